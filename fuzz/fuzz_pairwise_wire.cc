// Pairwise gossip's header (gossip/protocols/pairwise_wire.h) against
// arbitrary messages: ReadPairwiseHeader accepts or names the defect, never
// reads past the message, and a header it accepts writes back to the
// message's first 24 bytes.
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "gossip/protocols/pairwise_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::gossip;
  // A copy of exactly `size` bytes: ASan then sees a read past the message.
  const std::vector<std::byte> message(reinterpret_cast<const std::byte*>(data),
                                       reinterpret_cast<const std::byte*>(data) + size);
  auto header = ReadPairwiseHeader(message);
  if (!header) return 0;
  if (size < kPairwiseHeaderBytes) chorus::fuzz::Broken("a message shorter than the header was read");
  const std::vector<std::byte> again = PairwiseHeaderOnly(*header);
  if (std::memcmp(again.data(), message.data(), kPairwiseHeaderBytes) != 0) {
    chorus::fuzz::Broken("the header read does not write back to the same bytes");
  }
  auto reread = ReadPairwiseHeader(again);
  if (!reread || reread->type != header->type || reread->finished != header->finished ||
      reread->seq != header->seq || reread->step != header->step) {
    chorus::fuzz::Broken("a written header does not read back");
  }
  return 0;
}
