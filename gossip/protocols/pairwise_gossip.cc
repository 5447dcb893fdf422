// PairwiseGossip (pairwise_gossip.h): the responder thread, the initiator's
// attempts, deferral, step notices and the staleness wait.
//
// Wire: every message is a header (pairwise_wire.h: type, finished flag, seq,
// step), then (VALUE and ACCEPT) the codec's encoding of the sender's public
// value.
// An exchange: the initiator sends REQUEST (the header alone) with
// GossipTag(kPairwise, stream, epoch, 0); the responder posts a receive for
// the value from it (round field 2) and answers CLEAR, or declines; only then
// does the initiator send VALUE (REQUEST's header and the value), and the
// responder answers ACCEPT (or declines). Answers use round field 1 and are
// received by the initiator from the peer it asked, into a receive posted
// before the message they answer. So the one receive from any source (the
// responder's, round field 0) takes headers only, and every message above
// the provider's eager size finds its receive posted: with tcp;ofi_rxm 1.17,
// a receive that takes a queued rendezvous message whose sender's connection
// has closed since (a peer killed, or one that froze) crashes inside the
// provider (docs/libfabric.md, "`tcp;ofi_rxm`").
// Notices share the request tag because the responder waits on one receive (a
// receive matches one tag), and the per-tag order then delivers a neighbour's
// finishing notice after everything else it sent here, which Finish relies on
// (its values went before: each was accepted or declined first).
#include "gossip/protocols/pairwise_gossip.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>

#include "common/log.h"
#include "gossip/collectives/collective.h"
#include "gossip/protocols/dpsgd_gossip.h"
#include "gossip/protocols/pairwise_wire.h"

