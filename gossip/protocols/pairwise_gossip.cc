// PairwiseGossip (gossip_pairwise.h): the responder thread, the initiator's
// attempts, deferral and staleness handling.
//
// Wire: every message is a 24-byte header, then (REQUEST and ACCEPT) the codec's
// encoding of the sender's public value:
//   [0] type  [1] flags (bit 0: sender has finished)  [2..7] 0
//   [8..15] u64 seq (the initiator's request id; answers echo it)
//   [16..23] i64 step (the sender's step counter)
// Requests use GossipTag(kPairwise, stream, epoch, 0) and are received from any
// source by the responder; answers use round field 1 and are received by the
// initiator from the peer it asked.
#include "gossip/protocols/pairwise_gossip.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>

#include "common/log.h"
#include "gossip/collectives/collective.h"
#include "gossip/protocols/dpsgd_gossip.h"

namespace chorus::gossip {
namespace {

constexpr size_t kHeaderBytes = 24;

enum MessageType : uint8_t {
  kRequest = 1,
  kAccept = 2,
  kDeclineBusy = 3,
  kDeclineStale = 4,
  kDeclineRejected = 5,
};

constexpr uint8_t kFlagFinished = 1;

}  // namespace

struct PairwiseGossip::Message {
  uint8_t type = 0;
  uint8_t flags = 0;
  uint64_t seq = 0;
  int64_t step = 0;
};

namespace {

void WriteMessageHeader(const uint8_t type, uint8_t flags, uint64_t seq, int64_t step,
                        std::byte* out) {
  std::memset(out, 0, kHeaderBytes);
  out[0] = static_cast<std::byte>(type);
  out[1] = static_cast<std::byte>(flags);
  std::memcpy(out + 8, &seq, 8);
  std::memcpy(out + 16, &step, 8);
}

std::vector<std::byte> HeaderOnly(uint8_t type, uint8_t flags, uint64_t seq, int64_t step) {
  std::vector<std::byte> out(kHeaderBytes);
  WriteMessageHeader(type, flags, seq, step, out.data());
  return out;
}

Tag RequestTag(uint8_t stream, uint32_t epoch) {
  return GossipTag(GossipMessageKind::kPairwise, stream, epoch, 0);
}
Tag AnswerTag(uint8_t stream, uint32_t epoch) {
  return GossipTag(GossipMessageKind::kPairwise, stream, epoch, 1);
}

// Counts an averaging this node completed, on either side.
void CountExchange(GossipStats& s, int64_t staleness) {
  ++s.exchanges;
  s.staleness_sum += static_cast<uint64_t>(staleness);
  s.max_staleness_seen = std::max(s.max_staleness_seen, staleness);
}

}  // namespace

Result<std::unique_ptr<PairwiseGossip>> PairwiseGossip::Create(Transport& transport,
                                                               topologies::Graph graph,
                                                               const PairwiseOptions& options,
                                                               std::span<const float> initial) {
  if (options.period < 1) {
    return Err(
        InvalidArgument("pairwise: period must be >= 1, got " + std::to_string(options.period)));
  }
  if (options.max_attempts < 1) {
    return Err(InvalidArgument("pairwise: max_attempts must be >= 1, got " +
                               std::to_string(options.max_attempts)));
  }
  if (options.responder_wake.count() <= 0) {
    return Err(InvalidArgument("pairwise: responder_wake must be > 0"));
  }
  CHORUS_ASSIGN_OR_RETURN(auto codec, MakeCodec(options.codec));
  std::unique_ptr<PairwiseGossip> p(
      new PairwiseGossip(transport, graph, options, std::move(codec)));
  p->rng_ = SplitMix64(MessageSeed(options.seed, transport.rank(), -1));
  CHORUS_RETURN_IF_ERROR(p->Install(std::move(graph), options.epoch, initial));
  p->ResetState(initial.size());
  p->StartResponder();
  return p;
}

PairwiseGossip::~PairwiseGossip() {
  StopResponder();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& out : outgoing_) out.request->Cancel();
}

