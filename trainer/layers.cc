// Concrete layers over kernels/ops.h (see layers.h). FP32 only; no FP16 and no
// allocation of parameters here.
#include "trainer/layers.h"

#include <algorithm>
#include <cmath>

namespace chorus::trainer {
namespace {

// PyTorch's default for Linear and Conv: kaiming_uniform_(a = sqrt(5)) gives
// bound = gain * sqrt(3 / fan_in) with gain = sqrt(2 / (1 + 5)), i.e. 1/sqrt(fan_in);
// the bias uses the same bound.
InitRule FanInUniform(int64_t fan_in) {
  return InitRule{InitRule::Type::kUniform, 1.0 / std::sqrt(static_cast<double>(fan_in))};
}

InitRule Constant(double value) { return InitRule{InitRule::Type::kConstant, value}; }

}  // namespace

// ---- Linear --------------------------------------------------------------------

Linear::Linear(std::string name, int in, int out)
    : Layer(std::move(name), SampleShape{in, 1, 1}, SampleShape{out, 1, 1}), in_(in), out_(out) {}

std::string Linear::Describe() const {
  return name() + ": Linear(" + std::to_string(in_) + ", " + std::to_string(out_) + ")";
}

std::vector<ParameterSpec> Linear::Parameters() const {
  return {{"weight", {out_, in_}, ParamKind::kWeight, FanInUniform(in_)},
          {"bias", {out_}, ParamKind::kBias, FanInUniform(in_)}};
}

void Linear::Bind(std::span<const float* const> weights, std::span<float* const> grads,
                  std::span<float* const> buffers) {
  w_ = weights[0];
  b_ = weights[1];
  dw_ = grads[0];
  db_ = grads[1];
}

void Linear::Forward(const LayerRun& run, int n, const float* x, float* y) {
  kernels::LinearForward<float>(*run.ctx, n, in_, out_, x, w_, b_, y);
}

void Linear::Backward(const LayerRun& run, int n, const float* x, const float* y,
                      const float* dy, float* dx) {
  kernels::LinearBackward<float>(*run.ctx, n, in_, out_, x, w_, dy, dx, dw_, db_);
}

// ---- Conv2d --------------------------------------------------------------------

Conv2d::Conv2d(std::string name, SampleShape input, int out_channels, int kernel, int pad)
    : Layer(std::move(name), input,
            SampleShape{out_channels, input.h + 2 * pad - kernel + 1,
                        input.w + 2 * pad - kernel + 1}),
      kernel_(kernel),
      pad_(pad) {}

std::string Conv2d::Describe() const {
  return name() + ": Conv2d(" + std::to_string(input_shape().c) + ", " +
         std::to_string(output_shape().c) + ", kernel_size=" + std::to_string(kernel_) +
         ", padding=" + std::to_string(pad_) + ")";
}

std::vector<ParameterSpec> Conv2d::Parameters() const {
  const int c = input_shape().c;
  const int k = output_shape().c;
  const int64_t fan_in = int64_t{c} * kernel_ * kernel_;
  return {{"weight", {k, c, kernel_, kernel_}, ParamKind::kWeight, FanInUniform(fan_in)},
          {"bias", {k}, ParamKind::kBias, FanInUniform(fan_in)}};
}

void Conv2d::Bind(std::span<const float* const> weights, std::span<float* const> grads,
                  std::span<float* const> buffers) {
  w_ = weights[0];
  b_ = weights[1];
  dw_ = grads[0];
  db_ = grads[1];
}

kernels::Conv2dShape Conv2d::ShapeFor(int n) const {
  kernels::Conv2dShape s;
  s.n = n;
  s.c = input_shape().c;
  s.h = input_shape().h;
  s.w = input_shape().w;
  s.k = output_shape().c;
  s.r = kernel_;
  s.s = kernel_;
  s.pad = pad_;
  s.stride = 1;
  return s;
}

size_t Conv2d::WorkspaceElements(int n) const { return ShapeFor(n).WorkspaceElems(); }

void Conv2d::Forward(const LayerRun& run, int n, const float* x, float* y) {
  kernels::Conv2dForward<float>(*run.ctx, ShapeFor(n), x, w_, b_, y, run.workspace);
}

void Conv2d::Backward(const LayerRun& run, int n, const float* x, const float* y,
                      const float* dy, float* dx) {
  kernels::Conv2dBackward<float>(*run.ctx, ShapeFor(n), x, w_, dy, dx, dw_, db_, run.workspace);
  // Computed with the rest (oneDNN's backward takes the bias with the weights), then replaced.
  if (bias_gradient_cancelled_) std::fill(db_, db_ + output_shape().c, 0.0f);
}

// ---- BatchNorm2d ---------------------------------------------------------------

BatchNorm2d::BatchNorm2d(std::string name, SampleShape shape)
    : Layer(std::move(name), shape, shape),
      save_mean_(static_cast<size_t>(shape.c), 0.0f),
      save_inv_std_(static_cast<size_t>(shape.c), 0.0f) {}

std::string BatchNorm2d::Describe() const {
  return name() + ": BatchNorm2d(" + std::to_string(input_shape().c) + ")";
}

std::vector<ParameterSpec> BatchNorm2d::Parameters() const {
  const int64_t c = input_shape().c;
  return {{"weight", {c}, ParamKind::kBnScale, Constant(1.0)},
          {"bias", {c}, ParamKind::kBnShift, Constant(0.0)}};
}

std::vector<ParameterSpec> BatchNorm2d::Buffers() const {
  const int64_t c = input_shape().c;
  return {{"running_mean", {c}, ParamKind::kWeight, Constant(0.0)},
          {"running_var", {c}, ParamKind::kWeight, Constant(1.0)}};
}

void BatchNorm2d::Bind(std::span<const float* const> weights, std::span<float* const> grads,
                       std::span<float* const> buffers) {
  gamma_ = weights[0];
  beta_ = weights[1];
  dgamma_ = grads[0];
  dbeta_ = grads[1];
  running_mean_ = buffers[0];
  running_var_ = buffers[1];
}

kernels::BatchNormShape BatchNorm2d::ShapeFor(int n) const {
  kernels::BatchNormShape s;
  s.n = n;
  s.c = input_shape().c;
  s.hw = input_shape().h * input_shape().w;
  return s;  // eps 1e-5, momentum 0.1: PyTorch's defaults
}

void BatchNorm2d::Forward(const LayerRun& run, int n, const float* x, float* y) {
  if (run.training) {
    kernels::BatchNormForwardTrain<float>(*run.ctx, ShapeFor(n), x, gamma_, beta_, y,
                                          save_mean_.data(), save_inv_std_.data(),
                                          running_mean_, running_var_);
  } else {
    kernels::BatchNormForwardEval<float>(*run.ctx, ShapeFor(n), x, gamma_, beta_, running_mean_,
                                         running_var_, y);
  }
}

void BatchNorm2d::Backward(const LayerRun& run, int n, const float* x, const float* y,
                           const float* dy, float* dx) {
  kernels::BatchNormBackward<float>(*run.ctx, ShapeFor(n), x, gamma_, save_mean_.data(),
                                    save_inv_std_.data(), dy, dx, dgamma_, dbeta_);
}

// ---- ReLU ----------------------------------------------------------------------

Relu::Relu(SampleShape shape) : Layer("", shape, shape) {}

void Relu::Forward(const LayerRun& run, int n, const float* x, float* y) {
  kernels::ReluForward<float>(*run.ctx, static_cast<size_t>(n) * input_shape().Elements(), x, y);
}

void Relu::Backward(const LayerRun& run, int n, const float* x, const float* y, const float* dy,
                    float* dx) {
  if (dx == nullptr) return;
  kernels::ReluBackward<float>(*run.ctx, static_cast<size_t>(n) * input_shape().Elements(), y, dy,
                               dx);
}

// ---- MaxPool2d -----------------------------------------------------------------

MaxPool2d::MaxPool2d(SampleShape input, int size, bool relu)
    : Layer("", input, SampleShape{input.c, input.h / size, input.w / size}),
      size_(size),
      relu_(relu) {}

std::string MaxPool2d::Describe() const {
  return std::string(relu_ ? "ReLU + " : "") + "MaxPool2d(" + std::to_string(size_) + ")";
}

void MaxPool2d::Forward(const LayerRun& run, int n, const float* x, float* y) {
  argmax_.resize(static_cast<size_t>(n) * output_shape().Elements());
  const SampleShape& in = input_shape();
  kernels::MaxPoolForward<float>(*run.ctx, n, in.c, in.h, in.w, size_, x, y, argmax_.data(),
                                 relu_);
}

void MaxPool2d::Backward(const LayerRun& run, int n, const float* x, const float* y,
                         const float* dy, float* dx) {
  if (dx == nullptr) return;
  const SampleShape& in = input_shape();
  kernels::MaxPoolBackward<float>(*run.ctx, n, in.c, in.h, in.w, size_, dy, argmax_.data(), dx);
}

}  // namespace chorus::trainer
