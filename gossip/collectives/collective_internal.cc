// Building blocks shared by the all-reduce algorithms (see collective_internal.h).
#include "gossip/collectives/collective_internal.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "kernels/ops.h"
#include "kernels/vector_clones.h"

namespace chorus::gossip::detail {

namespace {
// FP16 arithmetic converts blocks of this many elements on the stack.
constexpr size_t kHalfBlock = 512;

CHORUS_VECTOR_CLONES void AddFloats(float* __restrict acc, const float* __restrict in,
                                    size_t count) {
  for (size_t i = 0; i < count; ++i) acc[i] += in[i];
}
}  // namespace

void AddInto(float* acc, const float* in, size_t count) { AddFloats(acc, in, count); }

void AddInto(uint16_t* acc, const uint16_t* in, size_t count) { kernels::AddHalves(acc, in, count); }

void ScaleInPlace(float* x, size_t count, float scale) {
  if (scale == 1.0f) return;
  for (size_t i = 0; i < count; ++i) x[i] *= scale;
}

void ScaleInPlace(uint16_t* x, size_t count, float scale) {
  if (scale == 1.0f) return;
  float a[kHalfBlock];
  for (size_t off = 0; off < count; off += kHalfBlock) {
    const size_t m = std::min(kHalfBlock, count - off);
    kernels::HalfToFloat(x + off, a, m);
    for (size_t i = 0; i < m; ++i) a[i] *= scale;
    kernels::FloatToHalf(a, x + off, m);
  }
}

std::string RankList(const std::vector<Rank>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
  }
  return out;
}

// ---- ScratchBuffer ----

namespace {
// Buffers a thread keeps for its next collectives (a tree holds one stream per
// child and one for the parent).
constexpr size_t kPooledScratch = 4;

struct PooledScratch {
  PageBytes data;
  size_t bytes = 0;
};
thread_local std::vector<PooledScratch> scratch_pool;
}  // namespace

ScratchBuffer::~ScratchBuffer() {
  if (data_ == nullptr) return;
  if (scratch_pool.size() < kPooledScratch) {
    scratch_pool.push_back(PooledScratch{std::move(data_), bytes_});
  }
}

std::byte* ScratchBuffer::Get(size_t bytes) {
  if (bytes_ >= bytes && data_ != nullptr) return data_.get();
  // The smallest pooled buffer that fits, else a new one (replacing ours).
  auto best = scratch_pool.end();
  for (auto it = scratch_pool.begin(); it != scratch_pool.end(); ++it) {
    if (it->bytes >= bytes && (best == scratch_pool.end() || it->bytes < best->bytes)) best = it;
  }
  if (best != scratch_pool.end()) {
    data_ = std::move(best->data);
    bytes_ = best->bytes;
    scratch_pool.erase(best);
  } else {
    data_ = AllocatePageBytes(bytes);
    bytes_ = bytes;
  }
  return data_.get();
}

// ---- RecvStream ----

template <typename T>
RecvStream<T>::RecvStream(const CollectiveGroup& group, int peer_index, size_t max_elems,
                          int window)
    : group_(group),
      peer_index_(peer_index),
      max_elems_(std::max<size_t>(max_elems, 1)),
      window_(std::max(window, 1)) {}

template <typename T>
RecvStream<T>::~RecvStream() {
  if (pending_.empty()) return;
  pending_.clear();
  if (group_.transport().UnreleasedBuffers() > 0) scratch_.Abandon();
}

template <typename T>
Status RecvStream<T>::Post(Tag tag, std::span<T> direct, size_t elems) {
  std::span<T> into = direct;
  if (direct.empty() && elems > 0) {
    if (elems > max_elems_) {
      return Internal("receive stream: segment of " + std::to_string(elems) +
                      " elements exceeds the " + std::to_string(max_elems_) + "-element slot");
    }
    T* slots = reinterpret_cast<T*>(
        scratch_.Get(max_elems_ * static_cast<size_t>(window_) * sizeof(T)));
    const size_t slot = posts_ % static_cast<size_t>(window_);
    into = std::span<T>(slots + slot * max_elems_, elems);
  }
  CHORUS_ASSIGN_OR_RETURN(RequestPtr request,
                          group_.transport().Irecv(group_.RankAt(peer_index_), tag,
                                                   AsWritableBytes(into)));
  pending_.push_back(Pending{std::move(request), into, tag});
  ++posts_;
  return Status::Ok();
}

