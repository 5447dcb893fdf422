// The message push-sum gossip sends along an out-edge (push_sum_gossip.h),
// and its reader and writer: a 16-byte header, then the codec's encoding of
// the sender's numerator x.
//   [0..7] f64 share p (the sender's mixing weight for this edge, in (0, 1])
//   [8..15] f64 the sender's weight w
// Little-endian, as the hosts that run Chorus are.
//
// Must not: judge w or decode the values; the protocol counts a share with
// a weight that is not finite and positive as rejected, as it counts
// non-finite values.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "common/status.h"

namespace chorus::gossip {

inline constexpr size_t kPushSumHeaderBytes = 16;

struct PushSumShare {
  double share = 0.0;                // p
  double weight = 0.0;               // the sender's w, unchecked
  std::span<const std::byte> values;  // the codec's message (within the bytes read)
};

// The message of `share`: its header, then `values` copied.
std::vector<std::byte> EncodePushSumShare(double share, double weight, std::span<const std::byte> values);

// The share in `message`; DataLoss for a message shorter than the header or
// a share p that is not in (0, 1] (p not finite included). A share it
// accepts encodes back to the same bytes.
[[nodiscard]] Result<PushSumShare> DecodePushSumShare(std::span<const std::byte> message);

}  // namespace chorus::gossip
