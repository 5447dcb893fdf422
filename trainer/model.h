// A feed-forward classifier: a chain of layers, its parameters packed into one
// contiguous FP32 master buffer (and an FP32 gradient buffer of the same
// layout), and the mixed-precision forward/backward pass.
//
// Built-in models by name, each equal to this PyTorch module (state_dict names
// match, so an exported model loads with load_state_dict):
//   "mlp":    fc1 = Linear(784, 256), fc2 = Linear(256, 128), fc3 = Linear(128, 10);
//             x.flatten(1) -> relu(fc1) -> relu(fc2) -> fc3
//   "cnn":    conv1 = Conv2d(1, 32, 5, padding=2), conv2 = Conv2d(32, 64, 5, padding=2),
//             fc1 = Linear(3136, 256), fc2 = Linear(256, 10);
//             max_pool2d(relu(conv1(x)), 2) -> max_pool2d(relu(conv2(.)), 2)
//             -> flatten(1) -> relu(fc1) -> fc2
//   "cnn-bn": as "cnn" with bn1 = BatchNorm2d(32), bn2 = BatchNorm2d(64) between
//             each conv and its ReLU (the convs keep their biases).
//
// Precision kFp16 (FP16 storage, FP32 accumulation, as tensor cores do):
//   - an FP16 working copy of the master is made with FloatToHalf after every
//     update (RefreshWorkingCopy); layers compute with its exact FP32 expansion
//     (HalfToFloat), and working_half() hands out the FP16 bits;
//   - activations are stored between layers as FP16 (only those backward needs);
//     each layer runs the FP32 op on FP16 values and its outputs are rounded to
//     FP16 (ReLU and max-pool only copy values, so theirs already are);
//   - the loss gradient is multiplied by the loss scale; activation and parameter
//     gradients are rounded to FP16 (so an overflow really is Inf), then parameter
//     gradients are unscaled into the FP32 gradient buffer.
// Precision kFp32: none of that; the master is used directly.
//
// Gradients are final layer by layer, last layer first; `on_ready(i)` is called
// for each parameter i as soon as its unscaled FP32 gradient is in the buffer, in
// strictly decreasing index order. The Model never checks for Inf/NaN, never
// updates weights and never knows who listens to the callback.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/page_bytes.h"
#include "common/status.h"
#include "kernels/ops.h"
#include "trainer/choices.h"
#include "trainer/layer.h"
#include "trainer/parameter.h"

namespace chorus::trainer {

class Model {
 public:
  using GradientReadyFn = std::function<void(int param_index)>;

  struct PassResult {
    double loss = 0.0;  // mean cross-entropy over the batch (unscaled)
    int correct = 0;    // rows whose argmax equals the label
  };

  // A built-in model, initialised from `seed` like PyTorch's defaults.
  [[nodiscard]] static Result<std::unique_ptr<Model>> Create(ModelKind kind, Precision precision,
                                                             uint64_t seed, const kernels::Context& ctx);

  // Any chain of layers (tests build tiny ones). Checks that each layer's input
  // size equals the previous output size; the last layer's output size is the
  // number of classes.
  [[nodiscard]] static Result<std::unique_ptr<Model>> Build(
      std::string name, SampleShape input, std::vector<std::unique_ptr<Layer>> layers,
      Precision precision, uint64_t seed, const kernels::Context& ctx);

  const std::string& name() const { return name_; }
  Precision precision() const { return precision_; }
  const SampleShape& input_shape() const { return input_; }
  int num_classes() const { return num_classes_; }

  std::span<const ParameterInfo> parameters() const { return params_; }
  std::span<const BufferInfo> buffers() const { return buffers_; }
  size_t parameter_count() const { return master_.size(); }

  // The FP32 master weights and gradients, laid out as parameters().
  std::span<float> master() { return master_; }
  std::span<const float> master() const { return master_; }
  std::span<float> gradients() { return grads_; }
  std::span<const float> gradients() const { return grads_; }
  // Moves the gradients to fresh zeroed storage and keeps the old for good,
  // never freed: for when a transport may still write into it (a receive the
  // provider kept after its cancel, Transport::UnreleasedBuffers). Spans of
  // gradients() taken before point into the old storage.
  void ReplaceGradientStorage();
  // BatchNorm running statistics, laid out as buffers().
  std::span<float> buffer_values() { return buffer_values_; }
  std::span<const float> buffer_values() const { return buffer_values_; }
  // The FP16 working copy as FP16 bits (empty in kFp32). The layers compute
  // with its exact FP32 expansion; the bits are materialised on request.
  std::span<const uint16_t> working_half() const;

  // Training forward passes so far (PyTorch's BatchNorm num_batches_tracked).
  int64_t num_batches_tracked() const { return num_batches_tracked_; }
  void set_num_batches_tracked(int64_t n) { num_batches_tracked_ = n; }
  bool has_batch_norm() const;