template <typename T>
Result<std::span<T>> RecvStream<T>::Next(Deadline deadline) {
  if (pending_.empty()) return Err(Internal("receive stream: no receive posted"));
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  auto done = p.request->Wait(deadline);
  if (!done) return Err(done.error());
  const size_t want = p.into.size_bytes();
  if (done->bytes != want) {
    return Err(DataLoss("receive from rank " +
                        std::to_string(group_.RankAt(peer_index_)) + " (tag " +
                        std::to_string(p.tag) + ") got " + std::to_string(done->bytes) +
                        " bytes, expected " + std::to_string(want) +
                        " (do all members pass the same length and options?)"));
  }
  return p.into;
}

// ---- Segment helpers ----

void CapSegments(size_t elems, size_t* segment, int* window) {
  *segment = std::clamp<size_t>(*segment, 1, std::max<size_t>(elems, 1));
  const size_t segments = (elems + *segment - 1) / *segment;
  *window = static_cast<int>(
      std::clamp<size_t>(segments, 1, static_cast<size_t>(std::max(*window, 1))));
}

template <typename T>
Status SendSegments(const CollectiveGroup& group, int peer_index, Tag tag, std::span<const T> data,
                    size_t segment, std::vector<RequestPtr>* out) {
  segment = std::max<size_t>(segment, 1);
  const Rank dest = group.RankAt(peer_index);
  for (size_t off = 0; off < data.size(); off += segment) {
    const auto part = data.subspan(off, std::min(segment, data.size() - off));
    CHORUS_ASSIGN_OR_RETURN(RequestPtr request,
                            group.transport().Isend(dest, tag, std::as_bytes(part)));
    out->push_back(std::move(request));
  }
  return Status::Ok();
}

template <typename T>
Status ReceiveSegments(const CollectiveGroup& group, int peer_index, Tag tag, std::span<T> data,
                       bool reduce, size_t segment, int window, Deadline deadline,
                       std::string_view what, const std::function<Status()>& once_posted) {
  if (data.empty()) return once_posted ? once_posted() : Status::Ok();
  CapSegments(data.size(), &segment, &window);
  RecvStream<T> stream(group, peer_index, segment, window);
  size_t posted = 0;  // elements covered by posted receives
  for (size_t off = 0; off < data.size(); off += segment) {
    while (!stream.Full() && posted < data.size()) {
      const size_t elems = std::min(segment, data.size() - posted);
      CHORUS_RETURN_IF_ERROR(
          stream.Post(tag, reduce ? std::span<T>() : data.subspan(posted, elems), elems));
      posted += elems;
    }
    if (off == 0 && once_posted) CHORUS_RETURN_IF_ERROR(once_posted());
    auto got_or = stream.Next(deadline);
    if (!got_or) return got_or.error().WithContext(what);
    const std::span<T> got = *got_or;
    if (reduce) {
      if constexpr (std::is_same_v<T, std::byte>) {
        return Internal(std::string(what) + ": byte buffers cannot be reduced");
      } else {
        AddInto(data.data() + off, got.data(), got.size());
      }
    }
  }
  return Status::Ok();
}

// ---- RunCollective ----

