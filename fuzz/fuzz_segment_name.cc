// The shared-memory segment's name as a host's leader sends it
// (gossip/collectives/host_segment_wire.h) against arbitrary messages:
// DecodeSegmentName accepts or names the defect, a name it accepts is empty
// or "/chorus-seg-" and digits and dashes (nothing else reaches shm_open),
// and it encodes back to the same bytes.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "gossip/collectives/host_segment_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::gossip;
  const std::vector<std::byte> message(reinterpret_cast<const std::byte*>(data),
                                       reinterpret_cast<const std::byte*>(data) + size);
  auto name = DecodeSegmentName(message);
  if (!name) return 0;
  if (!name->empty() && (!name->starts_with("/chorus-seg-") || name->find('/', 1) != std::string::npos ||
                         name->find('.') != std::string::npos)) {
    chorus::fuzz::Broken("a name outside the segments' accepted: " + *name);
  }
  const auto again = EncodeSegmentName(*name);
  if (!std::equal(again.begin(), again.end(), message.begin(), message.end())) {
    chorus::fuzz::Broken("the name does not encode back to the same bytes");
  }
  return 0;
}
