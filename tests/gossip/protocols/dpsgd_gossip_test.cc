// Tests of D-PSGD gossip over the local transport (N nodes as threads): average
// preservation, the convergence rate the spectral gap predicts, local SGD,
// rejection of non-finite neighbours, and a killed node.
#include "gossip/protocols/dpsgd_gossip.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cmath>
#include <latch>
#include <mutex>
#include <string>
#include <vector>

#include "gossip/protocols/choco_gossip.h"
#include "gossip/protocols/pairwise_gossip.h"
#include "gossip/protocols/push_sum_gossip.h"
#include "gossip/transport/subgroup_transport.h"
#include "tests/gossip/gossip_test_util.h"
#include "topologies/graph_builders.h"
#include "topologies/spectral_gap.h"

namespace chorus::gossip {
namespace {

using testing::ConsensusDistance;
using testing::DeviationNorm;
using testing::MeanOf;
using testing::RandomVector;
using testing::RunGossipNodes;
using testing::TotalSum;

topologies::Graph DpsgdMust(Result<topologies::Graph> g) {
  EXPECT_TRUE(g.has_value()) << g.error().ToString();
  return std::move(*g);
}

void ExpectAllOk(const std::vector<Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();
  }
}

// Runs `rounds` D-PSGD rounds on every node of `graph` from RandomVector(seed);
// history[t][r] is rank r's vector after t rounds (t = 0: the start).
std::vector<std::vector<std::vector<float>>> RunDpsgd(const topologies::Graph& graph, int rounds,
                                                      size_t len, uint64_t seed, double lo,
                                                      double hi) {
  const int n = graph.NumNodes();
  std::vector<std::vector<std::vector<float>>> history(rounds + 1,
                                                       std::vector<std::vector<float>>(n));
  auto statuses = RunGossipNodes(n, [&](int r, Transport& t, LocalHub&) -> Status {
    CHORUS_ASSIGN_OR_RETURN(auto p, DpsgdGossip::Create(t, graph, DpsgdOptions{}));
    auto x = RandomVector(seed, r, len, lo, hi);
    history[0][r] = x;
    for (int round = 0; round < rounds; ++round) {
      CHORUS_RETURN_IF_ERROR(p->Mix(x, round, Deadline::AfterSeconds(20)));
      history[round + 1][r] = x;
    }
    const GossipStats s = p->Stats();
    if (s.mix_rounds != static_cast<uint64_t>(rounds)) return Internal("mix_rounds mismatch");
    const uint64_t degree = graph.OutNeighbors(r).size();
    const uint64_t wire = 16 + 4 * len;  // codec "none": header + f32 values
    if (s.messages_sent != degree * rounds || s.bytes_sent != degree * rounds * wire ||
        s.bytes_received != degree * rounds * wire) {
      return Internal("byte counters do not match degree x rounds x message size");
    }
    return Status::Ok();
  });
  ExpectAllOk(statuses);
  return history;
}

TEST(DpsgdGossipTest, MixingPreservesTheSum) {
  for (auto graph :
       {DpsgdMust(topologies::BidirectionalRingGraph(5)), DpsgdMust(topologies::TorusGraph(6, {2, 3})),
        DpsgdMust(topologies::RandomRegularGraph(7, 4, 3))}) {
    SCOPED_TRACE(graph.Name());
    // Values in [1, 2): the sum stays far from 0, so a relative bound is meaningful.
    auto history = RunDpsgd(graph, 20, 1001, 21, 1.0, 2.0);
    const double before = TotalSum(history.front());
    const double after = TotalSum(history.back());
    // W is doubly stochastic, so sum_i x_i is invariant in exact arithmetic. Each
    // node rounds each element once per round (accumulated in double): <= 2^-24
    // relative per element, independent signs, so the total over 20 rounds drifts
    // far below 1e-6 relative; a wrong weight would move it by percent.
    EXPECT_NEAR(after, before, 1e-6 * std::fabs(before));
    // Per element: the same bound summed over 20 rounds x nodes without cancellation
    // is 20 * 7 * 2^-24 ~ 8e-6.
    const auto mean0 = MeanOf(history.front());
    const auto mean1 = MeanOf(history.back());
    for (size_t i = 0; i < mean0.size(); ++i) EXPECT_NEAR(mean1[i], mean0[i], 1e-5 * mean0[i]);
    EXPECT_LT(ConsensusDistance(history.back()), ConsensusDistance(history.front()));
  }
}

// The distance to consensus shrinks like |lambda_2|^t = (1 - gap)^t.
void CheckSpectralRate(const topologies::Graph& graph, int rounds, int tail_from) {
  SCOPED_TRACE(graph.Name());
  auto gap = topologies::GraphSpectralGap(graph);
  ASSERT_TRUE(gap.has_value()) << gap.error().ToString();
  ASSERT_TRUE(gap->exact);
  const double lambda = 1.0 - gap->gap_per_round;
  auto history = RunDpsgd(graph, rounds, 64, 31, -1.0, 1.0);
  std::vector<double> e;
  for (const auto& xs : history) e.push_back(DeviationNorm(xs));
  double scale = 0.0;  // ||X_0||, for the float rounding floor
  for (const auto& x : history[0]) {
    for (float v : x) scale += v * v;
  }
  scale = std::sqrt(scale);
  for (int t = 1; t <= rounds; ++t) {
    // Upper bound, a theorem for symmetric W: e_t <= lambda^t e_0; the slack is
    // float rounding, about 1e-7 ||X_0|| per round.
    EXPECT_LE(e[t], std::pow(lambda, t) * e[0] + 1e-6 * scale) << "round " << t;
  }
  // Asymptotic rate: from tail_from on the lambda_2 component dominates (the next
  // eigenvalue's share has shrunk by (|lambda_3| / lambda_2)^tail_from), so the
  // measured per-round rate matches lambda_2 within 5%.
  const double measured = std::pow(e[rounds] / e[tail_from], 1.0 / (rounds - tail_from));
  EXPECT_NEAR(measured, lambda, 0.05 * lambda) << "gap " << gap->gap_per_round;
}

TEST(DpsgdGossipTest, ConvergesAtTheSpectralGapRateOnRing) {
  // Ring of 8 with MH weights 1/3: lambda_2 = 1/3 + 2/3 cos(2 pi / 8) = 0.805.
  CheckSpectralRate(DpsgdMust(topologies::BidirectionalRingGraph(8)), 40, 15);
}

TEST(DpsgdGossipTest, ConvergesAtTheSpectralGapRateOnTorus) {
  // 3x3 torus with MH weights 1/5: lambda_2 = 0.4, next |lambda| = 0.2.
  CheckSpectralRate(DpsgdMust(topologies::TorusGraph(9, {3, 3})), 10, 4);
}

TEST(DpsgdGossipTest, LocalSgdPeriodSkipsRounds) {
  const auto graph = DpsgdMust(topologies::BidirectionalRingGraph(4));
  auto statuses = RunGossipNodes(4, [&](int r, Transport& t, LocalHub&) -> Status {
    DpsgdOptions options;
    options.period = 3;
    CHORUS_ASSIGN_OR_RETURN(auto p, DpsgdGossip::Create(t, graph, options));
    auto x = RandomVector(41, r, 10);
    for (int round = 0; round < 9; ++round) {
      x[0] += 0.25f * static_cast<float>(r + 1);  // a local step that differs per node
      const auto before = x;
      CHORUS_RETURN_IF_ERROR(p->Mix(x, round, Deadline::AfterSeconds(20)));
      const bool mixed = (round + 1) % 3 == 0;
      if ((x != before) != mixed)
        return Internal("round " + std::to_string(round) + " mixed wrongly");
    }
    const GossipStats s = p->Stats();
    if (s.mix_rounds != 3 || s.skipped_rounds != 6 || s.messages_sent != 6) {
      return Internal("counters: mix " + std::to_string(s.mix_rounds) + " skipped " +
                      std::to_string(s.skipped_rounds));
    }
    return Status::Ok();
  });
  ExpectAllOk(statuses);
}

TEST(DpsgdGossipTest, RejectsAndCountsNonFiniteNeighbours) {
  const auto graph = DpsgdMust(topologies::BidirectionalRingGraph(4));  // 0's neighbours: 1, 3
  std::vector<std::vector<float>> finals(4);
  std::vector<GossipStats> stats(4);
  auto statuses = RunGossipNodes(4, [&](int r, Transport& t, LocalHub&) -> Status {
    CHORUS_ASSIGN_OR_RETURN(auto p, DpsgdGossip::Create(t, graph, DpsgdOptions{}));
    auto x = RandomVector(51, r, 33);
    if (r == 0) x[5] = NAN;
    for (int round = 0; round < 6; ++round) {
      CHORUS_RETURN_IF_ERROR(p->Mix(x, round, Deadline::AfterSeconds(20)));
    }
    finals[r] = x;
    stats[r] = p->Stats();
    return Status::Ok();
  });
  ExpectAllOk(statuses);
  EXPECT_EQ(stats[1].rejected_nonfinite, 6u);
  EXPECT_EQ(stats[3].rejected_nonfinite, 6u);
  EXPECT_EQ(stats[2].rejected_nonfinite, 0u);
  for (int r = 1; r < 4; ++r) {
    for (float v : finals[r]) ASSERT_TRUE(std::isfinite(v)) << "rank " << r;
  }
}

TEST(GossipProtocolsTest, ASingleNodeKeepsItsValue) {
  // World size 1: no neighbours, nothing to send; every protocol leaves x as is.
  const auto graph = DpsgdMust(topologies::CompleteGraph(1));
  auto statuses = RunGossipNodes(1, [&](int, Transport& t, LocalHub&) -> Status {
    const auto x0 = RandomVector(55, 0, 9);
    std::vector<std::unique_ptr<GossipProtocol>> protocols;
    CHORUS_ASSIGN_OR_RETURN(auto d, DpsgdGossip::Create(t, graph, {}));
    protocols.push_back(std::move(d));
    CHORUS_ASSIGN_OR_RETURN(auto p, PushSumGossip::Create(t, graph, {}));
    protocols.push_back(std::move(p));
    CHORUS_ASSIGN_OR_RETURN(auto c, ChocoGossip::Create(t, graph, {}));
    protocols.push_back(std::move(c));
    CHORUS_ASSIGN_OR_RETURN(auto a, PairwiseGossip::Create(t, graph, {}, x0));
    protocols.push_back(std::move(a));
    for (auto& protocol : protocols) {
      auto x = x0;
      for (int round = 0; round < 3; ++round) {
        CHORUS_RETURN_IF_ERROR(protocol->Mix(x, round, Deadline::AfterSeconds(5)));
      }
      if (x != x0) return Internal(std::string(protocol->Name()) + " changed a lone node's value");
      if (protocol->Stats().bytes_sent != 0) return Internal("a lone node sent bytes");
    }
    return Status::Ok();
  });
  ExpectAllOk(statuses);
}

TEST(DpsgdGossipTest, RejectsABadGraph) {
  LocalHubOptions options;
  options.world_size = 3;
  auto hub = LocalHub::Create(options);
  auto transports = hub->MakeAll();
  // Directed and irregular: node 2 has in-degree 2, the others 1.
  auto irregular = topologies::Graph::Create("irregular", 3, {{{1, 2}, {2}, {0}}});
  ASSERT_TRUE(irregular.has_value());
  auto directed = DpsgdGossip::Create(*transports[0], *irregular, {});
  ASSERT_FALSE(directed.has_value());
  EXPECT_NE(directed.error().message().find("not regular"), std::string::npos);
  // A directed ring is regular (in = out = 1): accepted.
  EXPECT_TRUE(DpsgdGossip::Create(*transports[0], DpsgdMust(topologies::RingGraph(3)), {}).has_value());
  auto wrong_size =
      DpsgdGossip::Create(*transports[0], DpsgdMust(topologies::BidirectionalRingGraph(4)), {});
  ASSERT_FALSE(wrong_size.has_value());
  EXPECT_NE(wrong_size.error().message().find("4 nodes"), std::string::npos);
}

TEST(DpsgdGossipTest, SurvivorsDetectAKilledNodeAndReachConsensusAfterRebuild) {
  constexpr int kN = 5;
  constexpr int kVictim = 2;
  constexpr int kKillRound = 5;
  const std::vector<int> survivors = {0, 1, 3, 4};  // slots; new ranks 0..3
  const auto graph = DpsgdMust(topologies::BidirectionalRingGraph(kN));
  const auto rebuilt = DpsgdMust(topologies::BidirectionalRingGraph(4));

  std::vector<DpsgdGossip*> protocols(kN, nullptr);
  std::latch created(kN);
  std::latch all_failed(static_cast<int>(survivors.size()));
  std::once_flag membership_change;
  std::vector<Status> failures(kN);
  std::vector<std::vector<float>> restart(kN);
  std::vector<std::vector<float>> finals(kN);

  auto statuses = RunGossipNodes(kN, [&](int r, Transport& t, LocalHub& hub) -> Status {
    CHORUS_ASSIGN_OR_RETURN(auto p, DpsgdGossip::Create(t, graph, DpsgdOptions{}));
    protocols[r] = p.get();
    created.arrive_and_wait();
    auto x = RandomVector(61, r, 50);
    if (r == kVictim) {
      for (int round = 0; round < kKillRound; ++round) {
        CHORUS_RETURN_IF_ERROR(p->Mix(x, round, Deadline::AfterSeconds(20)));
      }
      hub.Kill(r);
      return Status::Ok();
    }
    // Epoch 0 until something fails.
    for (int round = 0;; ++round) {
      Status s = p->Mix(x, round, Deadline::AfterSeconds(20));
      if (s.ok()) continue;
      failures[r] = s;
      break;
    }
    // The membership layer (simulated): the first failure interrupts every survivor
    // once; everyone re-forms after all have left epoch 0.
    std::call_once(membership_change, [&] {
      for (int q : survivors) protocols[q]->Interrupt();
    });
    all_failed.arrive_and_wait();
    std::vector<PeerInfo> peers;
    int self = -1;
    for (int k = 0; k < static_cast<int>(survivors.size()); ++k) {
      peers.push_back(
          PeerInfo{k, LocalHub::EncodeAddress(survivors[k]), hub.SlotName(survivors[k])});
      if (survivors[k] == r) self = k;
    }
    CHORUS_RETURN_IF_ERROR(t.SetPeers(self, peers));
    CHORUS_RETURN_IF_ERROR(p->SetTopology(rebuilt, 1, x));
    restart[r] = x;
    for (int round = 0; round < 40; ++round) {
      CHORUS_RETURN_IF_ERROR(p->Mix(x, round, Deadline::AfterSeconds(20)));
    }
    finals[r] = x;
    return Status::Ok();
  });
  ExpectAllOk(statuses);

  int detected = 0;
  for (int r : survivors) {
    const Status& f = failures[r];
    if (f.code() == StatusCode::kUnavailable) {
      ++detected;
      EXPECT_NE(f.message().find("rank 2 (local2)"), std::string::npos) << f.ToString();
    } else {
      EXPECT_EQ(f.code(), StatusCode::kAborted) << "rank " << r << ": " << f.ToString();
    }
  }
  EXPECT_GE(detected, 1) << "no survivor named the dead peer";

  std::vector<std::vector<float>> start, end;
  for (int r : survivors) {
    start.push_back(restart[r]);
    end.push_back(finals[r]);
  }
  const auto target = MeanOf(start);
  for (const auto& x : end) {
    for (size_t i = 0; i < x.size(); ++i) {
      // Ring of 4 with MH weights: rate 1/3 per round, 40 rounds: exact up to float
      // rounding of values in [-1, 1] (a few 1e-8).
      EXPECT_NEAR(x[i], target[i], 1e-6) << i;
    }
  }
}

}  // namespace
}  // namespace chorus::gossip

