// Sharing the live state with members that join (see live_state.h).
#include "node/cluster/live_state.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>

#include "common/enum_names.h"
#include "common/log.h"

namespace chorus::node {
namespace {

uint32_t Crc32(std::span<const uint8_t> bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  size_t done = 0;
  while (done < bytes.size()) {  // zlib takes a uInt length
    const size_t n = std::min<size_t>(bytes.size() - done, size_t{1} << 30);
    crc = crc32(crc, bytes.data() + done, static_cast<uInt>(n));
    done += n;
  }
  return static_cast<uint32_t>(crc);
}

// Round r of an epoch: [LiveStateTagBase + r << 22, + 1 << 22), r < 16.
gossip::Tag RoundTagBase(uint64_t epoch, int round) {
  return LiveStateTagBase(epoch) + (static_cast<gossip::Tag>(round) << 22);
}
gossip::Tag HeaderTag(gossip::Tag round_base) { return round_base + (gossip::Tag{1} << 20); }
gossip::Tag ChunkTag(gossip::Tag round_base) { return HeaderTag(round_base) + 1; }

size_t Chunks(uint64_t bytes) { return LiveStateChunks(bytes); }

std::string MiB(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

// Fault injection for tests (docs/testing.md): CHORUS_FAULT_STALL_LIVE_STATE_S
// seconds between the header and the chunks, so that a test can kill the
// sender mid-transfer. 0 when unset.
double StallBeforeChunks() {
  const char* text = std::getenv("CHORUS_FAULT_STALL_LIVE_STATE_S");
  return text != nullptr ? std::max(0.0, std::atof(text)) : 0.0;
}

// Who sends what in one transfer, the same on every member: the sources
// (ranks, lowest first; the first sends the header and its bytes are the
// ones received) and which of them sends each chunk. With no per-chunk plan
// (one source, whose size the receivers learn from the header) the first
// sends every chunk.
struct Plan {
  std::vector<int> sources;
  std::vector<size_t> chunk_source;  // per chunk: an index into `sources`
  size_t SourceOf(size_t c) const { return chunk_source.empty() ? 0 : chunk_source[c]; }
};

// Deals `chunks` chunks over `sources` sources: chunk c may come from source
// s when `alike(c, s)` (s holds chunk c as the first source does; the first
// always may). Each goes to the eligible source with the fewest chunks so
// far (ties: the lowest), so the chunks only the first holds (BatchNorm
// statistics that every all-reduce replica gathers from its own batches)
// weigh on it and the rest spread over the others.
template <typename Alike>
std::vector<size_t> DealChunks(size_t chunks, size_t sources, Alike alike) {
  std::vector<size_t> chunk_source(chunks, 0), load(sources, 0);
  for (size_t c = 0; c < chunks; ++c) {
    size_t best = 0;
    for (size_t s = 1; s < sources; ++s) {
      if (alike(c, s) && load[s] < load[best]) best = s;
    }
    chunk_source[c] = best;
    ++load[best];
  }
  return chunk_source;
}

// A sender's capture and its CRC-32, computed once (a striping holder's
// fingerprint and its header use the same one).
struct Captured {
  std::vector<uint8_t> bytes;
  uint32_t crc32 = 0;
  std::vector<uint32_t> chunk_crc32;  // per chunk: what striping holders compare
};

// One pass over the bytes: each chunk's CRC-32, combined into the whole's.
Result<Captured> CaptureWithCrc(LiveState& state, int64_t next_step) {
  Captured captured;
  CHORUS_ASSIGN_OR_RETURN(captured.bytes, state.Capture(next_step));
  const std::span<const uint8_t> bytes(captured.bytes);
  uLong whole = crc32(0L, Z_NULL, 0);
  for (size_t c = 0; c < Chunks(bytes.size()); ++c) {
    const size_t begin = c * kLiveStateChunkBytes;
    const size_t n = std::min(kLiveStateChunkBytes, bytes.size() - begin);
    const uint32_t crc = Crc32(bytes.subspan(begin, n));
    captured.chunk_crc32.push_back(crc);
    whole = crc32_combine(whole, crc, static_cast<z_off_t>(n));
  }
  captured.crc32 = static_cast<uint32_t>(whole);
  return captured;
}

LiveStateHeader HeaderOf(const Captured& captured, int64_t next_step) {
  return LiveStateHeader{captured.bytes.size(), next_step, captured.crc32};
}

// Posts `data` to `rank` with `tag`, its request added to `requests`.
Status Post(gossip::Transport& transport, int rank, gossip::Tag tag, std::span<const uint8_t> data,
            std::vector<gossip::RequestPtr>& requests) {
  Result<gossip::RequestPtr> r = transport.Isend(rank, tag, std::as_bytes(data));
  if (r) requests.push_back(std::move(*r));
  return r ? Status::Ok() : r.error();
}

// Posts the chunks of `bytes` that `plan` gives source `self_source` to each
// of `to`.
Status PostChunks(gossip::Transport& transport, const std::vector<int>& to, size_t self_source, const Plan& plan,
                  std::span<const uint8_t> bytes, gossip::Tag round_base,
                  std::vector<gossip::RequestPtr>& requests) {
  for (int rank : to) {
    for (size_t c = 0; c < Chunks(bytes.size()); ++c) {
      if (plan.SourceOf(c) != self_source) continue;
      const size_t begin = c * kLiveStateChunkBytes;
      const size_t n = std::min(kLiveStateChunkBytes, bytes.size() - begin);
      CHORUS_RETURN_IF_ERROR(Post(transport, rank, ChunkTag(round_base), bytes.subspan(begin, n), requests));
    }
  }
  return Status::Ok();
}

// Sends `header` (source 0 does) and this source's share of `bytes` (the
// chunks `plan` gives source `self_source`) to each of
// `to`, all at once, and waits. On a failure the requests are released, and
// when the provider keeps one (a chunk half sent to a receiver that froze may
// still be read), the header's copy and `bytes` are kept for good (`bytes` is
// then left empty).
Status Send(gossip::Transport& transport, const std::vector<int>& to, const LiveStateHeader& header, size_t self_source,
            const Plan& plan, std::vector<uint8_t>& bytes, gossip::Tag round_base, Deadline deadline) {
  const bool with_header = self_source == 0;
  std::vector<uint8_t> head = EncodeLiveStateHeader(header);
  std::vector<gossip::RequestPtr> requests;
  auto fail = [&](Status why) {
    gossip::ReleaseOrKeep(requests, head, bytes);
    return why;
  };
  for (int rank : to) {
    if (!with_header) break;
    if (Status s = Post(transport, rank, HeaderTag(round_base), head, requests); !s.ok()) return fail(s);
  }
  if (const double stall = StallBeforeChunks(); stall > 0) {
    for (gossip::RequestPtr& r : requests) {
      Result<gossip::Completion> done = r->Wait(deadline);
      if (!done) return fail(done.error().WithContext("sending the live state's header"));
    }
    CHORUS_LOG_WARN(Subsys::kNode, "fault injection: stalling ", stall, " s between the live state's header and its chunks");
    std::this_thread::sleep_for(std::chrono::duration<double>(stall));
  }
  if (Status s = PostChunks(transport, to, self_source, plan, bytes, round_base, requests); !s.ok()) {
    return fail(s);
  }
  for (gossip::RequestPtr& r : requests) {
    Result<gossip::Completion> done = r->Wait(deadline);
    if (!done) return fail(done.error().WithContext("sending the live state"));
  }
  return Status::Ok();
}

// Receives the header from the first source of `plan` and the chunks from
// each as `plan` deals them, and checks them.
Result<std::vector<uint8_t>> Receive(gossip::Transport& transport, const Plan& plan, const std::string& sender,
                                     gossip::Tag round_base, Deadline deadline, LiveStateHeader* header) {
  const std::vector<int>& from = plan.sources;
  {
    // Received into the heap, which is kept if the provider keeps the request.
    std::vector<uint8_t> head(kLiveStateHeaderBytes);
    std::vector<gossip::RequestPtr> requests;
    CHORUS_ASSIGN_OR_RETURN(gossip::RequestPtr h,
                            transport.Irecv(from[0], HeaderTag(round_base), std::as_writable_bytes(std::span(head))));
    requests.push_back(std::move(h));
    Result<gossip::Completion> done = requests[0]->Wait(deadline);
    if (!done) {
      gossip::ReleaseOrKeep(requests, head);
      return Err(done.error().WithContext("receiving the live state's header from " + sender));
    }
    Result<LiveStateHeader> decoded = DecodeLiveStateHeader(std::as_bytes(std::span(head)).first(done->bytes));
    if (!decoded) return Err(decoded.error().WithContext("live state from " + sender));
    *header = *decoded;
  }
  if (!plan.chunk_source.empty() && Chunks(header->bytes) != plan.chunk_source.size()) {
    return Err(DataLoss("live state from " + sender + ": a header of " + std::to_string(header->bytes) +
                        " bytes, not the size its holders agreed on"));
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(header->bytes));
  std::vector<gossip::RequestPtr> requests;
  // The chunks' requests end first (cancelled); a chunk half received from a
  // sender that froze may still be written into `bytes` after that.
  auto fail = [&](Status why) {
    gossip::ReleaseOrKeep(requests, bytes);
    return Err(std::move(why));
  };
  for (size_t c = 0; c < Chunks(bytes.size()); ++c) {
    const size_t begin = c * kLiveStateChunkBytes;
    const size_t n = std::min(kLiveStateChunkBytes, bytes.size() - begin);
    Result<gossip::RequestPtr> r = transport.Irecv(from[plan.SourceOf(c)], ChunkTag(round_base),
                                                   std::as_writable_bytes(std::span(bytes).subspan(begin, n)));
    if (!r) return fail(r.error());
    requests.push_back(std::move(*r));
  }
  for (size_t c = 0; c < requests.size(); ++c) {
    Result<gossip::Completion> done = requests[c]->Wait(deadline);
    if (!done) return fail(done.error().WithContext("receiving the live state from " + sender));
    const size_t expected = std::min(kLiveStateChunkBytes, bytes.size() - c * kLiveStateChunkBytes);
    if (done->bytes != expected) {
      return fail(DataLoss("live state from " + sender + ": chunk " + std::to_string(c) + " holds " +
                           std::to_string(done->bytes) + " bytes, expected " + std::to_string(expected)));
    }
  }
  const uint32_t crc = Crc32(bytes);
  if (crc != header->crc32) {
    return Err(DataLoss("live state from " + sender + ": CRC-32 " + std::to_string(crc) + " of the " +
                        std::to_string(bytes.size()) + " bytes received, the sender's is " +
                        std::to_string(header->crc32)));
  }
  return bytes;
}

}  // namespace

Result<std::vector<float>> GatherFromEveryRank(const gossip::Collective& collective,
                                               std::span<const float> mine, gossip::Tag tag_base,
                                               Deadline deadline, std::vector<int>* equivocators,
                                               const gossip::Collective::PartFor& bend,
                                               const gossip::PartSigner* signer) {
  const size_t k = mine.size();
  std::vector<float> all(k * static_cast<size_t>(collective.size()), 0.0f);
  std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(k * collective.rank()));
  gossip::CollectiveOptions o;
  o.tag_base = tag_base;
  o.deadline = deadline;
  o.identify_missing_peers = false;  // each receive names its rank
  if (equivocators != nullptr) {
    CHORUS_RETURN_IF_ERROR(collective.AgreedAllgather(std::span<float>(all), o, equivocators, bend, signer));
  } else {
    CHORUS_RETURN_IF_ERROR(collective.Allgather(std::span<float>(all), o, bend));
  }
  return all;
}

Result<std::vector<double>> GatherMemberValues(const gossip::Collective& collective, uint64_t epoch, double mine,
                                               Deadline deadline) {
  const float value = static_cast<float>(mine);
  CHORUS_ASSIGN_OR_RETURN(const std::vector<float> values,
                          GatherFromEveryRank(collective, std::span<const float>(&value, 1),
                                              EpochTagBase(epoch) + (gossip::Tag{5} << 37), deadline));
  return std::vector<double>(values.begin(), values.end());
}

namespace {

// Exact small floats for GatherFromEveryRank: a 32-bit value in two 16-bit
// halves (as the fingerprint of live_state_wire.h holds it).
float Half(uint64_t v, int shift) { return static_cast<float>((v >> shift) & 0xffff); }

// A capture's per-chunk CRC-32s, two floats per chunk.
std::vector<float> ChunkFingerprints(const Captured& captured) {
  std::vector<float> out;
  for (uint32_t crc : captured.chunk_crc32) {
    out.push_back(Half(crc, 16));
    out.push_back(Half(crc, 0));
  }
  return out;
}

// Rank `rank`'s `k` floats of a GatherFromEveryRank.
std::span<const float> Slot(const std::vector<float>& all, int rank, size_t k) {
  return std::span<const float>(all).subspan(static_cast<size_t>(rank) * k, k);
}

bool Same(std::span<const float> a, std::span<const float> b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

// `plan` without the sources that send no chunk (the first stays: it sends
// the header).
Plan DropIdleSources(Plan plan) {
  std::vector<size_t> index(plan.sources.size(), 0);
  std::vector<int> kept;
  for (size_t s = 0; s < plan.sources.size(); ++s) {
    const bool sends = s == 0 || std::find(plan.chunk_source.begin(), plan.chunk_source.end(), s) !=
                                     plan.chunk_source.end();
    index[s] = kept.size();
    if (sends) kept.push_back(plan.sources[s]);
  }
  for (size_t& c : plan.chunk_source) c = index[c];
  plan.sources = std::move(kept);
  return plan;
}

// The plan of a transfer: the lowest-ranked holder alone, or, with
// `max_sources` above 1 and several holders, up to that many holders
// (lowest ranks first) with the chunks dealt among them. Holders capture
// their state for it (`*captured`, with its CRC-32, which the header then
// carries) and gather a fingerprint of it. Where every holder captured the
// same bytes (all-reduce replicas on CPUs, bitwise equal) every chunk may
// come from any source. Where only some chunks differ (BatchNorm running
// statistics, gathered by each replica from its own batches) the sources
// gather a CRC-32 per chunk, and a chunk comes only from sources that hold
// it as the first does. Where the sizes differ (gossip replicas' metadata),
// the first source sends it all.
Result<Plan> PlanTransfer(const gossip::Collective& collective, const MembershipView& view, LiveState& state,
                          const std::vector<int>& holders, int max_sources, int64_t next_step,
                          gossip::Tag round_base, Deadline deadline, std::optional<Captured>* captured) {
  if (max_sources <= 1 || holders.size() < 2) return Plan{{holders[0]}, {}};
  const bool holds = std::find(holders.begin(), holders.end(), view.self_rank) != holders.end();
  std::array<float, kLiveStateFingerprintFloats> mine{};
  if (holds) {
    CHORUS_ASSIGN_OR_RETURN(*captured, CaptureWithCrc(state, next_step));
    mine = EncodeLiveStateFingerprint({true, (*captured)->crc32, (*captured)->bytes.size()});
  }
  // The third 2^20 tags of the round: after the needs' gather and the header.
  CHORUS_ASSIGN_OR_RETURN(const std::vector<float> all,
                          GatherFromEveryRank(collective, mine, round_base + (gossip::Tag{2} << 20), deadline));
  auto of = [&](int rank) -> Result<LiveStateFingerprint> {
    Result<LiveStateFingerprint> f = DecodeLiveStateFingerprint(Slot(all, rank, kLiveStateFingerprintFloats));
    if (!f) return Err(f.error().WithContext("from " + view.members[static_cast<size_t>(rank)].name));
    return f;
  };
  const size_t n = std::min(holders.size(), static_cast<size_t>(max_sources));
  Plan plan{std::vector<int>(holders.begin(), holders.begin() + static_cast<std::ptrdiff_t>(n)), {}};
  CHORUS_ASSIGN_OR_RETURN(const LiveStateFingerprint first, of(holders[0]));
  const size_t chunks = Chunks(first.bytes);
  bool all_same = true;
  for (int h : plan.sources) {
    CHORUS_ASSIGN_OR_RETURN(const LiveStateFingerprint other, of(h));
    if (other.bytes != first.bytes) {
      CHORUS_LOG_INFO(Subsys::kNode, "the holders of the live state at epoch ", view.epoch, " hold states of ",
                      "different sizes (", view.members[static_cast<size_t>(h)].name, " and ",
                      view.members[static_cast<size_t>(holders[0])].name, "): one of them sends it all");
      return Plan{{holders[0]}, {}};
    }
    all_same = all_same && other.holds == first.holds && other.crc32 == first.crc32;
  }
  if (all_same) {
    plan.chunk_source = DealChunks(chunks, n, [](size_t, size_t) { return true; });
    return DropIdleSources(std::move(plan));
  }
  // Same sizes, other bytes: which chunks differ, in the fourth 2^20 tags.
  const size_t k = 2 * chunks;
  std::vector<float> chunk_crcs(k, 0.0f);
  if (std::find(plan.sources.begin(), plan.sources.end(), view.self_rank) != plan.sources.end()) {
    chunk_crcs = ChunkFingerprints(**captured);
  }
  CHORUS_ASSIGN_OR_RETURN(const std::vector<float> crcs,
                          GatherFromEveryRank(collective, chunk_crcs, round_base + (gossip::Tag{3} << 20), deadline));
  // Source s holds chunk c as the first source does.
  auto holds_alike = [&](size_t c, size_t s) {
    return Same(Slot(crcs, plan.sources[s], k).subspan(2 * c, 2), Slot(crcs, plan.sources[0], k).subspan(2 * c, 2));
  };
  plan.chunk_source = DealChunks(chunks, n, holds_alike);
  size_t alike = 0;
  for (size_t c = 0; c < chunks; ++c) {
    bool every = true;
    for (size_t s = 1; s < n; ++s) every = every && holds_alike(c, s);
    alike += every ? 1 : 0;
  }
  const std::string& first_name = view.members[static_cast<size_t>(holders[0])].name;
  if (alike == 0) {
    CHORUS_LOG_INFO(Subsys::kNode, "the holders of the live state at epoch ", view.epoch, " hold none of its ", chunks,
                    " chunks alike: ", first_name, " sends what no other holds as it does");
  } else {
    CHORUS_LOG_INFO(Subsys::kNode, "the holders of the live state at epoch ", view.epoch, " hold ", alike, " of its ",
                    chunks, " chunks alike: those come striped, the rest from ", first_name);
  }
  return DropIdleSources(std::move(plan));
}

}  // namespace

Status NobodyHoldsTheState(uint64_t epoch) {
  return FailedPrecondition("no member of epoch " + std::to_string(epoch) +
                            " holds the cluster's state: every member joined and is waiting for it");
}

Result<LiveStateShared> ShareLiveState(const gossip::Collective& collective, const MembershipView& view,
                                       LiveState& state, int64_t next_step, Deadline deadline, int round,
                                       int max_sources) {
  LiveStateShared shared;
  const gossip::Tag round_base = RoundTagBase(view.epoch, round);
  shared.next_step = next_step;
  const int n = view.size();
  const float need = state.NeedsState() ? 1.0f : 0.0f;
  CHORUS_ASSIGN_OR_RETURN(const std::vector<float> needs,
                          GatherFromEveryRank(collective, std::span<const float>(&need, 1), round_base, deadline));

  std::vector<int> receivers, holders;
  for (int r = 0; r < n; ++r) (needs[static_cast<size_t>(r)] > 0.5f ? receivers : holders).push_back(r);
  shared.receivers = static_cast<int>(receivers.size());
  if (receivers.empty()) return shared;
  if (holders.empty()) return Err(NobodyHoldsTheState(view.epoch));
  std::optional<Captured> captured;
  CHORUS_ASSIGN_OR_RETURN(const Plan plan, PlanTransfer(collective, view, state, holders, max_sources, next_step,
                                                         round_base, deadline, &captured));
  const std::vector<int>& sources = plan.sources;
  std::vector<std::string> source_names;
  for (int r : sources) source_names.push_back(view.members[static_cast<size_t>(r)].name);
  shared.sender = source_names[0];
  shared.sources = static_cast<int>(sources.size());
  gossip::Transport& transport = collective.transport();
  const double t0 = NowSeconds();
  if (auto self = std::find(sources.begin(), sources.end(), view.self_rank); self != sources.end()) {
    if (!captured) {
      CHORUS_ASSIGN_OR_RETURN(captured, CaptureWithCrc(state, next_step));
    }
    std::vector<uint8_t>& bytes = captured->bytes;
    const LiveStateHeader header = HeaderOf(*captured, next_step);
    const size_t index = static_cast<size_t>(self - sources.begin());
    CHORUS_RETURN_IF_ERROR(Send(transport, receivers, header, index, plan, bytes, round_base, deadline));
    shared.bytes = header.bytes;
    std::vector<std::string> names;
    for (int r : receivers) names.push_back(view.members[static_cast<size_t>(r)].name);
    CHORUS_LOG_INFO(Subsys::kNode, "sent the live state (", MiB(header.bytes), ", step ", next_step, ") to ",
                    JoinNames(names),
                    sources.size() > 1 ? " as 1 of " + std::to_string(sources.size()) + " sources" : std::string(),
                    " in ", NowSeconds() - t0, " s");
    return shared;
  }
  if (!state.NeedsState()) return shared;
  std::string sender_text;
  for (size_t i = 0; i < sources.size(); ++i) {
    sender_text += (i == 0 ? "" : i + 1 == sources.size() ? " and " : ", ") + source_names[i] + " (rank " +
                   std::to_string(sources[i]) + ")";
  }
  if (sources.size() > 1) sender_text += ", striped";
  LiveStateHeader header;
  CHORUS_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes,
                          Receive(transport, plan, sender_text, round_base, deadline, &header));
  CHORUS_RETURN_IF_ERROR(state.Restore(bytes, "live state from " + JoinNames(source_names)));
  shared.bytes = bytes.size();
  shared.next_step = header.next_step;
  CHORUS_LOG_INFO(Subsys::kNode, "received the live state from ", sender_text, ": ", MiB(bytes.size()), " in ",
                  NowSeconds() - t0, " s, CRC-32 verified; resuming at step ", header.next_step);
  return shared;
}

// A push travels in the last round of its epoch's tags: the collective
// transfers of that epoch use the first ones.
constexpr int kPushRound = 15;

Result<std::unique_ptr<LiveStatePush>> LiveStatePush::Start(gossip::Transport& transport,
                                                          const MembershipView& view, int to, LiveState& state,
                                                          int64_t next_step, Deadline deadline) {
  std::unique_ptr<LiveStatePush> push(new LiveStatePush(deadline));
  push->to_ = view.members[static_cast<size_t>(to)].name;
  CHORUS_ASSIGN_OR_RETURN(Captured captured, CaptureWithCrc(state, next_step));
  push->head_ = EncodeLiveStateHeader(HeaderOf(captured, next_step));
  push->bytes_ = std::move(captured.bytes);
  const gossip::Tag round_base = RoundTagBase(view.epoch, kPushRound);
  CHORUS_RETURN_IF_ERROR(Post(transport, to, HeaderTag(round_base), push->head_, push->requests_));
  CHORUS_RETURN_IF_ERROR(PostChunks(transport, {to}, 0, Plan{{to}, {}}, push->bytes_, round_base, push->requests_));
  CHORUS_LOG_INFO(Subsys::kNode, "pushing the live state (", MiB(push->bytes_.size()), ", step ", next_step, ") to ",
                  push->to_, " at epoch ", view.epoch, " while training on");
  return push;
}

LiveStatePush::~LiveStatePush() { gossip::ReleaseOrKeep(requests_, head_, bytes_); }

bool LiveStatePush::Reap() {
  for (gossip::RequestPtr& r : requests_) {
    if (r->Done()) continue;
    if (!deadline_.Expired()) return false;
    CHORUS_LOG_WARN(Subsys::kNode, "giving up the live state's push to ", to_,
                    ": not taken by the deadline (it joins again if it still lacks a state)");
    return true;
  }
  for (gossip::RequestPtr& r : requests_) {
    Result<gossip::Completion> done = r->Wait(deadline_);
    if (!done) {
      CHORUS_LOG_WARN(Subsys::kNode, "the live state's push to ", to_, " failed: ", done.error().message());
      return true;
    }
  }
  CHORUS_LOG_INFO(Subsys::kNode, "pushed the live state to ", to_, " in ", NowSeconds() - started_, " s");
  return true;
}

Result<int64_t> ReceivePushedLiveState(gossip::Transport& transport, const MembershipView& view, int from,
                                       LiveState& state, Deadline deadline) {
  const std::string& sender = view.members[static_cast<size_t>(from)].name;
  const double t0 = NowSeconds();
  LiveStateHeader header;
  CHORUS_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, Receive(transport, Plan{{from}, {}}, sender,
                                                              RoundTagBase(view.epoch, kPushRound), deadline, &header));
  CHORUS_RETURN_IF_ERROR(state.Restore(bytes, "live state from " + sender));
  CHORUS_LOG_INFO(Subsys::kNode, "received the live state from ", sender, " (rank ", from, ", pushed): ",
                  MiB(bytes.size()), " in ", NowSeconds() - t0, " s, CRC-32 verified; resuming at step ",
                  header.next_step);
  return header.next_step;
}

Result<int64_t> ShareLiveStateIfAny(const gossip::Collective& collective, const MembershipView& view,
                                    LiveState* state, int64_t next_step, Deadline deadline, int round,
                                    int max_sources) {
  if (state == nullptr) return next_step;
  CHORUS_ASSIGN_OR_RETURN(LiveStateShared shared,
                          ShareLiveState(collective, view, *state, next_step, deadline, round, max_sources));
  return shared.next_step;
}

}  // namespace chorus::node
