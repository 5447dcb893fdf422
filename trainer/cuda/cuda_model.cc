// The GPU replica of a Model (device_model.h) on the CUDA ops of
// kernels/cuda/ops.h. Per batch size and mode it keeps a Pass: cuDNN plans,
// FP16 activations, pinned input staging and, after the first eager run, a
// CUDA graph of the whole pass (input copies, forward, loss, backward, unscale
// and finite check, output copies), so that a step costs one graph launch and
// one synchronisation instead of ~40 kernel launches.
//
// Must not: include CUDA headers (kernels/cuda/ops.h is plain C++), or know
// about exchanges, hooks or checkpoints (the Trainer does).
#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "common/log.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"
#include "trainer/device_model.h"
#include "trainer/layers.h"

namespace chorus::trainer {
namespace {

namespace cu = kernels::cuda;
using cu::Half;

enum class Kind { kLinear, kConv, kBatchNorm, kRelu, kMaxPool };

// One layer of the chain, as the device runs it.
struct DeviceLayer {
  Kind kind = Kind::kRelu;
  const Layer* layer = nullptr;
  size_t in_elems = 0, out_elems = 0;  // per sample
  size_t weight = 0, bias = 0;         // parameter offsets (BatchNorm: gamma, beta)
  size_t weight_count = 0, bias_count = 0;
  bool bias_gradient_cancelled = false;  // Conv2d::bias_gradient_cancelled: stays zero
  size_t running_mean = 0, running_var = 0;  // buffer offsets (BatchNorm)
  // BatchNorm scratch: batch statistics kept from forward for backward, and the
  // FP32 parameter gradients before they join the FP16 gradient buffer.
  cu::DeviceArray<float> save_mean, save_inv_std, dgamma, dbeta;
};

// Everything one batch size in one mode needs.
struct Pass {
  int n = 0;
  bool training = false;
  bool from_rows = false;  // the batch is gathered from the held training set
  std::vector<std::unique_ptr<cu::ConvPlan>> conv;        // per layer (null: not a conv)
  std::vector<std::unique_ptr<cu::BatchNormPlan>> bn;     // per layer (null: not BatchNorm)
  std::vector<cu::DeviceArray<Half>> act_storage;
  std::vector<Half*> act;                                 // [layers + 1]: input of layer i
  std::vector<cu::DeviceArray<int32_t>> argmax;           // per layer (max-pool)
  cu::DeviceArray<Half> grad_a, grad_b;                   // activation-gradient ping-pong
  cu::DeviceArray<std::byte> workspace;
  cu::DeviceArray<float> images;
  cu::DeviceArray<int32_t> labels;
  cu::PinnedArray<float> host_images;
  cu::PinnedArray<int32_t> host_labels;
  cu::DeviceArray<int32_t> rows;  // from_rows: the samples' indices in the held set
  cu::PinnedArray<int32_t> host_rows;
  int eager_runs = 0;
  std::unique_ptr<cu::Device::Graph> graph;
  bool graph_failed = false;
};

// Device scalars read by the kernels (graph-friendly): loss scale, its inverse, lr.
enum Scalar { kLossScale = 0, kInverseScale = 1, kLearningRate = 2, kScalarCount = 4 };

class CudaModel final : public DeviceModel {
 public:
  CudaModel(const Model& model, const DeviceModelOptions& options,
            std::unique_ptr<cu::Device> device)
      : model_(model), options_(options), device_(std::move(device)) {}

  // Init's steps: the device view of each layer, the device state, the
  // fused optimizer, and the host model's values uploaded.
  Status Init();
  Status DescribeLayers();
  Status DescribeLayer(size_t index, size_t* next_buffer);
  Status AllocateState();
  Status CreateOptimizer();

  const std::string& description() const override { return device_->description(); }

  Status UploadMaster(std::span<const float> master) override {
    CHORUS_RETURN_IF_ERROR(Upload(master, master_.data(), master_.size()));
    return cu::RoundToHalf(*device_, master_.data(), working_half_.data(), working_float_.data(),
                           master_.size());
  }
  Status UploadMomentum(std::span<const float> momentum) override {
    return Upload(momentum, momentum_.data(), momentum_.size());
  }
  Status UploadBuffers(std::span<const float> buffers) override {
    return Upload(buffers, buffers_.data(), buffers_.size());
  }
  Status UploadGradients(std::span<const float> gradients) override {
    return Upload(gradients, grads32_.data(), grads32_.size());
  }
  Status DownloadMaster(std::span<float> master) override {
    return Download(master_.data(), master_.size(), master);
  }
  Status DownloadMomentum(std::span<float> momentum) override {
    return Download(momentum_.data(), momentum_.size(), momentum);
  }
  Status DownloadBuffers(std::span<float> buffers) override {
    return Download(buffers_.data(), buffers_.size(), buffers);
  }
  Status DownloadGradients(std::span<float> gradients) override {
    return Download(grads32_.data(), grads32_.size(), gradients);
  }

