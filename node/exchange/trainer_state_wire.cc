// The trainer state's bytes (see trainer_state_wire.h).
#include "node/exchange/trainer_state_wire.h"

#include <cstring>
#include <string>

namespace chorus::node {

std::vector<std::byte> EncodeBatchNormState(std::span<const float> values, int64_t batches_tracked) {
  std::vector<std::byte> out(values.size_bytes() + sizeof(int64_t));
  if (!values.empty()) std::memcpy(out.data(), values.data(), values.size_bytes());
  std::memcpy(out.data() + values.size_bytes(), &batches_tracked, sizeof(int64_t));
  return out;
}

Result<int64_t> ReadBatchNormState(std::span<const std::byte> message, std::span<float> values) {
  if (message.size() != values.size_bytes() + sizeof(int64_t)) {
    return Err(DataLoss("BatchNorm state of " + std::to_string(message.size()) + " bytes, expected " +
                        std::to_string(values.size()) + " floats and an 8-byte batch count"));
  }
  int64_t tracked = 0;
  std::memcpy(&tracked, message.data() + values.size_bytes(), sizeof(int64_t));
  if (tracked < 0) {
    return Err(DataLoss("BatchNorm state: batch count " + std::to_string(tracked) + " (byte " +
                        std::to_string(values.size_bytes()) + ") is negative"));
  }
  if (!values.empty()) std::memcpy(values.data(), message.data(), values.size_bytes());
  return tracked;
}

std::array<std::byte, kLossScalerStateBytes> EncodeLossScalerState(const trainer::LossScalerState& state) {
  std::array<std::byte, kLossScalerStateBytes> out{};
  std::memcpy(out.data(), &state.scale, 8);
  std::memcpy(out.data() + 8, &state.clean_steps, 8);
  std::memcpy(out.data() + 16, &state.skipped_steps, 8);
  return out;
}

Result<trainer::LossScalerState> DecodeLossScalerState(std::span<const std::byte> message) {
  if (message.size() != kLossScalerStateBytes) {
    return Err(DataLoss("loss scaler state of " + std::to_string(message.size()) + " bytes, expected " +
                        std::to_string(kLossScalerStateBytes)));
  }
  trainer::LossScalerState state;
  std::memcpy(&state.scale, message.data(), 8);
  std::memcpy(&state.clean_steps, message.data() + 8, 8);
  std::memcpy(&state.skipped_steps, message.data() + 16, 8);
  return state;
}

}  // namespace chorus::node
