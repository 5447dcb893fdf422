// ParseDevice (choices.h); the device model itself is in cuda/cuda_model.cc.
#include "trainer/choices.h"

#include <charconv>
#include <string>

namespace chorus::trainer {

Result<Device> ParseDevice(std::string_view name) {
  if (name == "cpu") return Device::Cpu();
  if (name == "cuda") return Device::Cuda(0);
  constexpr std::string_view kPrefix = "cuda:";
  if (name.substr(0, kPrefix.size()) == kPrefix) {
    const std::string_view digits = name.substr(kPrefix.size());
    int ordinal = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
    if (ec == std::errc() && end == digits.data() + digits.size() && ordinal >= 0 &&
        !digits.empty()) {
      return Device::Cuda(ordinal);
    }
  }
  return Err(InvalidArgument("unknown device '" + std::string(name) +
                             "' (expected \"cpu\", \"cuda\" or \"cuda:N\" with N >= 0)"));
}

}  // namespace chorus::trainer
