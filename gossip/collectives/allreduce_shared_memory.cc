// AllreduceSharedMemory (see allreduce_shared_memory.h).
#include "gossip/collectives/allreduce_shared_memory.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "gossip/collectives/collective_internal.h"
#include "topologies/chunking.h"

namespace chorus::gossip {

namespace detail {

namespace {

// Slice i of a round of `elems` elements among n members: the schedules'
// balanced chunks, counted in 64-byte lines so that no two members write one
// cache line of the result.
template <typename T>
std::pair<size_t, size_t> SliceOf(size_t elems, int n, int i) {
  constexpr size_t kLine = 64 / sizeof(T);
  const topologies::Range lines =
      topologies::ChunkOf(static_cast<int64_t>((elems + kLine - 1) / kLine), n, i);
  return {std::min(elems, static_cast<size_t>(lines.begin) * kLine),
          std::min(elems, static_cast<size_t>(lines.end) * kLine)};
}

// mine[k] = sum over members j (in order) of their part of the round, k in
// [lo, hi): this member's own part is `mine` itself (no copy of it went to the
// slot), the others' parts their slots. Summed in blocks that stay in L1, the
// block's sum written to `mine` and to the result slot.
template <typename T>
void SumSlice(const HostSegment& segment, size_t lo, size_t hi, T* mine, T* result, float scale) {
  constexpr size_t kBlock = 4096 / sizeof(T);
  alignas(64) T acc[kBlock];
  auto part = [&](int j, size_t b) -> const T* {
    return j == segment.self() ? mine + b : reinterpret_cast<const T*>(segment.Slot(j)) + b;
  };
  for (size_t b = lo; b < hi; b += kBlock) {
    const size_t len = std::min(kBlock, hi - b);
    std::memcpy(acc, part(0, b), len * sizeof(T));
    for (int j = 1; j < segment.size(); ++j) AddInto(acc, part(j, b), len);
    ScaleInPlace(acc, len, scale);
    std::memcpy(mine + b, acc, len * sizeof(T));
    std::memcpy(result + b, acc, len * sizeof(T));
  }
}

// Copies [0, len) but [lo, hi) from `from` to `to`.
template <typename T>
void CopyAround(T* to, const T* from, size_t len, size_t lo, size_t hi) {
  std::memcpy(to, from, lo * sizeof(T));
  std::memcpy(to + hi, from + hi, (len - hi) * sizeof(T));
}

// Each round: the member's part of the round outside its own slice goes to its
// slot (the others sum those); its own slice stays where it is, scaled in
// place, and receives the slice's sum, which it also writes to the result
// slot; after the second wait the other slices come from the result slot.
// Every member sums slice i in the same order (members 0..n-1) from the same
// values, so all end with the same bits.
template <typename T>
Status SumRounds(HostSegment& segment, std::span<T> data, Tag tag, Deadline deadline, bool leader_only,
                 float pre_scale, float post_scale) {
  auto lock = segment.Lock();
  const size_t round_elems = segment.slot_bytes() / sizeof(T);
  const int n = segment.size();
  const int self = segment.self();
  T* slot = reinterpret_cast<T*>(segment.Slot(self));
  T* result = reinterpret_cast<T*>(segment.ResultSlot());
  for (size_t off = 0; off < data.size(); off += round_elems) {
    const size_t len = std::min(round_elems, data.size() - off);
    T* mine = data.data() + off;
    const auto [lo, hi] = SliceOf<T>(len, n, self);
    const uint64_t seq = segment.NextSequence();
    CopyAround(slot, mine, len, lo, hi);
    ScaleInPlace(slot, lo, pre_scale);
    ScaleInPlace(slot + hi, len - hi, pre_scale);
    ScaleInPlace(mine + lo, hi - lo, pre_scale);
    segment.Post(seq, tag);
    CHORUS_RETURN_IF_ERROR(segment.WaitPosted(seq, tag, deadline));
    SumSlice(segment, lo, hi, mine, result, post_scale);
    segment.Finish(seq);
    CHORUS_RETURN_IF_ERROR(segment.WaitFinished(seq, deadline));
    if (!leader_only || self == 0) CopyAround(mine, result, len, lo, hi);
  }
  return Status::Ok();
}

}  // namespace

template <typename T>
Status SharedMemorySum(HostSegment& segment, std::span<T> data, Tag tag, Deadline deadline,
                       bool leader_only) {
  return SumRounds(segment, data, tag, deadline, leader_only, 1.0f, 1.0f);
}

template <typename T>
Status SharedMemoryBroadcast(HostSegment& segment, std::span<T> data, int root, Tag tag,
                             Deadline deadline) {
  auto lock = segment.Lock();
  const size_t round_elems = segment.slot_bytes() / sizeof(T);
  const bool is_root = segment.self() == root;
  T* slot = reinterpret_cast<T*>(segment.Slot(root));
  for (size_t off = 0; off < data.size(); off += round_elems) {
    const size_t len = std::min(round_elems, data.size() - off);
    const uint64_t seq = segment.NextSequence();
    if (is_root) {
      std::memcpy(slot, data.data() + off, len * sizeof(T));
      segment.Post(seq, tag);
      CHORUS_RETURN_IF_ERROR(segment.WaitFinished(seq, deadline, root));
    } else {
      CHORUS_RETURN_IF_ERROR(segment.WaitPosted(seq, tag, deadline, root));
      std::memcpy(data.data() + off, slot, len * sizeof(T));
      segment.Finish(seq);
    }
  }
  return Status::Ok();
}

template Status SharedMemorySum<float>(HostSegment&, std::span<float>, Tag, Deadline, bool);
template Status SharedMemorySum<uint16_t>(HostSegment&, std::span<uint16_t>, Tag, Deadline, bool);
template Status SharedMemoryBroadcast<float>(HostSegment&, std::span<float>, int, Tag, Deadline);
template Status SharedMemoryBroadcast<uint16_t>(HostSegment&, std::span<uint16_t>, int, Tag, Deadline);

}  // namespace detail

namespace {

// A segment of one member works as any other: its own slice is the whole
// round, so nothing is copied in or out.
template <typename T>
Status Run(HostSegment& segment, std::span<T> data, const AllreduceOptions& options, const char* what) {
  Status s = detail::SumRounds(segment, data, options.tag_base, options.deadline, /*leader_only=*/false,
                               options.pre_scale, options.post_scale);
  return s.ok() ? s : s.WithContext(what);
}

}  // namespace

Status AllreduceSharedMemory(HostSegment& segment, std::span<float> data, const AllreduceOptions& options) {
  return Run(segment, data, options, "shared-memory all-reduce");
}

Status AllreduceSharedMemory(HostSegment& segment, std::span<uint16_t> half,
                             const AllreduceOptions& options) {
  return Run(segment, half, options, "shared-memory all-reduce (fp16)");
}

}  // namespace chorus::gossip
