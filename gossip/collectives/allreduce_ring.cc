// Ring all-reduce (see allreduce_ring.h).
//
// The buffer is cut into n `chunks` (topologies::PartitionChunks), one per rank,
// and each chunk into `segments` of options.segment_elems. Rank i sends to i+1 and
// receives from i-1 only, following topologies::RingAllreduceSchedule, whose
// 2(n-1) `steps` this file numbers 0 .. 2n-3 (reduce-scatter first). In
// reduce-scatter step s (s < n-1) rank i sends chunk i-s and adds the chunk i-s-1
// that arrives from i-1 into its own copy; after n-1 steps it holds the full sum of chunk
// i+1. In all-gather step s it sends the summed chunk it got last and stores the
// one that arrives. The chunk received at step s is the one sent at step s+1, so
// steps pipeline segment by segment: as soon as segment k of a chunk has been
// received (and reduced), it is sent on. Receives ("units" (step, k), in order)
// are posted `window` = options.inflight_segments ahead, reduce-scatter ones into
// scratch slots, all-gather ones straight into the buffer unless that region is
// still being sent from (then via scratch and a copy after the send completed).
//
// Progress: sends never block. The first window of reduce-scatter receives and
// then all step-0 sends are posted first, every other send follows a completed
// receive, and a rank only ever waits for its oldest receive, whose sender
// needs nothing later than that unit: no cycle of waits.
#include "gossip/collectives/allreduce_ring.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "gossip/collectives/collective_internal.h"
#include "topologies/chunking.h"
#include "topologies/ring_schedule.h"

namespace chorus::gossip {

namespace detail {

template <typename T>
Status RingSum(const CollectiveGroup& group, std::span<T> data, const AllreduceOptions& options) {
  const int n = group.size();
  if (n == 1 || data.empty()) return Status::Ok();
  const int i = group.self();
  const int steps = 2 * (n - 1);
  const size_t segment = std::max<size_t>(options.segment_elems, 1);
  const int window = std::max(options.inflight_segments, 1);
  Transport& transport = group.transport();
  CHORUS_ASSIGN_OR_RETURN(const topologies::RingSchedule schedule,
                          topologies::RingAllreduceSchedule(i, n));
  CHORUS_ASSIGN_OR_RETURN(const std::vector<topologies::Range> chunks,
                          topologies::PartitionChunks(static_cast<int64_t>(data.size()), n));
  std::vector<std::vector<topologies::Range>> segments(n);  // by chunk
  for (int c = 0; c < n; ++c) {
    CHORUS_ASSIGN_OR_RETURN(segments[c],
                            topologies::SegmentRange(chunks[c], static_cast<int64_t>(segment)));
  }
  auto step_of = [&](int s) -> const topologies::RingStep& {
    return s < n - 1 ? schedule.reduce_scatter[s] : schedule.all_gather[s - (n - 1)];
  };
  auto chunk_sent = [&](int s) { return step_of(s).send_chunk; };
  auto chunk_received = [&](int s) { return step_of(s).recv_chunk; };
  auto segments_of = [&](int chunk) { return segments[chunk].size(); };
  auto region = [&](int chunk, size_t k) {
    const topologies::Range& r = segments[chunk][k];
    return data.subspan(static_cast<size_t>(r.begin), static_cast<size_t>(r.size()));
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
    auto request = transport.Isend(group.RankAt(step_of(s).send_to), tag_of(s), AsBytes(part));
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
    while (u.step < steps && u.k >= segments_of(chunk_received(u.step))) {
      ++u.step;
      u.k = 0;
    }
  };
  Unit next_post;
  settle(next_post);
  Unit cur = next_post;

  RecvStream<T> in(group, schedule.reduce_scatter[0].recv_from, std::min<size_t>(segment, static_cast<size_t>(chunks[0].size())), window);
  auto post_ahead = [&](int below_step) -> Status {
    while (!in.Full() && next_post.step < below_step) {
      const int chunk = chunk_received(next_post.step);
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
    return Status::Ok();
  };
  // The first window of reduce-scatter receives goes before the step-0 sends,
  // so that the predecessor's data finds them posted. (All-gather receives wait
  // for the main loop: they land straight in regions the reduce-scatter sends.)
  CHORUS_RETURN_IF_ERROR(post_ahead(n - 1));
  for (size_t k = 0; k < segments_of(chunk_sent(0)); ++k) {
    CHORUS_RETURN_IF_ERROR(send(0, chunk_sent(0), k));
  }

  while (cur.step < steps) {
    CHORUS_RETURN_IF_ERROR(post_ahead(steps));

    const int chunk = chunk_received(cur.step);
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
