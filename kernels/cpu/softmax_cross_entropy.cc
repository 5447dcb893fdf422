// CPU mean softmax cross-entropy over logits [N, classes] with int labels [N].
//
// Per row i with label y_i: lse_i = max_i + log(sum_j exp(l_ij - max_i)) (the
// max shift keeps exp from overflowing); loss_i = lse_i - l_{i,y_i};
// dlogits_ij = scale * (exp(l_ij - lse_i) - [j == y_i]) / N. Sums are in
// double. A row counts as correct when its first maximal logit is the label.
// Labels must lie in [0, classes). Rows run in parallel; nothing here allocates.
#include <cmath>

#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"

namespace chorus::kernels {
namespace {

// Below this many logits an OpenMP region costs more than it saves.
constexpr size_t kParallelElems = size_t{1} << 14;

}  // namespace

template <typename T>
double SoftmaxCrossEntropy(const Context& ctx, int n, int classes, const T* logits,
                           const int32_t* labels, T scale, T* dlogits, int* correct) {
  if (n <= 0 || classes <= 0) {
    if (correct != nullptr) *correct = 0;
    return 0.0;
  }
  double total_loss = 0.0;
  int total_correct = 0;
  const double grad_scale = static_cast<double>(scale) / n;
  const bool parallel = static_cast<size_t>(n) * classes >= cpu::ParallelMin(kParallelElems);
#pragma omp parallel for num_threads(cpu::KernelThreads()) schedule(static) \
    reduction(+ : total_loss, total_correct) if (parallel)
  for (int i = 0; i < n; ++i) {
    const T* row = logits + static_cast<size_t>(i) * classes;
    const int label = labels[i];
    int arg = 0;
    for (int j = 1; j < classes; ++j) {
      if (row[j] > row[arg]) arg = j;
    }
    const double max = static_cast<double>(row[arg]);
    double sum = 0.0;
    for (int j = 0; j < classes; ++j) sum += std::exp(static_cast<double>(row[j]) - max);
    const double lse = max + std::log(sum);
    total_loss += lse - static_cast<double>(row[label]);
    total_correct += arg == label ? 1 : 0;
    if (dlogits != nullptr) {
      T* drow = dlogits + static_cast<size_t>(i) * classes;
      for (int j = 0; j < classes; ++j) {
        const double p = std::exp(static_cast<double>(row[j]) - lse);
        drow[j] = static_cast<T>(grad_scale * (p - (j == label ? 1.0 : 0.0)));
      }
    }
  }
  if (correct != nullptr) *correct = total_correct;
  return total_loss / n;
}

#define CHORUS_INSTANTIATE_SCE(T)                                                               \
  template double SoftmaxCrossEntropy<T>(const Context&, int, int, const T*, const int32_t*, T, \
                                         T*, int*);
CHORUS_INSTANTIATE_SCE(float)
CHORUS_INSTANTIATE_SCE(double)
#undef CHORUS_INSTANTIATE_SCE

}  // namespace chorus::kernels