  Result<TrainPass> ForwardBackward(const float* images, const int32_t* labels, int n,
                                    double loss_scale, double gradient_weight) override;
  Status HoldTrainingSet(std::span<const float> images, std::span<const int32_t> labels, int count,
                         size_t image) override;
  Result<TrainPass> ForwardBackwardRows(const int32_t* rows, int n, double loss_scale,
                                        double gradient_weight) override;
  Result<bool> GradientsFinite() override;
  Status Step(double lr) override;
  Result<std::vector<double>> LastLocalLr() override { return optimizer_->LastLocalLr(*device_); }
  Result<Model::PassResult> Evaluate(const float* images, const int32_t* labels, int n) override;
  int64_t graph_replays() const override { return graph_replays_; }

 private:
  Status Upload(std::span<const float> host, float* device, size_t count);
  Status Download(const float* device, size_t count, std::span<float> host);
  Result<Pass*> GetPass(int n, bool training, bool from_rows = false);
  // Copies the batch into the pass's pinned staging and runs the pass.
  Status Run(Pass& pass, const float* images, const int32_t* labels);
  // Runs the pass whose inputs are staged (from its graph when there is one),
  // then waits for it.
  Status Run(Pass& pass);
  // The loss scale and the factor that unscales (and weights) the gradients.
  void SetTrainingScalars(double loss_scale, double gradient_weight);
  // What a training pass left in the pinned outputs.
  TrainPass TrainingResult(int n) const;
  // Enqueues the whole pass on the stream (eagerly or into a capture).
  Status Enqueue(Pass& pass);
  Status EnqueueForward(Pass& pass);
  Status EnqueueBackward(Pass& pass);

  const Model& model_;
  DeviceModelOptions options_;
  std::unique_ptr<cu::Device> device_;
  std::vector<DeviceLayer> layers_;
  size_t widest_ = 0;  // widest activation per sample, input included

