// The outer sync's message (see outer_sync_wire.h).
#include "node/exchange/outer_sync_wire.h"

#include <cstring>
#include <string>

namespace chorus::node {

std::vector<std::byte> EncodeOuterSyncMessage(std::span<const float> params,
                                              std::span<const std::byte> pseudo_gradient) {
  std::vector<std::byte> out(params.size_bytes() + pseudo_gradient.size());
  if (!params.empty()) std::memcpy(out.data(), params.data(), params.size_bytes());
  if (!pseudo_gradient.empty()) {
    std::memcpy(out.data() + params.size_bytes(), pseudo_gradient.data(), pseudo_gradient.size());
  }
  return out;
}

Result<std::span<const std::byte>> ReadOuterSyncMessage(std::span<const std::byte> message, std::span<float> params) {
  if (message.size() < params.size_bytes()) {
    return Err(DataLoss("outer sync message of " + std::to_string(message.size()) + " bytes is shorter than the " +
                        std::to_string(params.size()) + " parameters it starts with"));
  }
  if (!params.empty()) std::memcpy(params.data(), message.data(), params.size_bytes());
  return message.subspan(params.size_bytes());
}

}  // namespace chorus::node
