// Model construction, parameter packing and initialisation, and the
// mixed-precision forward/backward pass (see model.h). Must not update weights,
// check gradients for Inf/NaN, or know about optimizers and hooks' listeners.
#include "trainer/model.h"

#include <algorithm>
#include <array>
#include <random>
#include <utility>

#include "trainer/layers.h"

namespace chorus::trainer {
namespace {

constexpr SampleShape kImageShape{1, 28, 28};
constexpr int kClasses = 10;
// Uniform double in [0, 1) from the top 53 bits of one mt19937_64 draw: the same
// on every platform (std::uniform_real_distribution is implementation-defined).
double UniformUnit(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

void Fill(const InitRule& rule, std::mt19937_64& rng, float* out, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    out[i] = rule.type == InitRule::Type::kUniform
                 ? static_cast<float>((2.0 * UniformUnit(rng) - 1.0) * rule.value)
                 : static_cast<float>(rule.value);
  }
}

std::vector<std::unique_ptr<Layer>> MakeMlp() {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Linear>("fc1", 784, 256));
  layers.push_back(std::make_unique<Relu>(SampleShape{256, 1, 1}));
  layers.push_back(std::make_unique<Linear>("fc2", 256, 128));
  layers.push_back(std::make_unique<Relu>(SampleShape{128, 1, 1}));
  layers.push_back(std::make_unique<Linear>("fc3", 128, kClasses));
  return layers;
}

// conv5x5(1->32, pad 2) [BN] ReLU maxpool2, conv5x5(32->64, pad 2) [BN] ReLU maxpool2,
// fc 3136->256 ReLU, fc 256->10. The flatten before fc1 is implicit (NCHW rows).
// Each ReLU + maxpool pair is one fused MaxPool2d layer (see layers.h).
std::vector<std::unique_ptr<Layer>> MakeCnn(bool batch_norm) {
  std::vector<std::unique_ptr<Layer>> layers;
  SampleShape shape = kImageShape;
  const int channels[2] = {32, 64};
  for (int i = 0; i < 2; ++i) {
    const std::string index = std::to_string(i + 1);
    auto conv = std::make_unique<Conv2d>("conv" + index, shape, channels[i], 5, 2);
    if (batch_norm) conv->CancelBiasGradient();
    shape = conv->output_shape();
    layers.push_back(std::move(conv));
    if (batch_norm) layers.push_back(std::make_unique<BatchNorm2d>("bn" + index, shape));
    auto pool = std::make_unique<MaxPool2d>(shape, 2, /*relu=*/true);
    shape = pool->output_shape();
    layers.push_back(std::move(pool));
  }
  const int flat = static_cast<int>(shape.Elements());  // 64 * 7 * 7 = 3136
  layers.push_back(std::make_unique<Linear>("fc1", flat, 256));
  layers.push_back(std::make_unique<Relu>(SampleShape{256, 1, 1}));
  layers.push_back(std::make_unique<Linear>("fc2", 256, kClasses));
  return layers;
}

}  // namespace

Result<std::unique_ptr<Model>> Model::Create(ModelKind kind, Precision precision, uint64_t seed,
                                             const kernels::Context& ctx) {
  std::vector<std::unique_ptr<Layer>> layers;
  switch (kind) {
    case ModelKind::kMlp: layers = MakeMlp(); break;
    case ModelKind::kCnn: layers = MakeCnn(false); break;
    case ModelKind::kCnnBn: layers = MakeCnn(true); break;
  }
  return Build(std::string(ModelName(kind)), kImageShape, std::move(layers), precision, seed, ctx);
}

Result<std::unique_ptr<Model>> Model::Build(std::string name, SampleShape input,
                                            std::vector<std::unique_ptr<Layer>> layers,
                                            Precision precision, uint64_t seed,
                                            const kernels::Context& ctx) {
  if (layers.empty()) return Err(InvalidArgument("model '" + name + "' has no layers"));
  size_t elements = input.Elements();
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i]->input_shape().Elements() != elements) {
      return Err(InvalidArgument("model '" + name + "': layer " + std::to_string(i) + " (" +
                                 layers[i]->Describe() + ") takes " +
                                 std::to_string(layers[i]->input_shape().Elements()) +
                                 " values per sample but gets " + std::to_string(elements)));
    }
    elements = layers[i]->output_shape().Elements();
  }
  std::unique_ptr<Model> model(
      new Model(std::move(name), input, std::move(layers), precision, ctx));
  CHORUS_RETURN_IF_ERROR(model->Initialise(seed));
  return model;
}

