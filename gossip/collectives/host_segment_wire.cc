// The segment name's bytes (see host_segment_wire.h).
#include "gossip/collectives/host_segment_wire.h"

#include <algorithm>
#include <cstring>
#include <string_view>

namespace chorus::gossip {

std::array<std::byte, kSegmentNameBytes> EncodeSegmentName(const std::string& name) {
  std::array<std::byte, kSegmentNameBytes> out{};
  std::memcpy(out.data(), name.data(), std::min(name.size(), kSegmentNameBytes - 1));
  return out;
}

Result<std::string> DecodeSegmentName(std::span<const std::byte> message) {
  if (message.size() != kSegmentNameBytes) {
    return Err(DataLoss("segment name of " + std::to_string(message.size()) + " bytes, expected " +
                        std::to_string(kSegmentNameBytes)));
  }
  const auto nul = std::find(message.begin(), message.end(), std::byte{0});
  if (nul == message.end()) return Err(DataLoss("segment name: no NUL in its " + std::to_string(kSegmentNameBytes) + " bytes"));
  for (auto it = nul; it != message.end(); ++it) {
    if (*it != std::byte{0}) {
      return Err(DataLoss("segment name: byte " + std::to_string(it - message.begin()) + " after the name is not NUL"));
    }
  }
  std::string name(reinterpret_cast<const char*>(message.data()), static_cast<size_t>(nul - message.begin()));
  if (name.empty()) return name;
  const std::string prefix = std::string("/") + kSegmentNamePrefix;
  const std::string_view rest = std::string_view(name).substr(std::min(prefix.size(), name.size()));
  const bool digits_and_dashes = !rest.empty() && std::all_of(rest.begin(), rest.end(), [](char c) {
    return (c >= '0' && c <= '9') || c == '-';
  });
  if (!name.starts_with(prefix) || !digits_and_dashes) {
    return Err(DataLoss("segment name '" + name + "' is not " + prefix + " and digits"));
  }
  return name;
}

}  // namespace chorus::gossip
