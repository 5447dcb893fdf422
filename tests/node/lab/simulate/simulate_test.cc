// Tests of `chorus simulate` (node/lab/simulate/simulate.h): a tiny simulation (8 virtual
// nodes, ring all-reduce and D-PSGD ring, 4 steps) writes the run-directory
// contract's files with consistent bytes and virtual times, all-reduce replicas
// end identical, gossip reaches consensus, virtual times are reproducible (also
// for asynchronous pairwise gossip, at each node's own pace); and the methods
// that virtual time cannot run are refused with the reason.
#include "node/lab/simulate/simulate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "node/config/config_parse.h"
#include "node/lab/report/report.h"
#include "tests/util/temp_dir.h"

namespace chorus::node {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

constexpr const char* kDataDir = "/usr/share/datasets/fashion-mnist";
constexpr int kSimNodes = 8;
constexpr int kSimBatch = 16;
constexpr int kSteps = 4;  // per node: train_limit = kSimNodes * kSimBatch * kSteps
constexpr double kComputeS = 1e-3;
constexpr double kLatencyS = 50e-6;
constexpr double kBytesPerS = 1.25e9;  // 10 Gbit/s
// Serialisation time of one float in each of the 2(n-1) ring rounds of a step.
constexpr double kOneFloatPerRound = 2 * (kSimNodes - 1) * 4 / kBytesPerS;

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

std::vector<json> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  return lines;
}

class SimulateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(kDataDir) + "/train-images-idx3-ubyte.gz")) {
      GTEST_SKIP() << "dataset-fashion-mnist is not installed (" << kDataDir << ")";
    }
  }

  SimulateOptions TinyOptions(const std::vector<std::string>& methods) {
    SimulateOptions o;
    o.base = DefaultConfig();
    o.base.data.dir = kDataDir;
    o.base.data.train_limit = kSimNodes * kSimBatch * kSteps;
    o.base.train.epochs = 1;
    o.base.train.batch_size = kSimBatch;
    o.base.run.log_level = LogLevel::kWarn;
    // The closed forms below are of the gradient all-reduce alone, without
    // the contribution check's small all-reduce per step.
    o.base.exchange.poison_check = false;
    o.nodes = kSimNodes;
    auto m = SimulateMethods(methods, kSimNodes);
    EXPECT_TRUE(m) << m.error().ToString();
    if (m) o.methods = *m;
    o.out_dir = dir_.File("sim");
    o.latency_s = kLatencyS;
    o.bytes_per_second = kBytesPerS;
    o.forward_backward_s = kComputeS;  // given: virtual times are exact
    o.update_s = 0.0;
    o.exchange_cpu_scale = 0.0;  // measured CPU time would make them inexact
    o.eval_nodes = 2;
    o.evals = 2;
    o.eval_samples = 200;
    o.print_progress = false;
    return o;
  }

  chorus::testing::TempDir dir_{"chorus_simulate_test"};
};