Status PairwiseGossip::Install(topologies::Graph graph, uint32_t epoch,
                               std::span<const float> initial) {
  CHORUS_RETURN_IF_ERROR(CheckGraph(graph, transport_, true, Name()));
  std::lock_guard<std::mutex> lock(mu_);
  graph_ = std::move(graph);
  options_.epoch = epoch;
  neighbors_ = graph_.OutNeighbors(transport_.rank());
  const size_t n = initial.size();
  public_.assign(initial.begin(), initial.end());
  pending_.assign(n, 0.0f);
  scratch_.assign(n, 0.0f);
  own_sent_.assign(n, 0.0f);
  busy_ = false;
  finished_ = false;
  deferred_.clear();
  responder_status_ = Status::Ok();
  return Status::Ok();
}

Status PairwiseGossip::SetTopology(topologies::Graph graph, uint32_t epoch,
                                   std::span<float> params) {
  StopResponder();
  CHORUS_RETURN_IF_ERROR(Install(std::move(graph), epoch, params));
  ResetState(params.size());
  StartResponder();
  return Status::Ok();
}

void PairwiseGossip::StartResponder() {
  stop_.store(false);
  responder_ = std::thread([this] { ResponderLoop(); });
}

void PairwiseGossip::StopResponder() {
  stop_.store(true);
  if (responder_.joinable()) responder_.join();
}

void PairwiseGossip::ResponderLoop() {
  size_t n = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = public_.size();
  }
  const Tag tag = RequestTag(options_.tag_stream, options_.epoch);
  std::vector<std::byte> buffer(kHeaderBytes + codec_->WireBytes(n));
  auto record_error = [&](const Status& s) {
    CHORUS_LOG_WARN(Subsys::kGossip, "pairwise responder (rank ", transport_.rank(),
                    ") stopped: ", s.ToString());
    std::lock_guard<std::mutex> lock(mu_);
    responder_status_ = s.WithContext("pairwise responder");
  };
  while (!stop_.load()) {
    auto posted = transport_.Irecv(kAnySource, tag, buffer);
    if (!posted) {
      record_error(posted.error());
      return;
    }
    RequestPtr request = std::move(*posted);
    Result<Completion> done = request->Wait(Deadline::After(options_.responder_wake));
    if (!done && done.error().code() == StatusCode::kDeadlineExceeded) {
      // Woken by the slice to look at stop_: cancel and repost, but keep a message
      // that completed the receive in between.
      request->Cancel();
      done = request->Wait(Deadline::Now());
    }
    if (!done) {
      const StatusCode code = done.error().code();
      if (code == StatusCode::kDeadlineExceeded || code == StatusCode::kCancelled) continue;
      record_error(done.error());
      return;
    }
    UpdateStats([&](GossipStats& s) {
      s.bytes_received += done->bytes;
      ++s.messages_received;
    });
    std::lock_guard<std::mutex> lock(mu_);
    ReapLocked();
    HandleRequestLocked(done->source, std::span<const std::byte>(buffer).first(done->bytes));
  }
}

void PairwiseGossip::SendLocked(Rank to, Tag tag, std::vector<std::byte> bytes) {
  const size_t size = bytes.size();
  Outgoing out;
  out.bytes = std::move(bytes);
  auto request = transport_.Isend(to, tag, out.bytes);
  if (!request) {
    // The requester is gone; its exchange fails on its side.
    CHORUS_LOG_DEBUG(Subsys::kGossip, "pairwise: answer to rank ", to,
                     " not sent: ", request.error().ToString());
    return;
  }
  out.request = std::move(*request);
  outgoing_.push_back(std::move(out));
  UpdateStats([&](GossipStats& s) {
    s.bytes_sent += size;
    ++s.messages_sent;
  });
}

void PairwiseGossip::ReapLocked() {
  outgoing_.remove_if([](Outgoing& out) {
    if (!out.request->Done()) return false;
    auto done = out.request->Wait(Deadline::Now());
    if (!done) {
      CHORUS_LOG_DEBUG(Subsys::kGossip, "pairwise: answer send failed: ", done.error().ToString());
    }
    return true;
  });
}