template <typename T>
Status DirectAllgather(const CollectiveGroup& group, Tag tag, const std::function<std::span<T>(int)>& part,
                       size_t segment, int window, Deadline deadline, std::string_view what,
                       const std::function<void(int)>& received,
                       const std::function<std::span<const T>(int)>& outgoing) {
  const int n = group.size();
  const int self = group.self();
  std::vector<RequestPtr> sends;
  for (int k = 0; k < n; ++k) {
    if (k == self) continue;
    const std::span<const T> mine = outgoing ? outgoing(k) : std::span<const T>(part(self));
    CHORUS_RETURN_IF_ERROR(SendSegments<T>(group, k, tag, mine, segment, &sends));
  }
  for (int k = 0; k < n; ++k) {
    if (k == self) continue;
    CHORUS_RETURN_IF_ERROR(ReceiveSegments<T>(group, k, tag, part(k), false, segment, window, deadline,
                                              std::string(what) + " from rank " + std::to_string(k)));
    if (received) received(k);
  }
  for (RequestPtr& r : sends) {
    auto done = r->Wait(deadline);
    if (!done) return done.error().WithContext(std::string(what) + " sends");
  }
  return Status::Ok();
}

namespace {

// For each rank s but `self`, the copies of s's part (w floats a rank, the
// part its first k): the one s sent (in `table`), and the ones each rank
// other than s and self relayed (in `echoes`). `choose` picks the part to
// keep; where it picks none, NaN in every float of the part, and s is
// returned (ascending).
using Choice = std::function<std::optional<std::vector<float>>(int, const std::vector<std::span<const float>>&)>;
std::vector<int> Resolve(std::span<float> table, std::span<const float> echoes, int n, int self, size_t k,
                         const Choice& choose) {
  const size_t w = table.size() / static_cast<size_t>(n);
  std::vector<int> unresolved;
  for (int s = 0; s < n; ++s) {
    if (s == self) continue;
    std::vector<std::span<const float>> copies = {table.subspan(static_cast<size_t>(s) * w, w)};
    for (int r = 0; r < n; ++r) {
      if (r != s && r != self) copies.push_back(echoes.subspan((static_cast<size_t>(r) * n + s) * w, w));
    }
    const std::optional<std::vector<float>> chosen = choose(s, copies);
    float* out = table.data() + static_cast<size_t>(s) * w;
    if (chosen) {
      std::copy(chosen->begin(), chosen->end(), out);
    } else {
      std::fill(out, out + k, std::numeric_limits<float>::quiet_NaN());
      unresolved.push_back(s);
    }
  }
  return unresolved;
}

}  // namespace

std::vector<int> ResolveByMajority(std::span<float> all, std::span<const float> echoes, int n, int self) {
  const size_t k = all.size() / static_cast<size_t>(n);
  return Resolve(all, echoes, n, self, k, [&](int, const std::vector<std::span<const float>>& copies) {
    auto same = [&](std::span<const float> a, std::span<const float> b) {
      return std::memcmp(a.data(), b.data(), k * sizeof(float)) == 0;
    };
    for (std::span<const float> c : copies) {
      const auto held = std::count_if(copies.begin(), copies.end(), [&](auto other) { return same(c, other); });
      if (2 * static_cast<size_t>(held) > copies.size()) return std::optional(std::vector<float>(c.begin(), c.end()));
    }
    return std::optional<std::vector<float>>();
  });
}

std::vector<int> ResolveBySignature(
    std::span<float> table, std::span<const float> echoes, int n, int self, size_t k,
    const std::function<bool(int, std::span<const float>, std::span<const float>)>& valid) {
  return Resolve(table, echoes, n, self, k, [&](int s, const std::vector<std::span<const float>>& copies) {
    std::optional<std::vector<float>> signed_part;
    for (std::span<const float> c : copies) {
      if (signed_part && std::memcmp(signed_part->data(), c.data(), k * sizeof(float)) == 0) continue;
      if (!valid(s, c.first(k), c.subspan(k))) continue;  // a relayer's forgery, or s's own garbage
      if (signed_part) return std::optional<std::vector<float>>();  // two signed parts: s equivocated
      signed_part.emplace(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(k));
    }
    return signed_part;
  });
}

