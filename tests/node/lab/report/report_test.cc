// Tests of `chorus report` (node/report*.h): a comparison of three methods x
// two nodes is written to a temp dir from closed-form formulas, and the curves,
// the table (every cell), the files, the plots and the page are checked
// against figures computed here from the same formulas. Also: the recorded
// real runs under tests/node/lab/report/data/, bad input, a missing gnuplot, HTML
// escaping, and the CLI.
#include "node/lab/report/report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "node/lab/report/report_data.h"
#include "node/lab/report/report_html.h"
#include "node/lab/report/report_plots.h"
#include "node/lab/report/report_table.h"
#include "tests/util/temp_dir.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// Means of two doubles are summed then divided here as in the code under test;
// only the order of the rounding steps may differ, far below this.
constexpr double kMeanTol = 1e-12;

constexpr int kStepsPerEpoch = 10;
constexpr int kLogEvery = 5;
constexpr int kEpochs = 3;
constexpr int kBatch = 64;
constexpr double kSingleNodeSamplesPerS = 1000.0;

// One method of the synthetic comparison. Node n's records (steps s = 5, 10, .., 30):
//   time = time_scale * s + 0.5 n (an evaluation record: + 0.2)
//   bytes_sent = bytes_per_step * s * (n + 1)
//   loss = 2 / s + 0.1 n, samples = 64 s
//   consensus_distance_estimate = (n + 1) / s (gossip only)
// and at the end of epoch k an evaluation record with eval_accuracy = accuracy[n][k-1]
// and consensus_distance_exact = 0.1 / k (gossip; all-reduce: 0, as the exchange records).
struct SyntheticMethod {
  std::string name;
  std::string label;
  std::string family;
  double time_scale;
  double bytes_per_step;
  double accuracy[2][kEpochs];
  bool epoch_progress;  // newer format; the older one lacks epoch_progress
  double final_accuracy[2];
  double samples_per_s[2];
  bool node1_killed = false;  // node1: no summary.json, half a line at the end
};

const std::vector<SyntheticMethod>& Methods() {
  static const std::vector<SyntheticMethod> methods = {
      {"ring-allreduce",
       "ring all-reduce",
       "allreduce",
       1.0,
       1e5,
       {{0.70, 0.86, 0.90}, {0.70, 0.86, 0.90}},
       true,
       {0.905, 0.905},
       {900, 700}},
      {"dpsgd-ring",
       "D-PSGD ring",
       "gossip",
       1.2,
       2e4,
       {{0.80, 0.84, 0.86}, {0.84, 0.85, 0.88}},
       false,
       {0.87, 0.89},
       {850, 750}},
      {"choco-sign",
       "CHOCO sign",
       "gossip",
       1.5,
       1e3,
       {{0.50, 0.60, 0.70}, {0.50, 0.60, 0.70}},
       true,
       {0.71, 0.0},
       {600, 0},
       true},
  };
  return methods;
}

double RecordTime(const SyntheticMethod& m, int n, int step) { return m.time_scale * step + 0.5 * n; }
double EvalTime(const SyntheticMethod& m, int n, int step) { return RecordTime(m, n, step) + 0.2; }
double Bytes(const SyntheticMethod& m, int n, int step) { return m.bytes_per_step * step * (n + 1); }
double TrainSeconds(const SyntheticMethod& m, int n) {
  return m.time_scale * kEpochs * kStepsPerEpoch + 0.5 * n + 0.3;
}

void WriteFile(const fs::path& path, const std::string& text) { chorus::testing::WriteTextFile(path, text); }
std::string ReadFile(const fs::path& path) { return chorus::testing::ReadTextFile(path); }

void WriteNode(const SyntheticMethod& m, int n, const fs::path& dir) {
  std::string lines;
  const bool gossip = m.family == "gossip";
  for (int step = kLogEvery; step <= kEpochs * kStepsPerEpoch; step += kLogEvery) {
    nlohmann::json r = {{"step", step},
                        {"epoch", (step - 1) / kStepsPerEpoch},
                        {"time", RecordTime(m, n, step)},
                        {"loss", 2.0 / step + 0.1 * n},
                        {"samples", kBatch * step},
                        {"samples_per_s", 6400.0},
                        {"bytes_sent", Bytes(m, n, step)},
                        {"bytes_received", Bytes(m, n, step)},
                        {"parameter_checksum", "123"}};
    if (m.epoch_progress) r["epoch_progress"] = static_cast<double>(step) / kStepsPerEpoch;
    if (gossip) r["consensus_distance_estimate"] = (n + 1.0) / step;
    lines += r.dump() + "\n";
    if (step % kStepsPerEpoch == 0) {
      const int k = step / kStepsPerEpoch;
      r["epoch"] = k;
      r["time"] = EvalTime(m, n, step);
      r["eval_accuracy"] = m.accuracy[n][k - 1];
      r["eval_loss"] = 1.0 / k;
      r["loss"] = 9.0;  // the last step's loss: must not enter the loss curve
      r["consensus_distance_exact"] = gossip ? 0.1 / k : 0.0;
      r.erase("samples_per_s");
      if (m.epoch_progress) r["epoch_progress"] = k;
      lines += r.dump() + "\n";
    }
  }
  if (m.node1_killed && n == 1) {
    lines += "{\"step\": 35, \"loss\": 0.0";  // a killed node's half line (line 10)
  } else {
    nlohmann::json s = {{"node", "node" + std::to_string(n)},
                        {"rank", n},
                        {"world_size", 2},
                        {"exchange", m.family == "allreduce" ? "allreduce ring over 2 nodes (local)"
                                                             : "gossip dpsgd on ring over 2 nodes (local)"},
                        {"model", "mlp"},
                        {"epochs", kEpochs},
                        {"global_batch", 2 * kBatch},
                        {"train_seconds", TrainSeconds(m, n)},
                        {"samples_per_s", m.samples_per_s[n]},
                        {"test_accuracy", m.final_accuracy[n]},
                        {"test_loss", 0.3},
                        {"bytes_sent", Bytes(m, n, kEpochs * kStepsPerEpoch)},
                        // Gossip nodes at their own pace train unequal steps.
                        {"steps", kEpochs * kStepsPerEpoch + (gossip ? 7 * n : 0)}};
    if (gossip) {
      s["consensus_distance_before"] = 0.1;
      s["consensus_distance_after"] = 1e-3 * (n + 1);
    }
    WriteFile(dir / "summary.json", s.dump(2));
  }
  WriteFile(dir / "metrics.jsonl", lines);
}

