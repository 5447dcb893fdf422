// FusedOptimizer (kernels/cuda/optimizer.cu) against trainer::Optimizer over a
// table of odd-sized tensors (1, 3, 7, a tensor spanning several chunks, an
// empty one, one with zero weights, one with zero gradients), decayed and not,
// LARS and SGD, several steps with a changing learning rate; the FP16 working
// copy and its FP32 expansion; determinism; replay in a CUDA graph; Create's
// argument checks. Skips without a GPU.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "kernels/cuda/ops.h"
#include "tests/cuda/cuda_test_util.h"
#include "trainer/optimizer.h"
#include "trainer/parameter.h"

namespace chorus::kernels::cuda {
namespace {

using testing::AllClose;
using testing::GpuTest;
using trainer::ParamKind;

// The update is the same sequence of FP32 operations on both sides; only the
// norms differ, summed in double in another order (relative ~1e-12 for these
// sizes), which can move float(lr * local_lr) by one FP32 unit. That changes
// w by far less than 1e-6 of its value over a few steps.
constexpr double kWeightRelTol = 1e-6;
constexpr double kWeightAbsTol = 1e-9;
// Momentum holds lr * local_lr * g-sized values (down to ~1e-8): the same
// relative bound, with a floor well below them.
constexpr double kMomentumRelTol = 1e-6;
constexpr double kMomentumAbsTol = 1e-14;
// local_lr: ratios of double norms whose sums differ only in summation order.
constexpr double kLocalLrRelTol = 1e-10;

struct Entry {
  size_t count;
  ParamKind kind;
};

// Crosses the 4096-float chunks: 4097 (two chunks, one of a single float),
// 12289 (four), plus tiny and empty tensors.
const std::vector<Entry> kEntries = {
    {7, ParamKind::kWeight},     {3, ParamKind::kBias},    {4097, ParamKind::kWeight},
    {1, ParamKind::kBnScale},    {0, ParamKind::kWeight},  {12289, ParamKind::kWeight},
    {5, ParamKind::kBnShift},    {64, ParamKind::kWeight},  // zero weights
    {33, ParamKind::kWeight},                                // zero gradients
    {1, ParamKind::kWeight}};
constexpr size_t kZeroWeights = 7;
constexpr size_t kZeroGradients = 8;

struct Tables {
  std::vector<trainer::ParameterInfo> cpu;
  std::vector<TensorRange> gpu;
  size_t total = 0;
};

Tables MakeTables() {
  Tables t;
  for (size_t i = 0; i < kEntries.size(); ++i) {
    trainer::ParameterInfo p;
    p.name = "p" + std::to_string(i);
    p.shape = {static_cast<int64_t>(kEntries[i].count)};
    p.offset = t.total;
    p.count = kEntries[i].count;
    p.kind = kEntries[i].kind;
    t.cpu.push_back(p);
    TensorRange r;
    r.offset = t.total;
    r.count = kEntries[i].count;
    r.decayed = trainer::IsDecayedWeight(kEntries[i].kind);
    t.gpu.push_back(r);
    t.total += kEntries[i].count;
  }
  return t;
}

std::vector<float> Uniform(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void ZeroTensor(const Tables& t, size_t index, std::vector<float>& v) {
  for (size_t i = 0; i < t.cpu[index].count; ++i) v[t.cpu[index].offset + i] = 0.0f;
}

std::vector<float> Gradients(const Tables& t, int step) {
  std::vector<float> g = Uniform(t.total, 1000 + static_cast<uint32_t>(step), 0.02f);
  ZeroTensor(t, kZeroGradients, g);
  return g;
}

const float kLr[] = {0.1f, 0.05f, 0.2f, 0.0125f};

class CudaOptimizerTest : public GpuTest {
 protected:
  // Runs kSteps steps on the CPU and on the GPU from the same start and
  // compares master, momentum, local_lr and the working copies after each.
  void CompareWithCpu(bool lars, bool with_float) {
    const Tables t = MakeTables();
    FusedOptimizerOptions o;
    o.lars = lars;
    o.momentum = 0.9f;
    o.weight_decay = 5e-4f;
    o.eta = 0.001f;
    // The CPU takes doubles: give it exactly the FP32 values the GPU uses.
    trainer::OptimizerOptions co;
    co.kind = lars ? trainer::OptimizerKind::kLars : trainer::OptimizerKind::kSgd;
    co.momentum = o.momentum;
    co.weight_decay = o.weight_decay;
    co.eta = o.eta;
    auto cpu = trainer::Optimizer::Create(co, t.cpu);
    ASSERT_TRUE(cpu.has_value()) << cpu.error().ToString();
    auto gpu = FusedOptimizer::Create(device(), t.gpu, o);
    ASSERT_TRUE(gpu.has_value()) << gpu.error().ToString();

    std::vector<float> master = Uniform(t.total, 7, 0.5f);
    ZeroTensor(t, kZeroWeights, master);
    auto d_master = Upload(master);
    auto d_momentum = Zeros<float>(t.total);
    auto d_grad = Zeros<float>(t.total);
    auto d_half = Upload(std::vector<uint16_t>(t.total, 0x5555u));
    auto d_float = Upload(std::vector<float>(t.total, -3.0f));
    auto d_lr = Zeros<float>(1);

    for (int step = 0; step < 4; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const std::vector<float> g = Gradients(t, step);
      (*cpu)->Step(master, g, static_cast<double>(kLr[step]));
      ASSERT_TRUE(device().CopyToDevice(d_grad.data(), g.data(), g.size() * sizeof(float)).ok());
      ASSERT_TRUE(device().CopyToDevice(d_lr.data(), &kLr[step], sizeof(float)).ok());
      ASSERT_TRUE((*gpu)
                      ->Step(device(), d_lr.data(), d_master.data(), d_grad.data(),
                             d_momentum.data(), d_half.data(),
                             with_float ? d_float.data() : nullptr)
                      .ok());
      const std::vector<float> got = Download(d_master);
      EXPECT_TRUE(AllClose(got, master, kWeightAbsTol, kWeightRelTol));
      const auto cpu_momentum = (*cpu)->momentum();
      EXPECT_TRUE(AllClose(Download(d_momentum),
                           std::vector<float>(cpu_momentum.begin(), cpu_momentum.end()),
                           kMomentumAbsTol, kMomentumRelTol));
      auto local = (*gpu)->LastLocalLr(device());
      ASSERT_TRUE(local.has_value()) << local.error().ToString();
      const auto cpu_local = (*cpu)->last_local_lr();
      ASSERT_EQ(local->size(), cpu_local.size());
      for (size_t i = 0; i < cpu_local.size(); ++i) {
        EXPECT_NEAR((*local)[i], cpu_local[i], kLocalLrRelTol * std::fabs(cpu_local[i]))
            << "tensor " << i;
        if (!lars || !t.gpu[i].decayed) {
          EXPECT_EQ((*local)[i], 1.0) << "tensor " << i;
        }
      }
      if (lars && step == 0) {
        // Zero weights and zero gradients fall back to 1; the others do not.
        EXPECT_EQ((*local)[kZeroWeights], 1.0);
        EXPECT_NE((*local)[2], 1.0);
      }
      if (lars) {
        EXPECT_EQ((*local)[kZeroGradients], 1.0);
      }
      // The working copy is exactly the FP16 rounding of the GPU's own master.
      const std::vector<uint16_t> half = Download(d_half);
      const std::vector<float> expanded = Download(d_float);
      for (size_t i = 0; i < t.total; ++i) {
        ASSERT_EQ(half[i], FloatToHalfBits(got[i])) << i;
        if (with_float) {
          ASSERT_EQ(std::bit_cast<uint32_t>(expanded[i]),
                    std::bit_cast<uint32_t>(HalfBitsToFloat(half[i])))
              << i;
        } else {
          ASSERT_EQ(expanded[i], -3.0f) << i;  // untouched
        }
      }
    }
  }

  // Master after `steps` LARS steps from the fixed start (for determinism).
  std::vector<float> RunLars(int steps) {
    const Tables t = MakeTables();
    auto gpu = FusedOptimizer::Create(device(), t.gpu, FusedOptimizerOptions{});
    EXPECT_TRUE(gpu.has_value());
    std::vector<float> master = Uniform(t.total, 7, 0.5f);
    auto d_master = Upload(master);
    auto d_momentum = Zeros<float>(t.total);
    auto d_grad = Zeros<float>(t.total);
    auto d_half = Zeros<uint16_t>(t.total);
    auto d_lr = Zeros<float>(1);
    for (int step = 0; step < steps; ++step) {
      const std::vector<float> g = Gradients(t, step);
      EXPECT_TRUE(device().CopyToDevice(d_grad.data(), g.data(), g.size() * sizeof(float)).ok());
      EXPECT_TRUE(device().CopyToDevice(d_lr.data(), &kLr[step], sizeof(float)).ok());
      EXPECT_TRUE((*gpu)
                      ->Step(device(), d_lr.data(), d_master.data(), d_grad.data(),
                             d_momentum.data(), d_half.data(), nullptr)
                      .ok());
    }
    return Download(d_master);
  }
};

TEST_F(CudaOptimizerTest, LarsMatchesTheCpuOptimizer) { CompareWithCpu(true, true); }

TEST_F(CudaOptimizerTest, SgdMatchesTheCpuOptimizer) { CompareWithCpu(false, true); }

TEST_F(CudaOptimizerTest, LarsWithoutFloatWorkingCopy) { CompareWithCpu(true, false); }

TEST_F(CudaOptimizerTest, IsDeterministic) {
  const std::vector<float> a = RunLars(4);
  const std::vector<float> b = RunLars(4);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i])) << i;
  }
}

