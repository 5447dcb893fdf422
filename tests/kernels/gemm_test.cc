// Gemm against a naive triple loop for every transpose combination (odd shapes,
// leading dimensions larger than the rows, single-threaded and split over
// threads), and LinearForward against its
// definition. Backward passes are checked by finite differences in
// gradient_check_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"

namespace chorus::kernels {
namespace {

// Reference C = alpha * op(A) op(B) + beta * C in double, plus the magnitude
// sum |alpha| sum_k |a||b| + |beta||c| that bounds the rounding error of any
// summation order.
template <typename T>
void NaiveGemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const T* a, int lda,
               const T* b, int ldb, double beta, const T* c, int ldc, std::vector<double>* out,
               std::vector<double>* magnitude) {
  out->assign(static_cast<size_t>(m) * n, 0.0);
  magnitude->assign(static_cast<size_t>(m) * n, 0.0);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0.0, mag = 0.0;
      for (int l = 0; l < k; ++l) {
        const double av =
            trans_a ? a[static_cast<size_t>(l) * lda + i] : a[static_cast<size_t>(i) * lda + l];
        const double bv =
            trans_b ? b[static_cast<size_t>(j) * ldb + l] : b[static_cast<size_t>(l) * ldb + j];
        sum += av * bv;
        mag += std::abs(av * bv);
      }
      const double cv = c[static_cast<size_t>(i) * ldc + j];
      (*out)[static_cast<size_t>(i) * n + j] = alpha * sum + beta * cv;
      (*magnitude)[static_cast<size_t>(i) * n + j] = std::abs(alpha) * mag + std::abs(beta * cv);
    }
  }
}

template <typename T>
void CheckAllTransposes(int m, int n, int k) {
  std::mt19937_64 rng(1234);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  const Context ctx;
  const double alpha = 0.7, beta = -0.3;
  for (int trans_a = 0; trans_a < 2; ++trans_a) {
    for (int trans_b = 0; trans_b < 2; ++trans_b) {
      // Leading dimensions padded by 3 so a wrong stride shows up.
      const int a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
      const int b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
      const int lda = a_cols + 3, ldb = b_cols + 3, ldc = n + 3;
      std::vector<T> a(static_cast<size_t>(a_rows) * lda), b(static_cast<size_t>(b_rows) * ldb),
          c(static_cast<size_t>(m) * ldc);
      for (T& v : a) v = static_cast<T>(dist(rng));
      for (T& v : b) v = static_cast<T>(dist(rng));
      for (T& v : c) v = static_cast<T>(dist(rng));
      std::vector<double> want, magnitude;
      NaiveGemm(trans_a != 0, trans_b != 0, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta,
                c.data(), ldc, &want, &magnitude);
      std::vector<T> got = c;
      Gemm<T>(ctx, trans_a != 0, trans_b != 0, m, n, k, static_cast<T>(alpha), a.data(), lda,
              b.data(), ldb, static_cast<T>(beta), got.data(), ldc);
      // Any summation order is within (k + 2) * eps * magnitude of the exact
      // result (standard dot-product error bound); x2 for the rounding of
      // alpha and beta to T.
      const double eps = std::numeric_limits<T>::epsilon();
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          const size_t idx = static_cast<size_t>(i) * n + j;
          ASSERT_NEAR(got[static_cast<size_t>(i) * ldc + j], want[idx],
                      2.0 * (k + 2) * eps * magnitude[idx])
              << "trans_a=" << trans_a << " trans_b=" << trans_b << " at " << i << "," << j;
        }
        // The padding columns of C are never written.
        for (int j = n; j < ldc; ++j) {
          ASSERT_EQ(got[static_cast<size_t>(i) * ldc + j], c[static_cast<size_t>(i) * ldc + j]);
        }
      }
    }
  }
}

TEST(Gemm, AllTransposesMatchNaiveDouble) { CheckAllTransposes<double>(7, 5, 9); }

TEST(Gemm, AllTransposesMatchNaiveFloat) { CheckAllTransposes<float>(67, 33, 129); }

TEST(Gemm, OpenBlasBackendMatchesNaive) {
  SetGemmBackend(GemmBackend::kBlas);
  EXPECT_FALSE(GemmUsesOnednn());
  CheckAllTransposes<float>(67, 33, 129);
  SetGemmBackend(GemmBackend::kAuto);
}

// With a parallel region pinned at the reference cost (2 us), large enough
// (2*m*n*k above 4M flops) that Gemm splits C over threads: by columns when
// n >= m, by rows otherwise; three threads give uneven blocks.
class GemmThreads : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = cpu::KernelThreads();
    SetThreads(3);
    cpu::OverrideRegionSeconds(2e-6);
  }
  void TearDown() override {
    cpu::OverrideRegionSeconds(-1.0);
    SetThreads(saved_);
  }

 private:
  int saved_ = 1;
};

