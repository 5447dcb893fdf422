// Each outer method against its closed form: N nodes as threads over one
// LocalHub, each with an OuterExchange built from the config as a node builds
// it, whose inner steps are known deltas written into the master (no
// training). After every step the exchange's AfterUpdate runs; at the end
// every node's parameters must equal a double-precision replay of the outer
// steps (gossip/protocols/outer_step.h's arithmetic, the group's mean, the
// fragment schedule, the delay and local_mix) to float rounding, and the
// replay of plain averaging (local SGD) must lie far from them. What this
// catches: an outer method mapped to another (Nesterov run as averaging or as
// the heavy ball), a lost lr or momentum, the velocity not kept across outer
// steps, a fragment landing at the wrong step or unmixed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "gossip/protocols/outer_step.h"
#include "node/exchange/outer_exchange.h"
#include "tests/node/exchange/exchange_test_nodes.h"

namespace chorus::node {
namespace {

// Rank r's inner delta at step s, element i: small steps of either sign, a
// different pattern per rank and step, so that the mean pseudo-gradient is
// neither zero nor the same from one outer step to the next.
float InnerDelta(int r, int64_t s, size_t i) {
  return 1e-2f * static_cast<float>(static_cast<int64_t>((i * 7 + static_cast<size_t>(r) * 13 +
                                                          static_cast<size_t>(s) * 5) % 11) - 5);
}

struct OuterCase {
  const char* name;
  int nodes;
  int steps;
  Config config;
};

void PrintTo(const OuterCase& c, std::ostream* os) { *os << c.name; }

Config MethodConfig(ExchangeKind kind, OuterOptimizer optimizer, int period) {
  Config config;
  config.exchange.kind = kind;
  config.exchange.algorithm = gossip::AllreduceAlgorithm::kRing;
  config.exchange.outer.optimizer = optimizer;
  config.exchange.outer.lr = 0.7;
  config.exchange.outer.momentum = 0.5;
  config.exchange.outer.period = period;
  config.fabric.op_timeout_s = 20.0;
  config.train.batch_size = 8;
  return config;
}

gossip::OuterKind KindOf(OuterOptimizer o) {
  switch (o) {
    case OuterOptimizer::kSgd: return gossip::OuterKind::kSgd;
    case OuterOptimizer::kNesterov: return gossip::OuterKind::kNesterov;
    default: return gossip::OuterKind::kAverage;
  }
}

// The replay, in double: every node's parameters x, anchor a and velocity v
// through `steps` steps of InnerDelta, with the outer steps the config's
// schedule puts after them, under outer method `kind`. Returns every node's x.
std::vector<std::vector<double>> Replay(const Config& config, gossip::OuterKind kind, int n, int steps,
                                        const std::vector<float>& initial) {
  const OuterConfig& oc = config.exchange.outer;
  const double lr = oc.lr, mu = oc.momentum, mix = oc.local_mix;
  std::vector<std::vector<double>> x(n, std::vector<double>(initial.begin(), initial.end()));
  std::vector<std::vector<double>> a = x, v(n, std::vector<double>(initial.size(), 0.0));
  const std::vector<gossip::FragmentRange> ranges = gossip::SplitFragments(initial.size(), oc.fragments);
  struct Sync {
    int fragment;
    int64_t step;
    std::vector<std::vector<double>> snapshot;  // every node's x over the fragment
  };
  std::optional<Sync> in_flight;
  const auto land = [&](const Sync& sync) {
    const gossip::FragmentRange range = ranges[static_cast<size_t>(sync.fragment)];
    for (int r = 0; r < n; ++r) {
      std::vector<int> group(static_cast<size_t>(n));
      for (int j = 0; j < n; ++j) group[static_cast<size_t>(j)] = j;
      if (config.exchange.kind == ExchangeKind::kGossip) {
        group = gossip::RandomGroup(n, r, config.train.seed, sync.step);
      }
      for (size_t k = 0; k < range.count; ++k) {
        const size_t i = range.begin + k;
        double base = 0.0;
        for (int j : group) base += sync.snapshot[static_cast<size_t>(j)][k];
        base /= static_cast<double>(group.size());
        const double g = a[r][i] - base;
        if (kind == gossip::OuterKind::kAverage) {
          a[r][i] = base;
        } else {
          v[r][i] = mu * v[r][i] + g;
          a[r][i] -= lr * (kind == gossip::OuterKind::kNesterov ? g + mu * v[r][i] : v[r][i]);
        }
        x[r][i] = mix * x[r][i] + (1.0 - mix) * a[r][i];
      }
    }
  };
  for (int64_t s = 0; s < steps; ++s) {
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < initial.size(); ++i) x[r][i] += InnerDelta(r, s, i);
    }
    if (in_flight && in_flight->step + oc.delay <= s) {
      land(*in_flight);
      in_flight.reset();
    }
    const int fragment = gossip::FragmentDue(s + 1, oc.fragments, oc.period);
    if (fragment < 0) continue;
    const gossip::FragmentRange range = ranges[static_cast<size_t>(fragment)];
    Sync sync{fragment, s, {}};
    for (int r = 0; r < n; ++r) {
      sync.snapshot.emplace_back(x[r].begin() + static_cast<std::ptrdiff_t>(range.begin),
                                 x[r].begin() + static_cast<std::ptrdiff_t>(range.begin + range.count));
    }
    if (oc.delay == 0) {
      land(sync);
    } else {
      in_flight = std::move(sync);
    }
  }
  return x;
}

