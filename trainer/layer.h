// The Layer interface the Model chains: one FP32 compute step over a batch
// plus its backward, with parameters and state owned elsewhere (bound once).
//
// A layer declares its parameters (shape, kind, PyTorch-style init) and buffers;
// the Model packs them into its contiguous buffers and binds pointers. Forward
// and Backward see FP32 arrays only: the Model alone decides whether
// activations are stored as FP16 between layers and converts around the call.
// A layer never allocates its parameters, never rounds to FP16 and never talks
// to hooks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "trainer/parameter.h"

namespace chorus::trainer {

// Shape of one sample's activation (C, H, W); a flat vector is (features, 1, 1).
struct SampleShape {
  int c = 1, h = 1, w = 1;
  size_t Elements() const { return static_cast<size_t>(c) * h * w; }
};

// How a parameter or buffer starts (PyTorch's reset_parameters conventions).
struct InitRule {
  enum class Type { kUniform, kConstant } type = Type::kConstant;
  double value = 0.0;  // kUniform: values in [-value, value); kConstant: the value
};

struct ParameterSpec {
  std::string suffix;          // "weight" / "bias" / "running_mean": appended to "<layer>."
  std::vector<int64_t> shape;
  ParamKind kind = ParamKind::kWeight;  // ignored for buffers
  InitRule init;
};

// Per-call settings shared by all layers of one pass.
struct LayerRun {
  const kernels::Context* ctx = nullptr;
  bool training = true;          // BatchNorm: batch statistics and running-stat updates
  float* workspace = nullptr;    // at least WorkspaceElements(n) floats
};

class Layer {
 public:
  virtual ~Layer() = default;

  // Module name in the state dict ("conv1"); empty for parameter-free layers.
  const std::string& name() const { return name_; }
  const SampleShape& input_shape() const { return input_shape_; }
  const SampleShape& output_shape() const { return output_shape_; }
  // "Conv2d(1, 32, k=5, pad=2)"
  virtual std::string Describe() const = 0;

  virtual std::vector<ParameterSpec> Parameters() const { return {}; }
  virtual std::vector<ParameterSpec> Buffers() const { return {}; }
  // weights[i] / grads[i] belong to Parameters()[i]; buffers[i] to Buffers()[i].
  // weights are what Forward computes with (FP32 master or its FP16-rounded copy).
  virtual void Bind(std::span<const float* const> weights, std::span<float* const> grads,
                    std::span<float* const> buffers) {}

  virtual size_t WorkspaceElements(int n) const { return 0; }
  // Which stored activations Backward reads (others may be passed as nullptr).
  virtual bool BackwardNeedsInput() const { return false; }
  virtual bool BackwardNeedsOutput() const { return false; }
  // True when every output (and every dx) is a copy of an input (or dy) value
  // or zero (ReLU, max-pool): values already representable in FP16 stay so,
  // and the Model skips rounding them again.
  virtual bool PreservesHalf() const { return false; }

  // x [n, input_shape] -> y [n, output_shape].
  virtual void Forward(const LayerRun& run, int n, const float* x, float* y) = 0;
  // dy [n, output_shape] -> parameter gradients (written, not accumulated) and
  // dx [n, input_shape] unless dx == nullptr. x, y are this pass's forward
  // input and output (as stored). dx may alias dy only where a layer says so.
  virtual void Backward(const LayerRun& run, int n, const float* x, const float* y,
                        const float* dy, float* dx) = 0;

 protected:
  Layer(std::string name, SampleShape input, SampleShape output)
      : name_(std::move(name)), input_shape_(input), output_shape_(output) {}

 private:
  std::string name_;
  SampleShape input_shape_;
  SampleShape output_shape_;
};

}  // namespace chorus::trainer