TEST_F(SimulateTest, TinySimulationWritesTheContractFilesWithConsistentBytesAndTimes) {
  SimulateOptions options = TinyOptions({"ring-allreduce", "dpsgd-ring"});
  Result<SimulationResult> result = RunSimulation(options);
  ASSERT_TRUE(result) << result.error().ToString();
  ASSERT_EQ(result->methods.size(), 2u);
  for (const SimulatedMethod& m : result->methods) EXPECT_EQ(m.exit_code, 0) << m.error;

  const json compare = ReadJson(options.out_dir + "/compare.json");
  EXPECT_EQ(compare["kind"], "simulate");
  EXPECT_EQ(compare["nodes"], kSimNodes);
  EXPECT_EQ(compare["global_batch"], kSimNodes * kSimBatch);
  EXPECT_EQ(compare["link"]["bandwidth"], options.bandwidth);
  // S = batch / modelled step time, exactly (no measurement).
  EXPECT_DOUBLE_EQ(compare["single_node"]["samples_per_s"].get<double>(), kSimBatch / kComputeS);
  ASSERT_EQ(compare["methods"].size(), 2u);
  EXPECT_EQ(compare["methods"][0]["name"], "ring-allreduce");
  EXPECT_EQ(compare["methods"][0]["family"], "allreduce");
  EXPECT_EQ(compare["methods"][1]["dir"], "dpsgd-ring");
  EXPECT_EQ(compare["methods"][1]["exit_code"], 0);

  for (const std::string method : {"ring-allreduce", "dpsgd-ring"}) {
    SCOPED_TRACE(method);
    uint64_t sent_total = 0, received_total = 0;
    std::vector<std::string> checksums;
    for (int r = 0; r < kSimNodes; ++r) {
      const std::string node_dir = options.out_dir + "/" + method + "/node" + std::to_string(r);
      const json summary = ReadJson(node_dir + "/summary.json");
      const std::vector<json> records = ReadLines(node_dir + "/metrics.jsonl");
      ASSERT_FALSE(records.empty());
      EXPECT_EQ(summary["rank"], r);
      EXPECT_EQ(summary["world_size"], kSimNodes);
      EXPECT_EQ(summary["steps"], kSteps);
      EXPECT_GE(summary["test_accuracy"].get<double>(), 0.0);
      EXPECT_LE(summary["test_accuracy"].get<double>(), 1.0);
      sent_total += summary["bytes_sent"].get<uint64_t>();
      received_total += summary["bytes_received"].get<uint64_t>();
      checksums.push_back(summary["parameter_checksum"].get<std::string>());

      // Virtual time: each step costs more than the modelled compute; the
      // summary's train time is the last step's clock.
      const json& last = records.back();
      EXPECT_EQ(last["step"], kSteps);
      EXPECT_DOUBLE_EQ(summary["train_seconds"].get<double>(), last["time"].get<double>());
      const double per_step = last["time"].get<double>() / kSteps;
      const uint64_t last_bytes = last["bytes_sent"].get<uint64_t>();
      int evals = 0;
      double previous_time = 0.0;
      for (const json& rec : records) {
        const int64_t step = rec["step"].get<int64_t>();
        const double time = rec["time"].get<double>();
        EXPECT_GE(time, previous_time);
        EXPECT_GT(time, step * kComputeS);
        previous_time = time;
        if (method == "ring-allreduce") {
          // The ring is symmetric, so every step costs the same, up to one float
          // per round: when n does not divide P, ring chunks differ by one float
          // and which rank sends the longer one changes from step to step. (Not
          // so D-PSGD: on the ring's wrap-around edge the send order differs, and
          // nodes drift by up to a latency.)
          EXPECT_NEAR(time, step * per_step, step * kOneFloatPerRound);
        }
        // Every step sends the same bytes.
        EXPECT_EQ(rec["bytes_sent"].get<uint64_t>() * kSteps, step * last_bytes);
        if (rec.contains("eval_accuracy")) ++evals;
      }
      // The consensus phase (gossip) sends more after the last step.
      EXPECT_GE(summary["bytes_sent"].get<uint64_t>(), last_bytes);
      // Nodes 0 and 4 evaluate at steps 2 and 4; the others never during training.
      EXPECT_EQ(evals, r == 0 || r == kSimNodes / 2 ? 2 : 0);
    }
    // Every byte sent was received by someone.
    EXPECT_EQ(sent_total, received_total);
    // All-reduce: replicas equal after every step; gossip: after the exact
    // consensus average. Either way the final models are bitwise the same.
    for (const std::string& c : checksums) EXPECT_EQ(c, checksums[0]);
  }

  // Ring all-reduce of the MLP's P = 235146 floats (one fusion bucket under the
  // 1 MiB default), n = 8: 2(n-1) rounds, each latency + (4P/n bytes)/bandwidth.
  const json ring0 = ReadJson(options.out_dir + "/ring-allreduce/node0/summary.json");
  const double comm = 2 * (kSimNodes - 1) * (kLatencyS + 4.0 * 235146 / kSimNodes / kBytesPerS);
  // 1%: chunks differ by one float when n does not divide P, and segments may
  // pipeline; both move the step time by far less.
  EXPECT_NEAR(ring0["train_seconds"].get<double>() / kSteps, kComputeS + comm,
              0.01 * (kComputeS + comm));
  // Ring all-reduce: each rank sends 2(n-1)/n of the vector per step (+/- the
  // one-float chunk imbalance).
  EXPECT_NEAR(ring0["bytes_sent"].get<double>() / kSteps, 2.0 * (kSimNodes - 1) / kSimNodes * 4 * 235146,
              2 * (kSimNodes - 1) * 4.0);

  // D-PSGD: replicas differed before the consensus phase and agree after it.
  const json d0 = ReadJson(options.out_dir + "/dpsgd-ring/node0/summary.json");
  EXPECT_GT(d0["consensus_distance_before"].get<double>(), 0.0);
  EXPECT_EQ(d0["consensus_distance_after"].get<double>(), 0.0);
}

