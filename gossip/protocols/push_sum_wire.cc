// The push-sum share message (see push_sum_wire.h).
#include "gossip/protocols/push_sum_wire.h"

#include <cmath>
#include <cstring>
#include <string>

namespace chorus::gossip {

std::vector<std::byte> EncodePushSumShare(double share, double weight, std::span<const std::byte> values) {
  std::vector<std::byte> m(kPushSumHeaderBytes + values.size());
  std::memcpy(m.data(), &share, 8);
  std::memcpy(m.data() + 8, &weight, 8);
  if (!values.empty()) std::memcpy(m.data() + kPushSumHeaderBytes, values.data(), values.size());
  return m;
}

Result<PushSumShare> DecodePushSumShare(std::span<const std::byte> message) {
  if (message.size() < kPushSumHeaderBytes) {
    return Err(DataLoss("push-sum message of " + std::to_string(message.size()) + " bytes has no " +
                        std::to_string(kPushSumHeaderBytes) + "-byte share header"));
  }
  PushSumShare s;
  std::memcpy(&s.share, message.data(), 8);
  std::memcpy(&s.weight, message.data() + 8, 8);
  if (!(std::isfinite(s.share) && s.share > 0.0 && s.share <= 1.0)) {
    return Err(DataLoss("push-sum message: share " + std::to_string(s.share) + " (bytes 0-7) outside (0, 1]"));
  }
  s.values = message.subspan(kPushSumHeaderBytes);
  return s;
}

}  // namespace chorus::gossip
