// Comparison files (`chorus compare`): ParseCompareFile accepts or names what
// is wrong, and never crashes or throws.
#include <cstdint>

#include "fuzz/fuzz_util.h"
#include "node/lab/compare/compare_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto config = chorus::node::ParseCompareFile(chorus::fuzz::WriteTemp(data, size, ".toml"));
  (void)config;
  return 0;
}