// Only the sampled nodes evaluate during training, by design: the report of a
// simulation notes no unequal evaluation counts, and the summaries say where
// the nodes ran.
TEST_F(SimulateTest, ReportNotesNoSampledEvaluationsAndSummariesRecordTheHost) {
  SimulateOptions options = TinyOptions({"dpsgd-ring"});
  Result<SimulationResult> result = RunSimulation(options);
  ASSERT_TRUE(result) << result.error().ToString();
  Result<ReportData> data = LoadReportData({options.out_dir}, -1);
  ASSERT_TRUE(data) << data.error().ToString();
  for (const std::string& warning : data->runs.warnings) {
    EXPECT_THAT(warning, ::testing::Not(HasSubstr("evaluation records"))) << warning;
  }
  const json summary = ReadJson(options.out_dir + "/dpsgd-ring/node1/summary.json");
  EXPECT_EQ(summary["threads"], 1);  // a virtual node trains on one thread
  EXPECT_GE(summary["host"]["cores"].get<int>(), 1);
  EXPECT_TRUE(summary["host"]["cpu"].is_string());
  EXPECT_TRUE(data->environment.virtual_time);
}

TEST_F(SimulateTest, ComputeSpreadMakesTheSlowestNodePaceTheAllreduce) {
  SimulateOptions options = TinyOptions({"tree-allreduce"});
  options.compute_spread = 1.0;  // node 7 computes twice as long as node 0
  Result<SimulationResult> result = RunSimulation(options);
  ASSERT_TRUE(result) << result.error().ToString();
  ASSERT_EQ(result->methods[0].exit_code, 0) << result->methods[0].error;
  const auto& s = result->methods[0].summaries;
  // Synchronous: every node waits for the slowest, so each step costs at least
  // 2 x compute, even on the fast node 0.
  EXPECT_GE(s[0]["train_seconds"].get<double>(), kSteps * 2 * kComputeS);
  EXPECT_GE(s[kSimNodes - 1]["train_seconds"].get<double>(), kSteps * 2 * kComputeS);
}

TEST_F(SimulateTest, VirtualTimesDoNotDependOnTheWallClock) {
  // Two runs of the same gossip method interleave their 8 threads differently
  // on the machine; with a given compute time the virtual clocks must agree
  // exactly, node by node.
  std::vector<std::vector<double>> times;
  for (int run = 0; run < 2; ++run) {
    SimulateOptions options = TinyOptions({"push-sum-one-peer-exp"});
    options.out_dir = dir_.File("run" + std::to_string(run));
    options.compute_spread = 0.5;  // unequal nodes: arrivals decide the clocks
    Result<SimulationResult> result = RunSimulation(options);
    ASSERT_TRUE(result) << result.error().ToString();
    ASSERT_EQ(result->methods[0].exit_code, 0) << result->methods[0].error;
    times.emplace_back();
    for (const json& s : result->methods[0].summaries) {
      times.back().push_back(s["train_seconds"].get<double>());
    }
  }
  EXPECT_EQ(times[0], times[1]);
}

// The summaries of the one method `options` runs; fails the test when it does not run.
std::vector<json> RunOne(const SimulateOptions& options) {
  Result<SimulationResult> result = RunSimulation(options);
  EXPECT_TRUE(result) << result.error().ToString();
  if (!result) return {};
  EXPECT_EQ(result->methods[0].exit_code, 0) << result->methods[0].error;
  return result->methods[0].summaries;
}

