// The codecs' wire formats: the first byte picks a codec and its options, the
// next two the element count, the rest is the message. Decode accepts or
// names the defect, never writes past `out`; a message it accepts has the
// size WireBytes says.
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "gossip/codecs/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::gossip;
  if (size < 3) return 0;
  static const CodecKind kKinds[] = {CodecKind::kNone, CodecKind::kFp16, CodecKind::kInt8,
                                     CodecKind::kSign, CodecKind::kTopK, CodecKind::kRandomK};
  static const int kBits[] = {32, 16, 8};
  CodecOptions o;
  o.kind = kKinds[data[0] % 6];
  o.value_bits = kBits[(data[0] / 6) % 3];
  o.chunk = 1 + (data[0] >> 5) * 7;
  o.ratio = 0.05;
  auto codec = MakeCodec(o);
  if (!codec) return 0;
  const size_t n = static_cast<size_t>(data[1]) | (static_cast<size_t>(data[2] & 0x0f) << 8);
  std::vector<float> out(n);
  const std::span<const std::byte> message(reinterpret_cast<const std::byte*>(data + 3), size - 3);
  if ((*codec)->Decode(message, out).ok() && message.size() != (*codec)->WireBytes(n)) {
    chorus::fuzz::Broken("a message of the wrong size decoded");
  }
  return 0;
}
