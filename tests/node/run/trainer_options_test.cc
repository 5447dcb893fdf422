// Tests of the LARS norm a node's trust ratio sees (LarsNormNodes): auto
// follows the exchange, the graph and the device; the explicit settings and
// the cap.
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

TEST(LarsNormNodesTest, AutoFollowsTheExchangeTheGraphAndTheDevice) {
  // One gossip round on a ring averages the node and its two neighbours; on
  // the one-peer exponential graph the node and one peer; on the complete
  // graph every node.
  EXPECT_EQ(LarsNormNodes(Gossip(topologies::GraphKind::kRing), 16), 3);
  EXPECT_EQ(LarsNormNodes(Gossip(topologies::GraphKind::kOnePeerExponential), 16), 2);
  EXPECT_EQ(LarsNormNodes(Gossip(topologies::GraphKind::kComplete), 16), 16);
  // Quasi-global momentum: the global batch (0).
  Config qgm = Gossip(topologies::GraphKind::kOnePeerExponential);
  qgm.exchange.gossip_momentum = GossipMomentum::kQuasiGlobal;
  EXPECT_EQ(LarsNormNodes(qgm, 64), 0);
  // Its own norm: under all-reduce (its gradient is the global batch's), with
  // local steps between mixing rounds or outer steps, with SGD, on a GPU.
  Config allreduce;
  allreduce.exchange.kind = ExchangeKind::kAllreduce;
  EXPECT_EQ(LarsNormNodes(allreduce, 16), 1);
  Config local_sgd = Gossip(topologies::GraphKind::kRing);
  local_sgd.exchange.period = 8;
  EXPECT_EQ(LarsNormNodes(local_sgd, 16), 1);
  Config diloco = allreduce;
  diloco.exchange.outer.optimizer = OuterOptimizer::kNesterov;
  EXPECT_EQ(LarsNormNodes(diloco, 16), 1);
  Config sgd = Gossip(topologies::GraphKind::kRing);
  sgd.train.optimizer = trainer::OptimizerKind::kSgd;
  EXPECT_EQ(LarsNormNodes(sgd, 16), 1);
  Config gpu = Gossip(topologies::GraphKind::kRing);
  gpu.train.device = *trainer::ParseDevice("cuda");
  EXPECT_EQ(LarsNormNodes(gpu, 16), 1);
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
  // Under all-reduce the explicit settings apply as well.
  c.exchange.kind = ExchangeKind::kAllreduce;
  c.train.lars_norm = LarsNorm::kGlobalBatch;
  c.train.lars_norm_nodes = 0;
  EXPECT_EQ(LarsNormNodes(c, 4), 0);
}

}  // namespace
}  // namespace chorus::node
