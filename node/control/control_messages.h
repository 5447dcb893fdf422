// Control-plane messages as plain C++ values, and their Cap'n Proto encoding.
//
// node/control/control.capnp defines the wire format; this file is the only place that
// touches the generated classes: EncodeMessage builds a flat capnp message from
// a ControlMessage and DecodeMessage turns bytes back into one, catching every
// kj::Exception (malformed input) and returning a Status instead. The rest of the
// control plane works with the structs below. Must not: do I/O, authenticate
// (control_frame.h / control_auth.h do), or decide anything about membership.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "node/control/membership.h"

namespace chorus::node {

// What two nodes must agree on exactly. libfabric builds of tcp;ofi_rxm with
// different versions do not interoperate, so the provider version is included.
struct VersionInfo {
  std::string chorus;
  std::string libfabric;
  std::string provider;
  std::string provider_version;

  bool operator==(const VersionInfo&) const = default;
  // "chorus 0.1.0, libfabric 1.17, provider tcp;ofi_rxm 117.0"
  std::string Describe() const;
};

// Ok when equal; otherwise FailedPrecondition naming both sides' versions:
// "version mismatch with node2 (127.0.0.1:4100): ours chorus 0.1.0, ...; theirs chorus 0.2.0, ...".
Status CheckVersions(const VersionInfo& ours, const VersionInfo& theirs, std::string_view peer);

enum class RejectCode {
  kOther,
  kVersionMismatch,
  kAuthenticationFailed,
  kDuplicateName,
  kNotMember,
  kProtocol,
  kSettingsMismatch,  // a joiner's shared settings differ from the coordinator's
  kRunEnded,          // the cluster ended its run before admitting the joiner
  kExpelled,          // the members expelled a node of that name (ControlPlane::Expel)
  kCredentialRefused,  // cluster.issuer is set and the dialer's credential does not verify
};
std::string_view RejectCodeName(RejectCode code);

namespace msg {

struct Hello {
  VersionInfo versions;
  std::string node_name;
  std::vector<uint8_t> nonce;  // 32 random bytes
  std::vector<uint8_t> proof;  // acceptor only: proof over the dialer's nonce
  std::vector<uint8_t> ephemeral;  // X25519 public key (32 bytes)
  // Per-node credentials (credentials.h); empty without cluster.issuer.
  std::vector<uint8_t> credential_key;
  std::vector<uint8_t> credential_signature;
  std::vector<uint8_t> transcript_signature;  // acceptor only
};
struct Proof {
  std::vector<uint8_t> proof;
  std::vector<uint8_t> transcript_signature;  // with credentials
};
struct Join {
  Member info;  // rank is -1
  std::string shared_settings;  // see LocalNodeInfo::shared_settings
  bool resume = false;          // see LocalNodeInfo::resume
};
// An epoch as proposed and as committed.
// One member's signed word that a name must be expelled (with
// cluster.issuer; accusation_proof.h): its credential and its signature.
struct AccusationProof {
  std::string accuser;
  std::vector<uint8_t> credential_key;
  std::vector<uint8_t> credential_signature;
  std::vector<uint8_t> signature;
  bool operator==(const AccusationProof&) const = default;
};
// Why a name is (to be) expelled, and the accusers' proofs (none without
// cluster.issuer).
struct Expulsion {
  std::string why;
  std::vector<AccusationProof> proofs = {};
  bool operator==(const Expulsion&) const = default;
};
using Expulsions = std::map<std::string, Expulsion>;  // by name

struct EpochView {
  uint64_t epoch = 0;
  uint64_t proposal_id = 0;
  std::string proposer;
  std::vector<Member> members;  // members[i].rank == i
  std::vector<int> departed;
  std::vector<std::string> joined;
  std::vector<std::string> finished;  // departed members that left at their run's end
  std::vector<std::string> stopped;   // departed members that left before it
  std::vector<uint8_t> data_salt;     // fresh per view (ClusterKey::DataKey)
  Expulsions expelled = {};           // every name expelled so far, with why
  std::vector<uint8_t> run_salt;      // drawn with epoch 0, the same in every later view
  bool reform = false;                // asked for by a member whose exchange failed (control.capnp)
};
struct Welcome {
  EpochView view;
};
struct EpochProposal {
  EpochView view;
};
struct EpochAck {
  uint64_t epoch = 0;
  uint64_t proposal_id = 0;
  std::string sender;
};
struct Heartbeat {
  uint64_t epoch = 0;
  std::string sender;
  uint64_t samples = 0;     // trained by the sender so far
  // Coordinator: epoch + 1 while joiners wait (0: none). Informational (logs,
  // tools): no member waits on it, as own-pace admission needs no barrier.
  uint64_t joiners_at = 0;
  std::vector<std::string> dead = {};  // members the sender declared dead in `epoch`
  std::string incarnation = {};        // the sender's (sample_counter.h), whose count `samples` is
  std::map<std::string, uint64_t> counts = {};  // the sender's sample counter, every incarnation it knows
  // The sender's own accusations (ControlPlane::Expel), each with its proof.
  Expulsions accusations = {};
  // The sender's exchange failed in `epoch` and no member is gone: it asks for
  // the next epoch over the same members (ControlPlane::RequestReform).
  bool reform = false;
};
struct Leave {
  uint64_t epoch = 0;
  std::string name;
  bool stopping = false;  // before the run's end: ends the others' epoch (control.capnp)
};
struct Barrier {
  std::string name;
  uint64_t epoch = 0;
  uint64_t seq = 0;
  std::string sender;
  bool advance = false;
  bool reply = false;
  int64_t value = 0;  // the sender's proposal (AdvanceEpochIfPending): the barrier agrees on the largest
};
// A discovery probe when control_address is set (control.capnp StateRequest).
struct StateRequest {
  std::string sender;
  std::string control_address;     // the prober's advertised address; "" from tools
  std::vector<std::string> known;  // control addresses the prober knows
  std::string shared_settings;     // as in Join
  bool resume = false;             // as in Join
};
struct State {
  bool formed = false;
  uint64_t epoch = 0;
  std::vector<Member> members;
  std::vector<std::string> pending;
  std::string coordinator;
  // While forming (see control.capnp State).
  std::string address;             // the answering node's advertised address
  bool candidate = false;          // it accepts joins for epoch 0
  std::string applied_to;          // address of the node that accepted its join
  bool applied_formed = false;     // applied_to is in a formed cluster
  std::vector<std::string> known;
  // Formed: ControlPlane::ReportProgress's latest values.
  int64_t step = -1;               // -1: none reported
  int64_t next_admission_step = 0;  // 0: unknown
  std::vector<uint8_t> data_salt;   // formed: the current view's
  bool reform = false;              // formed: the current view's (EpochView.reform)
};
struct Redirect {
  std::string coordinator_name;
  std::string coordinator_address;
  bool formed = false;  // the target is in a formed cluster (else a founder candidate)
};
struct Reject {
  RejectCode code = RejectCode::kOther;
  std::string reason;
};

}  // namespace msg

using ControlMessage =
    std::variant<msg::Hello, msg::Proof, msg::Join, msg::Welcome, msg::Heartbeat, msg::Leave,
                 msg::Barrier, msg::StateRequest, msg::State, msg::EpochProposal, msg::EpochAck,
                 msg::Reject, msg::Redirect>;

// "hello", "join", "welcome", ... (the union field names of control.capnp).
std::string_view MessageName(const ControlMessage& message);

// The flat Cap'n Proto encoding of one Envelope (a multiple of 8 bytes).
[[nodiscard]] Result<std::vector<uint8_t>> EncodeMessage(const ControlMessage& message);

// Parses one Envelope. Malformed input (not whole words, bad segment table,
// pointers out of bounds, trailing bytes, unknown union member) is kDataLoss
// naming what was wrong; it never throws.
[[nodiscard]] Result<ControlMessage> DecodeMessage(std::span<const uint8_t> bytes);

}  // namespace chorus::node