// A captured Step replays with the learning rate current at launch time.
TEST_F(CudaOptimizerTest, StepReplaysInACapturedGraph) {
  const Tables t = MakeTables();
  trainer::OptimizerOptions co;  // LARS, 0.9, 5e-4, 0.001 as doubles of the FP32 values:
  co.momentum = 0.9f;
  co.weight_decay = 5e-4f;
  co.eta = 0.001f;
  auto cpu = trainer::Optimizer::Create(co, t.cpu);
  ASSERT_TRUE(cpu.has_value());
  auto gpu = FusedOptimizer::Create(device(), t.gpu, FusedOptimizerOptions{});
  ASSERT_TRUE(gpu.has_value());
  std::vector<float> master = Uniform(t.total, 7, 0.5f);
  auto d_master = Upload(master);
  auto d_momentum = Zeros<float>(t.total);
  auto d_grad = Zeros<float>(t.total);
  auto d_half = Zeros<uint16_t>(t.total);
  auto d_lr = Zeros<float>(1);
  ASSERT_TRUE(device().Synchronize().ok());

  ASSERT_TRUE(device().BeginCapture().ok());
  const Status captured = (*gpu)->Step(device(), d_lr.data(), d_master.data(), d_grad.data(),
                                       d_momentum.data(), d_half.data(), nullptr);
  auto graph = device().EndCapture();
  ASSERT_TRUE(captured.ok()) << captured.ToString();
  ASSERT_TRUE(graph.has_value()) << graph.error().ToString();

  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = Gradients(t, step);
    (*cpu)->Step(master, g, static_cast<double>(kLr[step]));
    ASSERT_TRUE(device().CopyToDevice(d_grad.data(), g.data(), g.size() * sizeof(float)).ok());
    ASSERT_TRUE(device().CopyToDevice(d_lr.data(), &kLr[step], sizeof(float)).ok());
    ASSERT_TRUE((*graph)->Launch().ok());
    EXPECT_TRUE(AllClose(Download(d_master), master, kWeightAbsTol, kWeightRelTol))
        << "step " << step;
  }
}