// Asynchronous pairwise gossip under a sample budget, every second node 4x
// slower: each node trains at its own pace (no node waits for a slower
// one), all stop when the cluster's samples reach the budget, and end with
// one model; a second run repeats every virtual time and step count, and the
// evaluating nodes' records carry the exact consensus distance.
TEST_F(SimulateTest, PairwiseAsyncTrainsAtEachNodesPaceAndRepeats) {
  constexpr int kBudgetSteps = 16;  // per node, at equal speeds
  // Compute well above an exchange's ~2 ms (two models of ~0.8 MB at 10
  // Gbit/s and two round trips, on the initiator's path).
  constexpr double kPairwiseComputeS = 10e-3;
  std::vector<std::vector<json>> runs;
  for (int run = 0; run < 2; ++run) {
    SimulateOptions options = TinyOptions({"pairwise-async"});
    options.base.data.train_limit = kSimNodes * kSimBatch * kBudgetSteps;
    options.speeds = {1.0, 0.25};
    options.forward_backward_s = kPairwiseComputeS;
    options.out_dir = dir_.File("pairwise" + std::to_string(run));
    runs.push_back(RunOne(options));
    ASSERT_EQ(runs.back().size(), static_cast<size_t>(kSimNodes));
  }
  const std::vector<json>& s = runs[0];
  for (int r = 0; r < kSimNodes; ++r) {
    EXPECT_EQ(s[r]["train_seconds"], runs[1][r]["train_seconds"]) << r;
    EXPECT_EQ(s[r]["steps"], runs[1][r]["steps"]) << r;
    EXPECT_EQ(s[r]["parameter_checksum"], s[0]["parameter_checksum"]) << r;  // one model
    EXPECT_GE(s[r]["cluster_samples"].get<int64_t>(), kSimNodes * kSimBatch * kBudgetSteps) << r;
  }
  // Steps of about 12 ms against 42.
  EXPECT_GT(s[0]["steps"].get<int64_t>(), 2 * s[1]["steps"].get<int64_t>());
  // D-PSGD steps together, every step as slow as the slowest node's.
  SimulateOptions lockstep = TinyOptions({"dpsgd-ring"});
  lockstep.base.data.train_limit = kSimNodes * kSimBatch * kBudgetSteps;
  lockstep.speeds = {1.0, 0.25};
  lockstep.forward_backward_s = kPairwiseComputeS;
  lockstep.out_dir = dir_.File("lockstep");
  const std::vector<json> d = RunOne(lockstep);
  ASSERT_EQ(d.size(), static_cast<size_t>(kSimNodes));
  EXPECT_EQ(d[0]["steps"], kBudgetSteps);
  EXPECT_LT(s[0]["train_seconds"].get<double>(), 0.7 * d[0]["train_seconds"].get<double>());
  // The nodes evaluate at their own steps: each distance says which point
  // it is, in order, so that the report pairs the nodes' k-th points.
  int distances = 0;
  for (const json& record : ReadLines(dir_.File("pairwise0") + "/pairwise-async/node0/metrics.jsonl")) {
    if (!record.contains("consensus_distance_exact")) continue;
    EXPECT_EQ(record.value("consensus_point", -1), distances) << record.dump();
    ++distances;
  }
  EXPECT_GE(distances, 1);
}

TEST_F(SimulateTest, SlowNodesPaceTheAllreduce) {
  // Ring all-reduce at full speed: compute plus about 2 ms of ring per step.
  SimulateOptions options = TinyOptions({"ring-allreduce"});
  options.out_dir = dir_.File("fast");
  const std::vector<json> fast = RunOne(options);
  ASSERT_EQ(fast.size(), static_cast<size_t>(kSimNodes));
  // Every second node at a fifth of the speed: 5 ms of compute per step, and
  // every node waits for them in every step.
  options.speeds = {1.0, 0.2};
  options.out_dir = dir_.File("slow");
  const std::vector<json> slow = RunOne(options);
  ASSERT_EQ(slow.size(), static_cast<size_t>(kSimNodes));
  const double slow_compute = kSteps * kComputeS / 0.2;
  EXPECT_LT(fast[0]["train_seconds"].get<double>(), slow_compute);
  for (const json& s : slow) EXPECT_GE(s["train_seconds"].get<double>(), slow_compute) << s["rank"];
  const json compare = ReadJson(options.out_dir + "/compare.json");
  EXPECT_EQ(compare["node_profiles"]["speeds"], json({1.0, 0.2}));
}