// Writes the comparison to `root`: compare.json and methods x 2 nodes.
void WriteComparison(const fs::path& root, const std::string& first_label = "ring all-reduce") {
  nlohmann::json methods = nlohmann::json::array();
  for (const SyntheticMethod& m : Methods()) {
    methods.push_back({{"name", m.name},
                       {"label", m.name == "ring-allreduce" ? first_label : m.label},
                       {"dir", m.name},
                       {"family", m.family},
                       {"exit_code", 0},
                       {"wall_seconds", 40.0}});
    for (int n = 0; n < 2; ++n) WriteNode(m, n, root / m.name / ("node" + std::to_string(n)));
  }
  const nlohmann::json compare = {{"name", "compare-test"},
                                  {"kind", "compare"},
                                  {"nodes", 2},
                                  {"target_accuracy", 0.85},
                                  {"model", "mlp"},
                                  {"epochs", kEpochs},
                                  {"global_batch", 2 * kBatch},
                                  {"link", {{"bandwidth", "1gbit"}, {"latency", "1ms"}, {"emulated", false}}},
                                  {"single_node", {{"samples_per_s", kSingleNodeSamplesPerS}}},
                                  {"methods", methods}};
  WriteFile(root / "compare.json", compare.dump(2));
}

bool HaveGnuplot() { return std::system("command -v gnuplot > /dev/null 2>&1") == 0; }

const TableRow* FindRow(const std::vector<TableRow>& rows, const std::string& name) {
  for (const TableRow& r : rows) {
    if (r.method == name) return &r;
  }
  return nullptr;
}

bool AnyContains(const std::vector<std::string>& lines, const std::string& part) {
  for (const std::string& l : lines) {
    if (l.find(part) != std::string::npos) return true;
  }
  return false;
}

TEST(ReportDataTest, CurvesAverageNodesAtEachPoint) {
  chorus::testing::TempDir dir("report_curves");
  WriteComparison(dir.path());
  Result<ReportData> data = LoadReportData({dir.path()}, -1);
  ASSERT_TRUE(data) << data.error().ToString();
  ASSERT_EQ(data->runs.methods.size(), 3u);
  EXPECT_EQ(data->runs.title, "compare-test");
  EXPECT_TRUE(data->runs.first_input_is_comparison);
  EXPECT_DOUBLE_EQ(data->target_accuracy, 0.85);  // compare.json's

  for (size_t i = 0; i < Methods().size(); ++i) {
    const SyntheticMethod& m = Methods()[i];
    const MethodCurves& c = data->curves[i];
    SCOPED_TRACE(m.name);
    ASSERT_EQ(c.accuracy.size(), static_cast<size_t>(kEpochs));
    for (int k = 1; k <= kEpochs; ++k) {
      const CurvePoint& p = c.accuracy[k - 1];
      const int step = k * kStepsPerEpoch;
      EXPECT_NEAR(p.value, (m.accuracy[0][k - 1] + m.accuracy[1][k - 1]) / 2, kMeanTol);
      EXPECT_DOUBLE_EQ(p.time_s, EvalTime(m, 1, step));  // max over nodes: node1 is later
      EXPECT_NEAR(p.bytes_per_node, (Bytes(m, 0, step) + Bytes(m, 1, step)) / 2, kMeanTol * p.bytes_per_node);
      EXPECT_DOUBLE_EQ(p.epochs, k);
      EXPECT_EQ(p.step, step);
      EXPECT_EQ(p.nodes, 2);
    }
    // Training loss: the 6 logging records; the evaluation records' loss (9) is left out.
    // The killed node's half line at step 35 is skipped, so every point has 2 nodes.
    const size_t logging_points = kEpochs * kStepsPerEpoch / kLogEvery;
    ASSERT_EQ(c.train_loss.size(), logging_points);
    for (size_t j = 0; j < logging_points; ++j) {
      const int step = kLogEvery * static_cast<int>(j + 1);
      const CurvePoint& p = c.train_loss[j];
      EXPECT_NEAR(p.value, 2.0 / step + 0.05, kMeanTol);
      EXPECT_DOUBLE_EQ(p.time_s, RecordTime(m, 1, step));
      // Older records (no epoch_progress): samples / samples-per-epoch, the latter
      // learnt from the evaluation records (64 x 10 per epoch).
      EXPECT_NEAR(p.epochs, static_cast<double>(step) / kStepsPerEpoch, kMeanTol);
    }
    // The exact distance: one point per evaluation, at the evaluation records' time.
    ASSERT_EQ(c.consensus.size(), static_cast<size_t>(kEpochs));
    for (int k = 1; k <= kEpochs; ++k) {
      const CurvePoint& p = c.consensus[k - 1];
      EXPECT_EQ(p.step, k * kStepsPerEpoch);
      EXPECT_NEAR(p.value, m.family == "gossip" ? 0.1 / k : 0.0, kMeanTol);
      EXPECT_DOUBLE_EQ(p.time_s, EvalTime(m, 1, k * kStepsPerEpoch));
      EXPECT_EQ(p.nodes, 2);
    }
    if (m.family == "gossip") {
      ASSERT_EQ(c.consensus_estimate.size(), logging_points);
      for (size_t j = 0; j < logging_points; ++j) {
        const int step = kLogEvery * static_cast<int>(j + 1);
        EXPECT_NEAR(c.consensus_estimate[j].value, 1.5 / step, kMeanTol);
        // The logging record's time, not the evaluation record's repeat of it.
        EXPECT_DOUBLE_EQ(c.consensus_estimate[j].time_s, RecordTime(m, 1, step));
      }
    } else {
      EXPECT_TRUE(c.consensus_estimate.empty());
    }
  }
}

