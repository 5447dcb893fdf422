// The parameter table of a model: where each named tensor lives in the one
// contiguous FP32 master buffer (and the gradient and momentum buffers, which
// share its layout), its shape, and its kind.
//
// Names follow PyTorch's state_dict ("fc1.weight", "bn1.bias", buffers
// "bn1.running_mean"), so an exported model loads into the equivalent nn.Module.
// The kind tells the optimizer what to exclude from weight decay and LARS
// scaling (biases and BatchNorm parameters). Plain data; no storage here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::trainer {

enum class ParamKind {
  kWeight,   // fc / conv weight: weight decay and LARS trust ratio apply
  kBias,     // fc / conv bias: neither applies
  kBnScale,  // BatchNorm gamma ("bnX.weight"): neither applies
  kBnShift,  // BatchNorm beta ("bnX.bias"): neither applies
};

std::string_view ParamKindName(ParamKind kind);

// True for the kinds that get weight decay and the LARS trust ratio (weights only).
inline bool IsDecayedWeight(ParamKind kind) { return kind == ParamKind::kWeight; }

// One trained tensor. offset and count are in floats, into the master, gradient
// and momentum buffers; parameters are packed back to back in table order with
// no padding, so the last parameter ends at the buffer's end.
struct ParameterInfo {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;
  size_t count = 0;
  ParamKind kind = ParamKind::kWeight;
  // Index of the layer that owns it (layers in forward order). A layer's
  // gradients become final together, at the end of its backward.
  size_t layer = 0;
};

// One non-trained FP32 state tensor (BatchNorm running mean / variance), packed
// the same way into the model's buffer-values array.
struct BufferInfo {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;
  size_t count = 0;
};

// Index of the parameter named `name`, or -1.
int FindParameter(std::span<const ParameterInfo> table, std::string_view name);

// Product of the dimensions (1 for a scalar's empty shape).
size_t ShapeElements(std::span<const int64_t> shape);

// "[32, 1, 5, 5]"
std::string ShapeToString(std::span<const int64_t> shape);

}  // namespace chorus::trainer