// Two sites (ranks alternating) joined by a 100 Mbit/s, 10 ms link: the
// link-aware ring sends across from two nodes only and beats the ring in rank
// order; under two levels only the representatives send across.
TEST_F(SimulateTest, SitesSlowTheRingInRankOrderAndTwoLevelsCrossByRepresentatives) {
  auto with_sites = [&](const std::string& method) {
    SimulateOptions options = TinyOptions({method});
    options.out_dir = dir_.File(method);
    options.sites = 2;
    options.site_link = "100mbit 10ms";
    options.site_bytes_per_second = 100e6 / 8;
    options.site_latency_s = 0.01;
    return RunOne(options);
  };
  auto senders_across = [](const std::vector<json>& nodes) {
    int senders = 0;
    for (const json& s : nodes) senders += s["bytes_sent_across_sites"].get<int64_t>() > 0 ? 1 : 0;
    return senders;
  };
  const std::vector<json> aware = with_sites("ring-allreduce");
  const std::vector<json> ranked = with_sites("ring-allreduce-rank-order");
  const std::vector<json> two_level = with_sites("two-level-diloco");
  ASSERT_EQ(aware.size(), static_cast<size_t>(kSimNodes));
  ASSERT_EQ(ranked.size(), static_cast<size_t>(kSimNodes));
  ASSERT_EQ(two_level.size(), static_cast<size_t>(kSimNodes));
  EXPECT_EQ(senders_across(aware), 2);
  EXPECT_EQ(senders_across(ranked), kSimNodes);
  EXPECT_LT(aware[0]["train_seconds"].get<double>(), ranked[0]["train_seconds"].get<double>());
  EXPECT_EQ(senders_across(two_level), 2);
  for (const json& s : two_level) {
    EXPECT_EQ(s["sites"]["sites"], 2);
    EXPECT_EQ(s["sites"]["site_size"], kSimNodes / 2);
    EXPECT_EQ(s["bytes_sent_across_sites"].get<int64_t>() > 0, s["sites"]["representative"].get<bool>()) << s["rank"];
    EXPECT_EQ(s["parameter_checksum"], two_level[0]["parameter_checksum"]) << s["rank"];
  }
  std::printf("virtual train seconds: link-aware ring %.4f, rank order %.4f, two levels %.4f\n",
              aware[0]["train_seconds"].get<double>(), ranked[0]["train_seconds"].get<double>(),
              two_level[0]["train_seconds"].get<double>());
}

TEST_F(SimulateTest, BatchSizesGiveEachNodeItsBatchInTheSameSteps) {
  // Batches 8 and 24 alternate: the global batch is still 8 x 16, so every
  // node runs kSteps steps, and node i's compute is in proportion to its batch.
  SimulateOptions options = TinyOptions({"ring-allreduce"});
  options.batch_sizes = {8, 24};
  const std::vector<json> summaries = RunOne(options);
  ASSERT_EQ(summaries.size(), static_cast<size_t>(kSimNodes));
  for (int r = 0; r < kSimNodes; ++r) {
    SCOPED_TRACE(r);
    const json& s = summaries[static_cast<size_t>(r)];
    EXPECT_EQ(s["batch_size"], r % 2 == 0 ? 8 : 24);
    EXPECT_EQ(s["steps"], kSteps);
    // The big batches pace every step: 1.5 x the compute of batch 16.
    EXPECT_GE(s["train_seconds"].get<double>(), kSteps * 1.5 * kComputeS);
    // The all-reduce weighs each gradient by its batch: every node applies
    // the same update, so the replicas end bitwise equal.
    EXPECT_EQ(s["parameter_checksum"], summaries[0]["parameter_checksum"]);
  }
  const json compare = ReadJson(options.out_dir + "/compare.json");
  EXPECT_EQ(compare["global_batch"], kSimNodes * kSimBatch);
  EXPECT_EQ(compare["node_profiles"]["batch_sizes"], json({8, 24}));
}