void PairwiseGossip::HandleRequestLocked(Rank from, std::span<const std::byte> bytes) {
  if (bytes.size() < kHeaderBytes || static_cast<uint8_t>(bytes[0]) != kRequest) {
    CHORUS_LOG_WARN(Subsys::kGossip, "pairwise: ignoring a malformed request of ", bytes.size(),
                    " bytes from rank ", from);
    return;
  }
  Message request;
  request.type = kRequest;
  request.flags = static_cast<uint8_t>(bytes[1]);
  std::memcpy(&request.seq, bytes.data() + 8, 8);
  std::memcpy(&request.step, bytes.data() + 16, 8);
  if (busy_) {
    if (from < transport_.rank()) {
      deferred_.emplace_back(from, std::vector<std::byte>(bytes.begin(), bytes.end()));
    } else {
      SendLocked(from, AnswerTag(options_.tag_stream, options_.epoch),
                 HeaderOnly(kDeclineBusy, finished_ ? kFlagFinished : 0, request.seq, step_));
    }
    return;
  }
  ServeLocked(from, request, bytes.subspan(kHeaderBytes));
}

void PairwiseGossip::ServeLocked(Rank from, const Message& request,
                                 std::span<const std::byte> payload) {
  const Tag answer_tag = AnswerTag(options_.tag_stream, options_.epoch);
  const uint8_t flags = finished_ ? kFlagFinished : 0;
  const int64_t staleness = std::abs(step_ - request.step);
  if (options_.max_staleness >= 0 && staleness > options_.max_staleness) {
    SendLocked(from, answer_tag, HeaderOnly(kDeclineStale, flags, request.seq, step_));
    return;
  }
  Status decoded = codec_->Decode(payload, scratch_);
  if (!decoded.ok()) {
    if (IsNonFiniteRejection(decoded)) {
      UpdateStats([](GossipStats& s) { ++s.rejected_nonfinite; });
    } else {
      CHORUS_LOG_WARN(Subsys::kGossip, "pairwise: request from rank ", from,
                      " rejected: ", decoded.ToString());
    }
    SendLocked(from, answer_tag, HeaderOnly(kDeclineRejected, flags, request.seq, step_));
    return;
  }
  // Answer with the current public value, then move it halfway to the requester's.
  std::vector<std::byte> answer;
  Status encoded =
      codec_->Encode(public_, MessageSeed(options_.seed, transport_.rank(), step_), &answer);
  if (!encoded.ok()) {
    CHORUS_LOG_WARN(Subsys::kGossip, "pairwise: cannot encode an answer: ", encoded.ToString());
    SendLocked(from, answer_tag, HeaderOnly(kDeclineRejected, flags, request.seq, step_));
    return;
  }
  if (!codec_->Lossless()) {
    // Both sides must use the decoded values so that their deltas cancel.
    Status own = codec_->Decode(answer, own_sent_);
    if (!own.ok()) {
      SendLocked(from, answer_tag, HeaderOnly(kDeclineRejected, flags, request.seq, step_));
      return;
    }
  }
  answer.insert(answer.begin(), kHeaderBytes, std::byte{0});
  WriteMessageHeader(kAccept, flags, request.seq, step_, answer.data());
  MoveHalfwayLocked(codec_->Lossless() ? std::span<const float>(public_) : std::span<const float>(own_sent_));
  SendLocked(from, answer_tag, std::move(answer));
  UpdateStats([&](GossipStats& s) {
    ++s.served;
    CountExchange(s, staleness);
  });
}

void PairwiseGossip::MoveHalfwayLocked(std::span<const float> own) {
  for (size_t i = 0; i < public_.size(); ++i) {
    const float delta = (scratch_[i] - own[i]) * 0.5f;
    public_[i] += delta;
    pending_[i] += delta;
  }
}

void PairwiseGossip::ServeDeferredLocked() {
  while (!busy_ && !deferred_.empty()) {
    auto [from, bytes] = std::move(deferred_.front());
    deferred_.pop_front();
    HandleRequestLocked(from, bytes);
  }
}

void PairwiseGossip::SyncLocked(std::span<float> params) {
  for (size_t i = 0; i < params.size(); ++i) {
    params[i] += pending_[i];
    pending_[i] = 0.0f;
    public_[i] = params[i];
  }
}