Model::Model(std::string name, SampleShape input, std::vector<std::unique_ptr<Layer>> layers,
             Precision precision, const kernels::Context& ctx)
    : name_(std::move(name)),
      input_(input),
      layers_(std::move(layers)),
      precision_(precision),
      ctx_(ctx),
      num_classes_(static_cast<int>(layers_.back()->output_shape().Elements())) {}

Status Model::Initialise(uint64_t seed) {
  // Pack parameters and buffers in layer order.
  std::vector<std::vector<ParameterSpec>> param_specs, buffer_specs;
  size_t param_total = 0, buffer_total = 0;
  for (const auto& layer : layers_) {
    layer_first_param_.push_back(params_.size());
    layer_first_buffer_.push_back(buffers_.size());
    param_specs.push_back(layer->Parameters());
    buffer_specs.push_back(layer->Buffers());
    if ((!param_specs.back().empty() || !buffer_specs.back().empty()) && layer->name().empty()) {
      return InvalidArgument("model '" + name_ + "': layer " + layer->Describe() +
                             " has parameters but no name");
    }
    for (const ParameterSpec& spec : param_specs.back()) {
      ParameterInfo info{layer->name() + "." + spec.suffix, spec.shape, param_total,
                         ShapeElements(spec.shape), spec.kind, layer_first_param_.size() - 1};
      if (FindParameter(params_, info.name) >= 0) {
        return InvalidArgument("model '" + name_ + "': duplicate parameter " + info.name);
      }
      param_total += info.count;
      params_.push_back(std::move(info));
    }
    for (const ParameterSpec& spec : buffer_specs.back()) {
      BufferInfo info{layer->name() + "." + spec.suffix, spec.shape, buffer_total,
                      ShapeElements(spec.shape)};
      buffer_total += info.count;
      buffers_.push_back(std::move(info));
    }
  }
  layer_first_param_.push_back(params_.size());
  layer_first_buffer_.push_back(buffers_.size());
  master_.assign(param_total, 0.0f);
  grads_.assign(param_total, 0.0f);
  buffer_values_.assign(buffer_total, 0.0f);
  if (precision_ == Precision::kFp16) {
    working_float_.assign(param_total, 0.0f);
  }

  // Initialise in table order from one generator stream.
  std::mt19937_64 rng(seed);
  size_t p = 0, b = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    for (const ParameterSpec& spec : param_specs[i]) {
      Fill(spec.init, rng, master_.data() + params_[p].offset, params_[p].count);
      ++p;
    }
    for (const ParameterSpec& spec : buffer_specs[i]) {
      Fill(spec.init, rng, buffer_values_.data() + buffers_[b].offset, buffers_[b].count);
      ++b;
    }
  }
  RefreshWorkingCopy();

  BindLayers();

  // Which activations backward reads.
  const size_t count = layers_.size();
  store_act_.assign(count + 1, false);
  for (size_t i = 0; i < count; ++i) {
    if (layers_[i]->BackwardNeedsInput()) store_act_[i] = true;
    if (layers_[i]->BackwardNeedsOutput()) store_act_[i + 1] = true;
  }
  act_f_.resize(count + 1);
  act_h_.resize(count + 1);
  return Status::Ok();
}

bool Model::has_batch_norm() const { return !buffers_.empty(); }

void Model::RefreshWorkingCopy() { RefreshWorkingCopy(0, master_.size()); }

void Model::RefreshWorkingCopy(size_t offset, size_t count) {
  if (precision_ != Precision::kFp16) return;
  // One rounding pass: the FP16 bits of the whole model are only written out
  // when someone asks (working_half()).
  const size_t end = std::min(offset + count, master_.size());
  if (offset < end) {
    kernels::RoundToHalf(master_.data() + offset, working_float_.data() + offset, end - offset);
  }
  working_half_stale_.store(true, std::memory_order_relaxed);
}

std::span<const uint16_t> Model::working_half() const {
  if (precision_ != Precision::kFp16) return {};
  if (working_half_stale_.load(std::memory_order_relaxed)) {
    // working_float_ holds FP16 values exactly, so this reproduces the bits.
    working_half_.resize(working_float_.size());
    kernels::FloatToHalf(working_float_.data(), working_half_.data(), working_float_.size());
    working_half_stale_.store(false, std::memory_order_relaxed);
  }
  return working_half_;
}

