// LARS and SGD-with-momentum updates of the FP32 master (see optimizer.h).
// Must not look at the FP16 working copy or decide whether a step is skipped.
#include "trainer/optimizer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "kernels/ops.h"
#include "kernels/vector_clones.h"

namespace chorus::trainer {
namespace {

// For kernels::SumSquares over one chunk: kUpdateChunk is below the kernels'
// parallel threshold, so each chunk's norm runs on the calling thread in a
// fixed order (the same bits for any thread count).
constexpr kernels::Context kNormContext{};

// Below this many parameters the optimizer runs on one thread.
constexpr size_t kParallelElems = size_t{1} << 15;

int ThreadsFor(size_t parameters) { return kernels::ThreadsFor(parameters, kParallelElems); }

// v = momentum * v + coeff * (g + wd * w);  w -= v
CHORUS_VECTOR_CLONES void MomentumUpdateLars(size_t count, float momentum, float coeff, float wd,
                                             const float* __restrict g, float* __restrict v,
                                             float* __restrict w) {
  for (size_t i = 0; i < count; ++i) {
    v[i] = momentum * v[i] + coeff * (g[i] + wd * w[i]);
    w[i] -= v[i];
  }
}

// v = momentum * v + (g + wd * w);  w -= lr * v
CHORUS_VECTOR_CLONES void MomentumUpdateSgd(size_t count, float momentum, float lr, float wd,
                                            const float* __restrict g, float* __restrict v,
                                            float* __restrict w) {
  for (size_t i = 0; i < count; ++i) {
    v[i] = momentum * v[i] + (g[i] + wd * w[i]);
    w[i] -= lr * v[i];
  }
}

}  // namespace

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
      last_local_lr_(table_.size(), 1.0),
      coeff_(table_.size(), 0.0f),
      decay_(table_.size(), 0.0f) {
  for (size_t i = 0; i < table_.size(); ++i) {
    for (size_t begin = 0; begin < table_[i].count; begin += kUpdateChunk) {
      chunks_.push_back(
          {i, table_[i].offset + begin, std::min(kUpdateChunk, table_[i].count - begin)});
    }
  }
  chunk_w_sq_.assign(chunks_.size(), 0.0);
  chunk_g_sq_.assign(chunks_.size(), 0.0);
  chunk_g_dot_.assign(chunks_.size(), 0.0);
  last_norm_ratio_.assign(table_.size(), 1.0);
}

namespace {

// Sum of a[i] * b[i] in double (the global-batch norm estimate's product of
// successive gradients).
double Dot(size_t n, const float* a, const float* b) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

}  // namespace

// Parallel over the chunks of every tensor, on the kernels' OpenMP threads.
// Norms are summed per tensor in chunk order (Step), so no result depends on
// the thread count. Small models stay on one thread (a parallel region costs
// microseconds).
bool Optimizer::Prepare(std::span<const float> master, std::span<const float> gradients) {
  const bool lars = options_.kind == OptimizerKind::kLars;
  const bool estimate = lars && options_.norm_batch_ratio < 1.0 && !options_.peer_products;
  const int chunks = static_cast<int>(chunks_.size());
  const int threads = ThreadsFor(master.size());
  const float* w = master.data();
  const float* g = gradients.data();
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int c = 0; c < chunks; ++c) {
    const Chunk& chunk = chunks_[c];
    chunk_g_sq_[c] = kernels::SumSquares(kNormContext, chunk.count, g + chunk.offset);
    if (lars && IsDecayedWeight(table_[chunk.param].kind)) {
      chunk_w_sq_[c] = kernels::SumSquares(kNormContext, chunk.count, w + chunk.offset);
      if (estimate && have_previous_) {
        chunk_g_dot_[c] = Dot(chunk.count, g + chunk.offset, previous_gradient_.data() + chunk.offset);
      }
    }
  }
  prepared_ = true;
  double total = 0.0;
  for (double g_sq : chunk_g_sq_) total += g_sq;
  return std::isfinite(total);
}

