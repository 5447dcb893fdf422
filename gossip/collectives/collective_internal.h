// Building blocks shared by the all-reduce algorithms (internal to gossip/):
// element arithmetic for FP32 and FP16 buffers, a pipelined receive stream, and
// the wrapper every public collective runs in (validation, "hello" messages that
// let a failure name the ranks that never joined, pre/post scaling).
//
// Element types: float, and uint16_t holding IEEE binary16 bits (summed in FP32
// after conversion, rounded back to FP16 after each addition).
//
// Must not: choose algorithms, log, or block without a deadline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/page_bytes.h"
#include "common/status.h"
#include "gossip/collectives/collective_group.h"
#include "gossip/collectives/collective_options.h"
#include "gossip/transport/transport.h"

namespace chorus::gossip::detail {

// acc[i] += in[i] for i < count.
void AddInto(float* acc, const float* in, size_t count);
void AddInto(uint16_t* acc, const uint16_t* in, size_t count);
// x[i] *= scale (a no-op for scale == 1).
void ScaleInPlace(float* x, size_t count, float scale);
void ScaleInPlace(uint16_t* x, size_t count, float scale);

template <typename T>
std::span<const std::byte> AsBytes(std::span<T> s) {
  return std::as_bytes(s);
}
template <typename T>
std::span<std::byte> AsWritableBytes(std::span<T> s) {
  return std::as_writable_bytes(s);
}

// Uninitialised scratch bytes that go back to a small per-thread pool when
// destroyed, so that a collective's receive streams reuse the previous call's
// memory: allocating (and zeroing) segment x window elements per stream per
// call, about 1 MiB with the default options, cost more than a small
// all-reduce itself.
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ~ScratchBuffer();
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  // At least `bytes` bytes (contents unspecified) starting on a page (the
  // transport may copy into them across processes: common/page_bytes.h);
  // taken from the pool on the first call.
  std::byte* Get(size_t bytes);
  // Never freed nor pooled: a receive the provider did not release may still
  // write into it (Transport::UnreleasedBuffers).
  void Abandon() { (void)data_.release(); }

 private:
  PageBytes data_;
  size_t bytes_ = 0;
};

// Receives from one peer, in order, segments of at most `max_elems` elements,
// keeping up to `window` receives posted. Each receive lands in the caller's
// destination ("direct") or in a scratch slot of the stream.
template <typename T>
class RecvStream {
 public:
  RecvStream(const CollectiveGroup& group, int peer_index, size_t max_elems, int window);
  // Abandons what is still posted; the scratch slots are kept for good when
  // the provider holds a receive it never released.
  ~RecvStream();
  RecvStream(const RecvStream&) = delete;
  RecvStream& operator=(const RecvStream&) = delete;

  // Posts the next receive of `elems` elements with `tag`, into `direct` when it
  // is non-empty (then direct.size() == elems), else into a scratch slot.
  Status Post(Tag tag, std::span<T> direct, size_t elems);
  bool Full() const { return static_cast<int>(pending_.size()) >= window_; }
  size_t pending() const { return pending_.size(); }

  // Waits for the oldest posted receive and returns its elements. A scratch span
  // stays valid until the next Post. Errors name the peer (callers add what the
  // receive was for).
  Result<std::span<T>> Next(Deadline deadline);

 private:
  struct Pending {
    RequestPtr request;
    std::span<T> into;
    Tag tag;
  };
  const CollectiveGroup& group_;
  const int peer_index_;
  const size_t max_elems_;
  const int window_;
  ScratchBuffer scratch_;  // window_ slots of max_elems_, taken on first use
  size_t posts_ = 0;
  std::deque<Pending> pending_;
};

// Caps a segment size and receive window for a buffer of `elems` elements:
// segments no larger than the buffer, no more receives in flight than it has
// segments (a receive stream's scratch is segment x window elements).
void CapSegments(size_t elems, size_t* segment, int* window);