void Model::EnsureCapacity(int n, bool training) {
  const size_t batch = static_cast<size_t>(n);
  if (n > pass_capacity_) {
    pass_capacity_ = n;
    size_t widest = input_.Elements();
    size_t workspace = 0;
    for (const auto& layer : layers_) {
      widest = std::max(widest, layer->output_shape().Elements());
      workspace = std::max(workspace, layer->WorkspaceElements(n));
    }
    fwd_a_.resize(batch * widest);
    fwd_b_.resize(batch * widest);
    workspace_.resize(workspace);
  }
  if (!training || n <= train_capacity_) return;
  train_capacity_ = n;
  size_t widest = input_.Elements();
  size_t all_acts = input_.Elements();  // per sample, every act 0..L
  for (size_t i = 0; i < layers_.size(); ++i) {
    const size_t out = layers_[i]->output_shape().Elements();
    widest = std::max(widest, out);
    all_acts += out;
  }
  float_acts_ = precision_ == Precision::kFp16 &&
                batch * all_acts * sizeof(float) <= float_activation_budget_;
  if (precision_ == Precision::kFp32 || float_acts_) {
    for (size_t i = 0; i < layers_.size(); ++i) {
      act_f_[i + 1].resize(batch * layers_[i]->output_shape().Elements());
    }
    if (float_acts_) act_f_[0].resize(batch * input_.Elements());
  } else {
    for (size_t i = 0; i <= layers_.size(); ++i) {
      if (!store_act_[i]) continue;
      const size_t per_sample =
          i == 0 ? input_.Elements() : layers_[i - 1]->output_shape().Elements();
      act_h_[i].resize(batch * per_sample);
    }
  }
  grad_a_.resize(batch * widest);
  grad_b_.resize(batch * widest);
}

const float* Model::Forward(const float* images, int n, bool training) {
  EnsureCapacity(n, training);
  LayerRun run{&ctx_, training, workspace_.data()};
  const size_t batch = static_cast<size_t>(n);
  if (precision_ == Precision::kFp32 || (training && float_acts_)) {
    // Training keeps every activation for backward; evaluation ping-pongs.
    // kFp16 rounds the images and each output that is not FP16 already.
    const bool half = precision_ == Precision::kFp16;
    const float* in = images;
    if (half) {
      kernels::RoundToHalf(images, act_f_[0].data(), batch * input_.Elements());
      in = act_f_[0].data();
    }
    input_images_ = in;
    for (size_t i = 0; i < layers_.size(); ++i) {
      float* out = training ? act_f_[i + 1].data() : (i % 2 == 0 ? fwd_a_.data() : fwd_b_.data());
      layers_[i]->Forward(run, n, in, out);
      if (half && !layers_[i]->PreservesHalf()) {
        kernels::RoundToHalf(out, batch * layers_[i]->output_shape().Elements());
      }
      in = out;
    }
    return in;
  }
  // kFp16: each activation is rounded to FP16 (and kept as FP16 bits when
  // backward needs it); the FP32 copy of the rounded values feeds the next layer.
  float* in = fwd_a_.data();
  float* out = fwd_b_.data();
  const size_t input_count = batch * input_.Elements();
  if (training && store_act_[0]) {
    kernels::RoundToHalfKeepBits(images, in, act_h_[0].data(), input_count);
  } else {
    kernels::RoundToHalf(images, in, input_count);
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->Forward(run, n, in, out);
    const size_t count = batch * layers_[i]->output_shape().Elements();
    const bool store = training && store_act_[i + 1];
    if (layers_[i]->PreservesHalf()) {
      if (store) kernels::FloatToHalf(out, act_h_[i + 1].data(), count);
    } else if (store) {
      kernels::RoundToHalfKeepBits(out, out, act_h_[i + 1].data(), count);
    } else {
      kernels::RoundToHalf(out, count);
    }
    std::swap(in, out);
  }
  return in;
}

// Layers compute with the FP16 working copy (expanded to FP32) in kFp16 and
// with the master itself in kFp32, and write their gradients into grads_.
void Model::BindLayers() {
  const float* compute = precision_ == Precision::kFp16 ? working_float_.data() : master_.data();
  for (size_t i = 0; i < layers_.size(); ++i) {
    std::vector<const float*> weights;
    std::vector<float*> grads, buffers;
    for (size_t p = layer_first_param_[i]; p < layer_first_param_[i + 1]; ++p) {
      weights.push_back(compute + params_[p].offset);
      grads.push_back(grads_.data() + params_[p].offset);
    }
    for (size_t b = layer_first_buffer_[i]; b < layer_first_buffer_[i + 1]; ++b) {
      buffers.push_back(buffer_values_.data() + buffers_[b].offset);
    }
    layers_[i]->Bind(weights, grads, buffers);
  }
}

void Model::ReplaceGradientStorage() {
  auto fresh = std::make_unique<std::vector<float, PageAllocator<float>>>(grads_.size(), 0.0f);
  std::swap(*fresh, grads_);
  (void)fresh.release();  // kept for good: someone may still write into it
  BindLayers();
}

