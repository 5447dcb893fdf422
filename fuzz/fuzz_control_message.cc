// Cap'n Proto control messages: DecodeMessage rejects what is malformed with an
// error and never crashes; what it accepts encodes again and decodes to the
// same message name.
#include <cstdint>
#include <span>

#include "fuzz/fuzz_util.h"
#include "node/control/control_messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::node;
  auto message = DecodeMessage(std::span<const uint8_t>(data, size));
  if (!message) return 0;
  auto again = EncodeMessage(*message);
  if (!again) chorus::fuzz::Broken("an accepted message does not encode: " + again.error().ToString());
  auto decoded = DecodeMessage(*again);
  if (!decoded) chorus::fuzz::Broken("a re-encoded message does not decode: " + decoded.error().ToString());
  if (MessageName(*decoded) != MessageName(*message)) chorus::fuzz::Broken("the message kind changed");
  return 0;
}