TEST_F(CudaOptimizerTest, CreateRejectsBadOptionsAndOverlappingRanges) {
  const std::vector<TensorRange> ok = {{0, 10, true}, {10, 5, false}};
  FusedOptimizerOptions o;
  EXPECT_TRUE(FusedOptimizer::Create(device(), ok, o).has_value());
  o.momentum = 1.0f;
  EXPECT_FALSE(FusedOptimizer::Create(device(), ok, o).has_value());
  o = {};
  o.weight_decay = -1.0f;
  EXPECT_FALSE(FusedOptimizer::Create(device(), ok, o).has_value());
  o = {};
  o.eta = 0.0f;
  EXPECT_FALSE(FusedOptimizer::Create(device(), ok, o).has_value());
  o.lars = false;  // eta unused by SGD
  EXPECT_TRUE(FusedOptimizer::Create(device(), ok, o).has_value());
  const std::vector<TensorRange> overlap = {{0, 10, true}, {9, 5, false}};
  EXPECT_FALSE(FusedOptimizer::Create(device(), overlap, FusedOptimizerOptions{}).has_value());
  // No tensors: Step does nothing, LastLocalLr is empty.
  auto empty = FusedOptimizer::Create(device(), std::span<const TensorRange>{}, o);
  ASSERT_TRUE(empty.has_value());
  auto d_lr = Zeros<float>(1);
  EXPECT_TRUE((*empty)->Step(device(), d_lr.data(), nullptr, nullptr, nullptr, nullptr, nullptr)
                  .ok());
  auto local = (*empty)->LastLocalLr(device());
  ASSERT_TRUE(local.has_value());
  EXPECT_TRUE(local->empty());
}

}  // namespace
}  // namespace chorus::kernels::cuda