Status RunCollective(const CollectiveGroup& group, Tag tag_base, Deadline deadline,
                     bool identify_missing_peers, std::string_view what,
                     const std::function<Status()>& body) {
  const int n = group.size();
  std::vector<RequestPtr> hello_recvs;
  std::vector<RequestPtr> hello_sends;
  std::vector<int> hello_from;
  if (identify_missing_peers && n > 1) {
    const Tag tag = CollectiveTag(tag_base, CollectivePhase::kHello);
    Transport& t = group.transport();
    for (int i = 0; i < n; ++i) {
      if (i == group.self()) continue;
      auto recv = t.Irecv(group.RankAt(i), tag, {});
      if (!recv) return recv.error().WithContext(what);
      hello_recvs.push_back(std::move(*recv));
      hello_from.push_back(i);
    }
    for (int i = 0; i < n; ++i) {
      if (i == group.self()) continue;
      auto send = t.Isend(group.RankAt(i), tag, {});
      if (!send) return send.error().WithContext(what);
      hello_sends.push_back(std::move(*send));
    }
  }

  Status status = body();
  if (!status.ok()) {
    std::vector<Rank> silent;
    for (size_t k = 0; k < hello_recvs.size(); ++k) {
      if (!hello_recvs[k]->Done()) silent.push_back(group.RankAt(hello_from[k]));
    }
    std::string context(what);
    if (!silent.empty()) {
      context += " (" + RankList(silent) + " sent nothing in this call: never joined?)";
    }
    return status.WithContext(context);
  }
  Status hellos = WaitAll(hello_recvs, deadline);
  if (hellos.ok()) hellos = WaitAll(hello_sends, deadline);
  if (!hellos.ok()) return hellos.WithContext(std::string(what) + ": hello messages");
  return Status::Ok();
}

template <typename T>
Status RunAllreduce(const CollectiveGroup& group, std::span<T> data,
                    const AllreduceOptions& options, std::string_view what,
                    const std::function<Status()>& sum) {
  if (options.segment_elems == 0 || options.inflight_segments < 1) {
    return InvalidArgument(std::string(what) + ": segment_elems (" + std::to_string(options.segment_elems) +
                           ") and inflight_segments (" + std::to_string(options.inflight_segments) +
                           ") must be >= 1");
  }
  ScaleInPlace(data.data(), data.size(), options.pre_scale);
  CHORUS_RETURN_IF_ERROR(RunCollective(group, options.tag_base, options.deadline,
                                       options.identify_missing_peers, what, sum));
  ScaleInPlace(data.data(), data.size(), options.post_scale);
  return Status::Ok();
}

// ---- Instantiations ----

template class RecvStream<float>;
template class RecvStream<uint16_t>;
template class RecvStream<std::byte>;

#define CHORUS_INSTANTIATE_SEGMENTS(T)                                                        \
  template Status SendSegments<T>(const CollectiveGroup&, int, Tag, std::span<const T>, size_t, \
                                  std::vector<RequestPtr>*);                                 \
  template Status ReceiveSegments<T>(const CollectiveGroup&, int, Tag, std::span<T>, bool,     \
                                     size_t, int, Deadline, std::string_view,                 \
                                     const std::function<Status()>&);
template Status DirectAllgather<float>(const CollectiveGroup&, Tag, const std::function<std::span<float>(int)>&,
                                       size_t, int, Deadline, std::string_view, const std::function<void(int)>&,
                                       const std::function<std::span<const float>(int)>&);
template Status DirectAllgather<uint16_t>(const CollectiveGroup&, Tag,
                                          const std::function<std::span<uint16_t>(int)>&, size_t, int, Deadline,
                                          std::string_view, const std::function<void(int)>&,
                                          const std::function<std::span<const uint16_t>(int)>&);
CHORUS_INSTANTIATE_SEGMENTS(float)
CHORUS_INSTANTIATE_SEGMENTS(uint16_t)
CHORUS_INSTANTIATE_SEGMENTS(std::byte)
#undef CHORUS_INSTANTIATE_SEGMENTS

template Status RunAllreduce<float>(const CollectiveGroup&, std::span<float>,
                                    const AllreduceOptions&, std::string_view,
                                    const std::function<Status()>&);
template Status RunAllreduce<uint16_t>(const CollectiveGroup&, std::span<uint16_t>,
                                       const AllreduceOptions&, std::string_view,
                                       const std::function<Status()>&);

}  // namespace chorus::gossip::detail
