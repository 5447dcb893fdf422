// Signed parts for the figures the members gather in agreement
// (gossip::PartSigner, Collective::AgreedAllgather), with per-node
// credentials (cluster.issuer): each member signs its part with its
// credential's key, and every signature carries the credential, so any
// member checks it against the issuer without trusting whoever relays it.
// What a member signs: a domain label, the epoch's data-plane key (it names
// the cluster, the run and the epoch: ClusterKey::DataKey; every member
// holds it, and only members see the signatures), the
// gather's tag base (one check of one step), the signer's name and the
// part. So a signature holds in that gather only: a relayer cannot bring
// one of another step, epoch or run to make an honest member look like it
// signed two parts.
//
// Must not: sign for another member, or accept a credential of another
// issuer, another name or a revoked key (NodeCredentials::CheckPeer).
#pragma once

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gossip/collectives/part_signer.h"
#include "node/control/credentials.h"
#include "node/control/membership.h"

namespace chorus::node {

class CredentialPartSigner final : public gossip::PartSigner {
 public:
  // `self`: this node's credentials; `view`: the members, whose transport
  // ranks are their ranks in it, and the epoch's data-plane key.
  CredentialPartSigner(std::shared_ptr<const NodeCredentials> self, const MembershipView& view);

  // The credential's key, the issuer's signature of it, and the signature
  // of the part: 160 bytes.
  static constexpr size_t kSignatureBytes = kSignPublicKeyBytes + 2 * node::kSignatureBytes;
  size_t SignatureFloats() const override { return kSignatureBytes / sizeof(float); }
  void Sign(gossip::Tag gather, std::span<const float> part, std::span<float> signature) const override;
  bool Verify(gossip::Rank sender, gossip::Tag gather, std::span<const float> part,
              std::span<const float> signature) const override;

 private:
  std::vector<uint8_t> Transcript(gossip::Tag gather, const std::string& signer, std::span<const float> part) const;

  std::shared_ptr<const NodeCredentials> self_;
  std::array<uint8_t, 32> context_{};  // the epoch's data-plane key
  std::vector<std::string> names_;     // by rank
  mutable std::mutex mu_;
  mutable std::map<std::string, std::string> issued_;  // name -> its key, credential checked
};

}  // namespace chorus::node
