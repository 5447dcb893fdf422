// Tests of what the exchanges measure and leave at the end, with N nodes as
// threads over one LocalHub, each with its own trainer: the exact consensus
// distance against a closed form (and where it is not measured), and Finish
// leaving one model on every node, BatchNorm statistics and batch count
// included, under gossip (both consensus methods) and all-reduce.
#include "node/exchange/gossip_exchange.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "node/exchange/allreduce_exchange.h"
#include "node/exchange/first_bucket_tuner.h"
#include "node/exchange/trainer_state.h"
#include "topologies/graph_builders.h"
#include "tests/node/exchange/exchange_test_nodes.h"

namespace chorus::node {
namespace {

Config MakeConfig(ExchangeKind kind) {
  Config config;
  config.exchange.kind = kind;
  config.exchange.protocol = GossipProtocolKind::kDpsgd;
  config.topology.kind = topologies::GraphKind::kRing;
  config.fabric.op_timeout_s = 20.0;
  config.train.batch_size = 8;
  return config;
}

// Rank r holds (r + 1) v with v[i] = 1 + i % 4: the mean is (n + 1) / 2 v and
// the farthest replicas (ranks 0 and n - 1) are (n - 1) / 2 ||v|| from it.
void SetClosedFormMaster(trainer::Trainer& trainer, int rank) {
  std::span<float> x = trainer.MasterWeights();
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((rank + 1) * (1 + static_cast<int>(i % 4)));
  trainer.RefreshWorkingCopy();
}

TEST(GossipExchangeTest, ExactConsensusDistanceHasTheClosedForm) {
  for (int n : {2, 3, 5}) {
    SCOPED_TRACE("n " + std::to_string(n));
    std::vector<double> first(n), again(n);
    std::vector<nlohmann::json> metrics(n);
    const Config config = MakeConfig(ExchangeKind::kGossip);
    auto statuses = RunNodes(n, config, trainer::ModelKind::kMlp, [&](int r, Node& node) -> Status {
      SetClosedFormMaster(*node.trainer, r);
      CHORUS_ASSIGN_OR_RETURN(first[r], node.exchange->ExactConsensusDistance(7));
      // A second evaluation after the same step: the first's result, no messages.
      const nlohmann::json before = node.exchange->Metrics();
      CHORUS_ASSIGN_OR_RETURN(again[r], node.exchange->ExactConsensusDistance(7));
      metrics[r] = node.exchange->Metrics();
      if (metrics[r]["consensus_measure_bytes_sent"] != before["consensus_measure_bytes_sent"]) {
        return Internal("the second call communicated");
      }
      return Status::Ok();
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
      // Float rounding of the 1/n post-scale of the mean (~1e-7 relative).
      EXPECT_NEAR(first[r], (n - 1.0) / (n + 1.0), 1e-6);
      EXPECT_EQ(first[r], first[0]) << "every node records the same value";
      EXPECT_EQ(again[r], first[r]);
      // The measurement's bytes are counted apart: nothing was mixed, so the
      // training's bytes are 0.
      EXPECT_EQ(metrics[r]["bytes_sent"].get<uint64_t>(), 0u);
      EXPECT_GT(metrics[r]["consensus_measure_bytes_sent"].get<uint64_t>(), 0u);
      EXPECT_GE(metrics[r]["consensus_measure_seconds"].get<double>(), 0.0);
    }
  }
}

TEST(GossipExchangeTest, ExactConsensusDistanceIsNotMeasuredWhereNodesDoNotEvaluateTogether) {
  // Alone, after SetEvaluationsInLockstep(false), and under pairwise-async.
  Config pairwise = MakeConfig(ExchangeKind::kGossip);
  pairwise.exchange.protocol = GossipProtocolKind::kPairwiseAsync;
  struct Case {
    const char* name;
    int n;
    const Config config;
    bool lockstep;
  };
  const Case cases[] = {{"alone", 1, MakeConfig(ExchangeKind::kGossip), true},
                        {"sampled evaluations", 3, MakeConfig(ExchangeKind::kGossip), false},
                        {"pairwise-async", 3, pairwise, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<double> distances(c.n, 0.0);
    auto statuses = RunNodes(c.n, c.config, trainer::ModelKind::kMlp, [&](int r, Node& node) -> Status {
      node.exchange->SetEvaluationsInLockstep(c.lockstep);
      SetClosedFormMaster(*node.trainer, r);
      CHORUS_ASSIGN_OR_RETURN(distances[r], node.exchange->ExactConsensusDistance(3));
      return Status::Ok();
    });
    for (int r = 0; r < c.n; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
      EXPECT_EQ(distances[r], Exchange::kNotMeasured);
    }
  }
}

// Pairwise-async nodes evaluate at their own steps: each starts the
// measurement at its own moment, over a copy of its weights, and trains on;
// all get the closed form, and its bytes stay out of training's. A member
// that never starts it leaves the others unmeasured at their deadline, and
// a node whose measurement is still in progress starts no other.
TEST(GossipExchangeTest, PairwiseAsyncMeasuresTheDistanceBesideTraining) {
  Config config = MakeConfig(ExchangeKind::kGossip);
  config.exchange.protocol = GossipProtocolKind::kPairwiseAsync;
  config.fabric.op_timeout_s = 1.0;
  for (bool all_start : {true, false}) {
    SCOPED_TRACE(all_start ? "every member" : "rank 2 never starts it");
    const int n = 3;
    std::vector<std::vector<ConsensusMeasurement>> got(n);
    std::vector<nlohmann::json> metrics(n);
    std::vector<int> second_started(n, -1);
    auto statuses = RunNodes(n, config, trainer::ModelKind::kMlp, [&](int r, Node& node) -> Status {
      SetClosedFormMaster(*node.trainer, r);
      std::this_thread::sleep_for(std::chrono::milliseconds(100 * r));
      if (!all_start && r == 2) return Status::Ok();
      if (!node.exchange->StartConsensusMeasurement(1)) return Internal("not started");
      // Training goes on: the measurement holds its own copy.
      for (float& x : node.trainer->MasterWeights()) x = 0.0f;
      if (!all_start) second_started[r] = node.exchange->StartConsensusMeasurement(2) ? 1 : 0;
      got[r] = node.exchange->TakeConsensusMeasurements(/*wait=*/true);
      metrics[r] = node.exchange->Metrics();
      return Status::Ok();
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
      if (!all_start && r == 2) continue;
      ASSERT_EQ(got[r].size(), 1u) << "rank " << r;
      EXPECT_EQ(got[r][0].key, 1);
      EXPECT_EQ(metrics[r]["bytes_sent"].get<uint64_t>(), 0u) << "rank " << r;
      if (all_start) {
        EXPECT_NEAR(got[r][0].distance, (n - 1.0) / (n + 1.0), 1e-6) << "rank " << r;
        EXPECT_EQ(got[r][0].distance, got[0][0].distance);
        EXPECT_GT(metrics[r]["consensus_measure_bytes_sent"].get<uint64_t>(), 0u);
      } else {
        EXPECT_LT(got[r][0].distance, 0.0) << "rank " << r << ": measured without rank 2";
        EXPECT_EQ(second_started[r], 0) << "rank " << r << " started a second measurement beside the first";
      }
    }
  }
}

// The membership mode follows the exchange and the session's pacing: the
// all-reduce is lock step and its steps match; pairwise gossip's steps run
// apart, and its transitions switch to the own-pace mode when the session
// is paced so, whose resume sends nothing (the lock-step one agrees on a
// step with the others).
TEST(MembershipTransitionsTest, TheModeFollowsTheExchangeAndThePacing) {
  struct Flags {
    bool lockstep = false, apart = false, switched = false;
    uint64_t resume_bytes = 0;
  };
  Config pairwise = MakeConfig(ExchangeKind::kGossip);
  pairwise.exchange.protocol = GossipProtocolKind::kPairwiseAsync;
  const std::pair<const char*, Config> cases[] = {
      {"allreduce", MakeConfig(ExchangeKind::kAllreduce)},
      {"dpsgd", MakeConfig(ExchangeKind::kGossip)},
      {"pairwise", pairwise}};
  for (const auto& [name, config] : cases) {
    SCOPED_TRACE(name);
    std::vector<Flags> flags(2);
    auto statuses = RunNodes(2, config, trainer::ModelKind::kMlp, [&, &config = config](int r, Node& node) -> Status {
      MembershipTransitions& first = node.exchange->Transitions();
      flags[r].lockstep = first.StepsInLockstep();
      flags[r].apart = first.StepsRunApart();
      if (config.exchange.protocol != GossipProtocolKind::kPairwiseAsync ||
          config.exchange.kind != ExchangeKind::kGossip) {
        return Status::Ok();
      }
      node.session.SetOwnPace();
      MembershipTransitions& own = node.exchange->Transitions();
      flags[r].switched = &own != &first;
      const uint64_t before = node.session.transport->Stats().bytes_sent;
      CHORUS_RETURN_IF_ERROR(own.Resumed(5));
      flags[r].resume_bytes = node.session.transport->Stats().bytes_sent - before;
      if (own.TakeStepsToCatchUp() != 0) return Internal("steps to catch up at own pace");
      return Status::Ok();
    });
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
      EXPECT_EQ(flags[r].lockstep, std::string(name) == "allreduce") << r;
      EXPECT_EQ(flags[r].apart, std::string(name) == "pairwise") << r;
      EXPECT_EQ(flags[r].switched, std::string(name) == "pairwise") << r;
      EXPECT_EQ(flags[r].resume_bytes, 0u) << r;
    }
  }
}

TEST(AllreduceExchangeTest, ExactConsensusDistanceIsZeroWithoutCommunicating) {
  const int n = 3;
  std::vector<double> distances(n, -1.0);
  std::vector<uint64_t> bytes(n, 1);
  const Config config = MakeConfig(ExchangeKind::kAllreduce);
  auto statuses = RunNodes(n, config, trainer::ModelKind::kMlp, [&](int r, Node& node) -> Status {
    const uint64_t before = node.session.transport->Stats().bytes_sent;
    CHORUS_ASSIGN_OR_RETURN(distances[r], node.exchange->ExactConsensusDistance(3));
    bytes[r] = node.session.transport->Stats().bytes_sent - before;
    return Status::Ok();
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
    EXPECT_EQ(distances[r], 0.0);
    EXPECT_EQ(bytes[r], 0u);
  }
}

// Gives rank r's trainer its own weights (gossip) and BatchNorm state:
// statistic i is (r + 1) (1 + i % 4), the batch count 5 + r.
void SetRankState(trainer::Trainer& trainer, int rank, bool own_weights) {
  if (own_weights) SetClosedFormMaster(trainer, rank);
  std::span<float> stats = trainer.model().buffer_values();
  for (size_t i = 0; i < stats.size(); ++i) {
    stats[i] = static_cast<float>((rank + 1) * (1 + static_cast<int>(i % 4)));
  }
  trainer.model().set_num_batches_tracked(5 + rank);
}

// After Finish: every rank's weights and statistics have rank 0's bytes, the
// statistics are the mean, and the batch count is rank 0's.
void ExpectOneModel(const std::vector<std::vector<float>>& weights, const std::vector<std::vector<float>>& stats,
                    const std::vector<int64_t>& tracked) {
  const int n = static_cast<int>(weights.size());
  ASSERT_FALSE(stats[0].empty()) << "cnn-bn has BatchNorm statistics";
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(weights[r].size(), weights[0].size());
    EXPECT_EQ(std::memcmp(weights[r].data(), weights[0].data(), weights[0].size() * sizeof(float)), 0);
    ASSERT_EQ(stats[r].size(), stats[0].size());
    EXPECT_EQ(std::memcmp(stats[r].data(), stats[0].data(), stats[0].size() * sizeof(float)), 0);
    EXPECT_EQ(tracked[r], 5);
  }
  for (size_t i = 0; i < stats[0].size(); ++i) {
    // Small integers summed exactly; the 1/n post-scale rounds once.
    ASSERT_FLOAT_EQ(stats[0][i], (n + 1) / 2.0f * static_cast<float>(1 + i % 4)) << i;
  }
}

void CheckFinish(const Config& config, int n, bool own_weights) {
  std::vector<std::vector<float>> weights(n), stats(n);
  std::vector<int64_t> tracked(n, -1);
  auto statuses = RunNodes(n, config, trainer::ModelKind::kCnnBn, [&](int r, Node& node) -> Status {
    SetRankState(*node.trainer, r, own_weights);
    CHORUS_RETURN_IF_ERROR(node.exchange->Finish());
    const std::span<const float> w = node.trainer->MasterWeights();
    weights[r].assign(w.begin(), w.end());
    const std::span<const float> s = node.trainer->model().buffer_values();
    stats[r].assign(s.begin(), s.end());
    tracked[r] = node.trainer->model().num_batches_tracked();
    return Status::Ok();
  });
  for (int r = 0; r < n; ++r) ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
  ExpectOneModel(weights, stats, tracked);
}

// Batches of 2 and 6 under all-reduce, each node's gradients weighted by its
// share as the training loop sets them (ApplySampleWeights with the
// exchange's weighting): every node ends with the gradient of all 8 images,
// as one node computes it for the whole batch. The same with the MLP's
// gradient in one bucket, in two (fc3 + fc2 first, 134 KiB), and under the
// overlap model (-1), which decides after its measured steps, alike on every
// rank (on this host either way), and rebuilds the buckets if it splits them.
TEST(AllreduceExchangeTest, UnequalBatchesGiveTheGradientOfTheWholeGlobalBatch) {
  const std::vector<float> expected = WholeBatchGradients(8);
  const std::vector<int> batches = {2, 6};
  for (int first_bucket_kib : {0, 134, -1}) {
    SCOPED_TRACE("first_bucket_kib " + std::to_string(first_bucket_kib));
    Config config = MakeConfig(ExchangeKind::kAllreduce);
    config.exchange.first_bucket_kib = first_bucket_kib;
    const int steps = first_bucket_kib < 0 ? FirstBucketTuner::kWarmupSteps + FirstBucketTuner::kMeasuredSteps + 1 : 1;
    std::vector<std::vector<float>> got(2);
    std::vector<std::string> before(2), after(2);
    auto statuses = RunNodes(
        2, config, trainer::ModelKind::kMlp,
        [&](int r, Node& node) -> Status {
          EXPECT_EQ(node.exchange->SampleWeighting(), Exchange::Weighting::kGradient);
          ApplySampleWeights(node.exchange->SampleWeighting(), *node.trainer, batches, batches[r]);
          before[r] = node.exchange->Describe();
          for (int step = 0; step < steps; ++step) {
            CHORUS_RETURN_IF_ERROR(node.exchange->BeforeStep(step));
            CHORUS_RETURN_IF_ERROR(StatusOf(node.trainer->ForwardBackward(Images(r == 0 ? 0 : 2, batches[r]))));
            CHORUS_RETURN_IF_ERROR(node.exchange->AfterBackward(step, batches[r]));
          }
          after[r] = node.exchange->Describe();
          got[r].assign(node.trainer->Gradients().begin(), node.trainer->Gradients().end());
          return node.exchange->Finish();
        },
        batches);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
      ExpectSameGradients(got[r], expected, r);
    }
    if (first_bucket_kib == 134) {
      EXPECT_NE(after[0].find("2 fusion buckets"), std::string::npos) << after[0];
    }
    if (first_bucket_kib == 0) {
      EXPECT_NE(after[0].find("1 fusion buckets"), std::string::npos) << after[0];
    }
    if (first_bucket_kib < 0) {
      EXPECT_NE(before[0].find("overlap: measured in the first 13 steps"), std::string::npos) << before[0];
      const size_t at = after[0].find("overlap: ");
      ASSERT_NE(at, std::string::npos) << after[0];
      EXPECT_EQ(after[0].find("measured in the first"), std::string::npos) << after[0];
      // The choice, its reason and the layout it leads to: the same on both ranks.
      EXPECT_EQ(after[0].substr(at), after[1].substr(after[1].find("overlap: "))) << after[1];
    }
  }
}

// Gossip-PGA: every second step the exact mean replaces the mixing round.
// Rank r holds (r + 1) v: after step 0's ring round the replicas still
// differ, after step 1 every one is the mean, 3 v.
TEST(GossipExchangeTest, AnExactAverageReplacesTheMixingEveryPSteps) {
  const int n = 5;
  Config config = MakeConfig(ExchangeKind::kGossip);
  config.exchange.global_average_every = 2;
  std::vector<double> spread_after_mix(n), err_after_average(n);
  std::vector<nlohmann::json> metrics(n);
  auto statuses = RunNodes(n, config, trainer::ModelKind::kMlp, [&](int r, Node& node) -> Status {
    SetClosedFormMaster(*node.trainer, r);
    CHORUS_RETURN_IF_ERROR(node.exchange->AfterUpdate(0));
    std::span<const float> x = node.trainer->MasterWeights();
    spread_after_mix[r] = std::abs(x[0] - 3.0f);
    CHORUS_RETURN_IF_ERROR(node.exchange->AfterUpdate(1));
    double err = 0.0;
    for (size_t i = 0; i < x.size(); ++i) err = std::max(err, std::abs(x[i] - 3.0 * (1 + static_cast<int>(i % 4))));
    err_after_average[r] = err;
    metrics[r] = node.exchange->Metrics();
    return Status::Ok();
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
    EXPECT_LT(err_after_average[r], 1e-5) << r;
    EXPECT_EQ(metrics[r]["global_averages"], 1) << r;
  }
  EXPECT_GT(spread_after_mix[0], 0.1);  // node 0's ring neighbours are 1 and 4: its round gives 2, not 3
}

// LARS's peer norm: every step each node swaps its gradient's sketch with
// the step's peers on the one-peer exponential graph, and its trust ratio
// takes the global batch's norm estimated from their products: below its
// own batch's, whose noise the peers' products leave out.
TEST(GossipExchangeTest, ThePeerNormSwapsSketchesEveryStepAndSeesTheGlobalBatch) {
  const int n = 4;
  Config config = MakeConfig(ExchangeKind::kGossip);
  config.topology.kind = topologies::GraphKind::kOnePeerExponential;
  std::vector<nlohmann::json> metrics(n);
  std::vector<double> ratio(n);
  auto tune = [](trainer::TrainerOptions& o) {
    o.lars_norm_nodes = 0;  // the global batch's
    o.lars_norm_peer = true;
    o.global_batch = 32;
  };
  auto statuses = RunNodes(
      n, config, trainer::ModelKind::kMlp,
      [&](int r, Node& node) -> Status {
        for (int64_t step = 0; step < 3; ++step) {
          const int first = 8 * (4 * static_cast<int>(step) + r);
          CHORUS_ASSIGN_OR_RETURN(trainer::ForwardBackwardResult pass, node.trainer->ForwardBackward(Images(first, 8)));
          (void)pass;
          CHORUS_RETURN_IF_ERROR(node.exchange->AfterBackward(step, 8));
          CHORUS_ASSIGN_OR_RETURN(trainer::UpdateResult update, node.trainer->ApplyUpdate(step));
          (void)update;
          CHORUS_RETURN_IF_ERROR(node.exchange->AfterUpdate(step));
        }
        ratio[r] = node.trainer->optimizer().last_norm_ratio()[0];
        metrics[r] = node.exchange->Metrics();
        return Status::Ok();
      },
      {}, tune);
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
    EXPECT_EQ(metrics[r]["lars_peer_norm"]["steps"], 3) << metrics[r].dump();
    EXPECT_EQ(metrics[r]["lars_peer_norm"]["rejected_sketches"], 0) << r;
    EXPECT_LT(ratio[r], 1.0) << "node " << r << ": the global batch's norm is below its own";
    EXPECT_GE(ratio[r], 0.5 - 1e-9) << "node " << r << ": at least the norm of 4 batches of pure noise";
  }
}

// A neighbour whose parameters are rejected as outliers poison_expel_after
// times in a row is expelled, by its neighbours only, and named once in the
// metrics however long its values keep being rejected before the view
// without it comes.
TEST(GossipExchangeTest, ARepeatOutlierIsExpelledOnce) {
  const int n = 4;
  Config config = MakeConfig(ExchangeKind::kGossip);
  config.exchange.poison_expel_after = 3;
  std::vector<nlohmann::json> metrics(n);
  auto statuses = RunNodes(n, config, trainer::ModelKind::kMlp, [&](int r, Node& node) -> Status {
    for (int64_t step = 0; step < 8; ++step) {
      SetClosedFormMaster(*node.trainer, 0);
      if (r == 3) {
        for (float& x : node.trainer->MasterWeights()) x *= 1e4f;
      }
      CHORUS_RETURN_IF_ERROR(node.exchange->AfterUpdate(step));
    }
    metrics[r] = node.exchange->Metrics();
    return Status::Ok();
  });
  for (int r = 0; r < n; ++r) ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
  // Ring neighbours of rank 3: ranks 0 and 2, each rejecting it 8 times.
  for (int r : {0, 2}) {
    EXPECT_EQ(metrics[r]["poison"]["expelled"], nlohmann::json::array({"node3"})) << "rank " << r << ": " << metrics[r];
    EXPECT_GE(metrics[r]["poison"]["rejected_outliers"].get<int64_t>(), 6) << "rank " << r;
  }
  EXPECT_EQ(metrics[1]["poison"]["expelled"], nlohmann::json::array()) << metrics[1];
}

// Consensus control doubles the rounds a step while the measured distance is
// above its bound (up to the cap) and halves them under a quarter of it;
// every rank measures the same distance, so all run the same rounds.
TEST(GossipExchangeTest, ConsensusControlAddsRoundsWhileTheDistanceIsAboveItsBound) {
  const int n = 4;
  for (double bound : {1e-12, 1e6}) {
    SCOPED_TRACE("bound " + std::to_string(bound));
    Config config = MakeConfig(ExchangeKind::kGossip);
    config.exchange.consensus_control = bound;
    config.exchange.consensus_control_every = 1;
    config.exchange.consensus_control_max_rounds = 4;
    std::vector<nlohmann::json> metrics(n);
    auto statuses = RunNodes(n, config, trainer::ModelKind::kMlp, [&](int r, Node& node) -> Status {
      SetClosedFormMaster(*node.trainer, r);
      for (int step = 0; step < 3; ++step) CHORUS_RETURN_IF_ERROR(node.exchange->AfterUpdate(step));
      metrics[r] = node.exchange->Metrics();
      return Status::Ok();
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
      // Above the bound: 1, 2, then 4 rounds (7 in all), capped at 4 a step;
      // far under it: one round a step, never fewer.
      EXPECT_EQ(metrics[r]["mix_rounds_per_step"], bound < 1 ? 4 : 1) << r;
      EXPECT_EQ(metrics[r]["mix_rounds"], bound < 1 ? 7 : 3) << r;
      EXPECT_GE(metrics[r]["consensus_control_distance"].get<double>(), 0.0) << r;
    }
  }
}

// 16 members in 4 sites that interleave (member i in site i mod 4): the ring
// is placed by site (4 edges across instead of 16), the one-peer
// exponential graph stays in rank order, where its hops of 4 and 8 stay
// inside sites (32 edges across of 64, against 44 placed).
TEST(GossipExchangeTest, AGraphIsPlacedBySiteOnlyWhereThatCrossesLess) {
  MembershipView view = View(0, 16);
  for (int i = 0; i < 16; ++i) view.members[static_cast<size_t>(i)].site = "site" + std::to_string(i % 4);
  auto crossings = [&](const topologies::Graph& g) {
    int across = 0;
    for (int t = 0; t < g.Period(); ++t) {
      for (int i = 0; i < 16; ++i) {
        for (int j : g.OutNeighbors(i, t)) across += i % 4 != j % 4;
      }
    }
    return across;
  };
  Result<topologies::Graph> ring = PlacedBySite(*topologies::BidirectionalRingGraph(16), view, true);
  ASSERT_TRUE(ring) << ring.error().ToString();
  EXPECT_EQ(crossings(*ring), 8);  // 4 undirected edges, both ways
  Result<topologies::Graph> one_peer = PlacedBySite(*topologies::OnePeerExponentialGraph(16), view, true);
  ASSERT_TRUE(one_peer) << one_peer.error().ToString();
  EXPECT_EQ(crossings(*one_peer), 32);
  EXPECT_EQ(one_peer->OutNeighbors(0, 2), std::vector<int>({4}));  // rank order: 0 -> 0 + 4
  EXPECT_EQ(crossings(*PlacedBySite(*topologies::BidirectionalRingGraph(16), view, false)), 32);
}

TEST(GossipExchangeTest, FinishLeavesOneModelBatchNormIncluded) {
  for (ConsensusSetting consensus : {ConsensusSetting::kAllreduce, ConsensusSetting::kRounds}) {
    for (int n : {2, 3}) {
      SCOPED_TRACE(std::string(SettingName(consensus)) + " n " + std::to_string(n));
      Config config = MakeConfig(ExchangeKind::kGossip);
      config.exchange.consensus = consensus;
      // Rounds that stop far short of the bound: the replicas are still made one.
      config.exchange.consensus_max_rounds = 2;
      CheckFinish(config, n, /*own_weights=*/true);
    }
  }
}

TEST(AllreduceExchangeTest, FinishAveragesTheBatchNormStatistics) {
  for (int n : {2, 3}) {
    SCOPED_TRACE("n " + std::to_string(n));
    CheckFinish(MakeConfig(ExchangeKind::kAllreduce), n, /*own_weights=*/false);
  }
}

}  // namespace
}  // namespace chorus::node
