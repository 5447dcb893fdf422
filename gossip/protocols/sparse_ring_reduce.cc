// SparseRingAllreduce (see sparse_ring_reduce.h).
#include "gossip/protocols/sparse_ring_reduce.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gossip/protocols/gossip_protocol.h"
#include "gossip/protocols/message_round.h"

namespace chorus::gossip {
namespace {

struct Chunk {
  size_t begin = 0;
  size_t count = 0;
};

// Chunk c of n over `len` elements: the first len % n chunks one longer.
Chunk ChunkOf(size_t len, int n, int c) {
  const size_t base = len / static_cast<size_t>(n), extra = len % static_cast<size_t>(n);
  const size_t uc = static_cast<size_t>(c);
  return {uc * base + std::min(uc, extra), base + (uc < extra ? 1 : 0)};
}

int Mod(int a, int n) { return ((a % n) + n) % n; }

// With `stats`, a decode that found non-finite values: `into` becomes zeros
// and it is counted (SparseRingStats::nonfinite_received), so that the ring
// goes on instead of leaving the others waiting. Any other failure, or any
// failure without `stats`, stands.
Status TakeNonFiniteAsZeros(Status decoded, std::span<float> into, SparseRingStats* stats) {
  if (decoded.ok() || !IsNonFiniteRejection(decoded) || stats == nullptr) return decoded;
  std::fill(into.begin(), into.end(), 0.0f);
  ++stats->nonfinite_received;
  return Status::Ok();
}

// One ring step: `out` to the successor and the predecessor's message into
// `in` (sized to what it must hold), both on `tag`.
Status RingStep(Transport& transport, int next, int prev, Tag tag, std::vector<std::byte>& out,
                std::vector<std::vector<std::byte>>& in, SparseRingStats* stats, Deadline deadline) {
  const int to[] = {next}, from[] = {prev};
  CHORUS_RETURN_IF_ERROR(SwapExactly(transport, to, out, from, tag, deadline, &in, "sparse ring"));
  if (stats != nullptr) {
    stats->bytes_sent += out.size();
    ++stats->messages_sent;
  }
  return Status::Ok();
}

}  // namespace

uint64_t SparseRingBytesPerRank(const Codec& codec, size_t n, int ranks) {
  if (ranks < 2) return 0;
  uint64_t bytes = 0;
  // Reduce-scatter: rank r sends chunks r, r - 1, .., r - n + 2; all-gather:
  // chunks r + 1, r, .., r - n + 3. Rank 0's count (chunk sizes differ by 1 at most).
  for (int s = 0; s + 1 < ranks; ++s) {
    bytes += codec.WireBytes(ChunkOf(n, ranks, Mod(-s, ranks)).count);
    bytes += codec.WireBytes(ChunkOf(n, ranks, Mod(1 - s, ranks)).count);
  }
  return bytes;
}

Status SparseRingAllreduce(Transport& transport, const Codec& codec, std::span<const float> x,
                           std::span<float> residual, std::span<float> result, Tag tag_base, uint64_t seed,
                           Deadline deadline, SparseRingStats* stats,
                           const std::function<void(std::span<float>)>& alter_forwarded) {
  const int n = transport.size(), self = transport.rank();
  if (residual.size() != x.size() || result.size() != x.size()) {
    return InvalidArgument("sparse ring: x, residual and result differ in length");
  }
  std::fill(residual.begin(), residual.end(), 0.0f);
  if (n == 1) {
    std::copy(x.begin(), x.end(), result.begin());
    return Status::Ok();
  }
  const int next = Mod(self + 1, n), prev = Mod(self - 1, n);
  const size_t len = x.size();
  std::vector<float> partial, decoded;
  std::vector<std::byte> out;
  std::vector<std::vector<std::byte>> inbox(1);  // the predecessor's message
  std::vector<std::byte>& in = inbox[0];

  // Encodes `partial` (chunk c's values) into `out`; what the receiver will
  // decode goes to `decoded`, the rest to this rank's residual.
  auto encode = [&](int c, int64_t step) -> Status {
    const Chunk k = ChunkOf(len, n, c);
    CHORUS_RETURN_IF_ERROR(codec.Encode(partial, MessageSeed(seed, self, step), &out));
    decoded.assign(k.count, 0.0f);
    CHORUS_RETURN_IF_ERROR(codec.Decode(out, decoded).WithContext("sparse ring: own chunk"));
    for (size_t i = 0; i < k.count; ++i) residual[k.begin + i] += partial[i] - decoded[i];
    return Status::Ok();
  };

  // 1. Reduce-scatter: at step s, chunk self - s goes out; chunk self - s - 1
  // comes in, and this rank's part of it is added.
  {
    const Chunk first = ChunkOf(len, n, self);
    partial.assign(x.begin() + static_cast<std::ptrdiff_t>(first.begin),
                   x.begin() + static_cast<std::ptrdiff_t>(first.begin + first.count));
  }
  for (int s = 0; s + 1 < n; ++s) {
    const int send_chunk = Mod(self - s, n), recv_chunk = Mod(self - s - 1, n);
    CHORUS_RETURN_IF_ERROR(encode(send_chunk, s));
    const Chunk rk = ChunkOf(len, n, recv_chunk);
    in.assign(codec.WireBytes(rk.count), std::byte{0});
    CHORUS_RETURN_IF_ERROR(RingStep(transport, next, prev, tag_base + static_cast<Tag>(s), out, inbox, stats, deadline)
                               .WithContext("sparse ring reduce-scatter step " + std::to_string(s)));
    partial.assign(rk.count, 0.0f);
    CHORUS_RETURN_IF_ERROR(TakeNonFiniteAsZeros(codec.Decode(in, partial), partial, stats)
                               .WithContext("sparse ring: rank " + std::to_string(prev) + "'s partial sum of chunk " +
                                            std::to_string(recv_chunk)));
    for (size_t i = 0; i < rk.count; ++i) partial[i] += x[rk.begin + i];
  }

  // 2. All-gather: this rank completed chunk self + 1; its total is encoded
  // once and every rank forwards the bytes it received unchanged.
  const int own = Mod(self + 1, n);
  CHORUS_RETURN_IF_ERROR(encode(own, n - 1));
  {
    const Chunk k = ChunkOf(len, n, own);
    std::copy(decoded.begin(), decoded.end(), result.begin() + static_cast<std::ptrdiff_t>(k.begin));
  }
  for (int s = 0; s + 1 < n; ++s) {
    const int recv_chunk = Mod(self - s, n);
    const Chunk rk = ChunkOf(len, n, recv_chunk);
    in.assign(codec.WireBytes(rk.count), std::byte{0});
    CHORUS_RETURN_IF_ERROR(RingStep(transport, next, prev, tag_base + static_cast<Tag>(n - 1 + s), out, inbox,
                                    stats, deadline)
                               .WithContext("sparse ring all-gather step " + std::to_string(s)));
    std::span<float> into = result.subspan(rk.begin, rk.count);
    CHORUS_RETURN_IF_ERROR(TakeNonFiniteAsZeros(codec.Decode(in, into), into, stats)
                               .WithContext("sparse ring: chunk " + std::to_string(recv_chunk) +
                                            "'s total from rank " + std::to_string(prev)));
    out.swap(in);  // forwarded unchanged at the next step
    if (alter_forwarded && s + 2 < n) {  // fault injection; the last total is not sent on
      std::vector<float> altered(into.begin(), into.end());
      alter_forwarded(altered);
      CHORUS_RETURN_IF_ERROR(codec.Encode(altered, MessageSeed(seed, self, n + s), &out));
    }
  }
  return Status::Ok();
}

}  // namespace chorus::gossip
