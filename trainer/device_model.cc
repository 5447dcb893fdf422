// ParseDevice (device_model.h); the device model itself is in cuda_model.cc.
#include "trainer/device_model.h"

#include <charconv>
#include <string>

namespace chorus::trainer {

Result<int> ParseDevice(std::string_view name) {
  if (name == "cpu") return -1;
  if (name == "cuda") return 0;
  constexpr std::string_view kPrefix = "cuda:";
  if (name.substr(0, kPrefix.size()) == kPrefix) {
    const std::string_view digits = name.substr(kPrefix.size());
    int ordinal = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
    if (ec == std::errc() && end == digits.data() + digits.size() && ordinal >= 0 &&
        !digits.empty()) {
      return ordinal;
    }
  }
  return Err(InvalidArgument("unknown device '" + std::string(name) +
                             "' (expected \"cpu\", \"cuda\" or \"cuda:N\" with N >= 0)"));
}

}  // namespace chorus::trainer
