// Node configs (TOML): ParseConfigString accepts or names what is wrong; it
// never crashes or throws.
#include <cstdint>
#include <string_view>

#include "node/config/config_parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto config = chorus::node::ParseConfigString(std::string_view(reinterpret_cast<const char*>(data), size),
                                                "fuzz.toml");
  (void)config;
  return 0;
}