// Evaluations inside an epoch (epoch 0 at 0.25 and 0.5 epochs) are points of
// their own, and asynchronous nodes (at different steps when they evaluate)
// are matched by the order of their evaluations.
TEST(ReportDataTest, EvaluationsMatchByOrderAcrossAsynchronousNodes) {
  chorus::testing::TempDir dir("report_async");
  const double progress[3] = {0.25, 0.5, 1.0};
  const int steps[2][3] = {{10, 20, 40}, {8, 17, 35}};
  const double accuracy[2][3] = {{0.3, 0.5, 0.7}, {0.4, 0.6, 0.8}};
  for (int n = 0; n < 2; ++n) {
    std::string lines;
    for (int k = 0; k < 3; ++k) {
      lines += nlohmann::json({{"step", steps[n][k]},
                               {"epoch", progress[k] < 1 ? 0 : 1},
                               {"epoch_progress", progress[k]},
                               {"time", 4.0 * progress[k] + 0.5 * n},
                               {"eval_accuracy", accuracy[n][k]},
                               {"bytes_sent", 100.0 * steps[n][k]}})
                   .dump() +
               "\n";
    }
    WriteFile(fs::path(dir.path()) / "async" / ("node" + std::to_string(n)) / "metrics.jsonl", lines);
  }
  Result<ReportData> data = LoadReportData({dir.File("async")}, 0.5);
  ASSERT_TRUE(data) << data.error().ToString();
  const std::vector<CurvePoint>& points = data->curves[0].accuracy;
  ASSERT_EQ(points.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_NEAR(points[k].value, (accuracy[0][k] + accuracy[1][k]) / 2, kMeanTol);
    EXPECT_DOUBLE_EQ(points[k].time_s, 4.0 * progress[k] + 0.5);
    EXPECT_DOUBLE_EQ(points[k].epochs, progress[k]);
    EXPECT_NEAR(points[k].bytes_per_node, 50.0 * (steps[0][k] + steps[1][k]), kMeanTol * 1e4);
    EXPECT_EQ(points[k].step, -1);  // the nodes were at different steps
  }
  // Mean 0.35, then 0.55: the target 0.5 is reached at node1's second evaluation
  // (t = 2.5), when node0 (0.5 epochs at t = 2.0, 1.0 at 4.0) has done 0.625.
  EXPECT_DOUBLE_EQ(data->rows[0].time_to_target_s, 2.5);
  EXPECT_DOUBLE_EQ(data->rows[0].epochs_to_target, (0.625 + 0.5) / 2);
  // Merged on the time axis: node0's second evaluation (t = 2.0, 0.5) with
  // node1's first (t = 1.5, 0.4) is 0.45; node1's second (t = 2.5) makes 0.55.
  const std::vector<CurvePoint>& by_time = data->curves[0].accuracy_by_time;
  ASSERT_EQ(by_time.size(), 5u);  // from node1's first evaluation on: 1.5, 2.0, 2.5, 4.0, 4.5
  EXPECT_DOUBLE_EQ(by_time[0].time_s, 1.5);
  EXPECT_NEAR(by_time[0].value, (0.3 + 0.4) / 2, kMeanTol);
  EXPECT_DOUBLE_EQ(by_time[1].time_s, 2.0);
  EXPECT_NEAR(by_time[1].value, (0.5 + 0.4) / 2, kMeanTol);
  EXPECT_NEAR(by_time[1].epochs, (0.5 + 0.375) / 2, kMeanTol);  // node1 half way from 0.25 to 0.5
  // No summary.json: the final figures are missing, with a note per node.
  EXPECT_TRUE(std::isnan(data->rows[0].final_accuracy));
  EXPECT_TRUE(AnyContains(data->runs.warnings, "node1: no summary.json"));
}

TEST(ReportDataTest, TableCellsFollowFromTheRecords) {
  chorus::testing::TempDir dir("report_table");
  WriteComparison(dir.path());
  Result<ReportData> data = LoadReportData({dir.path()}, -1);
  ASSERT_TRUE(data) << data.error().ToString();
  const std::vector<TableRow>& rows = data->rows;
  ASSERT_EQ(rows.size(), 3u);

  const SyntheticMethod& ring = Methods()[0];
  const TableRow* r = FindRow(rows, "ring-allreduce");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->label, "ring all-reduce");
  EXPECT_EQ(r->nodes, 2);
  EXPECT_NEAR(r->final_accuracy, 0.905, kMeanTol);
  // Mean accuracy per epoch 0.70, 0.86, 0.90: the target 0.85 is reached at the end of epoch 2.
  EXPECT_DOUBLE_EQ(r->time_to_target_s, EvalTime(ring, 1, 2 * kStepsPerEpoch));
  EXPECT_NEAR(r->bytes_to_target, (Bytes(ring, 0, 20) + Bytes(ring, 1, 20)) / 2, 1e-6);
  EXPECT_DOUBLE_EQ(r->epochs_to_target, 2.0);
  EXPECT_DOUBLE_EQ(r->train_seconds, TrainSeconds(ring, 1));
  EXPECT_NEAR(r->bytes_sent, (Bytes(ring, 0, 30) + Bytes(ring, 1, 30)) / 2, 1e-6);
  EXPECT_NEAR(r->samples_per_s, 800.0, kMeanTol * 800);
  EXPECT_NEAR(r->efficiency, (900.0 + 700.0) / (kSingleNodeSamplesPerS * 2), kMeanTol);
  EXPECT_TRUE(std::isnan(r->consensus_distance_after));  // all-reduce has none
  EXPECT_EQ(r->steps_min, kEpochs * kStepsPerEpoch);
  EXPECT_EQ(r->steps_max, kEpochs * kStepsPerEpoch);
  EXPECT_EQ(TableCells(*r).back(), std::to_string(kEpochs * kStepsPerEpoch));

  const SyntheticMethod& dpsgd = Methods()[1];
  r = FindRow(rows, "dpsgd-ring");
  ASSERT_NE(r, nullptr);
  // Means 0.82, 0.845, 0.87 by round: 0.845 is under 0.85. The nodes evaluate at the same
  // steps (lock step): the target is the third round's, once node1 (0.5 s behind) has evaluated.
  EXPECT_DOUBLE_EQ(r->time_to_target_s, EvalTime(dpsgd, 1, 3 * kStepsPerEpoch));
  EXPECT_NEAR(r->bytes_to_target, (Bytes(dpsgd, 0, 30) + Bytes(dpsgd, 1, 30)) / 2, 1e-6);
  EXPECT_DOUBLE_EQ(r->epochs_to_target, 3.0);
  EXPECT_NEAR(r->final_accuracy, 0.88, kMeanTol);
  EXPECT_NEAR(r->efficiency, (850.0 + 750.0) / (kSingleNodeSamplesPerS * 2), kMeanTol);
  EXPECT_NEAR(r->consensus_distance_after, 1.5e-3, kMeanTol);
  EXPECT_EQ(TableCells(*r).back(), std::to_string(kEpochs * kStepsPerEpoch) + "-" +
                                       std::to_string(kEpochs * kStepsPerEpoch + 7));

  r = FindRow(rows, "choco-sign");
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(std::isnan(r->time_to_target_s));  // 0.70 at best
  EXPECT_TRUE(std::isnan(r->bytes_to_target));
  EXPECT_TRUE(std::isnan(r->epochs_to_target));
  EXPECT_NEAR(r->final_accuracy, 0.71, kMeanTol);  // node1 has no summary
  EXPECT_TRUE(std::isnan(r->efficiency));          // needs every node's samples/s
  EXPECT_NEAR(r->consensus_distance_after, 1e-3, kMeanTol);

  // Another target from the caller: dpsgd's 0.82 at epoch 1 reaches 0.8.
  Result<ReportData> lower = LoadReportData({dir.path()}, 0.8);
  ASSERT_TRUE(lower);
  EXPECT_DOUBLE_EQ(FindRow(lower->rows, "dpsgd-ring")->time_to_target_s, EvalTime(dpsgd, 1, kStepsPerEpoch));
  EXPECT_FALSE(LoadReportData({dir.path()}, 85.0));  // a percentage, not a fraction
}

