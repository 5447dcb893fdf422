// Cap'n Proto encoding of control-plane messages (see control_messages.h).
//
// The generated classes (build/generated/node/control.capnp.h) are used here and
// nowhere else. kj::Exception from capnp is caught in this file and becomes a
// Status: a peer's malformed frame must never take the node down.
#include "node/control/control_messages.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <type_traits>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include "node/control/control.capnp.h"

namespace chorus::node {
namespace {

// Readers are asked to visit at most this many words per word of input: a frame
// of n words can reference each of its words a few times (shared pointers) but a
// well-formed message from our encoder visits each about once.
constexpr uint64_t kTraversalWordsPerInputWord = 4;
constexpr uint64_t kMinTraversalWords = 1024;

capnp::Text::Reader TextOf(const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); }
capnp::Data::Reader DataOf(const std::vector<uint8_t>& d) {
  return capnp::Data::Reader(d.data(), d.size());
}
std::string StringOf(capnp::Text::Reader r) { return std::string(r.cStr(), r.size()); }
std::vector<uint8_t> BytesOf(capnp::Data::Reader r) { return std::vector<uint8_t>(r.begin(), r.end()); }

// ---- C++ -> capnp ----

void SetVersions(wire::Versions::Builder b, const VersionInfo& v) {
  b.setChorus(TextOf(v.chorus));
  b.setLibfabric(TextOf(v.libfabric));
  b.setProvider(TextOf(v.provider));
  b.setProviderVersion(TextOf(v.provider_version));
}

void SetNodeInfo(wire::NodeInfo::Builder b, const Member& m) {
  b.setRank(m.rank);
  b.setName(TextOf(m.name));
  b.setControlAddress(TextOf(m.control_address));
  b.setDataAddress(DataOf(m.data_address));
  b.setDevice(TextOf(m.device.Name()));
  b.setBatchSize(static_cast<uint32_t>(m.batch_size < 0 ? 0 : m.batch_size));
  b.setHostGroup(TextOf(m.host_group));
  b.setRankHint(m.rank_hint);
  b.setSite(TextOf(m.site));
}

void SetMembers(capnp::List<wire::NodeInfo>::Builder list, const std::vector<Member>& members) {
  for (size_t i = 0; i < members.size(); ++i) SetNodeInfo(list[i], members[i]);
}

void SetTextList(capnp::List<capnp::Text>::Builder list, const std::vector<std::string>& items) {
  for (size_t i = 0; i < items.size(); ++i) list.set(i, TextOf(items[i]));
}

void SetExpulsions(capnp::List<wire::Expulsion>::Builder list, const msg::Expulsions& expelled) {
  unsigned i = 0;
  for (const auto& [name, e] : expelled) {
    list[i].setName(TextOf(name));
    list[i].setWhy(TextOf(e.why));
    auto proofs = list[i].initProofs(static_cast<unsigned>(e.proofs.size()));
    for (unsigned j = 0; j < e.proofs.size(); ++j) {
      proofs[j].setAccuser(TextOf(e.proofs[j].accuser));
      proofs[j].setCredentialKey(DataOf(e.proofs[j].credential_key));
      proofs[j].setCredentialSignature(DataOf(e.proofs[j].credential_signature));
      proofs[j].setSignature(DataOf(e.proofs[j].signature));
    }
    ++i;
  }
}

void SetEpochView(wire::EpochView::Builder b, const msg::EpochView& v) {
  b.setEpoch(v.epoch);
  b.setProposalId(v.proposal_id);
  b.setProposer(TextOf(v.proposer));
  SetMembers(b.initMembers(v.members.size()), v.members);
  auto departed = b.initDeparted(v.departed.size());
  for (size_t i = 0; i < v.departed.size(); ++i) departed.set(i, v.departed[i]);
  SetTextList(b.initJoined(v.joined.size()), v.joined);
  SetTextList(b.initFinished(v.finished.size()), v.finished);
  SetTextList(b.initStopped(v.stopped.size()), v.stopped);
  b.setDataSalt(DataOf(v.data_salt));
  SetExpulsions(b.initExpelled(static_cast<unsigned>(v.expelled.size())), v.expelled);
  b.setRunSalt(DataOf(v.run_salt));
  b.setReform(v.reform);
}

void SetState(wire::State::Builder b, const msg::State& m) {
  b.setFormed(m.formed);
  b.setEpoch(m.epoch);
  SetMembers(b.initMembers(m.members.size()), m.members);
  SetTextList(b.initPending(m.pending.size()), m.pending);
  b.setCoordinator(TextOf(m.coordinator));
  b.setAddress(TextOf(m.address));
  b.setCandidate(m.candidate);
  b.setAppliedTo(TextOf(m.applied_to));
  b.setAppliedFormed(m.applied_formed);
  SetTextList(b.initKnown(m.known.size()), m.known);
  b.setStep(m.step);
  b.setNextAdmissionStep(m.next_admission_step);
  b.setDataSalt(DataOf(m.data_salt));
  b.setReform(m.reform);
}

wire::RejectCode ToWire(RejectCode code) {
  switch (code) {
    case RejectCode::kOther: return wire::RejectCode::OTHER;
    case RejectCode::kVersionMismatch: return wire::RejectCode::VERSION_MISMATCH;
    case RejectCode::kAuthenticationFailed: return wire::RejectCode::AUTHENTICATION_FAILED;
    case RejectCode::kDuplicateName: return wire::RejectCode::DUPLICATE_NAME;
    case RejectCode::kNotMember: return wire::RejectCode::NOT_MEMBER;
    case RejectCode::kProtocol: return wire::RejectCode::PROTOCOL;
    case RejectCode::kSettingsMismatch: return wire::RejectCode::SETTINGS_MISMATCH;
    case RejectCode::kRunEnded: return wire::RejectCode::RUN_ENDED;
    case RejectCode::kExpelled: return wire::RejectCode::EXPELLED;
    case RejectCode::kCredentialRefused: return wire::RejectCode::CREDENTIAL_REFUSED;
  }
  return wire::RejectCode::OTHER;
}

RejectCode FromWire(wire::RejectCode code) {
  switch (code) {
    case wire::RejectCode::OTHER: return RejectCode::kOther;
    case wire::RejectCode::VERSION_MISMATCH: return RejectCode::kVersionMismatch;
    case wire::RejectCode::AUTHENTICATION_FAILED: return RejectCode::kAuthenticationFailed;
    case wire::RejectCode::DUPLICATE_NAME: return RejectCode::kDuplicateName;
    case wire::RejectCode::NOT_MEMBER: return RejectCode::kNotMember;
    case wire::RejectCode::PROTOCOL: return RejectCode::kProtocol;
    case wire::RejectCode::SETTINGS_MISMATCH: return RejectCode::kSettingsMismatch;
    case wire::RejectCode::RUN_ENDED: return RejectCode::kRunEnded;
    case wire::RejectCode::EXPELLED: return RejectCode::kExpelled;
    case wire::RejectCode::CREDENTIAL_REFUSED: return RejectCode::kCredentialRefused;
  }
  return RejectCode::kOther;  // a code from a newer schema
}

void SetSampleCounts(capnp::List<wire::SampleCount>::Builder list, const std::map<std::string, uint64_t>& counts) {
  unsigned i = 0;
  for (const auto& [incarnation, samples] : counts) {
    list[i].setIncarnation(TextOf(incarnation));
    list[i].setSamples(samples);
    ++i;
  }
}

void Fill(wire::Envelope::Builder env, const ControlMessage& message) {
  std::visit(
      [&](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, msg::Hello>) {
          auto b = env.initHello();
          SetVersions(b.initVersions(), m.versions);
          b.setNodeName(TextOf(m.node_name));
          b.setNonce(DataOf(m.nonce));
          b.setProof(DataOf(m.proof));
          b.setEphemeral(DataOf(m.ephemeral));
          b.setCredentialKey(DataOf(m.credential_key));
          b.setCredentialSignature(DataOf(m.credential_signature));
          b.setTranscriptSignature(DataOf(m.transcript_signature));
        } else if constexpr (std::is_same_v<T, msg::Proof>) {
          auto b = env.initProof();
          b.setProof(DataOf(m.proof));
          b.setTranscriptSignature(DataOf(m.transcript_signature));
        } else if constexpr (std::is_same_v<T, msg::Join>) {
          auto b = env.initJoin();
          SetNodeInfo(b.initInfo(), m.info);
          b.setSharedSettings(TextOf(m.shared_settings));
          b.setResume(m.resume);
        } else if constexpr (std::is_same_v<T, msg::Welcome>) {
          SetEpochView(env.initWelcome(), m.view);
        } else if constexpr (std::is_same_v<T, msg::EpochProposal>) {
          SetEpochView(env.initEpochProposal(), m.view);
        } else if constexpr (std::is_same_v<T, msg::EpochAck>) {
          auto b = env.initEpochAck();
          b.setEpoch(m.epoch);
          b.setProposalId(m.proposal_id);
          b.setSender(TextOf(m.sender));
        } else if constexpr (std::is_same_v<T, msg::Heartbeat>) {
          auto b = env.initHeartbeat();
          b.setEpoch(m.epoch);
          b.setSender(TextOf(m.sender));
          b.setSamples(m.samples);
          b.setJoinersAt(m.joiners_at);
          SetTextList(b.initDead(m.dead.size()), m.dead);
          b.setIncarnation(TextOf(m.incarnation));
          SetSampleCounts(b.initCounts(static_cast<unsigned>(m.counts.size())), m.counts);
          SetExpulsions(b.initAccusations(static_cast<unsigned>(m.accusations.size())), m.accusations);
          b.setReform(m.reform);
        } else if constexpr (std::is_same_v<T, msg::Leave>) {
          auto b = env.initLeave();
          b.setEpoch(m.epoch);
          b.setName(TextOf(m.name));
          b.setStopping(m.stopping);
        } else if constexpr (std::is_same_v<T, msg::Barrier>) {
          auto b = env.initBarrier();
          b.setName(TextOf(m.name));
          b.setEpoch(m.epoch);
          b.setSeq(m.seq);
          b.setSender(TextOf(m.sender));
          b.setAdvance(m.advance);
          b.setReply(m.reply);
          b.setValue(m.value);
        } else if constexpr (std::is_same_v<T, msg::StateRequest>) {
          auto b = env.initStateRequest();
          b.setSender(TextOf(m.sender));
          b.setControlAddress(TextOf(m.control_address));
          SetTextList(b.initKnown(m.known.size()), m.known);
          b.setSharedSettings(TextOf(m.shared_settings));
          b.setResume(m.resume);
        } else if constexpr (std::is_same_v<T, msg::State>) {
          SetState(env.initState(), m);
        } else if constexpr (std::is_same_v<T, msg::Redirect>) {
          auto b = env.initRedirect();
          b.setCoordinatorName(TextOf(m.coordinator_name));
          b.setCoordinatorAddress(TextOf(m.coordinator_address));
          b.setFormed(m.formed);
        } else if constexpr (std::is_same_v<T, msg::Reject>) {
          auto b = env.initReject();
          b.setCode(ToWire(m.code));
          b.setReason(TextOf(m.reason));
        } else {
          static_assert(sizeof(T) == 0, "every ControlMessage alternative must be encoded");
        }
      },
      message);
}