namespace chorus::gossip {
namespace {

Tag RequestTag(uint8_t stream, uint32_t epoch) {
  return GossipTag(GossipMessageKind::kPairwise, stream, epoch, 0);
}
Tag AnswerTag(uint8_t stream, uint32_t epoch) {
  return GossipTag(GossipMessageKind::kPairwise, stream, epoch, 1);
}
Tag ValueTag(uint8_t stream, uint32_t epoch) {
  return GossipTag(GossipMessageKind::kPairwise, stream, epoch, 2);
}

// In virtual time, how long the responder waits for a message it knows is
// coming (a value it cleared, a request whose turn came): the turn may come
// late in wall time on a crowded host.
constexpr Duration kOrderedValueWait = std::chrono::seconds(600);

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
  if (options.value_wait.count() <= 0) {
    return Err(InvalidArgument("pairwise: value_wait must be > 0"));
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
  neighbor_round_.assign(neighbors_.size(), kNotHeard);
  neighbor_finished_.assign(neighbors_.size(), 0);
  neighbor_error_.assign(neighbors_.size(), Status::Ok());
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

void PairwiseGossip::Retire(std::span<float> params) {
  StopResponder();
  std::lock_guard<std::mutex> lock(mu_);
  if (params.size() == pending_.size()) SyncLocked(params);
}

Status PairwiseGossip::SetTopology(topologies::Graph graph, uint32_t epoch,
                                   std::span<float> params) {
  Retire(params);
  CHORUS_RETURN_IF_ERROR(Install(std::move(graph), epoch, params));
  ResetState(params.size());
  StartResponder();
  return Status::Ok();
}

void PairwiseGossip::StartResponder() {
  stop_.store(false);
  if (EventOrder* order = transport_.Order()) order->OpenServing(RequestTag(options_.tag_stream, options_.epoch));
  responder_ = std::thread([this] { ResponderLoop(); });
}

void PairwiseGossip::StopResponder() {
  stop_.store(true);
  if (!responder_.joinable()) return;
  responder_.join();
  if (EventOrder* order = transport_.Order()) order->CloseServing();
}

Result<Completion> PairwiseGossip::NextRequest(std::vector<std::byte>& header) {
  const Tag tag = RequestTag(options_.tag_stream, options_.epoch);
  EventOrder* order = transport_.Order();
  Rank source = kAnySource;
  if (order != nullptr) {
    // In virtual time the requests are taken in the order they arrive there.
    CHORUS_ASSIGN_OR_RETURN(source, order->AwaitMessage(Deadline::After(options_.responder_wake)));
  }
  CHORUS_ASSIGN_OR_RETURN(RequestPtr request, transport_.Irecv(source, tag, header));
  // In virtual time the message is there and its turn has come (a slice
  // could end the wait on a crowded host while another event of the same
  // moment goes first, and drop what the receive took).
  Result<Completion> done = request->Wait(order != nullptr ? Deadline::After(kOrderedValueWait)
                                                           : Deadline::After(options_.responder_wake));
  if (!done && done.error().code() == StatusCode::kDeadlineExceeded) {
    // Woken by the slice to look at stop_: cancel and repost, but keep a message
    // that completed the receive in between.
    request->Cancel();
    done = request->Wait(Deadline::Now());
  }
  if (!done) ReleaseOrKeepBuffer(request, header);
  return done;
}

void PairwiseGossip::ResponderLoop() {
  size_t n = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = public_.size();
  }
  if (EventOrder* order = transport_.Order()) order->ServeHere();
  std::vector<std::byte> header(kPairwiseHeaderBytes);
  std::vector<std::byte> value(kPairwiseHeaderBytes + codec_->WireBytes(n));
  auto record_error = [&](const Status& s) {
    CHORUS_LOG_WARN(Subsys::kGossip, "pairwise responder (rank ", transport_.rank(),
                    ") stopped: ", s.ToString());
    std::lock_guard<std::mutex> lock(mu_);
    responder_status_ = s.WithContext("pairwise responder");
  };
  while (!stop_.load()) {
    Result<Completion> done = NextRequest(header);
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
    const auto bytes = std::span<const std::byte>(header).first(done->bytes);
    const Result<PairwiseHeader> head = ReadPairwiseHeader(bytes);
    if (head && head->type == PairwiseType::kRequest && bytes.size() == kPairwiseHeaderBytes) {
      ReceiveValue(done->source, head->seq, value);
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    ReapLocked();
    HandleRequestLocked(done->source, bytes);
  }
}

std::vector<std::byte> PairwiseGossip::OwnHeaderLocked(PairwiseType type, uint64_t seq) const {
  return PairwiseHeaderOnly({type, finished_, seq, step_});
}

void PairwiseGossip::ReleaseOrKeepBuffer(RequestPtr& request, std::vector<std::byte>& buffer) {
  // A receive the provider did not release (a message half received from a
  // peer that froze) may still write into `buffer`: it is kept for good and
  // the next receive gets a fresh one.
  if (!request->Release()) {
    const size_t size = buffer.size();
    KeepForGood(buffer);
    buffer.assign(size, std::byte{0});
  }
}

void PairwiseGossip::ReceiveValue(Rank from, uint64_t seq, std::vector<std::byte>& value) {
  const Tag answer_tag = AnswerTag(options_.tag_stream, options_.epoch);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ReapLocked();
    if (busy_ && from > transport_.rank()) {
      SendLocked(from, answer_tag, OwnHeaderLocked(PairwiseType::kDeclineBusy, seq));
      return;
    }
  }
  // A VALUE of an attempt the requester gave up may come first (same tag): it
  // is skipped, a few times at most.
  constexpr int kMaxStale = 4;
  const Deadline give_up = Deadline::After(options_.value_wait);
  for (int attempt = 0; attempt <= kMaxStale; ++attempt) {
    auto posted = transport_.Irecv(from, ValueTag(options_.tag_stream, options_.epoch), value);
    if (!posted) {
      // The requester is gone; its attempt fails on its side.
      CHORUS_LOG_DEBUG(Subsys::kGossip, "pairwise: no value from rank ", from, ": ", posted.error().ToString());
      return;
    }
    RequestPtr request = std::move(*posted);
    if (attempt == 0) {
      std::lock_guard<std::mutex> lock(mu_);
      SendLocked(from, answer_tag, OwnHeaderLocked(PairwiseType::kClear, seq));
    }
    // Polled, not waited on with a deadline: a transport's Wait that reaches
    // its deadline cancels the receive, and the value would then arrive with
    // no receive posted for it. Sleeps are capped at 200 us, as in WaitAll.
    // In virtual time the wait is an event of its own (event_order.h), and
    // wall time says nothing about a peer: it waits as long as a step may.
    Result<Completion> done = Err(Cancelled(""));
    if (transport_.Order() != nullptr) {
      done = request->Wait(Deadline::After(std::max<Duration>(options_.value_wait, kOrderedValueWait)));
    } else {
      Backoff backoff(std::chrono::microseconds(200));
      while (!request->Done() && !stop_.load() && !give_up.Expired()) backoff.Pause();
      if (!request->Done()) request->Cancel();
      done = request->Wait(Deadline::Now());
    }
    if (!done) {
      ReleaseOrKeepBuffer(request, value);
      CHORUS_LOG_DEBUG(Subsys::kGossip, "pairwise: no value from rank ", from, " for request ", seq, ": ",
                       done.error().ToString());
      return;
    }
    UpdateStats([&](GossipStats& s) {
      s.bytes_received += done->bytes;
      ++s.messages_received;
    });
    const auto bytes = std::span<const std::byte>(value).first(done->bytes);
    if (const Result<PairwiseHeader> head = ReadPairwiseHeader(bytes); head && head->seq != seq) continue;
    std::lock_guard<std::mutex> lock(mu_);
    ReapLocked();
    HandleRequestLocked(from, bytes);
    return;
  }
}

void PairwiseGossip::SendLocked(Rank to, Tag tag, std::vector<std::byte> bytes) {
  const size_t size = bytes.size();
  Outgoing out;
  out.to = to;
  out.bytes = std::move(bytes);
  auto request = transport_.Isend(to, tag, out.bytes);
  if (!request) {
    // The peer is gone; an exchange with it fails on its side.
    CHORUS_LOG_DEBUG(Subsys::kGossip, "pairwise: message to rank ", to,
                     " not sent: ", request.error().ToString());
    NoteSendFailureLocked(to, request.error());
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
  outgoing_.remove_if([this](Outgoing& out) {
    if (!out.request->Done()) return false;
    auto done = out.request->Wait(Deadline::Now());
    if (!done) {
      CHORUS_LOG_DEBUG(Subsys::kGossip, "pairwise: send to rank ", out.to,
                       " failed: ", done.error().ToString());
      NoteSendFailureLocked(out.to, done.error());
    }
    return true;
  });
}

void PairwiseGossip::NoteSendFailureLocked(Rank to, const Status& status) {
  if (status.code() != StatusCode::kUnavailable) return;
  const int i = NeighborIndex(to);
  if (i < 0 || !neighbor_error_[i].ok()) return;
  neighbor_error_[i] = status;
  neighbors_cv_.notify_all();
}

int PairwiseGossip::NeighborIndex(Rank peer) const {
  auto it = std::find(neighbors_.begin(), neighbors_.end(), peer);
  return it == neighbors_.end() ? -1 : static_cast<int>(it - neighbors_.begin());
}

void PairwiseGossip::SendNoticesLocked() {
  ReapLocked();
  const Tag tag = RequestTag(options_.tag_stream, options_.epoch);
  for (Rank peer : neighbors_) {
    SendLocked(peer, tag, OwnHeaderLocked(PairwiseType::kNotice, 0));
  }
}

void PairwiseGossip::RecordNoticeLocked(Rank from, int64_t round, bool finished) {
  const int i = NeighborIndex(from);
  if (i < 0) {
    CHORUS_LOG_DEBUG(Subsys::kGossip, "pairwise: ignoring a notice from rank ", from,
                     ", not a neighbour");
    return;
  }
  neighbor_round_[i] = std::max(neighbor_round_[i], round);
  if (finished) neighbor_finished_[i] = 1;
  if (EventOrder* order = transport_.Order()) order->WakeOwner();
  neighbors_cv_.notify_all();
}

void PairwiseGossip::HandleRequestLocked(Rank from, std::span<const std::byte> bytes) {
  const Result<PairwiseHeader> head = ReadPairwiseHeader(bytes);
  if (head && head->type == PairwiseType::kNotice && bytes.size() == kPairwiseHeaderBytes) {
    RecordNoticeLocked(from, head->step, head->finished);
    return;
  }
  if (!head || head->type != PairwiseType::kRequest) {
    CHORUS_LOG_WARN(Subsys::kGossip, "pairwise: ignoring a malformed request of ", bytes.size(),
                    " bytes from rank ", from, ": ", head ? std::string("not a request") : head.error().message());
    return;
  }
  const PairwiseHeader& request = *head;
  if (busy_) {
    if (from < transport_.rank()) {
      deferred_.emplace_back(from, std::vector<std::byte>(bytes.begin(), bytes.end()));
    } else {
      SendLocked(from, AnswerTag(options_.tag_stream, options_.epoch),
                 OwnHeaderLocked(PairwiseType::kDeclineBusy, request.seq));
    }
    return;
  }
  ServeLocked(from, request, bytes.subspan(kPairwiseHeaderBytes));
}

void PairwiseGossip::ServeLocked(Rank from, const PairwiseHeader& request,
                                 std::span<const std::byte> payload) {
  const Tag answer_tag = AnswerTag(options_.tag_stream, options_.epoch);
  const int64_t staleness = std::abs(step_ - request.step);
  Status decoded = codec_->Decode(payload, scratch_);
  if (!decoded.ok()) {
    if (IsNonFiniteRejection(decoded)) {
      UpdateStats([](GossipStats& s) { ++s.rejected_nonfinite; });
      NoteNonFinite(from);
    } else {
      CHORUS_LOG_WARN(Subsys::kGossip, "pairwise: request from rank ", from,
                      " rejected: ", decoded.ToString());
    }
    SendLocked(from, answer_tag, OwnHeaderLocked(PairwiseType::kDeclineRejected, request.seq));
    return;
  }
  if (options_.max_relative_distance > 0 &&
      RejectOutlier(RelativeDistance(public_, scratch_), from, options_.max_relative_distance)) {
    SendLocked(from, answer_tag, OwnHeaderLocked(PairwiseType::kDeclineRejected, request.seq));
    return;
  }
  NoteAccepted(from);
  // Answer with the current public value, then move it halfway to the requester's.
  std::vector<std::byte> answer;
  Status encoded =
      codec_->Encode(public_, MessageSeed(options_.seed, transport_.rank(), step_), &answer);
  if (!encoded.ok()) {
    CHORUS_LOG_WARN(Subsys::kGossip, "pairwise: cannot encode an answer: ", encoded.ToString());
    SendLocked(from, answer_tag, OwnHeaderLocked(PairwiseType::kDeclineRejected, request.seq));
    return;
  }
  if (!codec_->Lossless()) {
    // Both sides must use the decoded values so that their deltas cancel.
    Status own = codec_->Decode(answer, own_sent_);
    if (!own.ok()) {
      SendLocked(from, answer_tag, OwnHeaderLocked(PairwiseType::kDeclineRejected, request.seq));
      return;
    }
  }
  answer.insert(answer.begin(), kPairwiseHeaderBytes, std::byte{0});
  WritePairwiseHeader({PairwiseType::kAccept, finished_, request.seq, step_}, answer);
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

Status PairwiseGossip::Attempt(Rank peer, int64_t round, Deadline deadline, PairwiseType* answer_type) {
  std::vector<std::byte> answer(kPairwiseHeaderBytes + codec_->WireBytes(length()));
  std::vector<std::byte> request;
  CHORUS_ASSIGN_OR_RETURN(const uint64_t seq, BeginRequest(round, request));
  // From here on every exit must clear busy_ and serve what was deferred (EndAttempt).
  std::vector<RequestPtr> requests;
  Result<size_t> bytes = ExchangeRequest(peer, seq, deadline, request, answer, requests);
  if (!bytes) {
    // An answer half received from, or a request half sent to, a peer that
    // froze may still be written or read by the provider.
    ReleaseOrKeep(requests, answer, request);
    return EndAttempt(bytes.error());
  }
  const std::span<const std::byte> received = std::span<const std::byte>(answer).first(*bytes);
  int64_t peer_step = 0;
  Status header = ReadAnswerHeader(peer, seq, received, answer_type, &peer_step);
  if (!header.ok() || *answer_type != PairwiseType::kAccept) return EndAttempt(std::move(header));
  std::lock_guard<std::mutex> lock(mu_);
  Status mixed = MixAnswerLocked(peer, peer_step, received.subspan(kPairwiseHeaderBytes));
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
  request.insert(request.begin(), kPairwiseHeaderBytes, std::byte{0});
  WritePairwiseHeader({PairwiseType::kRequest, finished_, seq, step_}, request);
  busy_ = true;
  return seq;
}

Result<size_t> PairwiseGossip::ExchangeRequest(Rank peer, uint64_t seq, Deadline deadline, std::span<const std::byte> request,
                                               std::span<std::byte> answer, std::vector<RequestPtr>& requests) {
  // The header alone first: the peer clears it (its receive for the value is
  // posted) or declines.
  CHORUS_ASSIGN_OR_RETURN(
      const size_t bytes,
      SendAndAwaitAnswer(peer, RequestTag(options_.tag_stream, options_.epoch), request.first(kPairwiseHeaderBytes),
                         deadline, answer, requests));
  const Result<PairwiseHeader> head = ReadPairwiseHeader(answer.first(bytes));
  const bool cleared = bytes == kPairwiseHeaderBytes && head && head->type == PairwiseType::kClear && head->seq == seq;
  if (!cleared) return bytes;
  return SendAndAwaitAnswer(peer, ValueTag(options_.tag_stream, options_.epoch), request, deadline, answer,
                            requests);
}

Result<size_t> PairwiseGossip::SendAndAwaitAnswer(Rank peer, Tag tag, std::span<const std::byte> message,
                                                  Deadline deadline, std::span<std::byte> answer,
                                                  std::vector<RequestPtr>& requests) {
  auto recv = transport_.Irecv(peer, AnswerTag(options_.tag_stream, options_.epoch), answer);
  if (!recv) return Err(recv.error());
  requests.push_back(std::move(*recv));
  auto send = transport_.Isend(peer, tag, message);
  if (!send) {
    requests.back()->Cancel();
    return Err(send.error());
  }
  requests.push_back(std::move(*send));
  std::vector<Completion> completions;
  CHORUS_RETURN_IF_ERROR(WaitAll(std::span<RequestPtr>(requests).last(2), deadline, &completions));
  const size_t bytes = completions[0].bytes;
  UpdateStats([&](GossipStats& s) {
    s.bytes_sent += message.size();
    ++s.messages_sent;
    s.bytes_received += bytes;
    ++s.messages_received;
  });
  return bytes;
}

Status PairwiseGossip::ReadAnswerHeader(Rank peer, uint64_t seq, std::span<const std::byte> answer,
                                        PairwiseType* answer_type, int64_t* peer_step) {
  const Result<PairwiseHeader> head = ReadPairwiseHeader(answer);
  if (!head) return head.error().WithContext("pairwise: answer from rank " + std::to_string(peer));
  *answer_type = head->type;
  *peer_step = head->step;
  if (head->seq != seq) {
    return DataLoss("pairwise: answer from rank " + std::to_string(peer) + " is for request " +
                    std::to_string(head->seq) + ", expected " + std::to_string(seq));
  }
  if (head->type != PairwiseType::kAccept && head->type != PairwiseType::kDeclineBusy && head->type != PairwiseType::kDeclineRejected) {
    return DataLoss("pairwise: an answer of type " + std::to_string(static_cast<int>(head->type)) + " from rank " +
                    std::to_string(peer) + " (not ACCEPT or a decline)");
  }
  return Status::Ok();
}

Status PairwiseGossip::MixAnswerLocked(Rank peer, int64_t peer_step, std::span<const std::byte> payload) {
  Status decoded = codec_->Decode(payload, scratch_);
  if (IsNonFiniteRejection(decoded)) {
    UpdateStats([](GossipStats& s) { ++s.rejected_nonfinite; });
    NoteNonFinite(peer);
    return Status::Ok();
  }
  if (!decoded.ok()) return decoded.WithContext("answer from rank " + std::to_string(peer));
  // One distance for the outlier test and the stats.
  const double distance = RelativeDistance(own_sent_, scratch_);
  if (RejectOutlier(distance, peer, options_.max_relative_distance)) return Status::Ok();
  NoteAccepted(peer);
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
  if (EventOrder* order = transport_.Order()) CHORUS_RETURN_IF_ERROR(order->AwaitTurn(deadline));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!responder_status_.ok()) return Fail(responder_status_, round);
    step_ = round;
    SyncLocked(params);
    SendNoticesLocked();
  }
  CHORUS_ASSIGN_OR_RETURN(const bool waited, AwaitNeighbors(round, deadline));
  const bool mixing = IsMixingRound(round, options_.period);
  const bool averages = mixing && !neighbors_.empty();
  if (averages) CHORUS_RETURN_IF_ERROR(Average(round, deadline));
  if (averages || waited) {
    // What the responder averaged during the wait or the exchange.
    std::lock_guard<std::mutex> lock(mu_);
    SyncLocked(params);
  }
  UpdateStats([&](GossipStats& s) { ++(mixing ? s.mix_rounds : s.skipped_rounds); });
  return Status::Ok();
}

Result<bool> PairwiseGossip::AwaitNeighbors(int64_t round, Deadline deadline) {
  const Clock::time_point start = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  bool waited = false;
  if (options_.max_staleness >= 0) {
    const int64_t floor = round - options_.max_staleness;
    auto caught_up = [&](size_t i) { return neighbor_finished_[i] != 0 || neighbor_round_[i] >= floor; };
    auto what = [&](size_t i) {
      const std::string at = neighbor_round_[i] == kNotHeard
                                 ? "not heard from in this graph"
                                 : "at round " + std::to_string(neighbor_round_[i]);
      return "waiting for rank " + std::to_string(neighbors_[i]) + " (" + at + ") to enter round " +
             std::to_string(floor) + " (max_staleness " + std::to_string(options_.max_staleness) + ")";
    };
    Status s = WaitForNeighborsLocked(lock, deadline, caught_up, what, &waited);
    if (!s.ok()) {
      lock.unlock();
      return Err(Fail(std::move(s), round));
    }
  }
  // The lead this node starts its next step with, over the live neighbours heard from.
  int64_t lead = 0;
  for (size_t i = 0; i < neighbors_.size(); ++i) {
    if (neighbor_finished_[i] == 0 && neighbor_round_[i] != kNotHeard) {
      lead = std::max(lead, round - neighbor_round_[i]);
    }
  }
  lock.unlock();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  UpdateStats([&](GossipStats& s) {
    s.max_staleness_seen = std::max(s.max_staleness_seen, lead);
    if (waited) {
      ++s.staleness_waits;
      s.staleness_wait_seconds += seconds;
    }
  });
  return waited;
}

Status PairwiseGossip::WaitForNeighborsLocked(std::unique_lock<std::mutex>& lock, Deadline deadline,
                                              const std::function<bool(size_t)>& done,
                                              const std::function<std::string(size_t)>& what,
                                              bool* waited) {
  // A notice wakes the wait at once; the slices only bound how late an
  // interrupt, a dead neighbour or the deadline is noticed.
  constexpr Duration kMaxSlice = std::chrono::milliseconds(10);
  Duration slice = std::max<Duration>(options_.retry_interval, std::chrono::microseconds(50));
  *waited = false;
  // In virtual time the wait holds nobody back, and the node goes on when
  // its turn comes after the notice that ended it.
  EventOrder* order = transport_.Order();
  auto end = [&](Status status) {
    if (order == nullptr || !*waited) return status;
    lock.unlock();
    Status turn = order->Unpark(deadline);
    lock.lock();
    return status.ok() ? turn : status;
  };
  while (true) {
    ReapLocked();
    int first = -1;
    for (size_t i = 0; i < neighbors_.size(); ++i) {
      if (done(i)) continue;
      if (first < 0) first = static_cast<int>(i);
      if (!neighbor_error_[i].ok()) return end(neighbor_error_[i].WithContext(what(i)));
      if (transport_.PeerMarkedDead(neighbors_[i])) {
        return end(Unavailable(what(i) + ": rank " + std::to_string(neighbors_[i]) + " is dead"));
      }
    }
    if (first < 0) return end(Status::Ok());
    if (order != nullptr) order->Park();
    *waited = true;
    if (!responder_status_.ok()) return end(responder_status_);
    if (interrupted()) return end(Aborted("interrupted while " + what(first)));
    if (deadline.Expired()) return end(DeadlineExceeded(what(first)));
    neighbors_cv_.wait_for(lock, std::min<Duration>(slice, deadline.Remaining()));
    slice = std::min<Duration>(slice * 2, kMaxSlice);
  }
}

Status PairwiseGossip::Average(int64_t round, Deadline deadline) {
  std::vector<Rank> candidates;
  auto pick = [&] {
    if (!options_.heard_partners_only) return neighbors_[rng_.Below(neighbors_.size())];
    candidates.clear();
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < neighbors_.size(); ++i) {
      if (neighbor_round_[i] != kNotHeard) candidates.push_back(neighbors_[i]);
    }
    return candidates.empty() ? Rank{-1} : candidates[rng_.Below(candidates.size())];
  };
  Rank peer = pick();
  if (peer < 0) return Status::Ok();  // nobody heard from in this graph yet
  int busy_declines = 0;
  while (true) {
    PairwiseType type = PairwiseType::kRequest;
    Status s = Attempt(peer, round, deadline, &type);
    if (!s.ok()) return Fail(s, round);
    if (type != PairwiseType::kDeclineBusy) return Status::Ok();  // accepted, or rejected for non-finite values
    UpdateStats([](GossipStats& st) { ++st.declined_busy; });
    if (++busy_declines >= options_.max_attempts) return Status::Ok();
    if (EventOrder* order = transport_.Order()) {
      order->Pause(std::chrono::duration<double>(options_.retry_interval).count());
      if (Status turn = order->AwaitTurn(deadline); !turn.ok()) return Fail(turn, round);
    } else {
      std::this_thread::sleep_for(options_.retry_interval);
    }
    peer = pick();
    if (peer < 0) return Status::Ok();
  }
}

Status PairwiseGossip::Finish(std::span<float> params, Deadline deadline) {
  CHORUS_RETURN_IF_ERROR(CheckMixable(params));
  if (EventOrder* order = transport_.Order()) CHORUS_RETURN_IF_ERROR(order->AwaitTurn(deadline));
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
    if (!responder_status_.ok()) return responder_status_;
    SendNoticesLocked();
  }
  CHORUS_ASSIGN_OR_RETURN(Collective world, Collective::Create(transport_));
  CollectiveOptions options;
  options.tag_base = GossipCollectiveTagBase(options_.tag_stream, options_.epoch, 0);
  options.deadline = deadline;
  Status barrier = world.Barrier(options);
  if (!barrier.ok()) return barrier.WithContext("pairwise finish barrier");
  {
    // Each neighbour sent its finishing notice before the barrier, after all its
    // other notices and requests to this node (one tag, in order).
    std::unique_lock<std::mutex> lock(mu_);
    bool waited = false;
    Status drained = WaitForNeighborsLocked(
        lock, deadline, [&](size_t i) { return neighbor_finished_[i] != 0; },
        [&](size_t i) { return "waiting for the finishing notice of rank " + std::to_string(neighbors_[i]); },
        &waited);
    if (!drained.ok()) return drained.WithContext("pairwise finish");
  }
  StopResponder();
  std::lock_guard<std::mutex> lock(mu_);
  SyncLocked(params);
  return responder_status_;
}

}  // namespace chorus::gossip