  // Re-derives the FP16 working copy from the master (after an update or after
  // someone else changed the master). No-op in kFp32.
  void RefreshWorkingCopy();
  // The same for master floats [offset, offset + count) only.
  void RefreshWorkingCopy(size_t offset, size_t count);

  // Training-mode forward and backward of `n` images [n, input_shape] with
  // labels [n]. Writes every parameter's unscaled gradient into gradients()
  // (Inf/NaN on FP16 overflow), times `gradient_weight`. loss_scale
  // multiplies the loss gradient.
  PassResult ForwardBackward(const float* images, const int32_t* labels, int n,
                             double loss_scale, const GradientReadyFn& on_ready,
                             double gradient_weight = 1.0);

  // Evaluation-mode forward (BatchNorm uses running statistics).
  PassResult Evaluate(const float* images, const int32_t* labels, int n);

  // Evaluation-mode logits [n, num_classes]; valid until the next pass.
  std::span<const float> Logits(const float* images, int n);

  // One line per layer, for the log.
  std::string Summary() const;

  // kFp16 training keeps the activations backward reads as FP16 bits, which
  // halves their memory but costs a conversion each way. When all of them
  // together take at most this many bytes as FP32 (the mlp), they are kept as
  // FP32 holding the same FP16-rounded values instead: the same numbers, so the
  // same results bit for bit, without the conversions. Decided when a larger
  // batch first arrives.
  static constexpr size_t kDefaultFloatActivationBudget = size_t{8} << 20;
  void set_float_activation_budget(size_t bytes) { float_activation_budget_ = bytes; }

  // The layer chain and, for layer i, the index of its first parameter in
  // parameters() (its parameters are [first_parameter(i), first_parameter(i + 1))).
  // The GPU model (trainer/cuda/cuda_model.cc) mirrors the chain from these.
  std::span<const std::unique_ptr<Layer>> layers() const { return layers_; }
  size_t first_parameter(size_t layer) const { return layer_first_param_[layer]; }

 private:
  Model(std::string name, SampleShape input, std::vector<std::unique_ptr<Layer>> layers,
        Precision precision, const kernels::Context& ctx);
  Status Initialise(uint64_t seed);
  // Binds each layer to its slices of the weights, gradients and buffers.
  void BindLayers();
  // Sizes the buffers a pass of `n` images needs (training adds the stored
  // activations and the gradient ping-pong).
  void EnsureCapacity(int n, bool training);
  // Runs the forward pass; returns the logits (FP32; FP16-rounded in kFp16).
  const float* Forward(const float* images, int n, bool training);
  void FinishParameterGradients(size_t layer, double loss_scale, double gradient_weight,
                                const GradientReadyFn& on_ready);

  std::string name_;
  SampleShape input_;
  std::vector<std::unique_ptr<Layer>> layers_;
  Precision precision_;
  kernels::Context ctx_;
  int num_classes_ = 0;

  std::vector<ParameterInfo> params_;
  std::vector<BufferInfo> buffers_;
  // [layers + 1]: the parameters of layer i are [first[i], first[i + 1]),
  // and its buffers likewise.
  std::vector<size_t> layer_first_param_;
  std::vector<size_t> layer_first_buffer_;
  // On pages: the exchanges send and receive parameters and gradients in
  // place (common/page_bytes.h).
  std::vector<float, PageAllocator<float>> master_, grads_;
  std::vector<float> buffer_values_;
  std::vector<float> working_float_;       // kFp16: the FP16 working copy expanded to FP32
  mutable std::vector<uint16_t> working_half_;  // kFp16: its FP16 bits, made on request
  // Atomic: the optimizer refreshes ranges of the working copy from several threads.
  mutable std::atomic<bool> working_half_stale_{true};
  int64_t num_batches_tracked_ = 0;

  // Activations: act i is the input of layer i (act 0: the images), act L the logits.
  // store_act_[i]: backward reads act i (kept in kFp16 as FP16, in kFp32 always kept).
  std::vector<bool> store_act_;
  // kFp32 training, and kFp16 with float_acts_: acts 1..L, and in kFp16 act 0
  // (the rounded images).
  std::vector<std::vector<float>> act_f_;
  std::vector<std::vector<uint16_t>> act_h_;   // kFp16 training without float_acts_: stored acts
  const float* input_images_ = nullptr;        // act 0 in act_f_ mode, valid during one pass
  size_t float_activation_budget_ = kDefaultFloatActivationBudget;
  bool float_acts_ = false;                    // kFp16: activations kept in act_f_
  std::vector<float> fwd_a_, fwd_b_;           // forward ping-pong (kFp16: also backward x, y)
  std::vector<float> grad_a_, grad_b_;         // activation-gradient ping-pong
  std::vector<float> workspace_;
  int pass_capacity_ = 0;                      // batch size fwd_a_, fwd_b_, workspace_ hold
  int train_capacity_ = 0;                     // batch size act_*, grad_* hold
};

}  // namespace chorus::trainer