TEST_F(SimulateTest, ExchangeCpuTimeMovesTheClocks) {
  // Gossip averages on the node's own thread (AfterUpdate); the all-reduce
  // sums on the fusion engine's thread. Either way the charged CPU time is
  // positive and can only make every clock later.
  for (const std::string method : {"dpsgd-ring", "ring-allreduce"}) {
    SCOPED_TRACE(method);
    SimulateOptions options = TinyOptions({method});
    options.out_dir = dir_.File(method + "-free");
    const std::vector<json> free = RunOne(options);
    options.exchange_cpu_scale = 1.0;
    options.out_dir = dir_.File(method + "-charged");
    const std::vector<json> charged = RunOne(options);
    ASSERT_EQ(free.size(), static_cast<size_t>(kSimNodes));
    ASSERT_EQ(charged.size(), static_cast<size_t>(kSimNodes));
    for (int r = 0; r < kSimNodes; ++r) {
      SCOPED_TRACE(r);
      EXPECT_EQ(free[r]["exchange_cpu_seconds"].get<double>(), 0.0);
      EXPECT_GT(charged[r]["exchange_cpu_seconds"].get<double>(), 0.0);
      EXPECT_GT(charged[r]["train_seconds"].get<double>(), free[r]["train_seconds"].get<double>());
    }
  }
}

TEST(SimulateProfilesTest, ProfilesRepeatOverTheNodes) {
  SimulateOptions o;
  o.base.train.batch_size = 16;
  o.nodes = 64;
  EXPECT_EQ(NodeSpeed(o, 5), 1.0);
  EXPECT_EQ(NodeBatchSize(o, 5), 16);
  // A quarter of the nodes 4x slower: every fourth.
  o.speeds = {1, 1, 1, 0.25};
  o.batch_sizes = {16, 64};
  int slow = 0;
  for (int i = 0; i < o.nodes; ++i) slow += NodeSpeed(o, i) == 0.25;
  EXPECT_EQ(slow, 16);
  EXPECT_EQ(NodeSpeed(o, 3), 0.25);
  EXPECT_EQ(NodeSpeed(o, 4), 1.0);
  EXPECT_EQ(NodeBatchSize(o, 0), 16);
  EXPECT_EQ(NodeBatchSize(o, 63), 64);
}

TEST(SimulateOptionsTest, BadProfilesAreInvalidArgument) {
  SimulateOptions o;
  o.nodes = 4;
  o.methods = *SimulateMethods({"ring-allreduce"}, 4);
  o.speeds = {1, 0};
  auto r = RunSimulation(o);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message(), HasSubstr("speeds must be > 0"));
  o.speeds = {};
  o.batch_sizes = {16, 0};
  r = RunSimulation(o);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message(), HasSubstr("batch sizes must be >= 1"));
  o.batch_sizes = {};
  o.exchange_cpu_scale = -1;
  r = RunSimulation(o);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message(), HasSubstr("exchange CPU scale must be >= 0"));
}

TEST(SimulateMethodsTest, RefusesWhatVirtualTimeCannotRunAndUnknownNames) {
  EXPECT_TRUE(SimulateMethods({"pairwise-async"}, 128));  // its events run in virtual-time order
  auto complete = SimulateMethods({"local-sgd"}, 64);
  ASSERT_FALSE(complete);
  EXPECT_THAT(complete.error().message(), HasSubstr("local-sgd-hypercube"));
  EXPECT_TRUE(SimulateMethods({"local-sgd"}, 8));  // small enough for the complete graph
  auto unknown = SimulateMethods({"ring-allreduc"}, 8);
  ASSERT_FALSE(unknown);
  EXPECT_THAT(unknown.error().message(), HasSubstr("ring-allreduce"));
  auto defaults = SimulateMethods({"default"}, 128);
  ASSERT_TRUE(defaults) << defaults.error().ToString();
  EXPECT_EQ(defaults->size(), DefaultSimulateMethodNames().size());
}

TEST(SimulateOptionsTest, BadOptionsAreInvalidArgument) {
  SimulateOptions o;
  {
    SimulateOptions sites = o;
    sites.methods = *SimulateMethods({"ring-allreduce"}, sites.nodes);
    sites.sites = 2;
    EXPECT_THAT(RunSimulation(sites).error().message(), HasSubstr("sites need a site link bandwidth > 0"));
    sites.sites = sites.nodes + 1;
    EXPECT_THAT(RunSimulation(sites).error().message(), HasSubstr("sites must be in 1..nodes"));
  }
  o.nodes = 1;
  o.methods = *SimulateMethods({"ring-allreduce"}, 8);
  auto r = RunSimulation(o);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.error().message(), HasSubstr("nodes must be >= 2"));
}

}  // namespace
}  // namespace chorus::node
