// Push-sum's share message (gossip/protocols/push_sum_wire.h) against
// arbitrary messages: DecodePushSumShare accepts or names the defect, a
// share it accepts is in (0, 1] and its values are the bytes after the
// header, and the share encodes back to the same message.
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "gossip/protocols/push_sum_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::gossip;
  const std::vector<std::byte> message(reinterpret_cast<const std::byte*>(data),
                                       reinterpret_cast<const std::byte*>(data) + size);
  auto share = DecodePushSumShare(message);
  if (!share) return 0;
  if (!(share->share > 0.0 && share->share <= 1.0)) chorus::fuzz::Broken("a share outside (0, 1] decoded");
  if (share->values.data() != message.data() + kPushSumHeaderBytes ||
      share->values.size() != size - kPushSumHeaderBytes) {
    chorus::fuzz::Broken("the values are not the bytes after the header");
  }
  if (EncodePushSumShare(share->share, share->weight, share->values) != message) {
    chorus::fuzz::Broken("the share does not encode back to the same message");
  }
  return 0;
}
