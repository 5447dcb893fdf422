// Ring all-reduce (see allreduce_ring.h).
//
// The buffer is cut into n `chunks` (BalancedPartition), one per rank, and each
// chunk into segments of options.segment_elems. Rank i talks to `right` (i+1)
// and `left` (i-1) only. There are `steps` = 2(n-1) steps: in reduce-scatter
// step s (s < n-1) rank i sends chunk i-s and adds the chunk i-s-1 that arrives
// from the left into its own copy; after n-1 steps it holds the full sum of chunk
// i+1. In all-gather step s it sends the summed chunk it got last and stores the
// one that arrives. The chunk received at step s is the one sent at step s+1, so
// steps pipeline segment by segment: as soon as segment k of a chunk has been
// received (and reduced), it is sent on. Receives ("units" (step, k), in order)
// are posted `window` = options.inflight_segments ahead, reduce-scatter ones into
// scratch slots, all-gather ones straight into the buffer unless that region is
// still being sent from (then via scratch and a copy after the send completed).
//
// Progress: sends never block. All step-0 sends are posted first, every other
// send follows a completed receive, and a rank only ever waits for its oldest
// receive, whose sender needs nothing later than that unit: no cycle of waits.
#include "gossip/allreduce_ring.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "gossip/collective_internal.h"
#include "gossip/collective_schedule.h"

namespace chorus::gossip {

namespace detail {

template <typename T>
Status RingSum(const CollectiveGroup& group, std::span<T> data, const AllreduceOptions& options) {
  const int n = group.size();
  if (n == 1 || data.empty()) return Status::Ok();
  const int i = group.self();
  const int right = (i + 1) % n;
  const int left = (i + n - 1) % n;
  const int steps = 2 * (n - 1);
  const size_t segment = std::max<size_t>(options.segment_elems, 1);
  const int window = std::max(options.inflight_segments, 1);
  const std::vector<ElemRange> chunks = BalancedPartition(data.size(), n);
  Transport& transport = group.transport();

  auto segments_of = [&](int chunk) { return NumSegments(chunks[chunk].count, segment); };
  auto region = [&](int chunk, size_t k) {
    const ElemRange r = SegmentOf(chunks[chunk], segment, k);
    return data.subspan(r.begin, r.count);
  };
  auto tag_of = [&](int s) {
    return s < n - 1 ? CollectiveTag(options.tag_base, CollectivePhase::kRingReduceScatter, s)
                     : CollectiveTag(options.tag_base, CollectivePhase::kRingAllGather,
                                     s - (n - 1));
  };
  auto describe = [&](int s, size_t k) {
    return std::string("ring ") + (s < n - 1 ? "reduce-scatter" : "all-gather") + " step " +
           std::to_string(s < n - 1 ? s : s - (n - 1)) + " segment " + std::to_string(k);
  };

  // Reduce-scatter sends by chunk and segment: an all-gather receive into that
  // region must wait for them. All-gather sends are only waited for at the end.
  std::vector<std::vector<RequestPtr>> rs_sends(n);
  std::vector<RequestPtr> ag_sends;
  auto send = [&](int s, int chunk, size_t k) -> Status {
    auto part = region(chunk, k);
    auto request = transport.Isend(group.RankAt(right), tag_of(s), AsBytes(part));
    if (!request) return request.error().WithContext(describe(s, k) + " send");
    if (s < n - 1) {
      rs_sends[chunk].resize(segments_of(chunk));
      rs_sends[chunk][k] = std::move(*request);
    } else {
      ag_sends.push_back(std::move(*request));
    }
    return Status::Ok();
  };

  // Receive units (step, k) in order; chunks with no elements have no units.
  struct Unit {
    int step = 0;
    size_t k = 0;
  };
  auto settle = [&](Unit& u) {
    while (u.step < steps && u.k >= segments_of(RingChunkReceived(i, n, u.step))) {
      ++u.step;
      u.k = 0;
    }
  };
  Unit next_post;
  settle(next_post);
  Unit cur = next_post;

  for (size_t k = 0; k < segments_of(RingChunkSent(i, n, 0)); ++k) {
    CHORUS_RETURN_IF_ERROR(send(0, RingChunkSent(i, n, 0), k));
  }

  RecvStream<T> in(group, left, std::min(segment, chunks[0].count), window);
  while (cur.step < steps) {
    while (!in.Full() && next_post.step < steps) {
      const int chunk = RingChunkReceived(i, n, next_post.step);
      auto dest = region(chunk, next_post.k);
      std::span<T> direct;
      if (next_post.step >= n - 1) {
        const auto& prior = rs_sends[chunk];
        if (prior.size() <= next_post.k || !prior[next_post.k] || prior[next_post.k]->Done()) {
          direct = dest;
        }
      }
      CHORUS_RETURN_IF_ERROR(in.Post(tag_of(next_post.step), direct, dest.size()));
      ++next_post.k;
      settle(next_post);
    }

    const int chunk = RingChunkReceived(i, n, cur.step);
    auto dest = region(chunk, cur.k);
    auto got_or = in.Next(options.deadline);
    if (!got_or) return got_or.error().WithContext(describe(cur.step, cur.k) + " receive");
    const std::span<T> got = *got_or;
    if (cur.step < n - 1) {
      AddInto(dest.data(), got.data(), got.size());
    } else if (got.data() != dest.data()) {
      // Landed in scratch because the region was still being sent from. The
      // receiver of that send already has it (this data depends on it), so the
      // wait is short.
      auto& prior = rs_sends[chunk][cur.k];
      auto done = prior->Wait(options.deadline);
      if (!done) return done.error().WithContext(describe(cur.step, cur.k) + " earlier send");
      std::memcpy(dest.data(), got.data(), got.size_bytes());
    }
    if (cur.step + 1 < steps) CHORUS_RETURN_IF_ERROR(send(cur.step + 1, chunk, cur.k));
    ++cur.k;
    settle(cur);
  }

  for (auto& per_chunk : rs_sends) {
    CHORUS_RETURN_IF_ERROR(WaitAll(per_chunk, options.deadline));
  }
  return WaitAll(ag_sends, options.deadline);
}

template Status RingSum<float>(const CollectiveGroup&, std::span<float>, const AllreduceOptions&);
template Status RingSum<uint16_t>(const CollectiveGroup&, std::span<uint16_t>,
                                  const AllreduceOptions&);

}  // namespace detail

Status AllreduceRing(const CollectiveGroup& group, std::span<float> data,
                     const AllreduceOptions& options) {
  return detail::RunAllreduce(group, data, options, "ring all-reduce",
                              [&] { return detail::RingSum(group, data, options); });
}

Status AllreduceRing(const CollectiveGroup& group, std::span<uint16_t> half,
                     const AllreduceOptions& options) {
  return detail::RunAllreduce(group, half, options, "ring all-reduce (fp16)",
                              [&] { return detail::RingSum(group, half, options); });
}

}  // namespace chorus::gossip