Status PairwiseGossip::Attempt(Rank peer, int64_t round, Deadline deadline, uint8_t* answer_type,
                               int64_t* peer_step, bool* peer_finished) {
  std::vector<std::byte> answer(kHeaderBytes + codec_->WireBytes(length()));
  std::vector<std::byte> request;
  CHORUS_ASSIGN_OR_RETURN(const uint64_t seq, BeginRequest(round, request));
  // From here on every exit must clear busy_ and serve what was deferred (EndAttempt).
  std::vector<RequestPtr> requests;
  Result<size_t> bytes = ExchangeRequest(peer, deadline, request, answer, requests);
  if (!bytes) return EndAttempt(bytes.error());
  const std::span<const std::byte> received = std::span<const std::byte>(answer).first(*bytes);
  Status header = ReadAnswerHeader(peer, seq, received, answer_type, peer_step, peer_finished);
  if (!header.ok() || *answer_type != kAccept) return EndAttempt(std::move(header));
  std::lock_guard<std::mutex> lock(mu_);
  Status mixed = MixAnswerLocked(peer, *peer_step, received.subspan(kHeaderBytes));
  EndAttemptLocked();
  return mixed;
}

Result<uint64_t> PairwiseGossip::BeginRequest(int64_t round, std::vector<std::byte>& request) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t seq = next_seq_++;
  CHORUS_RETURN_IF_ERROR(
      codec_->Encode(public_, MessageSeed(options_.seed, transport_.rank(), round), &request));
  if (codec_->Lossless()) {
    std::copy(public_.begin(), public_.end(), own_sent_.begin());
  } else {
    CHORUS_RETURN_IF_ERROR(codec_->Decode(request, own_sent_).WithContext("own request"));
  }
  request.insert(request.begin(), kHeaderBytes, std::byte{0});
  WriteMessageHeader(kRequest, finished_ ? kFlagFinished : 0, seq, step_, request.data());
  busy_ = true;
  return seq;
}

Result<size_t> PairwiseGossip::ExchangeRequest(Rank peer, Deadline deadline, std::span<const std::byte> request,
                                               std::span<std::byte> answer, std::vector<RequestPtr>& requests) {
  auto recv = transport_.Irecv(peer, AnswerTag(options_.tag_stream, options_.epoch), answer);
  if (!recv) return Err(recv.error());
  requests.push_back(std::move(*recv));
  auto send = transport_.Isend(peer, RequestTag(options_.tag_stream, options_.epoch), request);
  if (!send) {
    requests[0]->Cancel();
    return Err(send.error());
  }
  requests.push_back(std::move(*send));
  std::vector<Completion> completions;
  CHORUS_RETURN_IF_ERROR(WaitAll(requests, deadline, &completions));
  const size_t bytes = completions[0].bytes;
  UpdateStats([&](GossipStats& s) {
    s.bytes_sent += request.size();
    ++s.messages_sent;
    s.bytes_received += bytes;
    ++s.messages_received;
  });
  return bytes;
}

Status PairwiseGossip::ReadAnswerHeader(Rank peer, uint64_t seq, std::span<const std::byte> answer,
                                        uint8_t* answer_type, int64_t* peer_step, bool* peer_finished) {
  if (answer.size() < kHeaderBytes) {
    return DataLoss("pairwise: answer of " + std::to_string(answer.size()) + " bytes from rank " +
                    std::to_string(peer) + " is shorter than its header");
  }
  uint64_t answer_seq = 0;
  *answer_type = static_cast<uint8_t>(answer[0]);
  *peer_finished = (static_cast<uint8_t>(answer[1]) & kFlagFinished) != 0;
  std::memcpy(&answer_seq, answer.data() + 8, 8);
  std::memcpy(peer_step, answer.data() + 16, 8);
  if (answer_seq != seq) {
    return DataLoss("pairwise: answer from rank " + std::to_string(peer) + " is for request " +
                    std::to_string(answer_seq) + ", expected " + std::to_string(seq));
  }
  if (*answer_type != kAccept && (*answer_type < kDeclineBusy || *answer_type > kDeclineRejected)) {
    return DataLoss("pairwise: unknown answer type " + std::to_string(*answer_type) + " from rank " +
                    std::to_string(peer));
  }
  return Status::Ok();
}

