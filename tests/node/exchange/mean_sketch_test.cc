// MeanSketch: over the one-peer exponential graph of 8 nodes (3 rounds) and
// the complete graph of 4 (1 round), every node's estimate is the squared
// norm of the exact mean of the step's sketches; over 6 nodes, which the
// one-peer graph does not average exactly in its rounds, it is not; a
// non-finite sketch ends its receivers' estimate.
#include "node/exchange/mean_sketch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <limits>
#include <random>
#include <vector>

#include "gossip/transport/local/local_transport.h"
#include "topologies/graph_builders.h"

namespace chorus::node {
namespace {

using Tensor = MeanSketch::Tensor;
const std::vector<Tensor> kMeanTensors = {{0, 100}, {100, 7}, {107, 1000}, {1107, 33}};
constexpr size_t kMeanSize = 1140;
constexpr int64_t kMeanStep = 6;

// Node r's gradient: its own.
std::vector<float> GradientOf(int r) {
  std::mt19937 rng(static_cast<uint32_t>(1000 + r));
  std::normal_distribution<float> normal(0.5f, 1.0f);
  std::vector<float> v(kMeanSize);
  for (float& x : v) x = normal(rng);
  return v;
}

// Each tensor's squared norm of the n members' mean sketch, times the stride.
std::vector<double> ExactSquares(int n) {
  const size_t offset = PeerGradientProducts::SketchOffset(5, kMeanStep);
  std::vector<float> mean, sketch;
  for (int r = 0; r < n; ++r) {
    PeerGradientProducts::Sketch(GradientOf(r), offset, &sketch);
    mean.resize(sketch.size(), 0.0f);
    for (size_t k = 0; k < sketch.size(); ++k) mean[k] += sketch[k] / static_cast<float>(n);
  }
  std::vector<double> squares(kMeanTensors.size(), 0.0);
  PeerGradientProducts::AddProducts(mean, mean, kMeanTensors, offset, squares);
  return squares;
}

// One step of every node over `graph`, node `bad`'s gradient infinite; each node's result.
std::vector<Result<std::vector<double>>> RunStep(const topologies::Graph& graph, int bad = -1) {
  const int n = graph.NumNodes();
  gossip::LocalHubOptions options;
  options.world_size = n;
  auto hub = gossip::LocalHub::Create(options);
  std::vector<std::unique_ptr<gossip::Transport>> transports = hub->MakeAll();
  std::vector<MeanSketch> nodes;
  for (int r = 0; r < n; ++r) nodes.emplace_back(kMeanTensors, 5, graph.Period());
  std::vector<std::future<Result<std::vector<double>>>> done;
  for (int r = 0; r < n; ++r) {
    done.push_back(std::async(std::launch::async, [&, r] {
      std::vector<float> gradient = GradientOf(r);
      if (r == bad) gradient.assign(kMeanSize, std::numeric_limits<float>::infinity());
      return nodes[r].Step(*transports[r], gradient, graph, r,
                           [](int round) { return static_cast<gossip::Tag>(40 + round); }, Deadline::AfterSeconds(10),
                           kMeanStep);
    }));
  }
  std::vector<Result<std::vector<double>>> results;
  for (auto& f : done) results.push_back(f.get());
  return results;
}

void ExpectExact(const Result<std::vector<double>>& got, const std::vector<double>& exact, int r) {
  ASSERT_TRUE(got.has_value()) << got.error().ToString();
  ASSERT_EQ(got->size(), exact.size()) << "node " << r;
  for (size_t t = 0; t < exact.size(); ++t) EXPECT_NEAR((*got)[t], exact[t], 1e-5 * exact[t]) << "node " << r;
}

TEST(MeanSketchTest, TheOnePeerExponentialGraphGivesEveryNodeTheExactMean) {
  auto graph = topologies::OnePeerExponentialGraph(8);
  ASSERT_TRUE(graph.has_value());
  ASSERT_EQ(graph->Period(), 3);
  const auto results = RunStep(*graph);
  const std::vector<double> exact = ExactSquares(8);
  for (int r = 0; r < 8; ++r) ExpectExact(results[r], exact, r);
  // The mean of all 8, not of fewer: one node's own square is far from it.
  const std::vector<double> own = ExactSquares(1);
  EXPECT_GT(std::abs((*results[0])[2] - own[2]), 0.1 * exact[2]);
}

TEST(MeanSketchTest, TheCompleteGraphGivesTheMeanInOneRound) {
  auto graph = topologies::CompleteGraph(4);
  ASSERT_TRUE(graph.has_value());
  const auto results = RunStep(*graph);
  for (int r = 0; r < 4; ++r) ExpectExact(results[r], ExactSquares(4), r);
}

TEST(MeanSketchTest, SixNodesOnTheOnePeerGraphAreNotAveragedExactly) {
  auto graph = topologies::OnePeerExponentialGraph(6);
  ASSERT_TRUE(graph.has_value());
  const auto results = RunStep(*graph);
  const std::vector<double> exact = ExactSquares(6);
  int off = 0;
  for (int r = 0; r < 6; ++r) {
    ASSERT_TRUE(results[r].has_value());
    off += std::abs((*results[r])[2] - exact[2]) > 1e-4 * exact[2] ? 1 : 0;
  }
  EXPECT_GT(off, 0);
}

TEST(MeanSketchTest, ANonFiniteSketchSpoilsItsReceiversEstimateAndEveryRoundStillRuns) {
  auto graph = topologies::CompleteGraph(3);
  ASSERT_TRUE(graph.has_value());
  const auto results = RunStep(*graph, /*bad=*/2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].has_value()) << results[r].error().ToString();
    EXPECT_TRUE(results[r]->empty()) << "node " << r;
  }
  // Over 3 rounds: node 4 takes node 3's infinite sketch in round 0 and still
  // sends in rounds 1 and 2 (its out-neighbours would wait out the deadline).
  auto exponential = topologies::OnePeerExponentialGraph(8);
  ASSERT_TRUE(exponential.has_value());
  const auto spoiled = RunStep(*exponential, /*bad=*/3);
  for (int r = 0; r < 8; ++r) {
    ASSERT_TRUE(spoiled[r].has_value()) << "node " << r << ": " << spoiled[r].error().ToString();
    if (r == 3) continue;
    EXPECT_TRUE(spoiled[r]->empty()) << "node " << r;  // the infinity reaches every node by the end
  }
}

}  // namespace
}  // namespace chorus::node