TEST(ReportDataTest, KilledNodeLeavesWarningsNamingFileAndLine) {
  chorus::testing::TempDir dir("report_killed");
  WriteComparison(dir.path());
  Result<ReportData> data = LoadReportData({dir.path()}, -1);
  ASSERT_TRUE(data) << data.error().ToString();
  const std::string metrics = (fs::path(dir.path()) / "choco-sign" / "node1" / "metrics.jsonl").string();
  // 6 logging + 3 evaluation lines, then the half line.
  EXPECT_TRUE(AnyContains(data->runs.warnings, metrics + ":10: malformed JSON line skipped"))
      << ::testing::PrintToString(data->runs.warnings);
  EXPECT_TRUE(AnyContains(data->runs.warnings, "choco-sign/node1: no summary.json"));
}

TEST(ReportDataTest, MetricsLineParsingSkipsAndWarns) {
  std::vector<std::string> warnings;
  const std::string text =
      "{\"step\": 5, \"time\": 1.5, \"loss\": 2.0}\n"
      "\n"
      "[1, 2]\n"
      "{\"step\": 10, \"time\": \"soon\", \"loss\": null, \"eval_accuracy\": 0.5}\n"
      "{\"step\": 15, \"time\": 3.0\n";
  std::vector<MetricsRecord> records = ParseMetricsLines(text, "m.jsonl", &warnings);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].line, 1);
  EXPECT_EQ(records[0].step, 5);
  EXPECT_DOUBLE_EQ(records[0].time_s, 1.5);
  EXPECT_FALSE(records[0].is_eval());
  EXPECT_EQ(records[1].line, 4);
  EXPECT_TRUE(std::isnan(records[1].time_s));
  EXPECT_TRUE(std::isnan(records[1].loss));
  EXPECT_TRUE(records[1].is_eval());
  EXPECT_TRUE(AnyContains(warnings, "m.jsonl:3: not a JSON object"));
  EXPECT_TRUE(AnyContains(warnings, "m.jsonl:5: malformed JSON line skipped"));
  EXPECT_TRUE(AnyContains(warnings, "m.jsonl: field \"time\" is not a number"));
  EXPECT_EQ(warnings.size(), 3u);
}

TEST(ReportDataTest, MetricsLinesGiveTheExactDistanceAndTheEstimateApart) {
  std::vector<std::string> warnings;
  const std::string text =
      "{\"step\": 5, \"loss\": 1.0, \"consensus_distance_estimate\": 0.25}\n"
      "{\"step\": 5, \"eval_accuracy\": 0.5, \"consensus_distance_estimate\": 0.25, "
      "\"consensus_distance_exact\": 0.125}\n"
      "{\"step\": 10, \"loss\": 1.0, \"consensus_distance\": 0.5}\n"  // an older record's estimate
      "{\"step\": 10, \"eval_accuracy\": 0.6, \"consensus_distance_exact\": \"high\"}\n";
  std::vector<MetricsRecord> records = ParseMetricsLines(text, "m.jsonl", &warnings);
  ASSERT_EQ(records.size(), 4u);
  EXPECT_DOUBLE_EQ(records[0].consensus_estimate, 0.25);
  EXPECT_TRUE(std::isnan(records[0].consensus_exact));
  EXPECT_DOUBLE_EQ(records[1].consensus_estimate, 0.25);
  EXPECT_DOUBLE_EQ(records[1].consensus_exact, 0.125);
  EXPECT_DOUBLE_EQ(records[2].consensus_estimate, 0.5);
  EXPECT_TRUE(std::isnan(records[3].consensus_exact));
  EXPECT_EQ(warnings, std::vector<std::string>{
                          "m.jsonl: field \"consensus_distance_exact\" is not a number on some lines; ignored there"});

  MethodRun method;
  method.name = "gossip";
  NodeRun node;
  node.name = "node0";
  node.records = records;
  method.nodes = {node, node};  // a consensus point needs two nodes' records
  const MethodCurves curves = BuildMethodCurves(method, nullptr);
  ASSERT_EQ(curves.consensus.size(), 1u);
  EXPECT_EQ(curves.consensus[0].step, 5);
  EXPECT_DOUBLE_EQ(curves.consensus[0].value, 0.125);
  // The estimate once per step: the evaluation record repeats the logging record's.
  ASSERT_EQ(curves.consensus_estimate.size(), 2u);
  EXPECT_DOUBLE_EQ(curves.consensus_estimate[0].value, 0.25);
  EXPECT_DOUBLE_EQ(curves.consensus_estimate[1].value, 0.5);
}

