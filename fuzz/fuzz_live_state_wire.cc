// What a joiner reads of the live state's transfer besides the state itself
// (node/cluster/live_state_wire.h; the state is a checkpoint, the
// `checkpoint` target's): the first byte picks the header (even) or a
// holder's fingerprint (odd, the rest read as floats). Each decoder accepts
// or names the defect, and what it accepts encodes back to the same bytes
// (the header) or equal floats (the fingerprint), within the limits it
// promises.
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "node/cluster/live_state_wire.h"

namespace {

void Header(std::span<const std::byte> message) {
  using namespace chorus::node;
  auto header = DecodeLiveStateHeader(message);
  if (!header) return;
  if (header->bytes > kMaxLiveStateBytes) chorus::fuzz::Broken("a header above the size limit decoded");
  const std::vector<uint8_t> again = EncodeLiveStateHeader(*header);
  if (again.size() != message.size() || std::memcmp(again.data(), message.data(), again.size()) != 0) {
    chorus::fuzz::Broken("the header does not encode back to the same bytes");
  }
}

void Fingerprint(std::span<const std::byte> message) {
  using namespace chorus::node;
  std::vector<float> floats(message.size() / sizeof(float));
  if (!floats.empty()) std::memcpy(floats.data(), message.data(), floats.size() * sizeof(float));
  auto fingerprint = DecodeLiveStateFingerprint(floats);
  if (!fingerprint) return;
  if (fingerprint->bytes > kMaxLiveStateBytes) chorus::fuzz::Broken("a fingerprint above the size limit decoded");
  const auto again = EncodeLiveStateFingerprint(*fingerprint);
  for (size_t i = 0; i < again.size(); ++i) {
    if (again[i] != floats[i]) chorus::fuzz::Broken("the fingerprint does not encode back to equal floats");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::vector<std::byte> message(reinterpret_cast<const std::byte*>(data + 1),
                                       reinterpret_cast<const std::byte*>(data) + size);
  if (data[0] % 2 == 0) {
    Header(message);
  } else {
    Fingerprint(message);
  }
  return 0;
}
