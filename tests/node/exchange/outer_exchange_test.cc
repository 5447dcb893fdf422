// The outer exchange with N nodes as threads over one LocalHub: DiLoCo with
// outer lr 1, no momentum and H = 1 is synchronous averaging bit for bit;
// streaming fragments keep the outer parameters one; NoLoCo's pairs and the
// compressed pseudo-gradients end with one model; the outer state travels.
#include "node/exchange/outer_exchange.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "node/exchange/outer_sync_wire.h"
#include "tests/node/exchange/exchange_test_nodes.h"

namespace chorus::node {
namespace {

Config OuterConfigFor(ExchangeKind kind, OuterOptimizer optimizer, int period) {
  Config config;
  config.exchange.kind = kind;
  config.exchange.algorithm = gossip::AllreduceAlgorithm::kRing;
  config.exchange.outer.optimizer = optimizer;
  config.exchange.outer.period = period;
  config.topology.kind = topologies::GraphKind::kRing;
  config.fabric.op_timeout_s = 20.0;
  config.train.batch_size = 8;
  return config;
}

// One inner step on the rank's own images.
Status InnerStep(Node& node, int rank, int64_t step) {
  CHORUS_RETURN_IF_ERROR(StatusOf(node.trainer->ForwardBackward(Images(8 * (rank + 4 * static_cast<int>(step)), 8))));
  return StatusOf(node.trainer->ApplyUpdate(step));
}

// `steps` inner steps, each followed by the exchange's AfterUpdate.
Status Train(Node& node, int rank, int64_t steps) {
  for (int64_t step = 0; step < steps; ++step) {
    CHORUS_RETURN_IF_ERROR(InnerStep(node, rank, step));
    CHORUS_RETURN_IF_ERROR(node.exchange->AfterUpdate(step));
  }
  return Status::Ok();
}

std::vector<float> Master(Node& node) {
  const std::span<const float> m = node.trainer->MasterWeights();
  return {m.begin(), m.end()};
}

bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// `steps` inner steps on n nodes, each followed by the weighted mean of the
// parameters: a ring all-reduce of each master scaled by its rank's weight
// (none where `weights` is empty) and post-scaled by 1 / n; every rank's
// master after them, into `averaged`.
void AverageEveryStep(int n, const Config& config, int64_t steps, const std::vector<float>& weights,
                      std::vector<std::vector<float>>& averaged) {
  Config plain = config;
  plain.exchange.kind = ExchangeKind::kNone;  // no all-reduce of gradients
  plain.exchange.outer.optimizer = OuterOptimizer::kNone;
  auto reference = RunNodes(n, plain, trainer::ModelKind::kMlp, [&](int r, Node& node) -> Status {
    CHORUS_ASSIGN_OR_RETURN(gossip::Collective world, gossip::Collective::Create(*node.session.transport));
    for (int64_t step = 0; step < steps; ++step) {
      CHORUS_RETURN_IF_ERROR(InnerStep(node, r, step));
      const std::span<float> master = node.trainer->MasterWeights();
      if (!weights.empty()) {
        for (float& v : master) v = static_cast<float>(v * static_cast<double>(weights[static_cast<size_t>(r)]));
      }
      gossip::AllreduceOptions o;
      o.algorithm = gossip::AllreduceAlgorithm::kRing;
      o.tag_base = static_cast<gossip::Tag>(step) << 20;
      o.post_scale = 1.0f / n;
      CHORUS_RETURN_IF_ERROR(world.Allreduce(master, o));
      node.trainer->RefreshWorkingCopy();
    }
    averaged[r] = Master(node);
    return Status::Ok();
  });
  for (int r = 0; r < n; ++r) ASSERT_TRUE(reference[r].ok()) << reference[r].ToString();
}

TEST(OuterExchangeTest, LearningRateOneWithoutMomentumAtPeriodOneIsSynchronousAveragingBitForBit) {
  const int n = 4, steps = 5;
  Config config = OuterConfigFor(ExchangeKind::kAllreduce, OuterOptimizer::kNesterov, 1);
  config.exchange.outer.lr = 1.0;
  config.exchange.outer.momentum = 0.0;
  std::vector<std::vector<float>> outer(n), averaged(n);
  auto statuses = RunNodes(n, config, trainer::ModelKind::kMlp, [&](int r, Node& node) -> Status {
    CHORUS_RETURN_IF_ERROR(Train(node, r, steps));
    CHORUS_RETURN_IF_ERROR(node.exchange->Finish());
    outer[r] = Master(node);
    return Status::Ok();
  });
  // The same steps, each followed by the mean of the parameters.
  AverageEveryStep(n, config, steps, {}, averaged);
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
    EXPECT_TRUE(SameBytes(outer[r], averaged[r])) << "rank " << r;
    EXPECT_TRUE(SameBytes(outer[r], outer[0])) << "rank " << r;
  }
}

// Unequal shares of the global batch (SetMemberShares: 1, 1, 1 and 5 of 8,
// weights 0.5, 0.5, 0.5 and 2.5): with outer lr 1, no momentum and H = 1 each
// outer step lands the sample-weighted mean, bit for bit the ring all-reduce
// of each master scaled by its weight and post-scaled by 1 / n. The plain
// mean misses it by far more than a rounding.
TEST(OuterExchangeTest, UnequalSharesLandTheSampleWeightedMean) {
  const int n = 4, steps = 3;
  const std::vector<int> shares = {1, 1, 1, 5};
  const std::vector<float> weights = {0.5f, 0.5f, 0.5f, 2.5f};
  Config config = OuterConfigFor(ExchangeKind::kAllreduce, OuterOptimizer::kNesterov, 1);
  config.exchange.outer.lr = 1.0;
  config.exchange.outer.momentum = 0.0;
  std::vector<std::vector<float>> outer(n), weighted(n);
  auto statuses = RunNodes(n, config, trainer::ModelKind::kMlp, [&](int r, Node& node) -> Status {
    node.exchange->SetMemberShares(shares);
    CHORUS_RETURN_IF_ERROR(Train(node, r, steps));
    outer[r] = Master(node);
    return Status::Ok();
  });
  AverageEveryStep(n, config, steps, weights, weighted);
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
    EXPECT_TRUE(SameBytes(outer[r], weighted[r])) << "rank " << r;
    EXPECT_TRUE(SameBytes(outer[r], outer[0])) << "rank " << r;
  }
}