TEST(ReportDataTest, BadInputIsAnErrorNamingTheFile) {
  chorus::testing::TempDir dir("report_bad");
  Result<RunSet> missing = LoadRunSet({dir.File("nope")});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.error().message(), HasSubstr(dir.File("nope")));

  fs::create_directories(dir.File("empty/stray"));
  Result<RunSet> empty = LoadRunSet({dir.File("empty")});
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.error().message(), HasSubstr(dir.File("empty") + ": no node folders"));

  WriteFile(dir.File("badsummary/node0/summary.json"), "{\n  \"test_accuracy\": 0.5,\n  \"steps\": ,\n}\n");
  Result<RunSet> bad_summary = LoadRunSet({dir.File("badsummary")});
  ASSERT_FALSE(bad_summary);
  EXPECT_EQ(bad_summary.error().code(), StatusCode::kDataLoss);
  EXPECT_THAT(bad_summary.error().message(), HasSubstr(dir.File("badsummary/node0/summary.json") + ":3:"));

  WriteComparison(dir.File("badcompare"));
  WriteFile(dir.File("badcompare/compare.json"), "{\"name\": \"x\",\n\"nodes\": 2\n\"methods\": []}\n");
  Result<RunSet> bad_compare = LoadRunSet({dir.File("badcompare")});
  ASSERT_FALSE(bad_compare);
  EXPECT_THAT(bad_compare.error().message(), HasSubstr(dir.File("badcompare/compare.json") + ":3:"));

  WriteFile(dir.File("badcompare/compare.json"), "{\"name\": \"x\", \"methods\": []}");
  Result<RunSet> no_methods = LoadRunSet({dir.File("badcompare")});
  ASSERT_FALSE(no_methods);
  EXPECT_THAT(no_methods.error().message(), HasSubstr("compare.json: lists no methods"));
}

TEST(ReportDataTest, PlainRunDirectoriesAreComparedByFolderName) {
  chorus::testing::TempDir dir("report_plain");
  const SyntheticMethod& ring = Methods()[0];
  const SyntheticMethod& dpsgd = Methods()[1];
  for (int n = 0; n < 2; ++n) {
    WriteNode(ring, n, fs::path(dir.path()) / "runA" / ("node" + std::to_string(n)));
    WriteNode(dpsgd, n, fs::path(dir.path()) / "runB" / ("node" + std::to_string(n)));
  }
  // node10 sorts after node2 (natural order).
  WriteNode(dpsgd, 1, fs::path(dir.path()) / "runB" / "node10");
  WriteNode(dpsgd, 0, fs::path(dir.path()) / "runB" / "node2");
  Result<ReportData> data = LoadReportData({dir.File("runA"), dir.File("runB") + "/"}, -1);
  ASSERT_TRUE(data) << data.error().ToString();
  EXPECT_FALSE(data->runs.first_input_is_comparison);
  ASSERT_EQ(data->runs.methods.size(), 2u);
  EXPECT_EQ(data->runs.methods[0].name, "runA");
  EXPECT_EQ(data->runs.methods[1].name, "runB");
  EXPECT_EQ(data->runs.title, "runA vs runB");
  // Families come from summary.json's exchange description.
  EXPECT_EQ(data->runs.methods[0].family, "allreduce");
  EXPECT_EQ(data->runs.methods[1].family, "gossip");
  std::vector<std::string> names;
  for (const NodeRun& n : data->runs.methods[1].nodes) names.push_back(n.name);
  EXPECT_EQ(names, (std::vector<std::string>{"node0", "node1", "node2", "node10"}));
  EXPECT_DOUBLE_EQ(data->target_accuracy, kDefaultTargetAccuracy);  // no compare.json
  // No S without compare.json: efficiency is "-".
  EXPECT_TRUE(std::isnan(data->rows[0].efficiency));
  EXPECT_EQ(TableCells(data->rows[0])[8], "-");

  // The default output goes next to the first run, and the same run twice is renamed.
  ReportOptions options;
  options.inputs = {dir.File("runA"), dir.File("runA")};
  options.render_plots = false;
  Result<ReportResult> report = BuildReport(options);
  ASSERT_TRUE(report) << report.error().ToString();
  EXPECT_EQ(fs::path(report->html_path).parent_path().parent_path(), fs::path(dir.path()));
  EXPECT_THAT(fs::path(report->html_path).parent_path().filename().string(),
              ::testing::StartsWith("report-"));
  ASSERT_EQ(report->table.size(), 2u);
  EXPECT_EQ(report->table[1]["method"], "runA/runA");
}

TEST(ReportDataTest, FailedMethodGetsARowAndANote) {
  chorus::testing::TempDir dir("report_failed");
  WriteComparison(dir.path());
  nlohmann::json compare = nlohmann::json::parse(ReadFile(dir.File("compare.json")));
  compare["methods"].push_back({{"name", "local-sgd"},
                                {"label", "local SGD"},
                                {"dir", "local-sgd"},
                                {"family", "local-sgd"},
                                {"exit_code", 1},
                                {"error", "node1 exited with code 1 (see launch.log)"}});
  WriteFile(dir.File("compare.json"), compare.dump());
  // The single-node baseline's folder is not a method: compare.json does not list it.
  WriteNode(Methods()[0], 0, fs::path(dir.path()) / "single-node" / "node0");
  Result<ReportData> data = LoadReportData({dir.path()}, -1);
  ASSERT_TRUE(data) << data.error().ToString();
  ASSERT_EQ(data->rows.size(), 4u);
  EXPECT_TRUE(AnyContains(data->runs.warnings, "method local-sgd exited with code 1"));
  EXPECT_TRUE(AnyContains(data->runs.warnings, "method local-sgd: node1 exited with code 1 (see launch.log)"));
  EXPECT_TRUE(AnyContains(data->runs.warnings, "method local-sgd: folder"));
  const std::vector<std::string> cells = TableCells(data->rows[3]);
  EXPECT_EQ(cells[0], "local SGD");
  for (size_t c = 1; c < cells.size(); ++c) EXPECT_EQ(cells[c], "-") << TableHeadings()[c];
}

