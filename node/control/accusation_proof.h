// Signed accusations. With per-node credentials (cluster.issuer) a member's
// word that a name must be expelled (ControlPlane::Expel) is signed with its
// node key, so that any member can check it without trusting whoever relays
// it: a view's expelled names carry the proofs of at least
// cluster.expel_quorum distinct accusers, and a member refuses a conviction
// without them. So a lying coordinator can neither ban an honest member's
// name for the rest of the run nor tell a member the cluster expelled it.
// Without credentials nothing is signed (any token holder may claim any
// name anyway), and a view's proposer is trusted with the list as with the
// membership itself.
//
// What an accuser signs: a domain label, the cluster and the run (a digest
// of the key derived from cluster.token and of the run's salt, drawn with
// epoch 0 and carried by every view: ClusterKey::Tag), the accused name and
// its own. Not the reason, which is free text. So a proof holds in the run it
// was signed in only: a proposer cannot bring a conviction of an earlier run
// of the same token and issuer into this one.
#pragma once

#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "node/control/control_messages.h"
#include "node/control/credentials.h"

namespace chorus::node {

// The bytes the accuser signs; `cluster` names the cluster (ClusterKey::Tag).
std::vector<uint8_t> AccusationTranscript(std::span<const uint8_t> cluster, std::string_view accused,
                                          std::string_view accuser);

// `self`'s signed accusation of `accused`.
msg::AccusationProof SignAccusation(const NodeCredentials& self, std::span<const uint8_t> cluster,
                                    std::string_view accused);

// Ok when `proof` holds a credential of `verifier`'s issuer for its accuser
// (not revoked) whose key signed the accusation of `accused` in `cluster`;
// PermissionDenied saying which check failed.
[[nodiscard]] Status CheckAccusation(const NodeCredentials& verifier, std::span<const uint8_t> cluster,
                                     std::string_view accused, const msg::AccusationProof& proof);

// The distinct accusers of `accused` whose proofs check, and why the first
// that did not was refused (empty when all did).
struct ProvenAccusers {
  std::set<std::string> accusers;
  std::string refused;
};
ProvenAccusers CheckAccusations(const NodeCredentials& verifier, std::span<const uint8_t> cluster,
                                std::string_view accused, std::span<const msg::AccusationProof> proofs);

}  // namespace chorus::node
