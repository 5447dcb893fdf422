// The non-parameter parts of the trainer state that members broadcast
// (trainer_state.h, batch_norm_state.h), as bytes, with their readers and
// writers. Little-endian, as the hosts that run Chorus are.
//   BatchNorm state: n f32 running statistics, then the i64 batch count.
//   Loss scaler state, 24 bytes: f64 scale, i64 clean steps, i64 skipped steps.
//
// Must not: judge a loss scaler state's values (LossScaler::Restore does,
// against its options) or pick tags.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "trainer/loss_scaler.h"

namespace chorus::node {

inline constexpr size_t kLossScalerStateBytes = 24;

// `values`, then `batches_tracked`.
std::vector<std::byte> EncodeBatchNormState(std::span<const float> values, int64_t batches_tracked);

// Copies the message's statistics into `values` and returns the batch
// count; DataLoss for a message that is not values.size() floats and the
// count, or a negative count. What it accepts encodes back to the same bytes.
[[nodiscard]] Result<int64_t> ReadBatchNormState(std::span<const std::byte> message, std::span<float> values);

std::array<std::byte, kLossScalerStateBytes> EncodeLossScalerState(const trainer::LossScalerState& state);

// The state in `message`, which must be exactly kLossScalerStateBytes
// (DataLoss otherwise). It encodes back to the same bytes.
[[nodiscard]] Result<trainer::LossScalerState> DecodeLossScalerState(std::span<const std::byte> message);

}  // namespace chorus::node