TEST(ReportDataTest, RecordedRunsGiveACompleteTable) {
  const std::string recorded = std::string(CHORUS_SOURCE_DIR) + "/tests/node/lab/report/data/recorded";
  Result<ReportData> data = LoadReportData({recorded}, -1);
  ASSERT_TRUE(data) << data.error().ToString();
  ASSERT_EQ(data->rows.size(), 4u);
  EXPECT_TRUE(data->runs.warnings.empty()) << ::testing::PrintToString(data->runs.warnings);
  EXPECT_DOUBLE_EQ(data->target_accuracy, 0.75);
  const std::vector<std::string> headings = TableHeadings();
  for (const TableRow& row : data->rows) {
    // Expected figures straight from the nodes' summary.json files.
    double accuracy = 0, rate = 0, slowest = 0;
    for (int n = 0; n < 4; ++n) {
      const nlohmann::json s = nlohmann::json::parse(
          ReadFile(fs::path(recorded) / row.method / ("node" + std::to_string(n)) / "summary.json"));
      accuracy += s["test_accuracy"].get<double>() / 4;
      rate += s["samples_per_s"].get<double>();
      slowest = std::max(slowest, s["train_seconds"].get<double>());
    }
    SCOPED_TRACE(row.method);
    EXPECT_NEAR(row.final_accuracy, accuracy, 1e-12);  // sums of 4 doubles in another order
    EXPECT_NEAR(row.efficiency, rate / (16480.99321196467 * 4), 1e-12);
    EXPECT_DOUBLE_EQ(row.train_seconds, slowest);
    const std::vector<std::string> cells = TableCells(row);
    for (size_t c = 0; c < cells.size(); ++c) {
      const bool may_be_missing = c == 2 || c == 3 || c == 4 || c == 9;  // target, consensus
      if (!may_be_missing) {
        EXPECT_NE(cells[c], "-") << headings[c];
      }
      EXPECT_THAT(cells[c], Not(HasSubstr("nan"))) << headings[c];
    }
    if (row.family == "gossip") {
      EXPECT_NE(cells[9], "-");
    }
    EXPECT_EQ(data->curves[&row - data->rows.data()].accuracy.size(), 1u);  // one epoch, one evaluation
  }
}