void Model::FinishParameterGradients(size_t layer, double loss_scale, double gradient_weight,
                                     const GradientReadyFn& on_ready) {
  const float inverse = static_cast<float>(gradient_weight / loss_scale);
  for (size_t p = layer_first_param_[layer + 1]; p-- > layer_first_param_[layer];) {
    float* g = grads_.data() + params_[p].offset;
    // FP16 gradients: round the scaled value (overflow becomes Inf), then unscale.
    if (precision_ == Precision::kFp16) {
      kernels::RoundToHalfScaled(g, params_[p].count, inverse);
    } else if (inverse != 1.0f) {
      kernels::Scale<float>(ctx_, params_[p].count, inverse, g);
    }
    if (on_ready) on_ready(static_cast<int>(p));
  }
}

Model::PassResult Model::ForwardBackward(const float* images, const int32_t* labels, int n,
                                         double loss_scale, const GradientReadyFn& on_ready,
                                         double gradient_weight) {
  const float* logits = Forward(images, n, /*training=*/true);
  ++num_batches_tracked_;
  const bool half = precision_ == Precision::kFp16;
  const size_t batch = static_cast<size_t>(n);
  float* dy = grad_a_.data();
  float* dx = grad_b_.data();
  PassResult result;
  result.loss = kernels::SoftmaxCrossEntropy<float>(ctx_, n, num_classes_, logits, labels,
                                                    static_cast<float>(loss_scale), dy,
                                                    &result.correct);
  if (half) kernels::RoundToHalf(dy, batch * num_classes_);

  // kFp16: the two forward scratch buffers cache FP32 expansions of stored
  // activations. After the forward they hold the logits (act L) and the last
  // layer's input (act L-1); a ReLU's output is the next layer's input, so each
  // stored activation is expanded once.
  struct Expanded {
    float* data;
    size_t act;
  };
  constexpr size_t kNone = static_cast<size_t>(-1);
  const size_t last = layers_.size();
  Expanded slots[2] = {{fwd_a_.data(), logits == fwd_a_.data() ? last : last - 1},
                       {fwd_b_.data(), logits == fwd_b_.data() ? last : last - 1}};
  auto expand = [&](size_t act, size_t keep) -> const float* {
    for (const Expanded& slot : slots) {
      if (slot.act == act) return slot.data;
    }
    Expanded& victim = slots[0].act == keep ? slots[1] : slots[0];
    const size_t per_sample =
        act == 0 ? input_.Elements() : layers_[act - 1]->output_shape().Elements();
    kernels::HalfToFloat(act_h_[act].data(), victim.data, batch * per_sample);
    victim.act = act;
    return victim.data;
  };

  LayerRun run{&ctx_, /*training=*/true, workspace_.data()};
  for (size_t i = layers_.size(); i-- > 0;) {
    Layer& layer = *layers_[i];
    const bool need_x = layer.BackwardNeedsInput();
    const bool need_y = layer.BackwardNeedsOutput();
    const float* x = nullptr;
    const float* y = nullptr;
    if (!half || float_acts_) {
      if (need_x) x = i == 0 ? input_images_ : act_f_[i].data();
      if (need_y) y = act_f_[i + 1].data();
    } else {
      if (need_y) y = expand(i + 1, need_x ? i : kNone);
      if (need_x) x = expand(i, need_y ? i + 1 : kNone);
    }
    float* dx_or_null = i > 0 ? dx : nullptr;
    layer.Backward(run, n, x, y, dy, dx_or_null);
    FinishParameterGradients(i, loss_scale, gradient_weight, on_ready);
    if (dx_or_null != nullptr) {
      if (half && !layer.PreservesHalf()) {
        kernels::RoundToHalf(dx, batch * layer.input_shape().Elements());
      }
      std::swap(dy, dx);
    }
  }
  input_images_ = nullptr;
  return result;
}

Model::PassResult Model::Evaluate(const float* images, const int32_t* labels, int n) {
  const float* logits = Forward(images, n, /*training=*/false);
  PassResult result;
  result.loss = kernels::SoftmaxCrossEntropy<float>(ctx_, n, num_classes_, logits, labels, 1.0f,
                                                    nullptr, &result.correct);
  input_images_ = nullptr;
  return result;
}

std::span<const float> Model::Logits(const float* images, int n) {
  const float* logits = Forward(images, n, /*training=*/false);
  input_images_ = nullptr;
  return {logits, static_cast<size_t>(n) * num_classes_};
}

std::string Model::Summary() const {
  std::string out = "model " + name_ + " (" + std::string(PrecisionName(precision_)) + "), " +
                    std::to_string(master_.size()) + " parameters";
  for (const auto& layer : layers_) out += "\n  " + layer->Describe();
  return out;
}

}  // namespace chorus::trainer
