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
#include <vector>

#include "gossip/collectives/collective_internal.h"
#include "topologies/chunking.h"
#include "topologies/ring_schedule.h"

namespace chorus::gossip {

namespace detail {
namespace {

// The chunks of the buffer, the segments of each chunk, and this rank's
// schedule over them.
struct RingLayout {
  int n = 0;
  topologies::RingSchedule schedule;
  std::vector<topologies::Range> chunks;
  std::vector<std::vector<topologies::Range>> segments;  // by chunk
};

Result<RingLayout> PlanRing(int self, int n, size_t elems, size_t segment) {
  RingLayout layout;
  layout.n = n;
  CHORUS_ASSIGN_OR_RETURN(layout.schedule, topologies::RingAllreduceSchedule(self, n));
  CHORUS_ASSIGN_OR_RETURN(layout.chunks, topologies::PartitionChunks(static_cast<int64_t>(elems), n));
  layout.segments.resize(n);
  for (int c = 0; c < n; ++c) {
    CHORUS_ASSIGN_OR_RETURN(layout.segments[c],
                            topologies::SegmentRange(layout.chunks[c], static_cast<int64_t>(segment)));
  }
  return layout;
}

// Receive units (step, k) in order; chunks with no elements have no units.
struct Unit {
  int step = 0;
  size_t k = 0;
};

// One call's ring over `data`: the sends and receives in flight, and the
// steps RingSum runs them by.
template <typename T>
class RingPass {
 public:
  RingPass(const CollectiveGroup& group, std::span<T> data, const AllreduceOptions& options,
           const RingLayout& layout, size_t segment, int window)
      : group_(group),
        data_(data),
        options_(options),
        layout_(layout),
        n_(layout.n),
        steps_(2 * (layout.n - 1)),
        rs_sends_(layout.n),
        in_(group, layout.schedule.reduce_scatter[0].recv_from,
            std::min<size_t>(segment, static_cast<size_t>(layout.chunks[0].size())), window) {
    Settle(next_post_);
    cur_ = next_post_;
  }

  int steps() const { return steps_; }
  bool Done() const { return cur_.step >= steps_; }

  // Posts receives of the units before `below_step` while the window has room.
  Status PostAhead(int below_step) {
    while (!in_.Full() && next_post_.step < below_step) {
      const int chunk = ChunkReceived(next_post_.step);
      auto dest = Region(chunk, next_post_.k);
      std::span<T> direct;
      if (next_post_.step >= n_ - 1) {
        const auto& prior = rs_sends_[chunk];
        if (prior.size() <= next_post_.k || !prior[next_post_.k] || prior[next_post_.k]->Done()) {
          direct = dest;
        }
      }
      CHORUS_RETURN_IF_ERROR(in_.Post(TagOf(next_post_.step), direct, dest.size()));
      ++next_post_.k;
      Settle(next_post_);
    }
    return Status::Ok();
  }

  // Sends every segment of step 0's chunk.
  Status SendFirstStep() {
    for (size_t k = 0; k < SegmentsOf(ChunkSent(0)); ++k) {
      CHORUS_RETURN_IF_ERROR(Send(0, ChunkSent(0), k));
    }
    return Status::Ok();
  }

  // Waits for the oldest receive, adds it in (reduce-scatter) or stores it
  // (all-gather), and sends that segment on as the next step's.
  Status ReceiveAndForward() {
    const int chunk = ChunkReceived(cur_.step);
    auto dest = Region(chunk, cur_.k);
    auto got_or = in_.Next(options_.deadline);
    if (!got_or) return got_or.error().WithContext(Describe(cur_.step, cur_.k) + " receive");
    const std::span<T> got = *got_or;
    if (cur_.step < n_ - 1) {
      AddInto(dest.data(), got.data(), got.size());
    } else if (got.data() != dest.data()) {
      // Landed in scratch because the region was still being sent from. The
      // receiver of that send already has it (this data depends on it), so the
      // wait is short.
      auto& prior = rs_sends_[chunk][cur_.k];
      auto done = prior->Wait(options_.deadline);
      if (!done) return done.error().WithContext(Describe(cur_.step, cur_.k) + " earlier send");
      std::memcpy(dest.data(), got.data(), got.size_bytes());
    }
    if (cur_.step + 1 < steps_) CHORUS_RETURN_IF_ERROR(Send(cur_.step + 1, chunk, cur_.k));
    ++cur_.k;
    Settle(cur_);
    return Status::Ok();
  }

