// Tests of the LARS norm a node's trust ratio sees (LarsNormNodes): the
// nodes a round averages, where a correction applies at all, the settings
// and the cap.
#include "node/run/trainer_options.h"

#include <gtest/gtest.h>

namespace chorus::node {
namespace {

Config Gossip(topologies::GraphKind graph) {
  Config c;
  c.exchange.kind = ExchangeKind::kGossip;
  c.exchange.protocol = GossipProtocolKind::kDpsgd;
  c.topology.kind = graph;
  return c;
}

TEST(LarsNormNodesTest, MixedCountsTheNodesOneRoundAverages) {
  // One gossip round on a ring averages the node and its two neighbours; on
  // the one-peer exponential graph the node and one peer; on the complete
  // graph every node. auto is the node's own norm.
  for (auto [graph, nodes] : {std::pair{topologies::GraphKind::kRing, 3},
                              std::pair{topologies::GraphKind::kOnePeerExponential, 2},
                              std::pair{topologies::GraphKind::kComplete, 16}}) {
    Config c = Gossip(graph);
    EXPECT_EQ(LarsNormNodes(c, 16), 1);
    c.train.lars_norm = LarsNorm::kMixed;
    EXPECT_EQ(LarsNormNodes(c, 16), nodes);
  }
}

// A node whose update is not a gossip round's keeps its own norm whatever
// the setting: under all-reduce (its gradient is the global batch's), with
// local steps between mixing rounds or outer steps, with SGD, on a GPU.
TEST(LarsNormNodesTest, OnlyGossipEveryStepOnACpuWithLarsCorrects) {
  Config allreduce;
  allreduce.exchange.kind = ExchangeKind::kAllreduce;
  Config local_sgd = Gossip(topologies::GraphKind::kRing);
  local_sgd.exchange.period = 8;
  Config diloco = allreduce;
  diloco.exchange.outer.optimizer = OuterOptimizer::kNesterov;
  Config sgd = Gossip(topologies::GraphKind::kRing);
  sgd.train.optimizer = trainer::OptimizerKind::kSgd;
  Config gpu = Gossip(topologies::GraphKind::kRing);
  gpu.train.device = *trainer::ParseDevice("cuda");
  for (Config* c : {&allreduce, &local_sgd, &diloco, &sgd, &gpu}) {
    c->train.lars_norm = LarsNorm::kGlobalBatch;
    EXPECT_EQ(LarsNormNodes(*c, 16), 1);
  }
}

TEST(LarsNormNodesTest, ExplicitSettingsAndTheCap) {
  Config c = Gossip(topologies::GraphKind::kRing);
  c.train.lars_norm = LarsNorm::kLocal;
  EXPECT_EQ(LarsNormNodes(c, 16), 1);
  c.train.lars_norm = LarsNorm::kGlobalBatch;
  EXPECT_EQ(LarsNormNodes(c, 16), 0);
  c.train.lars_norm_nodes = 8;
  EXPECT_EQ(LarsNormNodes(c, 16), 8);
  c.train.lars_norm = LarsNorm::kMixed;
  c.train.lars_norm_nodes = 2;
  EXPECT_EQ(LarsNormNodes(c, 16), 2);  // the ring's 3, capped
  EXPECT_FALSE(MakeTrainerOptions(c, 256, 10).lars_norm_peer);
  // peer: the global batch's, from the peers' products.
  c.train.lars_norm = LarsNorm::kPeer;
  c.train.lars_norm_nodes = 0;
  EXPECT_EQ(LarsNormNodes(c, 16), 0);
  EXPECT_TRUE(MakeTrainerOptions(c, 256, 10).lars_norm_peer);
  // mean-sketch: no estimate of the node's own; the exchange hands over the mean's norm.
  c.train.lars_norm = LarsNorm::kMeanSketch;
  EXPECT_EQ(LarsNormNodes(c, 16), 1);
  EXPECT_TRUE(MakeTrainerOptions(c, 256, 10).lars_norm_mean);
  EXPECT_FALSE(MakeTrainerOptions(c, 256, 10).lars_norm_peer);
  c.exchange.period = 2;  // not every step: the node's own
  EXPECT_EQ(LarsNormNodes(c, 16), 1);
  EXPECT_FALSE(MakeTrainerOptions(c, 256, 10).lars_norm_peer);
  EXPECT_FALSE(MakeTrainerOptions(c, 256, 10).lars_norm_mean);
}

}  // namespace
}  // namespace chorus::node
