// LARS and SGD-with-momentum updates of the FP32 master (see optimizer.h).
// Must not look at the FP16 working copy or decide whether a step is skipped.
#include "trainer/optimizer.h"

#include <algorithm>
#include <cmath>

namespace chorus::trainer {
namespace {

// ||w||^2 and ||g||^2 in one pass, accumulated in double. Eight independent
// partial sums per norm (combined in a fixed order) let the compiler vectorise
// without reassociating: the result is the same on every run and thread count.
void SquaredNorms(const float* w, const float* g, size_t count, double* w_sq, double* g_sq) {
  constexpr size_t kLanes = 8;
  double aw[kLanes] = {}, ag[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) {
      const double a = w[i + j], b = g[i + j];
      aw[j] += a * a;
      ag[j] += b * b;
    }
  }
  double sw = 0.0, sg = 0.0;
  for (size_t j = 0; j < kLanes; ++j) {
    sw += aw[j];
    sg += ag[j];
  }
  for (; i < count; ++i) {
    sw += static_cast<double>(w[i]) * w[i];
    sg += static_cast<double>(g[i]) * g[i];
  }
  *w_sq = sw;
  *g_sq = sg;
}

// v = momentum * v + coeff * (g + wd * w);  w -= v
void MomentumUpdateLars(size_t count, float momentum, float coeff, float wd, const float* g,
                        float* v, float* w) {
  for (size_t i = 0; i < count; ++i) {
    v[i] = momentum * v[i] + coeff * (g[i] + wd * w[i]);
    w[i] -= v[i];
  }
}

// v = momentum * v + (g + wd * w);  w -= lr * v
void MomentumUpdateSgd(size_t count, float momentum, float lr, float wd, const float* g, float* v,
                       float* w) {
  for (size_t i = 0; i < count; ++i) {
    v[i] = momentum * v[i] + (g[i] + wd * w[i]);
    w[i] -= lr * v[i];
  }
}

}  // namespace

Result<OptimizerKind> ParseOptimizerKind(std::string_view name) {
  if (name == "lars") return OptimizerKind::kLars;
  if (name == "sgd") return OptimizerKind::kSgd;
  return Err(InvalidArgument("unknown optimizer '" + std::string(name) +
                             "' (expected lars or sgd)"));
}

std::string_view OptimizerKindName(OptimizerKind kind) {
  return kind == OptimizerKind::kLars ? "lars" : "sgd";
}

Status ValidateOptimizerOptions(const OptimizerOptions& o) {
  if (!(o.momentum >= 0.0 && o.momentum < 1.0)) {
    return InvalidArgument("optimizer momentum must be in [0, 1), got " +
                           std::to_string(o.momentum));
  }
  if (!(o.weight_decay >= 0.0) || !std::isfinite(o.weight_decay)) {
    return InvalidArgument("optimizer weight_decay must be >= 0, got " +
                           std::to_string(o.weight_decay));
  }
  if (o.kind == OptimizerKind::kLars && (!(o.eta > 0.0) || !std::isfinite(o.eta))) {
    return InvalidArgument("LARS eta must be > 0, got " + std::to_string(o.eta));
  }
  return Status::Ok();
}

Result<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerOptions& options,
                                                     std::vector<ParameterInfo> table) {
  CHORUS_RETURN_IF_ERROR(ValidateOptimizerOptions(options));
  size_t total = 0;
  for (const ParameterInfo& p : table) {
    if (p.offset != total) {
      return Err(InvalidArgument("optimizer: parameter '" + p.name + "' at offset " +
                                 std::to_string(p.offset) + ", expected " +
                                 std::to_string(total) + " (table must be packed)"));
    }
    total += p.count;
  }
  return std::unique_ptr<Optimizer>(new Optimizer(options, std::move(table), total));
}

Optimizer::Optimizer(const OptimizerOptions& options, std::vector<ParameterInfo> table,
                     size_t total)
    : options_(options),
      table_(std::move(table)),
      momentum_(total, 0.0f),
      last_local_lr_(table_.size(), 1.0) {}

void Optimizer::Step(std::span<float> master, std::span<const float> gradients, double lr,
                     const UpdatedFn& on_updated) {
  const float momentum = static_cast<float>(options_.momentum);
  const double wd = options_.weight_decay;
  for (size_t i = 0; i < table_.size(); ++i) {
    const ParameterInfo& p = table_[i];
    float* w = master.data() + p.offset;
    const float* g = gradients.data() + p.offset;
    float* v = momentum_.data() + p.offset;
    const bool decayed = IsDecayedWeight(p.kind);
    const float tensor_wd = decayed ? static_cast<float>(wd) : 0.0f;
    double local_lr = 1.0;
    if (options_.kind == OptimizerKind::kLars && decayed) {
      double w_sq = 0.0, g_sq = 0.0;
      SquaredNorms(w, g, p.count, &w_sq, &g_sq);
      const double w_norm = std::sqrt(w_sq);
      const double g_norm = std::sqrt(g_sq);
      if (w_norm > 0.0 && g_norm > 0.0) local_lr = options_.eta * w_norm / (g_norm + wd * w_norm);
    }
    last_local_lr_[i] = local_lr;
    for (size_t begin = 0; begin < p.count; begin += kUpdateChunk) {
      const size_t count = std::min(kUpdateChunk, p.count - begin);
      if (options_.kind == OptimizerKind::kSgd) {
        MomentumUpdateSgd(count, momentum, static_cast<float>(lr), tensor_wd, g + begin,
                          v + begin, w + begin);
      } else {
        MomentumUpdateLars(count, momentum, static_cast<float>(lr * local_lr), tensor_wd,
                           g + begin, v + begin, w + begin);
      }
      if (on_updated) on_updated(p.offset + begin, count);
    }
  }
}

}  // namespace chorus::trainer
