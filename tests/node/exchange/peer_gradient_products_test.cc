// PeerGradientProducts: the sketch's products average to the exact products
// over the offsets (unbiased), the offset is shared by every node at a step,
// and three nodes on a ring over one LocalHub swap sketches, leaving out a
// peer's non-finite one.
#include "node/exchange/peer_gradient_products.h"

#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "gossip/transport/local/local_transport.h"

namespace chorus::node {
namespace {

using Tensor = PeerGradientProducts::Tensor;
constexpr size_t kStride = PeerGradientProducts::kSketchStride;

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Tensors of sizes around and below the stride, not aligned to it.
const std::vector<Tensor> kTensors = {{0, 100}, {100, 7}, {107, 1000}, {1107, 33}};
constexpr size_t kSize = 1140;

std::vector<double> Exact(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<double> out;
  for (const Tensor& t : kTensors) {
    double sum = 0.0;
    for (size_t i = t.offset; i < t.offset + t.count; ++i) sum += static_cast<double>(a[i]) * b[i];
    out.push_back(sum);
  }
  return out;
}

TEST(PeerGradientProductsTest, TheSketchProductsAverageToTheExactOnesOverTheOffsets) {
  const std::vector<float> a = Random(kSize, 1), b = Random(kSize, 2);
  std::vector<double> mean(kTensors.size(), 0.0);
  std::vector<float> sa, sb;
  for (size_t offset = 0; offset < kStride; ++offset) {
    PeerGradientProducts::Sketch(a, offset, &sa);
    PeerGradientProducts::Sketch(b, offset, &sb);
    EXPECT_EQ(sa.size(), (kSize - offset + kStride - 1) / kStride);
    PeerGradientProducts::AddProducts(sa, sb, kTensors, offset, mean);
  }
  const std::vector<double> exact = Exact(a, b);
  for (size_t t = 0; t < kTensors.size(); ++t) {
    EXPECT_NEAR(mean[t] / kStride, exact[t], 1e-9 * (1.0 + std::abs(exact[t]))) << "tensor " << t;
  }
}

TEST(PeerGradientProductsTest, TheOffsetIsAStepsAndRangesOverTheStride) {
  std::set<size_t> seen;
  for (int64_t step = 0; step < 400; ++step) {
    const size_t offset = PeerGradientProducts::SketchOffset(7, step);
    EXPECT_LT(offset, kStride);
    EXPECT_EQ(offset, PeerGradientProducts::SketchOffset(7, step));
    seen.insert(offset);
  }
  EXPECT_EQ(seen.size(), kStride);
}

TEST(PeerGradientProductsTest, ThreeNodesOnARingSwapSketchesAndLeaveOutANonFiniteOne) {
  gossip::LocalHubOptions options;
  options.world_size = 3;
  auto hub = gossip::LocalHub::Create(options);
  std::vector<std::unique_ptr<gossip::Transport>> transports = hub->MakeAll();
  std::vector<std::vector<float>> gradients = {Random(kSize, 10), Random(kSize, 11), Random(kSize, 12)};
  constexpr int64_t kStep = 5;
  const size_t offset = PeerGradientProducts::SketchOffset(99, kStep);
  // Node 2 overflowed or poisons, at an element its sketch carries.
  gradients[2][offset + 10 * kStride] = std::numeric_limits<float>::quiet_NaN();
  const gossip::Tag tag = 77;
  std::vector<std::future<Result<std::vector<double>>>> done;
  std::vector<PeerGradientProducts> nodes;
  for (int r = 0; r < 3; ++r) nodes.emplace_back(kTensors, 99);
  for (int r = 0; r < 3; ++r) {
    done.push_back(std::async(std::launch::async, [&, r] {
      const std::vector<int> peers = {(r + 1) % 3, (r + 2) % 3};
      return nodes[r].Exchange(*transports[r], gradients[r], peers, peers, tag, Deadline::AfterSeconds(10), kStep);
    }));
  }
  std::vector<Result<std::vector<double>>> results;
  for (auto& f : done) results.push_back(f.get());
  for (const auto& r : results) ASSERT_TRUE(r.has_value()) << r.error().ToString();
  std::vector<float> s0, s1;
  PeerGradientProducts::Sketch(gradients[0], offset, &s0);
  PeerGradientProducts::Sketch(gradients[1], offset, &s1);
  std::vector<double> expected(kTensors.size(), 0.0);
  PeerGradientProducts::AddProducts(s0, s1, kTensors, offset, expected);
  // Nodes 0 and 1 each take the other's only; node 2 takes both (its own
  // NaN then makes its products NaN, and its loss scaler skips the step).
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(nodes[r].rejected(), 1u) << "node " << r;
    ASSERT_EQ(results[r]->size(), kTensors.size());
    for (size_t t = 0; t < kTensors.size(); ++t) EXPECT_DOUBLE_EQ((*results[r])[t], expected[t]) << "tensor " << t;
  }
  EXPECT_EQ(nodes[2].rejected(), 0u);
}

}  // namespace
}  // namespace chorus::node