// ---- capnp -> C++ ----

VersionInfo GetVersions(wire::Versions::Reader r) {
  return VersionInfo{StringOf(r.getChorus()), StringOf(r.getLibfabric()), StringOf(r.getProvider()),
                     StringOf(r.getProviderVersion())};
}

Result<Member> GetNodeInfo(wire::NodeInfo::Reader r) {
  Member m;
  m.rank = r.getRank();
  m.name = StringOf(r.getName());
  m.control_address = StringOf(r.getControlAddress());
  m.data_address = BytesOf(r.getDataAddress());
  Result<trainer::Device> device = trainer::ParseDevice(StringOf(r.getDevice()));
  if (!device) return Err(DataLoss("member " + m.name + ": " + device.error().message()));
  m.device = *device;
  m.batch_size = static_cast<int>(std::min<uint32_t>(r.getBatchSize(), 1u << 30));
  m.host_group = StringOf(r.getHostGroup());
  m.rank_hint = r.getRankHint();
  m.site = StringOf(r.getSite());
  return m;
}

Result<std::vector<Member>> GetMembers(capnp::List<wire::NodeInfo>::Reader list) {
  std::vector<Member> out;
  out.reserve(list.size());
  for (auto r : list) {
    CHORUS_ASSIGN_OR_RETURN(Member m, GetNodeInfo(r));
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<std::string> GetTextList(capnp::List<capnp::Text>::Reader list) {
  std::vector<std::string> out;
  out.reserve(list.size());
  for (auto t : list) out.push_back(StringOf(t));
  return out;
}

msg::Expulsions GetExpulsions(capnp::List<wire::Expulsion>::Reader list) {
  msg::Expulsions out;
  for (auto e : list) {
    msg::Expulsion x{StringOf(e.getWhy())};
    for (auto p : e.getProofs()) {
      x.proofs.push_back({StringOf(p.getAccuser()), BytesOf(p.getCredentialKey()),
                          BytesOf(p.getCredentialSignature()), BytesOf(p.getSignature())});
    }
    out.emplace(StringOf(e.getName()), std::move(x));
  }
  return out;
}

Result<msg::EpochView> GetEpochView(wire::EpochView::Reader r) {
  msg::EpochView v;
  v.epoch = r.getEpoch();
  v.proposal_id = r.getProposalId();
  v.proposer = StringOf(r.getProposer());
  CHORUS_ASSIGN_OR_RETURN(v.members, GetMembers(r.getMembers()));
  for (int32_t d : r.getDeparted()) v.departed.push_back(d);
  v.joined = GetTextList(r.getJoined());
  v.finished = GetTextList(r.getFinished());
  v.stopped = GetTextList(r.getStopped());
  v.data_salt = BytesOf(r.getDataSalt());
  v.expelled = GetExpulsions(r.getExpelled());
  v.run_salt = BytesOf(r.getRunSalt());
  v.reform = r.getReform();
  return v;
}

msg::Hello GetHello(wire::Hello::Reader r) {
  return msg::Hello{GetVersions(r.getVersions()),    StringOf(r.getNodeName()),
                    BytesOf(r.getNonce()),           BytesOf(r.getProof()),
                    BytesOf(r.getEphemeral()),       BytesOf(r.getCredentialKey()),
                    BytesOf(r.getCredentialSignature()), BytesOf(r.getTranscriptSignature())};
}

Result<ControlMessage> Extract(wire::Envelope::Reader env) {
  switch (env.which()) {
    case wire::Envelope::HELLO:
      return GetHello(env.getHello());
    case wire::Envelope::PROOF:
      return msg::Proof{BytesOf(env.getProof().getProof()), BytesOf(env.getProof().getTranscriptSignature())};
    case wire::Envelope::JOIN: {
      CHORUS_ASSIGN_OR_RETURN(Member info, GetNodeInfo(env.getJoin().getInfo()));
      return msg::Join{std::move(info), StringOf(env.getJoin().getSharedSettings()), env.getJoin().getResume()};
    }
    case wire::Envelope::WELCOME: {
      CHORUS_ASSIGN_OR_RETURN(msg::EpochView view, GetEpochView(env.getWelcome()));
      return msg::Welcome{std::move(view)};
    }
    case wire::Envelope::EPOCH_PROPOSAL: {
      CHORUS_ASSIGN_OR_RETURN(msg::EpochView view, GetEpochView(env.getEpochProposal()));
      return msg::EpochProposal{std::move(view)};
    }
    case wire::Envelope::EPOCH_ACK: {
      auto r = env.getEpochAck();
      return msg::EpochAck{r.getEpoch(), r.getProposalId(), StringOf(r.getSender())};
    }
    case wire::Envelope::HEARTBEAT: {
      auto r = env.getHeartbeat();
      msg::Heartbeat h{r.getEpoch(), StringOf(r.getSender()), r.getSamples(), r.getJoinersAt(),
                       GetTextList(r.getDead()), StringOf(r.getIncarnation())};
      for (auto c : r.getCounts()) {
        uint64_t& slot = h.counts[StringOf(c.getIncarnation())];
        slot = std::max(slot, c.getSamples());
      }
      h.accusations = GetExpulsions(r.getAccusations());
      h.reform = r.getReform();
      return h;
    }
    case wire::Envelope::LEAVE: {
      auto r = env.getLeave();
      return msg::Leave{r.getEpoch(), StringOf(r.getName()), r.getStopping()};
    }
    case wire::Envelope::BARRIER: {
      auto r = env.getBarrier();
      return msg::Barrier{StringOf(r.getName()), r.getEpoch(), r.getSeq(), StringOf(r.getSender()),
                          r.getAdvance(), r.getReply(), r.getValue()};
    }
    case wire::Envelope::STATE_REQUEST: {
      auto r = env.getStateRequest();
      return msg::StateRequest{StringOf(r.getSender()), StringOf(r.getControlAddress()), GetTextList(r.getKnown()),
                               StringOf(r.getSharedSettings()), r.getResume()};
    }
    case wire::Envelope::STATE: {
      auto r = env.getState();
      msg::State state;
      state.formed = r.getFormed();
      state.epoch = r.getEpoch();
      CHORUS_ASSIGN_OR_RETURN(state.members, GetMembers(r.getMembers()));
      state.pending = GetTextList(r.getPending());
      state.coordinator = StringOf(r.getCoordinator());
      state.address = StringOf(r.getAddress());
      state.candidate = r.getCandidate();
      state.applied_to = StringOf(r.getAppliedTo());
      state.applied_formed = r.getAppliedFormed();
      state.known = GetTextList(r.getKnown());
      state.step = r.getStep();
      state.next_admission_step = r.getNextAdmissionStep();
      state.data_salt = BytesOf(r.getDataSalt());
      state.reform = r.getReform();
      return state;
    }
    case wire::Envelope::REDIRECT: {
      auto r = env.getRedirect();
      return msg::Redirect{StringOf(r.getCoordinatorName()), StringOf(r.getCoordinatorAddress()), r.getFormed()};
    }
    case wire::Envelope::REJECT: {
      auto r = env.getReject();
      return msg::Reject{FromWire(r.getCode()), StringOf(r.getReason())};
    }
  }
  return Err(DataLoss("unknown control message type " +
                      std::to_string(static_cast<unsigned>(env.which()))));
}

}  // namespace

std::string VersionInfo::Describe() const {
  return "chorus " + chorus + ", libfabric " + libfabric + ", provider " + provider + " " +
         provider_version;
}

Status CheckVersions(const VersionInfo& ours, const VersionInfo& theirs, std::string_view peer) {
  if (ours == theirs) return Status::Ok();
  return FailedPrecondition("version mismatch with " + std::string(peer) + ": ours " + ours.Describe() +
                            "; theirs " + theirs.Describe() +
                            " (versions must match exactly: libfabric builds of different versions do "
                            "not interoperate)");
}

std::string_view RejectCodeName(RejectCode code) {
  switch (code) {
    case RejectCode::kOther: return "other";
    case RejectCode::kVersionMismatch: return "version mismatch";
    case RejectCode::kAuthenticationFailed: return "authentication failed";
    case RejectCode::kDuplicateName: return "duplicate name";
    case RejectCode::kNotMember: return "not a member";
    case RejectCode::kProtocol: return "protocol error";
    case RejectCode::kSettingsMismatch: return "settings mismatch";
    case RejectCode::kRunEnded: return "run ended";
    case RejectCode::kExpelled: return "expelled";
    case RejectCode::kCredentialRefused: return "credential refused";
  }
  return "?";
}

std::string_view MessageName(const ControlMessage& message) {
  static constexpr std::string_view kNames[] = {
      "hello", "proof",        "join",  "welcome",       "heartbeat", "leave",   "barrier",
      "stateRequest", "state", "epochProposal", "epochAck", "reject", "redirect"};
  static_assert(std::size(kNames) == std::variant_size_v<ControlMessage>);
  return kNames[message.index()];
}

Result<std::vector<uint8_t>> EncodeMessage(const ControlMessage& message) {
  try {
    capnp::MallocMessageBuilder builder;
    Fill(builder.initRoot<wire::Envelope>(), message);
    kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
    kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
    return std::vector<uint8_t>(bytes.begin(), bytes.end());
  } catch (const kj::Exception& e) {
    return Err(Internal("encoding control message " + std::string(MessageName(message)) + ": " +
                        std::string(e.getDescription().cStr())));
  }
}

Result<ControlMessage> DecodeMessage(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return Err(DataLoss("empty control message"));
  if (bytes.size() % sizeof(capnp::word) != 0) {
    return Err(DataLoss("control message of " + std::to_string(bytes.size()) +
                        " bytes is not a whole number of 8-byte words"));
  }
  // Copy into word-aligned storage: the frame buffer has no alignment guarantee.
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords =
        std::max<uint64_t>(kMinTraversalWords, words.size() * kTraversalWordsPerInputWord);
    capnp::FlatArrayMessageReader reader(words.asPtr(), options);
    if (reader.getEnd() != words.end()) {
      return Err(DataLoss("control message has " +
                          std::to_string((words.end() - reader.getEnd()) * sizeof(capnp::word)) +
                          " trailing bytes after the capnp message"));
    }
    return Extract(reader.getRoot<wire::Envelope>());
  } catch (const kj::Exception& e) {
    return Err(DataLoss("malformed capnp message: " + std::string(e.getDescription().cStr())));
  }
}

}  // namespace chorus::node