Status PairwiseGossip::MixAnswerLocked(Rank peer, int64_t peer_step, std::span<const std::byte> payload) {
  Status decoded = codec_->Decode(payload, scratch_);
  if (IsNonFiniteRejection(decoded)) {
    UpdateStats([](GossipStats& s) { ++s.rejected_nonfinite; });
    return Status::Ok();
  }
  if (!decoded.ok()) return decoded.WithContext("answer from rank " + std::to_string(peer));
  const double distance = RelativeDistance(own_sent_, scratch_);
  MoveHalfwayLocked(own_sent_);
  const int64_t staleness = std::abs(step_ - peer_step);
  UpdateStats([&](GossipStats& s) {
    CountExchange(s, staleness);
    s.neighbor_distance = distance;
  });
  return Status::Ok();
}

Status PairwiseGossip::EndAttempt(Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  EndAttemptLocked();
  return status;
}

void PairwiseGossip::EndAttemptLocked() {
  busy_ = false;
  ServeDeferredLocked();
}

Status PairwiseGossip::Mix(std::span<float> params, int64_t round, Deadline deadline) {
  CHORUS_RETURN_IF_ERROR(CheckMixable(params));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!responder_status_.ok()) return Fail(responder_status_, round);
    step_ = round;
    SyncLocked(params);
  }
  if (!IsMixingRound(round, options_.period)) {
    UpdateStats([](GossipStats& s) { ++s.skipped_rounds; });
    return Status::Ok();
  }
  if (neighbors_.empty()) {
    UpdateStats([](GossipStats& s) { ++s.mix_rounds; });
    return Status::Ok();
  }
  auto pick = [&] { return neighbors_[rng_.Below(neighbors_.size())]; };
  Rank peer = pick();
  int busy_declines = 0;
  auto stale_wait = options_.retry_interval;
  constexpr std::chrono::microseconds kMaxStaleWait{10000};
  while (true) {
    uint8_t type = 0;
    int64_t peer_step = 0;
    bool peer_finished = false;
    Status s = Attempt(peer, round, deadline, &type, &peer_step, &peer_finished);
    if (!s.ok()) return Fail(s, round);
    if (type == kAccept || type == kDeclineRejected) break;
    if (type == kDeclineBusy) {
      UpdateStats([](GossipStats& st) { ++st.declined_busy; });
      if (++busy_declines >= options_.max_attempts) break;
      std::this_thread::sleep_for(options_.retry_interval);
      peer = pick();
      continue;
    }
    // kDeclineStale.
    UpdateStats([](GossipStats& st) { ++st.declined_stale; });
    const bool ahead = round - peer_step > options_.max_staleness;
    if (!ahead || peer_finished || options_.staleness_policy == StalenessPolicy::kSkip) break;
    if (interrupted()) return Fail(Aborted("interrupted while waiting for a stale peer"), round);
    if (deadline.Expired()) {
      return Fail(DeadlineExceeded("waiting for rank " + std::to_string(peer) + " (at step " +
                                   std::to_string(peer_step) + ") to come within " +
                                   std::to_string(options_.max_staleness) + " steps of step " +
                                   std::to_string(round)),
                  round);
    }
    std::this_thread::sleep_for(std::min<Duration>(stale_wait, deadline.Remaining()));
    stale_wait = std::min(stale_wait * 2, kMaxStaleWait);
  }
  std::lock_guard<std::mutex> lock(mu_);
  SyncLocked(params);
  UpdateStats([](GossipStats& s) { ++s.mix_rounds; });
  return Status::Ok();
}

Status PairwiseGossip::Finish(std::span<float> params, Deadline deadline) {
  CHORUS_RETURN_IF_ERROR(CheckMixable(params));
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
    if (!responder_status_.ok()) return responder_status_;
  }
  CHORUS_ASSIGN_OR_RETURN(Collective world, Collective::Create(transport_));
  CollectiveOptions options;
  options.tag_base = GossipCollectiveTagBase(options_.tag_stream, options_.epoch, 0);
  options.deadline = deadline;
  Status barrier = world.Barrier(options);
  if (!barrier.ok()) return barrier.WithContext("pairwise finish barrier");
  StopResponder();
  std::lock_guard<std::mutex> lock(mu_);
  SyncLocked(params);
  return responder_status_;
}

}  // namespace chorus::gossip