  cu::DeviceArray<float> master_, momentum_, grads32_, working_float_, buffers_;
  cu::DeviceArray<Half> working_half_, grads16_;
  cu::DeviceArray<float> scalars_, loss_sum_;
  cu::DeviceArray<int32_t> correct_, nonfinite_;
  cu::PinnedArray<float> host_scalars_, host_loss_sum_;
  cu::PinnedArray<int32_t> host_correct_, host_nonfinite_;
  cu::PinnedArray<float> staging_;  // host <-> device copies of parameter-sized vectors
  std::unique_ptr<cu::FusedOptimizer> optimizer_;
  std::map<std::tuple<int, bool, bool>, std::unique_ptr<Pass>> passes_;
  // The held training set: FP16 images [held_count_, input] and labels.
  cu::DeviceArray<Half> held_images_;
  cu::DeviceArray<int32_t> held_labels_;
  int held_count_ = 0;
  int64_t graph_replays_ = 0;
};

template <typename T>
Status Make(cu::Device& device, size_t count, cu::DeviceArray<T>* out) {
  CHORUS_ASSIGN_OR_RETURN(*out, cu::DeviceArray<T>::Create(device, count));
  return Status::Ok();
}

template <typename T>
Status MakePinned(cu::Device& device, size_t count, cu::PinnedArray<T>* out) {
  CHORUS_ASSIGN_OR_RETURN(*out, cu::PinnedArray<T>::Create(device, count));
  return Status::Ok();
}

Status CudaModel::Init() {
  CHORUS_RETURN_IF_ERROR(DescribeLayers());
  CHORUS_RETURN_IF_ERROR(AllocateState());
  CHORUS_RETURN_IF_ERROR(CreateOptimizer());
  cu::Device& d = *device_;
  CHORUS_RETURN_IF_ERROR(UploadMaster(model_.master()));
  CHORUS_RETURN_IF_ERROR(d.Zero(momentum_.data(), momentum_.bytes()));
  // Nothing writes a cancelled bias gradient (Conv2d::bias_gradient_cancelled).
  CHORUS_RETURN_IF_ERROR(d.Zero(grads16_.data(), grads16_.bytes()));
  CHORUS_RETURN_IF_ERROR(UploadBuffers(model_.buffer_values()));
  return d.Synchronize("uploading the model");
}

Status CudaModel::DescribeLayers() {
  widest_ = model_.input_shape().Elements();
  size_t next_buffer = 0;
  for (size_t i = 0; i < model_.layers().size(); ++i) CHORUS_RETURN_IF_ERROR(DescribeLayer(i, &next_buffer));
  return Status::Ok();
}

// Layer `index`'s kind, its parameters' offsets in the master, and for
// BatchNorm its running statistics (the model's buffers, in order from
// *next_buffer) and per-channel scratch.
Status CudaModel::DescribeLayer(size_t index, size_t* next_buffer) {
  cu::Device& d = *device_;
  const std::span<const ParameterInfo> params = model_.parameters();
  const Layer* layer = model_.layers()[index].get();
  DeviceLayer dl;
  dl.layer = layer;
  dl.in_elems = layer->input_shape().Elements();
  dl.out_elems = layer->output_shape().Elements();
  widest_ = std::max(widest_, dl.out_elems);
  const size_t first = model_.first_parameter(index);
  const size_t count = model_.first_parameter(index + 1) - first;
  if (dynamic_cast<const Linear*>(layer) != nullptr) {
    dl.kind = Kind::kLinear;
  } else if (const auto* conv = dynamic_cast<const Conv2d*>(layer); conv != nullptr) {
    dl.kind = Kind::kConv;
    dl.bias_gradient_cancelled = conv->bias_gradient_cancelled();
  } else if (dynamic_cast<const BatchNorm2d*>(layer) != nullptr) {
    dl.kind = Kind::kBatchNorm;
  } else if (dynamic_cast<const Relu*>(layer) != nullptr) {
    dl.kind = Kind::kRelu;
  } else if (dynamic_cast<const MaxPool2d*>(layer) != nullptr) {
    dl.kind = Kind::kMaxPool;
  } else {
    return InvalidArgument("model '" + model_.name() + "': layer " + layer->Describe() +
                           " has no CUDA implementation");
  }
  const bool has_params = dl.kind == Kind::kLinear || dl.kind == Kind::kConv || dl.kind == Kind::kBatchNorm;
  if (count != (has_params ? 2u : 0u)) {
    return InvalidArgument("model '" + model_.name() + "': layer " + layer->Describe() + " has " +
                           std::to_string(count) + " parameters, the CUDA model expects weight and bias");
  }
  if (has_params) {
    dl.weight = params[first].offset;
    dl.weight_count = params[first].count;
    dl.bias = params[first + 1].offset;
    dl.bias_count = params[first + 1].count;
  }
  if (dl.kind == Kind::kBatchNorm) {
    const auto buffers = model_.buffers();
    if (*next_buffer + 2 > buffers.size()) {
      return InvalidArgument("model '" + model_.name() + "': BatchNorm without its buffers");
    }
    dl.running_mean = buffers[*next_buffer].offset;
    dl.running_var = buffers[*next_buffer + 1].offset;
    *next_buffer += 2;
    const size_t channels = static_cast<size_t>(layer->input_shape().c);
    CHORUS_RETURN_IF_ERROR(Make(d, channels, &dl.save_mean));
    CHORUS_RETURN_IF_ERROR(Make(d, channels, &dl.save_inv_std));
    CHORUS_RETURN_IF_ERROR(Make(d, channels, &dl.dgamma));
    CHORUS_RETURN_IF_ERROR(Make(d, channels, &dl.dbeta));
  }
  layers_.push_back(std::move(dl));
  return Status::Ok();
}

// The device copies of the training state, their pinned host staging, and the
// per-step scalars (set to 1 until the first step writes them).
Status CudaModel::AllocateState() {
  cu::Device& d = *device_;
  const size_t param_count = model_.parameter_count();
  const size_t buffer_count = model_.buffer_values().size();
  CHORUS_RETURN_IF_ERROR(Make(d, param_count, &master_));
  CHORUS_RETURN_IF_ERROR(Make(d, param_count, &momentum_));
  CHORUS_RETURN_IF_ERROR(Make(d, param_count, &grads32_));
  CHORUS_RETURN_IF_ERROR(Make(d, param_count, &working_float_));
  CHORUS_RETURN_IF_ERROR(Make(d, param_count, &working_half_));
  CHORUS_RETURN_IF_ERROR(Make(d, param_count, &grads16_));
  CHORUS_RETURN_IF_ERROR(Make(d, buffer_count, &buffers_));
  CHORUS_RETURN_IF_ERROR(Make(d, kScalarCount, &scalars_));
  CHORUS_RETURN_IF_ERROR(Make(d, 1, &loss_sum_));
  CHORUS_RETURN_IF_ERROR(Make(d, 1, &correct_));
  CHORUS_RETURN_IF_ERROR(Make(d, 1, &nonfinite_));
  CHORUS_RETURN_IF_ERROR(MakePinned(d, kScalarCount, &host_scalars_));
  CHORUS_RETURN_IF_ERROR(MakePinned(d, 1, &host_loss_sum_));
  CHORUS_RETURN_IF_ERROR(MakePinned(d, 1, &host_correct_));
  CHORUS_RETURN_IF_ERROR(MakePinned(d, 1, &host_nonfinite_));
  CHORUS_RETURN_IF_ERROR(MakePinned(d, std::max(param_count, buffer_count), &staging_));
  for (size_t i = 0; i < kScalarCount; ++i) host_scalars_[i] = 1.0f;
  return d.CopyToDevice(scalars_.data(), host_scalars_.data(), scalars_.bytes());
}

Status CudaModel::CreateOptimizer() {
  std::vector<cu::TensorRange> ranges;
  for (const ParameterInfo& p : model_.parameters()) {
    ranges.push_back(cu::TensorRange{p.offset, p.count, IsDecayedWeight(p.kind)});
  }
  cu::FusedOptimizerOptions opt;
  opt.lars = options_.optimizer.kind == OptimizerKind::kLars;
  opt.momentum = static_cast<float>(options_.optimizer.momentum);
  opt.weight_decay = static_cast<float>(options_.optimizer.weight_decay);
  opt.eta = static_cast<float>(options_.optimizer.eta);
  CHORUS_ASSIGN_OR_RETURN(optimizer_, cu::FusedOptimizer::Create(*device_, ranges, opt));
  return Status::Ok();
}

Status CudaModel::Upload(std::span<const float> host, float* device, size_t count) {
  if (host.size() != count) {
    return InvalidArgument("device upload of " + std::to_string(host.size()) + " floats into " +
                           std::to_string(count));
  }
  // Through pinned staging: the copy is a DMA, and the host vector may change
  // as soon as this returns (we wait for the copy).
  std::memcpy(staging_.data(), host.data(), host.size_bytes());
  CHORUS_RETURN_IF_ERROR(device_->CopyToDevice(device, staging_.data(), host.size_bytes()));
  return device_->Synchronize("upload");
}

Status CudaModel::Download(const float* device, size_t count, std::span<float> host) {
  // As Upload: a size mismatch would read past the device array and write past
  // the pinned staging buffer.
  if (host.size() != count) {
    return InvalidArgument("device download of " + std::to_string(count) + " floats into " +
                           std::to_string(host.size()));
  }
  CHORUS_RETURN_IF_ERROR(device_->CopyToHost(staging_.data(), device, host.size_bytes()));
  CHORUS_RETURN_IF_ERROR(device_->Synchronize("download"));
  std::memcpy(host.data(), staging_.data(), host.size_bytes());
  return Status::Ok();
}

Result<Pass*> CudaModel::GetPass(int n, bool training, bool from_rows) {
  const auto key = std::make_tuple(n, training, from_rows);
  auto it = passes_.find(key);
  if (it != passes_.end()) return it->second.get();
  // Batch sizes are few (the training batch, the evaluation batch and their
  // last partial batches); bound the cache anyway.
  if (passes_.size() >= 8) passes_.clear();
  cu::Device& d = *device_;
  auto pass = std::make_unique<Pass>();
  pass->n = n;
  pass->training = training;
  pass->from_rows = from_rows;
  const size_t batch = static_cast<size_t>(n);
  const size_t count = layers_.size();
  pass->conv.resize(count);
  pass->bn.resize(count);
  pass->argmax.resize(count);
  size_t workspace = 0;
  for (size_t i = 0; i < count; ++i) {
    const DeviceLayer& l = layers_[i];
    if (l.kind == Kind::kConv) {
      CHORUS_ASSIGN_OR_RETURN(pass->conv[i], cu::ConvPlan::Create(
                                                 d, static_cast<const Conv2d*>(l.layer)->ShapeFor(n)));
      workspace = std::max(workspace, pass->conv[i]->workspace_bytes());
    } else if (l.kind == Kind::kBatchNorm) {
      CHORUS_ASSIGN_OR_RETURN(
          pass->bn[i],
          cu::BatchNormPlan::Create(d, static_cast<const BatchNorm2d*>(l.layer)->ShapeFor(n)));
    } else if (l.kind == Kind::kMaxPool) {
      CHORUS_RETURN_IF_ERROR(Make(d, batch * l.out_elems, &pass->argmax[i]));
    }
  }
  CHORUS_RETURN_IF_ERROR(Make(d, workspace, &pass->workspace));
  // Activations: training keeps every one for backward; evaluation ping-pongs.
  if (training) {
    pass->act_storage.resize(count + 1);
    CHORUS_RETURN_IF_ERROR(Make(d, batch * model_.input_shape().Elements(), &pass->act_storage[0]));
    for (size_t i = 0; i < count; ++i) {
      CHORUS_RETURN_IF_ERROR(Make(d, batch * layers_[i].out_elems, &pass->act_storage[i + 1]));
    }
    for (auto& a : pass->act_storage) pass->act.push_back(a.data());
    CHORUS_RETURN_IF_ERROR(Make(d, batch * widest_, &pass->grad_a));
    CHORUS_RETURN_IF_ERROR(Make(d, batch * widest_, &pass->grad_b));
  } else {
    pass->act_storage.resize(2);
    CHORUS_RETURN_IF_ERROR(Make(d, batch * widest_, &pass->act_storage[0]));
    CHORUS_RETURN_IF_ERROR(Make(d, batch * widest_, &pass->act_storage[1]));
    for (size_t i = 0; i <= count; ++i) pass->act.push_back(pass->act_storage[i % 2].data());
  }
  const size_t image = model_.input_shape().Elements();
  CHORUS_RETURN_IF_ERROR(Make(d, batch, &pass->labels));
  if (from_rows) {
    CHORUS_RETURN_IF_ERROR(Make(d, batch, &pass->rows));
    CHORUS_RETURN_IF_ERROR(MakePinned(d, batch, &pass->host_rows));
  } else {
    CHORUS_RETURN_IF_ERROR(Make(d, batch * image, &pass->images));
    CHORUS_RETURN_IF_ERROR(MakePinned(d, batch * image, &pass->host_images));
    CHORUS_RETURN_IF_ERROR(MakePinned(d, batch, &pass->host_labels));
  }
  Pass* raw = pass.get();
  passes_.emplace(key, std::move(pass));
  return raw;
}

Status CudaModel::EnqueueForward(Pass& pass) {
  cu::Device& d = *device_;
  const int n = pass.n;
  const size_t batch = static_cast<size_t>(n);
  const Half* w = working_half_.data();
  for (size_t i = 0; i < layers_.size(); ++i) {
    DeviceLayer& l = layers_[i];
    const Half* x = pass.act[i];
    Half* y = pass.act[i + 1];
    switch (l.kind) {
      case Kind::kLinear:
        CHORUS_RETURN_IF_ERROR(cu::LinearForward(d, n, static_cast<int>(l.in_elems),
                                                 static_cast<int>(l.out_elems), x, w + l.weight,
                                                 w + l.bias, y));
        break;
      case Kind::kConv:
        CHORUS_RETURN_IF_ERROR(
            pass.conv[i]->Forward(d, x, w + l.weight, w + l.bias, y, pass.workspace.data()));
        break;
      case Kind::kBatchNorm: {
        // The FP32 expansion of the FP16 working copy, as the CPU model uses.
        const float* gamma = working_float_.data() + l.weight;
        const float* beta = working_float_.data() + l.bias;
        float* mean = buffers_.data() + l.running_mean;
        float* var = buffers_.data() + l.running_var;
        if (pass.training) {
          CHORUS_RETURN_IF_ERROR(pass.bn[i]->ForwardTrain(d, x, gamma, beta, y, l.save_mean.data(),
                                                          l.save_inv_std.data(), mean, var));
        } else {
          CHORUS_RETURN_IF_ERROR(pass.bn[i]->ForwardEval(d, x, gamma, beta, mean, var, y));
        }
        break;
      }
      case Kind::kRelu:
        CHORUS_RETURN_IF_ERROR(cu::ReluForward(d, batch * l.in_elems, x, y));
        break;
      case Kind::kMaxPool: {
        const SampleShape& in = l.layer->input_shape();
        const auto* pool = static_cast<const MaxPool2d*>(l.layer);
        CHORUS_RETURN_IF_ERROR(cu::MaxPoolForward(d, n, in.c, in.h, in.w, pool->size(), x, y,
                                                  pass.argmax[i].data()));
        // A fused ReLU runs after the pooling, in place (the two commute).
        if (pool->relu()) CHORUS_RETURN_IF_ERROR(cu::ReluForward(d, batch * l.out_elems, y, y));
        break;
      }
    }
  }
  return Status::Ok();
}

Status CudaModel::EnqueueBackward(Pass& pass) {
  cu::Device& d = *device_;
  const int n = pass.n;
  const size_t batch = static_cast<size_t>(n);
  const Half* w = working_half_.data();
  Half* g = grads16_.data();
  Half* dy = pass.grad_a.data();  // holds dlogits (SoftmaxCrossEntropy wrote it)
  Half* dx = pass.grad_b.data();
  for (size_t i = layers_.size(); i-- > 0;) {
    DeviceLayer& l = layers_[i];
    const Half* x = pass.act[i];
    const Half* y = pass.act[i + 1];
    Half* dx_or_null = i > 0 ? dx : nullptr;
    switch (l.kind) {
      case Kind::kLinear:
        CHORUS_RETURN_IF_ERROR(cu::LinearBackward(d, n, static_cast<int>(l.in_elems),
                                                  static_cast<int>(l.out_elems), x, w + l.weight,
                                                  dy, dx_or_null, g + l.weight, g + l.bias));
        break;
      case Kind::kConv:
        // A cancelled bias gradient is not reduced: it keeps the zeros Init wrote.
        CHORUS_RETURN_IF_ERROR(pass.conv[i]->Backward(d, x, w + l.weight, dy, dx_or_null, g + l.weight,
                                                      l.bias_gradient_cancelled ? nullptr : g + l.bias,
                                                      pass.workspace.data()));
        break;
      case Kind::kBatchNorm:
        if (dx_or_null == nullptr) {
          return InvalidArgument("model '" + model_.name() +
                                 "': a BatchNorm first layer is not supported on CUDA");
        }
        CHORUS_RETURN_IF_ERROR(pass.bn[i]->Backward(
            d, x, working_float_.data() + l.weight, l.save_mean.data(), l.save_inv_std.data(), dy,
            dx_or_null, l.dgamma.data(), l.dbeta.data()));
        // The scaled FP32 gradients rounded to FP16, as every parameter gradient.
        CHORUS_RETURN_IF_ERROR(cu::FloatToHalf(d, l.dgamma.data(), g + l.weight, l.weight_count));
        CHORUS_RETURN_IF_ERROR(cu::FloatToHalf(d, l.dbeta.data(), g + l.bias, l.bias_count));
        break;
      case Kind::kRelu:
        if (dx_or_null != nullptr) {
          CHORUS_RETURN_IF_ERROR(cu::ReluBackward(d, batch * l.in_elems, y, dy, dx_or_null));
        }
        break;
      case Kind::kMaxPool:
        if (dx_or_null != nullptr) {
          const SampleShape& in = l.layer->input_shape();
          const auto* pool = static_cast<const MaxPool2d*>(l.layer);
          if (pool->relu()) {
            // The fused ReLU's backward on the pooled output, in place on dy.
            CHORUS_RETURN_IF_ERROR(cu::ReluBackward(d, batch * l.out_elems, y, dy, dy));
          }
          CHORUS_RETURN_IF_ERROR(cu::MaxPoolBackward(d, n, in.c, in.h, in.w, pool->size(), dy,
                                                     pass.argmax[i].data(), dx_or_null));
        }
        break;
    }
    if (dx_or_null != nullptr) std::swap(dy, dx);
  }
  return cu::UnscaleGradients(d, grads16_.size(), grads16_.data(), scalars_.data() + kInverseScale,
                              grads32_.data(), nonfinite_.data());
}

Status CudaModel::Enqueue(Pass& pass) {
  cu::Device& d = *device_;
  const size_t batch = static_cast<size_t>(pass.n);
  const size_t image = model_.input_shape().Elements();
  // Inputs from pinned memory (a graph's copy nodes read them at replay time).
  CHORUS_RETURN_IF_ERROR(
      d.CopyToDevice(scalars_.data(), host_scalars_.data(), 2 * sizeof(float)));  // scale, 1/scale
  if (pass.from_rows) {
    CHORUS_RETURN_IF_ERROR(d.CopyToDevice(pass.rows.data(), pass.host_rows.data(), batch * sizeof(int32_t)));
    CHORUS_RETURN_IF_ERROR(cu::GatherRows(d, held_images_.data(), held_labels_.data(), image,
                                          pass.rows.data(), pass.n, pass.act[0], pass.labels.data()));
  } else {
    CHORUS_RETURN_IF_ERROR(d.CopyToDevice(pass.images.data(), pass.host_images.data(),
                                          batch * image * sizeof(float)));
    CHORUS_RETURN_IF_ERROR(
        d.CopyToDevice(pass.labels.data(), pass.host_labels.data(), batch * sizeof(int32_t)));
    CHORUS_RETURN_IF_ERROR(cu::FloatToHalf(d, pass.images.data(), pass.act[0], batch * image));
  }
  CHORUS_RETURN_IF_ERROR(EnqueueForward(pass));
  CHORUS_RETURN_IF_ERROR(cu::SoftmaxCrossEntropy(
      d, pass.n, model_.num_classes(), pass.act[layers_.size()], pass.labels.data(),
      scalars_.data() + kLossScale, pass.training ? pass.grad_a.data() : nullptr,
      loss_sum_.data(), correct_.data()));
  if (pass.training) {
    CHORUS_RETURN_IF_ERROR(d.Zero(nonfinite_.data(), sizeof(int32_t)));
    CHORUS_RETURN_IF_ERROR(EnqueueBackward(pass));
    CHORUS_RETURN_IF_ERROR(
        d.CopyToHost(host_nonfinite_.data(), nonfinite_.data(), sizeof(int32_t)));
  }
  CHORUS_RETURN_IF_ERROR(d.CopyToHost(host_loss_sum_.data(), loss_sum_.data(), sizeof(float)));
  return d.CopyToHost(host_correct_.data(), correct_.data(), sizeof(int32_t));
}

Status CudaModel::Run(Pass& pass, const float* images, const int32_t* labels) {
  const size_t batch = static_cast<size_t>(pass.n);
  std::memcpy(pass.host_images.data(), images,
              batch * model_.input_shape().Elements() * sizeof(float));
  std::memcpy(pass.host_labels.data(), labels, batch * sizeof(int32_t));
  return Run(pass);
}

Status CudaModel::Run(Pass& pass) {
  cu::Device& d = *device_;
  // The first run of a pass is eager (libraries initialise lazily, which a
  // capture forbids); the second is captured into a graph and replayed after.
  if (options_.cuda_graphs && pass.graph == nullptr && !pass.graph_failed &&
      pass.eager_runs >= 1) {
    const Status begun = d.BeginCapture();
    const Status enqueued = begun.ok() ? Enqueue(pass) : begun;
    auto graph = begun.ok() ? d.EndCapture() : Result<std::unique_ptr<cu::Device::Graph>>(Err(begun));
    if (enqueued.ok() && graph.has_value()) {
      pass.graph = std::move(*graph);
      CHORUS_LOG_DEBUG(Subsys::kTrainer, description(), ": ",
                       pass.training ? "training" : "evaluation", " pass of batch ", pass.n,
                       " captured as a CUDA graph of ", pass.graph->node_count(), " nodes");
    } else {
      pass.graph_failed = true;
      CHORUS_LOG_WARN(Subsys::kTrainer, description(), ": CUDA graph capture of batch ", pass.n,
                      " failed (", (enqueued.ok() ? graph.error() : enqueued).ToString(),
                      "); running that pass eagerly");
    }
  }
  if (pass.graph != nullptr) {
    CHORUS_RETURN_IF_ERROR(pass.graph->Launch());
    ++graph_replays_;
  } else {
    CHORUS_RETURN_IF_ERROR(Enqueue(pass));
    ++pass.eager_runs;
  }
  return d.Synchronize(pass.training ? "training pass" : "evaluation pass");
}

Result<DeviceModel::TrainPass> CudaModel::ForwardBackward(const float* images,
                                                          const int32_t* labels, int n,
                                                          double loss_scale, double gradient_weight) {
  CHORUS_ASSIGN_OR_RETURN(Pass * pass, GetPass(n, /*training=*/true));
  SetTrainingScalars(loss_scale, gradient_weight);
  CHORUS_RETURN_IF_ERROR(Run(*pass, images, labels));
  return TrainingResult(n);
}

void CudaModel::SetTrainingScalars(double loss_scale, double gradient_weight) {
  host_scalars_[kLossScale] = static_cast<float>(loss_scale);
  // The unscaling applies the sample weight too, as the CPU model's does
  // (Model::FinishParameterGradients): one pass, no host round trip.
  host_scalars_[kInverseScale] = static_cast<float>(gradient_weight / loss_scale);
}

DeviceModel::TrainPass CudaModel::TrainingResult(int n) const {
  TrainPass out;
  out.result.loss = static_cast<double>(host_loss_sum_[0]) / n;
  out.result.correct = host_correct_[0];
  out.gradients_finite = host_nonfinite_[0] == 0;
  return out;
}

Status CudaModel::HoldTrainingSet(std::span<const float> images, std::span<const int32_t> labels, int count,
                                  size_t image) {
  const size_t total = static_cast<size_t>(count) * image;
  if (count < 1 || image != model_.input_shape().Elements() || images.size() != total ||
      labels.size() != static_cast<size_t>(count)) {
    return InvalidArgument("HoldTrainingSet: " + std::to_string(images.size()) + " floats and " +
                           std::to_string(labels.size()) + " labels for " + std::to_string(count) +
                           " images of " + std::to_string(image) + " floats; the model takes " +
                           std::to_string(model_.input_shape().Elements()));
  }
  cu::Device& d = *device_;
  // Graphs captured before name the old set's memory.
  passes_.clear();
  held_count_ = 0;
  CHORUS_RETURN_IF_ERROR(Make(d, total, &held_images_));
  CHORUS_RETURN_IF_ERROR(Make(d, labels.size(), &held_labels_));
  // Upload's staging at a time, rounded to FP16 on the device as every pass
  // rounds its input (FloatToHalf): the held set gives the same bits. The
  // stream orders each cast before the next chunk's copy overwrites `floats`.
  const size_t chunk = std::min(staging_.size(), total);
  cu::DeviceArray<float> floats;
  CHORUS_RETURN_IF_ERROR(Make(d, chunk, &floats));
  for (size_t at = 0; at < total; at += chunk) {
    const size_t take = std::min(chunk, total - at);
    CHORUS_RETURN_IF_ERROR(Upload(images.subspan(at, take), floats.data(), take));
    CHORUS_RETURN_IF_ERROR(cu::FloatToHalf(d, floats.data(), held_images_.data() + at, take));
  }
  cu::PinnedArray<int32_t> pinned_labels;
  CHORUS_RETURN_IF_ERROR(MakePinned(d, labels.size(), &pinned_labels));
  std::memcpy(pinned_labels.data(), labels.data(), labels.size_bytes());
  CHORUS_RETURN_IF_ERROR(d.CopyToDevice(held_labels_.data(), pinned_labels.data(), labels.size_bytes()));
  CHORUS_RETURN_IF_ERROR(d.Synchronize("training set upload"));
  held_count_ = count;
  return Status::Ok();
}

Result<DeviceModel::TrainPass> CudaModel::ForwardBackwardRows(const int32_t* rows, int n, double loss_scale,
                                                               double gradient_weight) {
  if (held_count_ == 0) return Err(FailedPrecondition("ForwardBackwardRows: no training set is held on the device"));
  for (int k = 0; k < n; ++k) {
    if (rows[k] < 0 || rows[k] >= held_count_) {
      return Err(OutOfRange("ForwardBackwardRows: row " + std::to_string(rows[k]) + " (position " +
                            std::to_string(k) + ") is outside the held set's 0.." +
                            std::to_string(held_count_ - 1)));
    }
  }
  CHORUS_ASSIGN_OR_RETURN(Pass * pass, GetPass(n, /*training=*/true, /*from_rows=*/true));
  std::memcpy(pass->host_rows.data(), rows, static_cast<size_t>(n) * sizeof(int32_t));
  SetTrainingScalars(loss_scale, gradient_weight);
  CHORUS_RETURN_IF_ERROR(Run(*pass));
  return TrainingResult(n);
}

Result<bool> CudaModel::GradientsFinite() {
  cu::Device& d = *device_;
  CHORUS_RETURN_IF_ERROR(d.Zero(nonfinite_.data(), sizeof(int32_t)));
  CHORUS_RETURN_IF_ERROR(
      cu::CheckFinite(d, grads32_.size(), grads32_.data(), nonfinite_.data()));
  CHORUS_RETURN_IF_ERROR(d.CopyToHost(host_nonfinite_.data(), nonfinite_.data(), sizeof(int32_t)));
  CHORUS_RETURN_IF_ERROR(d.Synchronize("finite check"));
  return host_nonfinite_[0] == 0;
}

Status CudaModel::Step(double lr) {
  cu::Device& d = *device_;
  // Not waited for: the next pass synchronises (and surfaces any error), and
  // nothing writes host_scalars_[kLearningRate] before then.
  host_scalars_[kLearningRate] = static_cast<float>(lr);
  CHORUS_RETURN_IF_ERROR(d.CopyToDevice(scalars_.data() + kLearningRate,
                                        host_scalars_.data() + kLearningRate, sizeof(float)));
  return optimizer_->Step(d, scalars_.data() + kLearningRate, master_.data(), grads32_.data(),
                          momentum_.data(), working_half_.data(), working_float_.data());
}

Result<Model::PassResult> CudaModel::Evaluate(const float* images, const int32_t* labels, int n) {
  CHORUS_ASSIGN_OR_RETURN(Pass * pass, GetPass(n, /*training=*/false));
  host_scalars_[kLossScale] = 1.0f;
  host_scalars_[kInverseScale] = 1.0f;
  CHORUS_RETURN_IF_ERROR(Run(*pass, images, labels));
  Model::PassResult result;
  result.loss = static_cast<double>(host_loss_sum_[0]) / n;
  result.correct = host_correct_[0];
  return result;
}

}  // namespace

Result<std::unique_ptr<DeviceModel>> CreateCudaModel(const Model& model,
                                                     const DeviceModelOptions& options) {
  if (model.precision() != Precision::kFp16) {
    return Err(InvalidArgument("device cuda:" + std::to_string(options.ordinal) +
                               " trains in fp16 (FP16 storage, FP32 master weights); precision "
                               "\"fp32\" is for CPU nodes"));
  }
  CHORUS_ASSIGN_OR_RETURN(auto device, cu::Device::Open(options.ordinal));
  auto replica = std::make_unique<CudaModel>(model, options, std::move(device));
  Status init = replica->Init();
  if (!init.ok()) return Err(init.WithContext("building model " + model.name() + " on the GPU"));
  return std::unique_ptr<DeviceModel>(std::move(replica));
}

}  // namespace chorus::trainer