// Posts sends of `data` to group member `peer_index`, cut into segments of
// `segment` elements, all with `tag`; appends the requests to `out`.
template <typename T>
Status SendSegments(const CollectiveGroup& group, int peer_index, Tag tag, std::span<const T> data,
                    size_t segment, std::vector<RequestPtr>* out);

// Receives `data.size()` elements from `peer_index` in segments straight into
// `data` (reduce == false) or adds them into it (reduce == true). `once_posted`
// (the step's sends, say) runs once the first window of receives is posted:
// data that arrives before its receive is posted costs the provider a detour
// (net parks it in the socket, rxm in a bounce buffer or a rendezvous).
template <typename T>
Status ReceiveSegments(const CollectiveGroup& group, int peer_index, Tag tag, std::span<T> data,
                       bool reduce, size_t segment, int window, Deadline deadline,
                       std::string_view what,
                       const std::function<Status()>& once_posted = nullptr);

// Every member's part to every other, directly (nobody passes on another's):
// sends part(self) to each member (or outgoing(k) to member k, where given),
// then receives each member k's part(k) in place and calls received(k) (may
// be null), then waits for the sends. Errors name `what` and the member.
template <typename T>
Status DirectAllgather(const CollectiveGroup& group, Tag tag, const std::function<std::span<T>(int)>& part,
                       size_t segment, int window, Deadline deadline, std::string_view what,
                       const std::function<void(int)>& received = nullptr,
                       const std::function<std::span<const T>(int)>& outgoing = nullptr);

// Collective::AgreedAllgather's choice on rank `self` of `n`: `all` holds the
// parts (k floats each) as this rank received them, `echoes` every rank's
// copy of all of them (rank r's n * k floats at r * n * k; this rank's own
// and each part's sender's are not read). For each other rank s, the value
// that more than half of the n - 1 copies of its part hold (the one s sent
// here, and the ones each rank other than s and self relayed), compared bit
// for bit, goes into `all`; where none does, NaN in every float. Returns the
// ranks of those without a majority, ascending.
std::vector<int> ResolveByMajority(std::span<float> all, std::span<const float> echoes, int n, int self);

// The signed gather's choice (Collective::AgreedAllgather with a signer) on
// rank `self` of `n`: `table` holds the parts as this rank received them,
// each followed by its signature (w floats a rank, the part its first k),
// `echoes` every rank's copy of the whole table (rank r's n * w floats at
// r * n * w; this rank's own and each part's sender's are not read). For
// each other rank s, of the copies of s's part (the one s sent here, the
// ones the others relayed) those that `valid(s, part, signature)` accepts:
// when they all hold one part, bit for bit, it goes into `table`; when they
// hold two or more (s signed different parts) or none (s sent no valid
// signature), NaN in every float of s's part, and s is returned (ascending).
std::vector<int> ResolveBySignature(
    std::span<float> table, std::span<const float> echoes, int n, int self, size_t k,
    const std::function<bool(int, std::span<const float>, std::span<const float>)>& valid);

// "rank 3" or "ranks 1, 4".
std::string RankList(const std::vector<Rank>& ranks);

// Runs `body` as the collective `what` over `group`: with identify_missing_peers,
// first sends an empty "hello" to every member and posts receives for theirs; on
// failure the error is prefixed with `what` and, if some members sent nothing,
// names them ("rank 4 sent nothing in this call (never joined?)"); on success
// waits for the hellos so that none is left behind.
Status RunCollective(const CollectiveGroup& group, Tag tag_base, Deadline deadline,
                     bool identify_missing_peers, std::string_view what,
                     const std::function<Status()>& body);

// RunCollective for an all-reduce: also applies options.pre_scale before `sum`
// and options.post_scale after it; checks the options.
template <typename T>
Status RunAllreduce(const CollectiveGroup& group, std::span<T> data,
                    const AllreduceOptions& options, std::string_view what,
                    const std::function<Status()>& sum);

}  // namespace chorus::gossip::detail