// Every cell of the table is there, NaN-free, in text, CSV, JSON and HTML; the
// files behind the report exist; each plot is drawn and inlined in the page.
TEST(ReportTest, BuildsTheFilesTableAndPlots) {
  chorus::testing::TempDir dir("report_build");
  WriteComparison(dir.path());
  ReportOptions options;
  options.inputs = {dir.path()};
  Result<ReportResult> report = BuildReport(options);
  ASSERT_TRUE(report) << report.error().ToString();

  EXPECT_EQ(report->html_path, (fs::path(dir.path()) / "report.html").string());  // a comparison: inside it
  const fs::path report_dir = fs::path(dir.path()) / "report";
  EXPECT_EQ(report->report_dir, report_dir.string());
  for (const char* name : {"table.csv", "table.json", "curves.csv"}) {
    EXPECT_GT(fs::file_size(report_dir / name), 0u) << name;
  }

  // JSON: every key in every row; a number or, only where expected, null.
  const char* const keys[] = {"final_accuracy",         "time_to_target_s", "bytes_to_target_per_node",
                              "epochs_to_target",       "train_seconds",    "bytes_sent_per_node",
                              "samples_per_s_per_node", "efficiency",       "consensus_distance_after"};
  ASSERT_EQ(report->table.size(), 3u);
  for (const nlohmann::json& row : report->table) {
    const std::string method = row["method"];
    for (const char* key : keys) {
      ASSERT_TRUE(row.contains(key)) << method << " " << key;
      const bool expect_null =
          (method == "ring-allreduce" && std::string(key) == "consensus_distance_after") ||
          (method == "choco-sign" &&
           (std::string(key).find("to_target") != std::string::npos || std::string(key) == "efficiency"));
      if (expect_null) {
        EXPECT_TRUE(row[key].is_null()) << method << " " << key;
      } else {
        ASSERT_TRUE(row[key].is_number()) << method << " " << key;
        EXPECT_TRUE(std::isfinite(row[key].get<double>())) << method << " " << key;
      }
    }
  }
  const nlohmann::json table_file = nlohmann::json::parse(ReadFile(report_dir / "table.json"));
  EXPECT_EQ(table_file["rows"], report->table);
  EXPECT_DOUBLE_EQ(table_file["target_accuracy"].get<double>(), 0.85);

  // Text: a header and one line per method, the ring's cells as computed.
  std::vector<std::string> lines;
  std::istringstream text(report->table_text);
  for (std::string line; std::getline(text, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_THAT(lines[0], HasSubstr("time to target (s)"));
  EXPECT_THAT(lines[1], HasSubstr("ring all-reduce"));
  EXPECT_THAT(lines[1], HasSubstr("90.50"));  // final acc %
  EXPECT_THAT(lines[1], HasSubstr("20.70"));  // time to target: epoch 2, node1 at 20 + 0.5 + 0.2
  EXPECT_THAT(lines[1], HasSubstr("0.800"));  // e = 1600 / (1000 x 2)
  for (const std::string& file :
       {report->table_text, ReadFile(report_dir / "table.csv"), ReadFile(report_dir / "curves.csv")}) {
    EXPECT_THAT(file, Not(HasSubstr("nan")));
    EXPECT_THAT(file, Not(HasSubstr("inf")));
  }

  const std::string html = ReadFile(report->html_path);
  for (size_t i = 1; i < lines.size(); ++i) {
    std::istringstream cells(lines[i].substr(lines[i].find("  ")));  // the figures after the method name
    for (std::string cell; cells >> cell;) EXPECT_THAT(html, HasSubstr(">" + cell + "<")) << cell;
  }
  EXPECT_THAT(html, HasSubstr("1gbit per node, 1ms latency"));  // settings from compare.json
  // Self-contained: no scripts, nothing loaded from elsewhere.
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, Not(HasSubstr("src=")));
  EXPECT_THAT(html, Not(HasSubstr("<link")));

  // The consensus plot: each gossip method's exact distance and, dotted, its
  // neighbour estimate; all-reduce's distance is 0, which a log axis cannot show.
  const std::string consensus_gp = ReadFile(report_dir / "consensus_time.gp");
  EXPECT_THAT(consensus_gp, HasSubstr("strcol(2) eq 'consensus')"));
  EXPECT_THAT(consensus_gp, HasSubstr("title 'D-PSGD ring'"));
  EXPECT_THAT(consensus_gp, HasSubstr("dt 3 lc rgb"));
  EXPECT_THAT(consensus_gp, HasSubstr("title 'D-PSGD ring (neighbour estimate)'"));
  EXPECT_THAT(consensus_gp, Not(HasSubstr("ring all-reduce")));
  EXPECT_THAT(ReadFile(report_dir / "curves.csv"), HasSubstr(",consensus_estimate,5,"));

  const std::vector<PlotSpec>& specs = ReportPlotSpecs();
  for (const PlotSpec& spec : specs) {
    EXPECT_TRUE(fs::exists(report_dir / (spec.id + ".gp"))) << spec.id;
  }
  if (!HaveGnuplot()) {
    GTEST_SKIP() << "gnuplot not installed (Debian: gnuplot-nox): plot assertions skipped; "
                 << "the table, CSV and HTML were checked";
  }
  // The only notes are the killed node's; none about plots.
  EXPECT_EQ(report->warnings.size(), 2u) << ::testing::PrintToString(report->warnings);
  ASSERT_EQ(report->svg_paths.size(), specs.size());
  size_t svg_count = 0;
  for (size_t pos = html.find("<svg"); pos != std::string::npos; pos = html.find("<svg", pos + 1))
    ++svg_count;
  EXPECT_EQ(svg_count, specs.size());
  for (const PlotSpec& spec : specs) {
    const fs::path svg = report_dir / (spec.id + ".svg");
    ASSERT_TRUE(fs::exists(svg)) << spec.id;
    const std::string content = ReadFile(svg);
    EXPECT_GT(content.size(), 1000u) << spec.id;
    // Inlined: the figure holds the SVG, whose legend names every method drawn.
    const size_t figure = html.find("<figure id=\"plot-" + spec.id + "\">");
    ASSERT_NE(figure, std::string::npos) << spec.id;
    const size_t end = html.find("</figure>", figure);
    const std::string inlined = html.substr(figure, end - figure);
    EXPECT_THAT(inlined, HasSubstr("<svg")) << spec.id;
    EXPECT_THAT(inlined, HasSubstr("D-PSGD ring")) << spec.id;
    if (spec.quantity != PlotQuantity::kConsensus) {
      EXPECT_THAT(inlined, HasSubstr("ring all-reduce")) << spec.id;
    }
    // The path data of the file is in the page unchanged.
    const size_t path = content.find("  d='M");  // a drawn line (the defs have one space)
    ASSERT_NE(path, std::string::npos) << spec.id;
    EXPECT_THAT(inlined, HasSubstr(content.substr(path, 40))) << spec.id;
  }
}

TEST(ReportTest, MissingGnuplotStillWritesTheReport) {
  chorus::testing::TempDir dir("report_nognuplot");
  WriteComparison(dir.path());
  ReportOptions options;
  options.inputs = {dir.path()};
  options.output_dir = dir.File("out");
  options.gnuplot = dir.File("no-such-gnuplot");
  Result<ReportResult> report = BuildReport(options);
  ASSERT_TRUE(report) << report.error().ToString();
  EXPECT_TRUE(report->svg_paths.empty());
  ASSERT_TRUE(AnyContains(report->warnings, "plots not drawn: cannot run " + dir.File("no-such-gnuplot")))
      << ::testing::PrintToString(report->warnings);
  EXPECT_EQ(report->html_path, dir.File("out/report.html"));
  const std::string html = ReadFile(report->html_path);
  EXPECT_THAT(html, HasSubstr("Not drawn: plots not drawn: cannot run"));
  EXPECT_THAT(html, Not(HasSubstr("<svg")));
  EXPECT_THAT(html, HasSubstr("ring all-reduce"));
  EXPECT_GT(fs::file_size(dir.File("out/report/table.csv")), 0u);
  EXPECT_TRUE(fs::exists(dir.File("out/report/accuracy_time.gp")));
}

TEST(ReportTest, StringsFromFilesAreEscaped) {
  chorus::testing::TempDir dir("report_escape");
  const std::string evil = "<b>bold</b> & \"quoted\" 'x'";
  WriteComparison(dir.path(), evil);
  ReportOptions options;
  options.inputs = {dir.path()};
  options.render_plots = HaveGnuplot();
  Result<ReportResult> report = BuildReport(options);
  ASSERT_TRUE(report) << report.error().ToString();
  const std::string html = ReadFile(report->html_path);
  EXPECT_THAT(html, Not(HasSubstr("<b>bold")));
  EXPECT_THAT(html, HasSubstr("&lt;b&gt;bold&lt;/b&gt; &amp; &quot;quoted&quot; &#39;x&#39;"));
  // The label is also in the plots' legends (gnuplot escapes it there) and in the CSVs.
  EXPECT_THAT(ReadFile(fs::path(report->report_dir) / "table.csv"),
              HasSubstr("\"<b>bold</b> & \"\"quoted\"\" 'x'\""));
  if (options.render_plots) {
    EXPECT_EQ(report->svg_paths.size(), ReportPlotSpecs().size());
  }
}

TEST(ReportHtmlTest, InlineSvgPrefixesIdsAndRefusesScripts) {
  const std::string svg =
      "<?xml version=\"1.0\"?>\n<!DOCTYPE svg>\n<svg viewBox='0 0 10 10'>\n<defs><path id='gpPt0' d='M0,0'/>"
      "<clipPath id=\"c1\"><rect/></clipPath></defs>\n<use xlink:href='#gpPt0' clip-path='url(#c1)'/>"
      "<g data-grid='1'/></svg>\n";
  const std::string out = InlineSvg(svg, "p3_");
  EXPECT_EQ(out.rfind("<svg", 0), 0u);
  EXPECT_THAT(out, HasSubstr("id='p3_gpPt0'"));
  EXPECT_THAT(out, HasSubstr("id=\"p3_c1\""));
  EXPECT_THAT(out, HasSubstr("xlink:href='#p3_gpPt0'"));
  EXPECT_THAT(out, HasSubstr("url(#p3_c1)"));
  EXPECT_THAT(out, HasSubstr("data-grid='1'"));
  EXPECT_THAT(out, Not(HasSubstr("DOCTYPE")));
  EXPECT_EQ(InlineSvg("<svg><script>alert(1)</script></svg>", "p_"), "");
  EXPECT_EQ(InlineSvg("<svg onload='x()'></svg>", "p_"), "");
  EXPECT_EQ(InlineSvg("no svg here", "p_"), "");
  EXPECT_EQ(HtmlEscape("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&#39;");
}

TEST(ReportPlotsTest, GnuplotStringsAreQuoted) {
  EXPECT_EQ(GnuplotQuote("it's"), "'it''s'");
  EXPECT_EQ(GnuplotQuote("a\nb\\c"), "'a b\\c'");  // single quotes: backslashes are literal
}

TEST(ReportPlotsTest, ProcessPastItsDeadlineIsKilled) {
  chorus::testing::TempDir dir("report_process");
  const auto start = std::chrono::steady_clock::now();
  Result<int> rc = RunLoggedProcess({"sleep", "30"}, dir.path(), dir.File("log"), 0.2);
  ASSERT_FALSE(rc);
  EXPECT_EQ(rc.error().code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  Result<int> ok = RunLoggedProcess({"sh", "-c", "echo hello; exit 3"}, dir.path(), dir.File("log"), 10);
  ASSERT_TRUE(ok) << ok.error().ToString();
  EXPECT_EQ(*ok, 3);
  EXPECT_EQ(ReadFile(dir.File("log")), "hello\n");
  Result<int> missing = RunLoggedProcess({dir.File("nothing")}, dir.path(), dir.File("log"), 10);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), StatusCode::kNotFound);
}

// The binary: `chorus report DIR --no-plots` prints the table and the path.
TEST(ReportCliTest, PrintsTableAndPath) {
  chorus::testing::TempDir dir("report_cli");
  WriteComparison(dir.path());
  const std::string command =
      std::string(CHORUS_BINARY) + " report " + dir.path() + " --no-plots --target 0.8 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) output.append(buf, n);
  const int status = ::pclose(pipe);
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
  EXPECT_THAT(output, HasSubstr("ring all-reduce"));
  EXPECT_THAT(output, HasSubstr("report: " + (fs::path(dir.path()) / "report.html").string()));
  EXPECT_THAT(output, HasSubstr("note: "));  // the killed node

  const std::string bad = std::string(CHORUS_BINARY) + " report " + dir.File("missing") + " > /dev/null 2>&1";
  EXPECT_EQ(WEXITSTATUS(std::system(bad.c_str())), 2);
}

}  // namespace
}  // namespace chorus::node