// The largest element difference of two masters over the largest element of `b`.
double RelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
    norm = std::max(norm, static_cast<double>(std::abs(b[i])));
  }
  return diff / norm;
}

// Two levels with unequal shares of the global batch: inside each site a
// member's parameters count by its share of the site's samples, and across
// the sites a site's by its share of every sample (SiteShares), so with
// outer lr 1, no momentum and H = 1 each outer step lands the flat
// sample-weighted mean, up to the order of the sums. Sites of 2 and 2 (the
// plain site average) and of 3 and 1 (the checked one, SiteAverageCheck),
// by representatives and by every node; weighing members instead misses that
// mean by far more.
TEST(OuterExchangeTest, SitesOfUnequalSharesLandTheSampleWeightedMean) {
  struct Case {
    std::vector<std::string> sites;
    std::vector<int> shares;
    bool representatives;
  };
  for (const Case& c : {Case{{"lab", "lab", "home", "home"}, {1, 1, 1, 5}, true},
                        Case{{"lab", "lab", "lab", "home"}, {1, 2, 1, 4}, true},
                        Case{{"lab", "lab", "home", "home"}, {1, 1, 1, 5}, false}}) {
    SCOPED_TRACE(c.sites[2] + (c.representatives ? ", by representatives" : ", by every node"));
    const int n = 4, steps = 3;
    std::vector<float> weights;
    for (int share : c.shares) weights.push_back(static_cast<float>(n * share) / 8.0f);
    Config config = OuterConfigFor(ExchangeKind::kAllreduce, OuterOptimizer::kNesterov, 1);
    config.exchange.outer.lr = 1.0;
    config.exchange.outer.momentum = 0.0;
    config.exchange.outer.inner = OuterInner::kSite;
    config.exchange.outer.site_representatives = c.representatives;
    std::vector<std::vector<float>> outer(n), weighted(n), plain(n);
    auto statuses = RunNodes(
        n, config, trainer::ModelKind::kMlp,
        [&](int r, Node& node) -> Status {
          node.exchange->SetMemberShares(c.shares);
          CHORUS_RETURN_IF_ERROR(Train(node, r, steps));
          outer[r] = Master(node);
          return Status::Ok();
        },
        {}, {}, c.sites);
    AverageEveryStep(n, config, steps, weights, weighted);
    AverageEveryStep(n, config, steps, {}, plain);
    const double missed = RelativeDifference(plain[0], weighted[0]);
    EXPECT_GT(missed, 1e-3) << "the member-weighted mean is not the sample-weighted one";
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
      EXPECT_LT(RelativeDifference(outer[r], weighted[r]), 1e-5) << "rank " << r;
      EXPECT_TRUE(SameBytes(outer[r], outer[0])) << "rank " << r;
    }
  }
}

