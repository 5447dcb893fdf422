// safetensors: DecodeSafetensors accepts or names the defect; what it accepts
// encodes again and decodes to the same tensors.
#include <cstdint>
#include <span>

#include "fuzz/fuzz_util.h"
#include "trainer/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::trainer;
  auto file = DecodeSafetensors(std::span<const uint8_t>(data, size), "fuzz");
  if (!file) return 0;
  auto bytes = EncodeSafetensors("fuzz", file->tensors, file->metadata);
  if (!bytes) return 0;  // e.g. a tensor name the writer refuses
  auto again = DecodeSafetensors(*bytes, "fuzz");
  if (!again) chorus::fuzz::Broken("a re-encoded file does not decode: " + again.error().ToString());
  if (again->tensors.size() != file->tensors.size()) chorus::fuzz::Broken("tensors lost in a round trip");
  return 0;
}
