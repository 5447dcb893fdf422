// Control-plane frames before anything is decoded: the length check and the
// MAC. A frame under a key nobody here holds never verifies, so nothing of
// its payload reaches DecodeMessage; the length header never allocates past
// the limit.
#include <array>
#include <cstdint>
#include <span>

#include "fuzz/fuzz_util.h"
#include "node/control/control_frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::node;
  if (size >= kFrameLengthBytes) {
    auto length = ParseFrameLength(std::span<const uint8_t, kFrameLengthBytes>(data, kFrameLengthBytes), 4096);
    if (length && (*length == 0 || *length > 4096)) chorus::fuzz::Broken("a length past the limit was accepted");
  }
  MacKey key{};
  key.fill(0x5a);
  FrameOpener opener(key);
  auto payload = OpenFrame(std::span<const uint8_t>(data, size), opener, 4096);
  if (payload) {
    // Only a frame sealed under the key verifies: seal the payload and compare.
    FrameSealer sealer(key);
    const std::vector<uint8_t> sealed = sealer.Seal(*payload);
    if (sealed.size() != size || !std::equal(sealed.begin(), sealed.end(), data)) {
      chorus::fuzz::Broken("a frame not sealed under the key verified");
    }
  }
  return 0;
}