namespace chorus::gossip {
namespace {

// D-PSGD on the one-peer exponential graph (directed, time-varying, regular):
// uniform weights 1/2 make W doubly stochastic, so every round keeps the
// average, and log2(n) rounds of a power-of-two n reach it exactly (each round
// halves the number of distinct values, as in recursive doubling); other n
// converge geometrically.
TEST(DpsgdGossipTest, OnePeerExponentialKeepsTheAverageAndConverges) {
  for (int n : {4, 8, 6}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto graph = DpsgdMust(topologies::OnePeerExponentialGraph(n));
    ASSERT_FALSE(graph.IsUndirected());
    std::vector<std::vector<float>> finals(n);
    const size_t len = 37;
    auto statuses = RunGossipNodes(n, [&](int r, Transport& t, LocalHub&) -> Status {
      CHORUS_ASSIGN_OR_RETURN(auto p, DpsgdGossip::Create(t, graph, DpsgdOptions{}));
      auto x = RandomVector(77, r, len);
      for (int round = 0; round < 40; ++round) {
        CHORUS_RETURN_IF_ERROR(p->Mix(x, round, Deadline::AfterSeconds(20)));
      }
      finals[r] = x;
      return Status::Ok();
    });
    ExpectAllOk(statuses);
    for (size_t i = 0; i < len; ++i) {
      double mean = 0.0;
      for (int r = 0; r < n; ++r) mean += RandomVector(77, r, len)[i];
      mean /= n;
      for (int r = 0; r < n; ++r) {
        // float storage between rounds: a few ulps of values in [-1, 1].
        ASSERT_NEAR(finals[r][i], mean, 1e-5) << "rank " << r << " element " << i;
      }
    }
  }
}

// D-PSGD inside groups of a membership (SubgroupTransport): ranks 0, 2, 4 and
// 1, 3, 5 gossip on their own one-peer exponential graphs over one
// transport. Each group keeps its own sum and reaches its own mean; nothing
// crosses between the groups; completions name the local rank.
TEST(DpsgdGossipTest, GroupsOfOneTransportMixAmongThemselvesOnly) {
  const int n = 6;
  const size_t len = 257;
  std::vector<std::vector<float>> start(n), end(n);
  auto statuses = RunGossipNodes(n, [&](int r, Transport& t, LocalHub&) -> Status {
    const std::vector<Rank> group = r % 2 == 0 ? std::vector<Rank>{0, 2, 4} : std::vector<Rank>{1, 3, 5};
    CHORUS_ASSIGN_OR_RETURN(auto sub, SubgroupTransport::Create(t, group));
    if (sub->rank() != r / 2 || sub->size() != 3 || sub->WorldRank(sub->rank()) != r) {
      return Internal("local rank of world rank " + std::to_string(r) + " is " + std::to_string(sub->rank()));
    }
    if (sub->Isend(3, 1, {}).has_value() || sub->Irecv(kAnySource, 1, {}).has_value()) {
      return Internal("a rank outside the group was accepted");
    }
    CHORUS_ASSIGN_OR_RETURN(auto graph, topologies::OnePeerExponentialGraph(3));
    CHORUS_ASSIGN_OR_RETURN(auto p, DpsgdGossip::Create(*sub, graph, DpsgdOptions{}));
    std::vector<float> x = RandomVector(5, r, len, r % 2 == 0 ? 1.0 : 10.0, r % 2 == 0 ? 2.0 : 20.0);
    start[static_cast<size_t>(r)] = x;
    for (int round = 0; round < 40; ++round) CHORUS_RETURN_IF_ERROR(p->Mix(x, round, Deadline::AfterSeconds(20)));
    end[static_cast<size_t>(r)] = x;
    // One message to the local rank's neighbour, whose completion names it locally.
    const Rank next = (sub->rank() + 1) % 3, prev = (sub->rank() + 2) % 3;
    std::array<std::byte, 4> in{}, out{};
    CHORUS_ASSIGN_OR_RETURN(RequestPtr recv, sub->Irecv(prev, 7, in));
    CHORUS_RETURN_IF_ERROR(sub->Send(next, 7, out, Deadline::AfterSeconds(20)));
    CHORUS_ASSIGN_OR_RETURN(Completion c, recv->Wait(Deadline::AfterSeconds(20)));
    if (c.source != prev) return Internal("completion names rank " + std::to_string(c.source));
    return Status::Ok();
  });
  ExpectAllOk(statuses);
  for (int parity = 0; parity < 2; ++parity) {
    std::vector<std::vector<float>> before, after;
    for (int r = parity; r < n; r += 2) {
      before.push_back(start[static_cast<size_t>(r)]);
      after.push_back(end[static_cast<size_t>(r)]);
    }
    EXPECT_NEAR(TotalSum(after), TotalSum(before), 1e-5 * std::abs(TotalSum(before))) << "group " << parity;
    EXPECT_LT(ConsensusDistance(after), 1e-4) << "group " << parity;
    const double mean = TotalSum(before) / (3.0 * static_cast<double>(len));
    EXPECT_NEAR(after[0][0], mean, 0.2 * mean) << "group " << parity;  // a group's own scale: [1,2) or [10,20)
  }
}

TEST(DpsgdGossipTest, AGroupMustNameDistinctRanksOfTheTransportIncludingItself) {
  auto statuses = RunGossipNodes(3, [&](int r, Transport& t, LocalHub&) -> Status {
    for (const std::vector<Rank>& bad : {std::vector<Rank>{0, 0, 1, 2}, std::vector<Rank>{0, 1, 2, 3},
                                         std::vector<Rank>{(r + 1) % 3}}) {
      if (SubgroupTransport::Create(t, bad).has_value()) return Internal("a bad group was accepted");
    }
    return Status::Ok();
  });
  ExpectAllOk(statuses);
}

}  // namespace
}  // namespace chorus::gossip