TEST_F(GemmThreads, SplitByColumnsMatchesNaive) {
  ASSERT_LT(cpu::ParallelMin(size_t{1} << 22), size_t{2} * 70 * 150 * 231);
  CheckAllTransposes<float>(70, 150, 231);
  CheckAllTransposes<double>(70, 150, 231);
}

TEST_F(GemmThreads, SplitByRowsMatchesNaive) {
  CheckAllTransposes<float>(150, 70, 231);
  CheckAllTransposes<double>(150, 70, 231);
}

// Whether a GEMM's blocks run in parallel follows a measured cost, so it must
// not change a bit: a resumed run continues bitwise only if so. The blocks'
// bits may differ from one whole GEMM's (oneDNN picks its K blocking from M and
// N), so the blocks must be the same either way.
TEST_F(GemmThreads, BlocksGiveTheSameBitsInParallelOrNot) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> dist;
  const Context ctx;
  // The MLP's shapes at batch 64 and 100: forward, weight gradient, input gradient.
  struct Shape {
    bool ta, tb;
    int m, n, k;
  };
  for (GemmBackend backend : {GemmBackend::kAuto, GemmBackend::kBlas}) {
    SetGemmBackend(backend);
    for (const Shape& s : {Shape{false, true, 64, 256, 784}, Shape{true, false, 256, 784, 64},
                           Shape{false, false, 100, 784, 256}, Shape{false, true, 256, 100, 784}}) {
      const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
      std::vector<float> a(static_cast<size_t>(s.m) * s.k), b(static_cast<size_t>(s.k) * s.n);
      for (float& v : a) v = dist(rng);
      for (float& v : b) v = dist(rng);
      std::vector<float> parallel(static_cast<size_t>(s.m) * s.n), serial(parallel.size());
      Gemm<float>(ctx, s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                  parallel.data(), s.n);
      cpu::OverrideRegionSeconds(1.0);  // no GEMM is worth a region now
      Gemm<float>(ctx, s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                  serial.data(), s.n);
      cpu::OverrideRegionSeconds(2e-6);
      EXPECT_EQ(parallel, serial) << s.m << "x" << s.n << "x" << s.k << " onednn "
                                  << GemmUsesOnednn();
    }
  }
  SetGemmBackend(GemmBackend::kAuto);
}

TEST(ParallelMin, ScalesWithTheCostOfARegion) {
  const int saved = cpu::KernelThreads();
  SetThreads(2);
  cpu::OverrideRegionSeconds(2e-6);
  EXPECT_EQ(cpu::ParallelMin(1000), 1000u);
  cpu::OverrideRegionSeconds(44e-6);
  EXPECT_EQ(cpu::ParallelMin(1000), 22000u);
  EXPECT_EQ(ThreadsFor(21999, 1000), 1);
  EXPECT_EQ(ThreadsFor(22000, 1000), 2);
  cpu::OverrideRegionSeconds(1.0);  // a starved machine: at most 64x
  EXPECT_EQ(cpu::ParallelMin(1000), 64000u);
  cpu::OverrideRegionSeconds(-1.0);
  EXPECT_GT(cpu::RegionSeconds(), 0.0);  // measured
  EXPECT_GE(cpu::ParallelMin(1000), 1000u);
  SetThreads(1);
  EXPECT_EQ(cpu::RegionSeconds(), 0.0);
  EXPECT_EQ(cpu::ParallelMin(1000), 1000u);
  SetThreads(saved);
}

TEST(Gemm, EmptyInnerDimensionScalesC) {
  const Context ctx;
  std::vector<float> c = {1.0f, 2.0f, 3.0f, 4.0f};
  Gemm<float>(ctx, false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f}));
}

TEST(Linear, ForwardMatchesDefinition) {
  const Context ctx;
  const int n = 3, in = 4, out = 2;
  std::vector<double> x(n * in), w(out * in), b = {0.5, -1.25};
  for (int i = 0; i < n * in; ++i) x[i] = 0.1 * i - 0.3;
  for (int i = 0; i < out * in; ++i) w[i] = 0.2 * i - 0.7;
  std::vector<double> y(n * out);
  LinearForward<double>(ctx, n, in, out, x.data(), w.data(), b.data(), y.data());
  for (int i = 0; i < n; ++i) {
    for (int o = 0; o < out; ++o) {
      double want = b[o];
      for (int j = 0; j < in; ++j) want += x[i * in + j] * w[o * in + j];
      // Four products of O(1) terms: a few ulps of double.
      EXPECT_NEAR(y[i * out + o], want, 1e-14) << i << "," << o;
    }
  }
}

}  // namespace
}  // namespace chorus::kernels
