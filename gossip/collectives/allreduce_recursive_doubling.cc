// Recursive doubling all-reduce (see allreduce_recursive_doubling.h).
//
// The `steps` come from topologies::RecursiveDoublingSchedule: with p2 the largest
// power of two <= n, the first 2(n - p2) ranks fold pairwise (the even one hands
// its whole buffer to the odd one, which adds it in, and sits out), the remaining
// p2 ranks run log2(p2) exchange rounds (the whole buffer to the round's partner,
// the partner's whole buffer added in), and the folded ranks get the result back.
//
// An exchange round sends from `data` while the partner's copy arrives, so the
// receives land in the scratch slots of a RecvStream (options.inflight_segments
// slots of options.segment_elems), and segment k of `data` is added into only
// once send k (which reads it) has completed. For latency the receives are posted
// before the sends, and a buffer of one segment is one message each way.
//
// Identical bits everywhere: in a round both partners compute, per element,
// mine + partner's, and float addition is commutative (so is the FP16 AddInto:
// both operands widened to float, added, rounded back), so both end with the same
// bits; by induction every group of 2^(round+1) virtual ranks holds one buffer,
// and the folded ranks get a copy of it.
//
// Tags: phase kFoldIn / kRecursiveDoubling (step = round) / kFoldOut; the segments
// of one step share its tag and are matched in order.
//
// Progress: sends never block. In a round both partners post the receives of
// their first `window` segments before any send, and post the receive of segment
// k + window after consuming segment k, which needs only the partner's send k and
// this rank's own send k (taken by the partner's receive k, posted at the latest
// after the partner consumed segment k - window): no cycle of waits. A folded
// rank waits for its fold-in send before receiving the result into `data`; the
// odd rank took that send with its first step.
#include "gossip/collectives/allreduce_recursive_doubling.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gossip/collectives/collective_internal.h"
#include "topologies/recursive_doubling_schedule.h"

namespace chorus::gossip {

namespace detail {

namespace {

// One exchange round with group member `peer`: sends the whole of `data` and adds
// the peer's whole buffer into it, segment by segment.
template <typename T>
Status ExchangeAndAdd(const CollectiveGroup& group, int peer, Tag tag, std::span<T> data,
                      size_t segment, int window, Deadline deadline, const std::string& what) {
  RecvStream<T> stream(group, peer, segment, window);
  size_t posted = 0;  // elements covered by posted receives
  auto post_ahead = [&]() -> Status {
    while (!stream.Full() && posted < data.size()) {
      const size_t elems = std::min(segment, data.size() - posted);
      Status s = stream.Post(tag, std::span<T>(), elems);
      if (!s.ok()) return s.WithContext(what + " receive");
      posted += elems;
    }
    return Status::Ok();
  };
  CHORUS_RETURN_IF_ERROR(post_ahead());
  std::vector<RequestPtr> sends;
  Status sent = SendSegments(group, peer, tag, std::span<const T>(data), segment, &sends);
  if (!sent.ok()) return sent.WithContext(what + " send");
  for (size_t k = 0, off = 0; off < data.size(); ++k, off += segment) {
    auto got = stream.Next(deadline);
    if (!got) return got.error().WithContext(what + " receive");
    // Send k reads this segment of `data`: it must be complete before the add.
    auto done = sends[k]->Wait(deadline);
    if (!done) return done.error().WithContext(what + " send");
    AddInto(data.data() + off, got->data(), got->size());
    CHORUS_RETURN_IF_ERROR(post_ahead());
  }
  return Status::Ok();
}

}  // namespace

template <typename T>
Status RecursiveDoublingSum(const CollectiveGroup& group, std::span<T> data,
                            const AllreduceOptions& options) {
  const int n = group.size();
  if (n == 1 || data.empty()) return Status::Ok();
  size_t segment = options.segment_elems;
  int window = options.inflight_segments;
  CapSegments(data.size(), &segment, &window);
  CHORUS_ASSIGN_OR_RETURN(const std::vector<topologies::RecursiveDoublingStep> steps,
                          topologies::RecursiveDoublingSchedule(group.self(), n));

  std::vector<RequestPtr> sends;  // fold-in / fold-out sends, waited for below
  // A fold step's whole-buffer send (the fold's other side receives it).
  auto send_all = [&](int peer, Tag tag, const char* what) -> Status {
    Status s = SendSegments(group, peer, tag, std::span<const T>(data), segment, &sends);
    return s.ok() ? s : s.WithContext(what);
  };
  for (const topologies::RecursiveDoublingStep& step : steps) {
    switch (step.phase) {
      case topologies::RecursiveDoublingPhase::kFoldIn: {
        const Tag tag = CollectiveTag(options.tag_base, CollectivePhase::kFoldIn);
        if (step.send) {
          CHORUS_RETURN_IF_ERROR(send_all(step.peer, tag, "fold-in send"));
        } else {
          CHORUS_RETURN_IF_ERROR(ReceiveSegments(group, step.peer, tag, data, /*reduce=*/true,
                                                 segment, window, options.deadline,
                                                 "fold-in receive"));
        }
        break;
      }
      case topologies::RecursiveDoublingPhase::kExchange: {
        const Tag tag = CollectiveTag(options.tag_base, CollectivePhase::kRecursiveDoubling,
                                      static_cast<uint32_t>(step.round));
        CHORUS_RETURN_IF_ERROR(ExchangeAndAdd(group, step.peer, tag, data, segment, window,
                                              options.deadline,
                                              "round " + std::to_string(step.round)));
        break;
      }
      case topologies::RecursiveDoublingPhase::kFoldOut: {
        const Tag tag = CollectiveTag(options.tag_base, CollectivePhase::kFoldOut);
        if (step.send) {
          CHORUS_RETURN_IF_ERROR(send_all(step.peer, tag, "fold-out send"));
        } else {
          // The fold-in send still reads `data`, which the result overwrites.
          Status s = WaitAll(sends, options.deadline);
          if (!s.ok()) return s.WithContext("fold-in send");
          sends.clear();
          CHORUS_RETURN_IF_ERROR(ReceiveSegments(group, step.peer, tag, data, /*reduce=*/false,
                                                 segment, window, options.deadline,
                                                 "fold-out receive"));
        }
        break;
      }
    }
  }
  Status sent = WaitAll(sends, options.deadline);
  if (!sent.ok()) return sent.WithContext("recursive-doubling final sends");
  return Status::Ok();
}

template Status RecursiveDoublingSum<float>(const CollectiveGroup&, std::span<float>,
                                            const AllreduceOptions&);
template Status RecursiveDoublingSum<uint16_t>(const CollectiveGroup&, std::span<uint16_t>,
                                               const AllreduceOptions&);

}  // namespace detail

Status AllreduceRecursiveDoubling(const CollectiveGroup& group, std::span<float> data,
                                  const AllreduceOptions& options) {
  return detail::RunAllreduce(group, data, options, "recursive-doubling all-reduce",
                              [&] { return detail::RecursiveDoublingSum(group, data, options); });
}

Status AllreduceRecursiveDoubling(const CollectiveGroup& group, std::span<uint16_t> half,
                                  const AllreduceOptions& options) {
  return detail::RunAllreduce(group, half, options, "recursive-doubling all-reduce (fp16)",
                              [&] { return detail::RecursiveDoublingSum(group, half, options); });
}

}  // namespace chorus::gossip
