// The outer sync's message (node/exchange/outer_sync_wire.h) against
// arbitrary messages: the first byte is the fragment's parameter count, the
// rest the message. ReadOuterSyncMessage accepts or names the defect, never
// reads past the message, returns the bytes after the parameters, and what
// it accepts encodes back to the same message.
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "node/exchange/outer_sync_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::node;
  if (size < 1) return 0;
  const std::vector<std::byte> message(reinterpret_cast<const std::byte*>(data + 1),
                                       reinterpret_cast<const std::byte*>(data) + size);
  std::vector<float> params(data[0]);
  auto gradient = ReadOuterSyncMessage(message, params);
  if (!gradient) return 0;
  if (gradient->size() + params.size() * sizeof(float) != message.size()) {
    chorus::fuzz::Broken("the pseudo-gradient is not the rest of the message");
  }
  if (EncodeOuterSyncMessage(params, *gradient) != message) {
    chorus::fuzz::Broken("the message does not encode back to the same bytes");
  }
  return 0;
}
