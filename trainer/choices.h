// The trainer's settings that a config file names: model, precision,
// optimizer and device. Each enum's spellings are listed once, here; the
// config parser, `chorus config check`, help texts and checkpoints read them.
#pragma once

#include <string>
#include <string_view>

#include "common/enum_names.h"
#include "common/status.h"

namespace chorus::trainer {

// The built-in models (model.h describes their layers).
enum class ModelKind { kMlp, kCnn, kCnnBn };
inline constexpr EnumName<ModelKind> kModelNames[] = {
    {ModelKind::kMlp, "mlp"}, {ModelKind::kCnn, "cnn"}, {ModelKind::kCnnBn, "cnn-bn"}};

// kFp16: FP16 working copy and activations, FP32 master and accumulation,
// dynamic loss scaling. kFp32: the master is used directly.
enum class Precision { kFp16, kFp32 };
inline constexpr EnumName<Precision> kPrecisionNames[] = {{Precision::kFp16, "fp16"},
                                                         {Precision::kFp32, "fp32"}};

enum class OptimizerKind { kLars, kSgd };
inline constexpr EnumName<OptimizerKind> kOptimizerNames[] = {{OptimizerKind::kLars, "lars"},
                                                             {OptimizerKind::kSgd, "sgd"}};

inline std::string_view ModelName(ModelKind kind) { return NameOf(kModelNames, kind); }
inline std::string_view PrecisionName(Precision precision) { return NameOf(kPrecisionNames, precision); }
inline std::string_view OptimizerKindName(OptimizerKind kind) { return NameOf(kOptimizerNames, kind); }

// Where a replica trains: the CPU, or CUDA device `cuda_ordinal`. Written
// "cpu", "cuda" (device 0) or "cuda:N".
struct Device {
  int cuda_ordinal = -1;  // -1: the CPU

  bool on_gpu() const { return cuda_ordinal >= 0; }
  // "cpu" or "cuda:N".
  std::string Name() const { return on_gpu() ? "cuda:" + std::to_string(cuda_ordinal) : "cpu"; }
  bool operator==(const Device&) const = default;

  static Device Cpu() { return Device{}; }
  static Device Cuda(int ordinal) { return Device{ordinal}; }
};

// "cpu", "cuda" or "cuda:N" (N >= 0); anything else is InvalidArgument naming
// the value and the accepted forms.
[[nodiscard]] Result<Device> ParseDevice(std::string_view name);

}  // namespace chorus::trainer