// Four fragments, each landing two steps after its sync began: over two
// periods every fragment lands twice, the outer parameters stay the same
// bytes on every node, and Finish leaves one model.
TEST(OuterExchangeTest, StreamingFragmentsLandLateAndKeepTheOuterParametersOne) {
  const int n = 3, period = 8, steps = 2 * period;
  Config config = OuterConfigFor(ExchangeKind::kAllreduce, OuterOptimizer::kNesterov, period);
  config.exchange.outer.fragments = 4;
  config.exchange.outer.delay = 1;
  config.exchange.outer.local_mix = 0.5;
  std::vector<std::vector<float>> anchors(n), finals(n);
  std::vector<nlohmann::json> metrics(n);
  auto statuses = RunNodes(n, config, trainer::ModelKind::kMlp, [&](int r, Node& node) -> Status {
    CHORUS_RETURN_IF_ERROR(Train(node, r, steps));
    anchors[r] = node.exchange->SavedState().at("outer.anchor");
    CHORUS_RETURN_IF_ERROR(node.exchange->Finish());
    metrics[r] = node.exchange->Metrics();
    finals[r] = Master(node);
    return Status::Ok();
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
    EXPECT_EQ(metrics[r]["outer_steps"], 8) << "4 fragments, twice each (the last landed at Finish)";
    EXPECT_TRUE(SameBytes(anchors[r], anchors[0])) << "rank " << r;
    EXPECT_TRUE(SameBytes(finals[r], finals[0])) << "rank " << r;
  }
  EXPECT_FALSE(SameBytes(anchors[0], finals[0])) << "the outer step moved the model";
}

// Gossip outer steps (random pairs, the ring's neighbours) and compressed
// pseudo-gradients (top-1% with 8-bit values, over every member and over
// pairs): the outer parameters of a gossip run differ between nodes, and
// Finish leaves one model everywhere.
TEST(OuterExchangeTest, GossipAndCompressedOuterStepsEndWithOneModel) {
  struct Case {
    const char* name;
    ExchangeKind kind;
    OuterPeers peers;
    gossip::CodecKind codec;
  };
  for (const Case& c : {Case{"noloco", ExchangeKind::kGossip, OuterPeers::kRandom, gossip::CodecKind::kNone},
                        Case{"neighbours", ExchangeKind::kGossip, OuterPeers::kNeighbours, gossip::CodecKind::kNone},
                        Case{"sparse-diloco", ExchangeKind::kAllreduce, OuterPeers::kNeighbours, gossip::CodecKind::kTopK},
                        Case{"sparse-noloco", ExchangeKind::kGossip, OuterPeers::kRandom, gossip::CodecKind::kTopK}}) {
    SCOPED_TRACE(c.name);
    const int n = 4, period = 3, steps = 9;
    Config config = OuterConfigFor(c.kind, OuterOptimizer::kNesterov, period);
    config.exchange.outer.peers = c.peers;
    config.exchange.compression.codec = c.codec;
    config.exchange.compression.value_bits = 8;
    std::vector<std::vector<float>> anchors(n), finals(n);
    auto statuses = RunNodes(n, config, trainer::ModelKind::kMlp, [&](int r, Node& node) -> Status {
      CHORUS_RETURN_IF_ERROR(Train(node, r, steps));
      anchors[r] = node.exchange->SavedState().at("outer.anchor");
      CHORUS_RETURN_IF_ERROR(node.exchange->Finish());
      finals[r] = Master(node);
      return Status::Ok();
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
      EXPECT_TRUE(SameBytes(finals[r], finals[0])) << "rank " << r;
    }
    if (c.kind == ExchangeKind::kGossip) {
      EXPECT_FALSE(SameBytes(anchors[1], anchors[0])) << "gossip groups leave the outer parameters apart";
    } else {
      EXPECT_TRUE(SameBytes(anchors[1], anchors[0]));
    }
  }
}

// The outer state goes out with SavedState and comes back; a state of the
// wrong size is refused naming it, and one without outer state starts afresh
// from the parameters.
TEST(OuterExchangeTest, TheOuterStateTravelsAndAWrongOneIsRefused) {
  Config config = OuterConfigFor(ExchangeKind::kAllreduce, OuterOptimizer::kNesterov, 2);
  auto statuses = RunNodes(1, config, trainer::ModelKind::kMlp, [&](int r, Node& node) -> Status {
    CHORUS_RETURN_IF_ERROR(Train(node, r, 4));
    std::map<std::string, std::vector<float>> state = node.exchange->SavedState();
    EXPECT_EQ(state.size(), 2u);
    EXPECT_NE(state.at("outer.velocity"), std::vector<float>(state.at("outer.velocity").size(), 0.0f));
    CHORUS_RETURN_IF_ERROR(node.exchange->RestoreSavedState(state));
    EXPECT_EQ(node.exchange->SavedState(), state);
    std::map<std::string, std::vector<float>> wrong = state;
    wrong["outer.anchor"].pop_back();
    const Status refused = node.exchange->RestoreSavedState(wrong);
    EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.ToString().find("outer.anchor"), std::string::npos) << refused.ToString();
    CHORUS_RETURN_IF_ERROR(node.exchange->RestoreSavedState({}));
    EXPECT_EQ(node.exchange->SavedState().at("outer.anchor"), Master(node));
    return Status::Ok();
  });
  ASSERT_TRUE(statuses[0].ok()) << statuses[0].ToString();
}

// The sync's message: the parameters, then the pseudo-gradient's bytes, both back.
TEST(OuterSyncWireTest, MessageRoundTrips) {
  const std::vector<float> params = {1.5f, -2.0f, 3.25f};
  const std::vector<std::byte> gradient = {std::byte{9}, std::byte{8}};
  const std::vector<std::byte> message = EncodeOuterSyncMessage(params, gradient);
  ASSERT_EQ(message.size(), 3 * sizeof(float) + 2);
  std::vector<float> read(3);
  auto rest = ReadOuterSyncMessage(message, read);
  ASSERT_TRUE(rest.has_value()) << rest.error().ToString();
  EXPECT_EQ(read, params);
  EXPECT_EQ(std::vector<std::byte>(rest->begin(), rest->end()), gradient);
}

// A message shorter than the fragment's parameters is refused, not read past.
TEST(OuterSyncWireTest, RefusesAShortMessage) {
  const std::vector<std::byte> message = EncodeOuterSyncMessage(std::vector<float>{1.0f, 2.0f}, {});
  std::vector<float> read(3);
  auto rest = ReadOuterSyncMessage(message, read);
  ASSERT_FALSE(rest.has_value());
  EXPECT_EQ(rest.error().code(), StatusCode::kDataLoss);
  EXPECT_NE(rest.error().message().find("8 bytes"), std::string::npos) << rest.error().message();
}

}  // namespace
}  // namespace chorus::node