namespace chorus::node {
namespace {

// A `chorus chaos` folder's chaos.jsonl becomes chaos.csv, chaos_faults.csv
// and a script that marks every injected fault (and no skipped one).
TEST(ReportChaosTest, ChaosRunGivesThroughputAndMembershipWithTheFaultsMarked) {
  chorus::testing::TempDir dir("report_chaos");
  const fs::path jsonl = fs::path(dir.path()) / "chaos.jsonl";
  {
    std::ofstream out(jsonl);
    out << R"({"kind":"sample","t":1.0,"running":4,"world_size":4,"samples_per_s":1000.5})" << "\n"
        << R"({"kind":"fault","t":1.5,"fault":"kill","nodes":[2],"duration_s":0,"injected":true})" << "\n"
        << R"({"kind":"sample","t":2.0,"running":3,"world_size":4,"samples_per_s":0})" << "\n"
        << R"({"kind":"fault","t":2.5,"fault":"stop","nodes":[1],"duration_s":3,"injected":false})" << "\n"
        << R"({"kind":"sample","t":3.0,"running":3,"world_size":3,"samples_per_s":750})" << "\n"
        << R"({"kind":"fault","t":3.5,"fault":"restart","nodes":[2],"duration_s":0,"injected":true})" << "\n"
        << "not json\n";
  }
  const fs::path report = fs::path(dir.path()) / "report";
  fs::create_directories(report);
  auto plot = WriteChaosPlot(report.string(), jsonl.string());
  ASSERT_TRUE(plot.has_value()) << plot.error().ToString();
  EXPECT_EQ(plot->spec.id, "chaos");
  EXPECT_EQ(plot->script_path, (report / "chaos.gp").string());
  std::ifstream csv(report / "chaos.csv");
  std::string header, row1, row2, row3;
  std::getline(csv, header);
  std::getline(csv, row1);
  std::getline(csv, row2);
  std::getline(csv, row3);
  EXPECT_EQ(header, "t_s,samples_per_s,running,world_size");
  EXPECT_THAT(row1, HasSubstr(",4,4"));
  EXPECT_THAT(row3, HasSubstr(",3,3"));
  std::stringstream faults;
  faults << std::ifstream(report / "chaos_faults.csv").rdbuf();
  EXPECT_THAT(faults.str(), HasSubstr("kill,2"));
  EXPECT_THAT(faults.str(), HasSubstr("restart,2"));
  EXPECT_THAT(faults.str(), Not(HasSubstr("stop")));
  std::stringstream script;
  script << std::ifstream(report / "chaos.gp").rdbuf();
  EXPECT_THAT(script.str(), HasSubstr("set arrow from 1.5"));
  EXPECT_THAT(script.str(), HasSubstr("set arrow from 3.5"));
  EXPECT_THAT(script.str(), Not(HasSubstr("set arrow from 2.5")));
  EXPECT_THAT(script.str(), HasSubstr("axes x1y2"));

  // No samples: a note, no script.
  std::ofstream(jsonl, std::ios::trunc) << R"({"kind":"summary"})" << "\n";
  auto empty = WriteChaosPlot(report.string(), jsonl.string());
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->script_path.empty());
  EXPECT_THAT(empty->note, HasSubstr("no samples"));
  EXPECT_FALSE(WriteChaosPlot(report.string(), (fs::path(dir.path()) / "missing.jsonl").string()).has_value());
}

}  // namespace
}  // namespace chorus::node
