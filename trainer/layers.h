// The concrete layers of the built-in models: Linear, Conv2d, BatchNorm2d, ReLU
// and MaxPool2d, each a thin FP32 wrapper over kernels/ops.h with PyTorch's
// parameter names, shapes and default initialisation. They must not know about
// FP16 storage, loss scaling or hooks (the Model handles those).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/layer.h"

namespace chorus::trainer {

// y = x w^T + b; w [out, in], b [out]. Init: w, b ~ U(+-1/sqrt(in)) (PyTorch's
// kaiming_uniform_(a=sqrt(5)) reduces to that bound).
class Linear final : public Layer {
 public:
  Linear(std::string name, int in, int out);
  std::string Describe() const override;
  std::vector<ParameterSpec> Parameters() const override;
  void Bind(std::span<const float* const> weights, std::span<float* const> grads,
            std::span<float* const> buffers) override;
  bool BackwardNeedsInput() const override { return true; }
  void Forward(const LayerRun& run, int n, const float* x, float* y) override;
  void Backward(const LayerRun& run, int n, const float* x, const float* y, const float* dy,
                float* dx) override;

 private:
  int in_, out_;
  const float* w_ = nullptr;
  const float* b_ = nullptr;
  float* dw_ = nullptr;
  float* db_ = nullptr;
};

// Square kernel, stride 1, zero padding `pad`; w [K, C, k, k], b [K].
// Init: U(+-1/sqrt(C*k*k)) for both.
class Conv2d final : public Layer {
 public:
  Conv2d(std::string name, SampleShape input, int out_channels, int kernel, int pad);
  std::string Describe() const override;
  std::vector<ParameterSpec> Parameters() const override;
  void Bind(std::span<const float* const> weights, std::span<float* const> grads,
            std::span<float* const> buffers) override;
  size_t WorkspaceElements(int n) const override;
  bool BackwardNeedsInput() const override { return true; }
  void Forward(const LayerRun& run, int n, const float* x, float* y) override;
  void Backward(const LayerRun& run, int n, const float* x, const float* y, const float* dy,
                float* dx) override;
  // The op shape of a batch of n (the GPU model builds its cuDNN plans from it).
  kernels::Conv2dShape ShapeFor(int n) const;
  // For a convolution that a BatchNorm follows: the bias shifts each channel's
  // batch mean, which BatchNorm subtracts, so its gradient is zero in exact
  // arithmetic. Backward writes that zero instead of the rounding residue of
  // N * H * W terms that cancel (and the GPU skips the reduction).
  void CancelBiasGradient() { bias_gradient_cancelled_ = true; }
  bool bias_gradient_cancelled() const { return bias_gradient_cancelled_; }

 private:
  int kernel_, pad_;
  bool bias_gradient_cancelled_ = false;
  const float* w_ = nullptr;
  const float* b_ = nullptr;
  float* dw_ = nullptr;
  float* db_ = nullptr;
};

// Per-channel batch normalisation (PyTorch BatchNorm2d defaults: eps 1e-5,
// momentum 0.1, gamma 1, beta 0, running mean 0, running var 1 (unbiased)).
// Training mode uses batch statistics and updates the running buffers.
class BatchNorm2d final : public Layer {
 public:
  BatchNorm2d(std::string name, SampleShape shape);
  std::string Describe() const override;
  std::vector<ParameterSpec> Parameters() const override;
  std::vector<ParameterSpec> Buffers() const override;
  void Bind(std::span<const float* const> weights, std::span<float* const> grads,
            std::span<float* const> buffers) override;
  bool BackwardNeedsInput() const override { return true; }
  void Forward(const LayerRun& run, int n, const float* x, float* y) override;
  void Backward(const LayerRun& run, int n, const float* x, const float* y, const float* dy,
                float* dx) override;
  // The op shape of a batch of n (the GPU model builds its cuDNN plans from it).
  kernels::BatchNormShape ShapeFor(int n) const;

 private:
  const float* gamma_ = nullptr;
  const float* beta_ = nullptr;
  float* dgamma_ = nullptr;
  float* dbeta_ = nullptr;
  float* running_mean_ = nullptr;
  float* running_var_ = nullptr;
  std::vector<float> save_mean_, save_inv_std_;  // [C], from the last training forward
};

// y = max(x, 0). Backward reads y and may run in place (dx == dy).
class Relu final : public Layer {
 public:
  explicit Relu(SampleShape shape);
  std::string Describe() const override { return "ReLU"; }
  bool BackwardNeedsOutput() const override { return true; }
  bool PreservesHalf() const override { return true; }
  void Forward(const LayerRun& run, int n, const float* x, float* y) override;
  void Backward(const LayerRun& run, int n, const float* x, const float* y, const float* dy,
                float* dx) override;
};

// size x size windows, stride size; H and W divisible by size. With relu, a
// ReLU in front is fused in: ReLU then max-pool (what the CNNs do) equals
// max-pool then ReLU, bit for bit in values and gradients, and pooling first
// reads and writes a quarter of the memory (and stores no ReLU output).
class MaxPool2d final : public Layer {
 public:
  MaxPool2d(SampleShape input, int size, bool relu = false);
  std::string Describe() const override;
  // Windows do not overlap (stride == size), so each dx gets at most one dy.
  bool PreservesHalf() const override { return true; }
  void Forward(const LayerRun& run, int n, const float* x, float* y) override;
  void Backward(const LayerRun& run, int n, const float* x, const float* y, const float* dy,
                float* dx) override;
  int size() const { return size_; }
  bool relu() const { return relu_; }

 private:
  int size_;
  bool relu_;
  std::vector<int32_t> argmax_;  // [n, output], from the last forward
};

}  // namespace chorus::trainer
