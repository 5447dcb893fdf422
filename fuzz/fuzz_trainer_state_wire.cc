// The trainer state's broadcast bytes (node/exchange/trainer_state_wire.h)
// against arbitrary messages: the first byte picks a loss scaler state (0)
// or a BatchNorm state of that many statistics (1 to 255), the rest is the
// message. Each decoder accepts or names the defect, what it accepts
// encodes back to the same bytes, and a loss scaler state that decodes is
// either restored or refused by the scaler (never crashes it).
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "node/exchange/trainer_state_wire.h"

namespace {

void LossScalerState(std::span<const std::byte> message) {
  using namespace chorus;
  auto state = node::DecodeLossScalerState(message);
  if (!state) return;
  const auto again = node::EncodeLossScalerState(*state);
  if (!std::equal(again.begin(), again.end(), message.begin(), message.end())) {
    fuzz::Broken("the loss scaler state does not encode back to the same bytes");
  }
  trainer::LossScalerOptions options;
  options.enabled = true;
  trainer::LossScaler scaler(options);
  if (scaler.Restore(*state).ok() && !(scaler.scale() > 0.0)) fuzz::Broken("a scale that is not positive restored");
}

void BatchNormState(std::span<const std::byte> message, size_t n) {
  using namespace chorus;
  std::vector<float> values(n);
  auto tracked = node::ReadBatchNormState(message, values);
  if (!tracked) return;
  if (*tracked < 0) fuzz::Broken("a negative batch count decoded");
  const std::vector<std::byte> again = node::EncodeBatchNormState(values, *tracked);
  if (!std::equal(again.begin(), again.end(), message.begin(), message.end())) {
    fuzz::Broken("the BatchNorm state does not encode back to the same bytes");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::vector<std::byte> message(reinterpret_cast<const std::byte*>(data + 1),
                                       reinterpret_cast<const std::byte*>(data) + size);
  if (data[0] == 0) {
    LossScalerState(message);
  } else {
    BatchNormState(message, data[0]);
  }
  return 0;
}