// The momentum update of each chunk, in parallel, each followed by on_updated.
void Optimizer::Step(std::span<float> master, std::span<const float> gradients, double lr,
                     const UpdatedFn& on_updated) {
  if (!prepared_) Prepare(master, gradients);
  prepared_ = false;
  const float momentum = static_cast<float>(options_.momentum);
  const double wd = options_.weight_decay;
  const bool lars = options_.kind == OptimizerKind::kLars;
  const int chunks = static_cast<int>(chunks_.size());
  const int threads = ThreadsFor(master.size());
  float* w = master.data();
  const float* g = gradients.data();
  float* v = momentum_.data();

  const bool estimate = lars && options_.norm_batch_ratio < 1.0;
  const bool successive = estimate && !options_.peer_products;  // products of successive gradients
  if (estimate && ema_dot_.size() != table_.size()) {
    ema_dot_.assign(table_.size(), 0.0);
    ema_sq_.assign(table_.size(), 0.0);
    if (successive) previous_gradient_.assign(gradients.size(), 0.0f);
  }
  const std::vector<double> peer = std::exchange(peer_products_, {});
  const std::vector<double> mean_sq = std::exchange(mean_squares_, {});
  constexpr double kEma = 0.9;
  const bool with_history = successive ? have_previous_ : estimate && peer.size() == table_.size();
  if (with_history) ++ema_steps_;
  const double debias = with_history ? 1.0 - std::pow(kEma, static_cast<double>(ema_steps_)) : 1.0;
  const std::span<const float> mean = lars && mean_gradient_ ? mean_gradient_(gradients) : std::span<const float>();
  for (size_t i = 0, c = 0; i < table_.size(); ++i) {
    const bool decayed = IsDecayedWeight(table_[i].kind);
    double w_sq = 0.0, g_sq = 0.0, g_dot = 0.0;
    for (; c < chunks_.size() && chunks_[c].param == i; ++c) {
      w_sq += chunk_w_sq_[c];
      g_sq += chunk_g_sq_[c];
      g_dot += chunk_g_dot_[c];
    }
    if (!successive && with_history) g_dot = peer[i];
    double local_lr = 1.0;
    if (lars && decayed) {
      const double w_norm = std::sqrt(w_sq);
      double g_norm = std::sqrt(g_sq);
      last_norm_ratio_[i] = 1.0;
      if (with_history && std::isfinite(g_dot) && std::isfinite(g_sq)) {
        ema_dot_[i] = kEma * ema_dot_[i] + (1.0 - kEma) * g_dot;
        ema_sq_[i] = kEma * ema_sq_[i] + (1.0 - kEma) * g_sq;
        const double sq = ema_sq_[i] / debias;
        const double dot = std::clamp(ema_dot_[i] / debias, 0.0, sq);
        const double global_sq = dot + (sq - dot) * options_.norm_batch_ratio;
        if (sq > 0.0 && global_sq > 0.0) {
          last_norm_ratio_[i] = std::sqrt(global_sq / sq);
          g_norm *= last_norm_ratio_[i];
        }
      }
      if (mean_sq.size() == table_.size() && std::isfinite(mean_sq[i]) && std::isfinite(g_sq)) {
        g_norm = std::sqrt(std::max(mean_sq[i], mean_squares_floor_ * g_sq));
      }
      if (mean.size() == gradients.size()) {
        g_norm = std::sqrt(kernels::SumSquares(kNormContext, table_[i].count, mean.data() + table_[i].offset));
      }
      if (w_norm > 0.0 && g_norm > 0.0) local_lr = options_.eta * w_norm / (g_norm + wd * w_norm);
    }
    last_local_lr_[i] = local_lr;
    decay_[i] = decayed ? static_cast<float>(wd) : 0.0f;
    coeff_[i] = static_cast<float>(lars ? lr * local_lr : lr);
  }

#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int c = 0; c < chunks; ++c) {
    const Chunk& chunk = chunks_[c];
    const size_t o = chunk.offset;
    if (successive) std::copy(g + o, g + o + chunk.count, previous_gradient_.data() + o);
    if (lars) {
      MomentumUpdateLars(chunk.count, momentum, coeff_[chunk.param], decay_[chunk.param], g + o,
                         v + o, w + o);
    } else {
      MomentumUpdateSgd(chunk.count, momentum, coeff_[chunk.param], decay_[chunk.param], g + o,
                        v + o, w + o);
    }
    if (on_updated) on_updated(o, chunk.count);
  }
  have_previous_ = successive;
}

}  // namespace chorus::trainer