double MaxDifference(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0.0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

class OuterMethodTest : public ::testing::TestWithParam<OuterCase> {};

TEST_P(OuterMethodTest, ParametersFollowTheClosedFormOfTheOuterMethod) {
  const OuterCase& c = GetParam();
  std::vector<std::vector<float>> initial(c.nodes), got(c.nodes);
  std::vector<int64_t> outer_steps(c.nodes, 0);
  auto statuses = RunNodes(c.nodes, c.config, trainer::ModelKind::kMlp, [&](int r, Node& node) -> Status {
    const std::span<float> m = node.trainer->MasterWeights();
    initial[r].assign(m.begin(), m.end());
    for (int64_t s = 0; s < c.steps; ++s) {
      const std::span<float> x = node.trainer->MasterWeights();
      for (size_t i = 0; i < x.size(); ++i) x[i] += InnerDelta(r, s, i);
      node.trainer->RefreshWorkingCopy();
      CHORUS_RETURN_IF_ERROR(node.exchange->AfterUpdate(s));
    }
    const std::span<const float> x = node.trainer->MasterWeights();
    got[r].assign(x.begin(), x.end());
    outer_steps[r] = node.exchange->Metrics().value("outer_steps", int64_t{-1});
    return node.exchange->Finish();  // lands a fragment still in flight, after the comparison
  });
  for (int r = 0; r < c.nodes; ++r) ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();
  for (int r = 1; r < c.nodes; ++r) ASSERT_EQ(initial[r], initial[0]) << "the replay starts every node alike";
  const gossip::OuterKind kind = KindOf(c.config.exchange.outer.optimizer);
  const std::vector<std::vector<double>> expected = Replay(c.config, kind, c.nodes, c.steps, initial[0]);
  const std::vector<std::vector<double>> averaged =
      Replay(c.config, gossip::OuterKind::kAverage, c.nodes, c.steps, initial[0]);
  // Float rounding: parameters below 1 in magnitude, each moved by at most 16
  // inner deltas and 4 outer steps of a few float operations, each of
  // relative error 6e-8 (a few 1e-6 in all); the methods differ by about
  // 3e-3 (the replays' distance, checked below to exceed 1e-3).
  constexpr double kRounding = 1e-5;
  for (int r = 0; r < c.nodes; ++r) {
    EXPECT_GT(outer_steps[r], 0) << "rank " << r;
    const std::vector<double> x(got[r].begin(), got[r].end());
    EXPECT_LT(MaxDifference(x, expected[r]), kRounding)
        << c.name << " rank " << r << ": the parameters are not the closed form's (plain averaging would be "
        << MaxDifference(x, averaged[r]) << " away)";
    if (kind != gossip::OuterKind::kAverage) {
      EXPECT_GT(MaxDifference(expected[r], averaged[r]), 100 * kRounding) << "the case cannot tell the method";
    }
  }
}

Config Noloco() {
  Config config = MethodConfig(ExchangeKind::kGossip, OuterOptimizer::kNesterov, 3);
  config.exchange.outer.peers = OuterPeers::kRandom;
  return config;
}

Config Streaming() {
  Config config = MethodConfig(ExchangeKind::kAllreduce, OuterOptimizer::kNesterov, 8);
  config.exchange.outer.fragments = 4;
  config.exchange.outer.delay = 1;
  config.exchange.outer.local_mix = 0.5;
  return config;
}

// World sizes 3 and 5 (NoLoCo's odd world: two pairs and one group of three
// in turn); 4 outer steps of period 3, or two periods of 4 fragments.
INSTANTIATE_TEST_SUITE_P(
    OuterMethods, OuterMethodTest,
    ::testing::Values(OuterCase{"diloco", 3, 12, MethodConfig(ExchangeKind::kAllreduce, OuterOptimizer::kNesterov, 3)},
                      OuterCase{"heavy-ball", 3, 12, MethodConfig(ExchangeKind::kAllreduce, OuterOptimizer::kSgd, 3)},
                      OuterCase{"local-sgd", 3, 12,
                                MethodConfig(ExchangeKind::kAllreduce, OuterOptimizer::kAverage, 3)},
                      OuterCase{"streaming-diloco", 3, 16, Streaming()}, OuterCase{"noloco", 5, 12, Noloco()}),
    [](const ::testing::TestParamInfo<OuterCase>& info) {
      std::string name = info.param.name;
      for (char& ch : name) ch = ch == '-' ? '_' : ch;
      return name;
    });

}  // namespace
}  // namespace chorus::node