  Status WaitSends() {
    for (auto& per_chunk : rs_sends_) {
      CHORUS_RETURN_IF_ERROR(WaitAll(per_chunk, options_.deadline));
    }
    return WaitAll(ag_sends_, options_.deadline);
  }

 private:
  const topologies::RingStep& StepOf(int s) const {
    return s < n_ - 1 ? layout_.schedule.reduce_scatter[s] : layout_.schedule.all_gather[s - (n_ - 1)];
  }
  int ChunkSent(int s) const { return StepOf(s).send_chunk; }
  int ChunkReceived(int s) const { return StepOf(s).recv_chunk; }
  size_t SegmentsOf(int chunk) const { return layout_.segments[chunk].size(); }
  std::span<T> Region(int chunk, size_t k) const {
    const topologies::Range& r = layout_.segments[chunk][k];
    return data_.subspan(static_cast<size_t>(r.begin), static_cast<size_t>(r.size()));
  }
  Tag TagOf(int s) const {
    return s < n_ - 1 ? CollectiveTag(options_.tag_base, CollectivePhase::kRingReduceScatter, s)
                      : CollectiveTag(options_.tag_base, CollectivePhase::kRingAllGather, s - (n_ - 1));
  }
  std::string Describe(int s, size_t k) const {
    return std::string("ring ") + (s < n_ - 1 ? "reduce-scatter" : "all-gather") + " step " +
           std::to_string(s < n_ - 1 ? s : s - (n_ - 1)) + " segment " + std::to_string(k);
  }
  // Moves `u` past the chunks that have no segments left.
  void Settle(Unit& u) const {
    while (u.step < steps_ && u.k >= SegmentsOf(ChunkReceived(u.step))) {
      ++u.step;
      u.k = 0;
    }
  }

  Status Send(int s, int chunk, size_t k) {
    auto part = Region(chunk, k);
    auto request = group_.transport().Isend(group_.RankAt(StepOf(s).send_to), TagOf(s), AsBytes(part));
    if (!request) return request.error().WithContext(Describe(s, k) + " send");
    if (s < n_ - 1) {
      rs_sends_[chunk].resize(SegmentsOf(chunk));
      rs_sends_[chunk][k] = std::move(*request);
    } else {
      ag_sends_.push_back(std::move(*request));
    }
    return Status::Ok();
  }

  const CollectiveGroup& group_;
  const std::span<T> data_;
  const AllreduceOptions& options_;
  const RingLayout& layout_;
  const int n_;
  const int steps_;  // 2 (n - 1), numbered 0 .. 2n-3, reduce-scatter first
  // Reduce-scatter sends by chunk and segment: an all-gather receive into that
  // region must wait for them. All-gather sends are only waited for at the end.
  std::vector<std::vector<RequestPtr>> rs_sends_;
  std::vector<RequestPtr> ag_sends_;
  Unit next_post_;  // the next unit to post a receive for
  Unit cur_;        // the next unit to receive
  RecvStream<T> in_;
};

}  // namespace

template <typename T>
Status RingSum(const CollectiveGroup& group, std::span<T> data, const AllreduceOptions& options) {
  const int n = group.size();
  if (n == 1 || data.empty()) return Status::Ok();
  const size_t segment = std::max<size_t>(options.segment_elems, 1);
  const int window = std::max(options.inflight_segments, 1);
  CHORUS_ASSIGN_OR_RETURN(const RingLayout layout, PlanRing(group.self(), n, data.size(), segment));
  RingPass<T> ring(group, data, options, layout, segment, window);
  // The first window of reduce-scatter receives goes before the step-0 sends,
  // so that the predecessor's data finds them posted. (All-gather receives wait
  // for the main loop: they land straight in regions the reduce-scatter sends.)
  CHORUS_RETURN_IF_ERROR(ring.PostAhead(/*below_step=*/n - 1));
  CHORUS_RETURN_IF_ERROR(ring.SendFirstStep());
  while (!ring.Done()) {
    CHORUS_RETURN_IF_ERROR(ring.PostAhead(ring.steps()));
    CHORUS_RETURN_IF_ERROR(ring.ReceiveAndForward());
  }
  return ring.WaitSends();
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
