// Tests of what `chorus report` says about where its runs ran
// (node/lab/report/report_environment.h): the single-node baseline as a
// sentence, the host CPU, cores and threads per node from the nodes'
// summary.json, whether the nodes shared cores and the efficiency cap that
// follows; runs from before those fields say "not recorded". Also the note
// on unequal evaluation counts, which a simulation's sampled evaluators do
// not raise.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "node/lab/report/report.h"
#include "node/lab/report/report_environment.h"
#include "tests/node/lab/report/report_test_util.h"
#include "tests/util/temp_dir.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using nlohmann::json;

constexpr int kNodes = 4;

// A node's summary.json; `host` and `threads` only where given (older runs lack them).
json Summary(const json& host, const json& threads) {
  json s = {{"test_accuracy", 0.8}, {"train_seconds", 1.0}, {"samples_per_s", 1000.0}, {"steps", 10}};
  if (!host.is_null()) s["host"] = host;
  if (!threads.is_null()) s["threads"] = threads;
  return s;
}

// `root`: a comparison of one all-reduce method on kNodes nodes, each node
// with `evals[i]` evaluation records and `summary`; compare.json is `compare`
// with the method list added.
void WriteComparison(const fs::path& root, json compare, const json& summary, const std::vector<int>& evals) {
  compare["methods"] = json::array({{{"name", "ring"}, {"dir", "ring"}, {"family", "allreduce"}, {"exit_code", 0}}});
  chorus::testing::WriteTextFile(root / "compare.json", compare.dump(2));
  for (int n = 0; n < kNodes; ++n) {
    const fs::path dir = root / "ring" / ("node" + std::to_string(n));
    std::string lines;
    for (int k = 1; k <= evals[n]; ++k) {
      lines += json({{"step", 10 * k}, {"time", 1.0 * k}, {"eval_accuracy", 0.5 + 0.1 * k}}).dump() + "\n";
    }
    chorus::testing::WriteTextFile(dir / "metrics.jsonl", lines);
    chorus::testing::WriteTextFile(dir / "summary.json", summary.dump(2));
  }
}

json Compare(const std::string& kind) {
  return {{"name", "env"},
          {"kind", kind},
          {"nodes", kNodes},
          {"single_node", {{"samples_per_s", 58727.4}, {"train_seconds", 0.255009}, {"dir", "single-node"}}}};
}

// The value cell of the settings row headed `heading` in report.html.
std::string SettingsCell(const std::string& html, const std::string& heading) {
  const std::string open = "<tr><th>" + heading + "</th><td>";
  const size_t at = html.find(open);
  if (at == std::string::npos) return "(no row " + heading + ")";
  const size_t start = at + open.size();
  return html.substr(start, html.find("</td>", start) - start);
}

TEST(ReportEnvironmentTest, SingleNodeBaselineIsASentence) {
  chorus::testing::TempDir dir("report_env_baseline");
  WriteComparison(dir.path(), Compare("compare"), Summary(nullptr, nullptr), {2, 2, 2, 2});
  Result<ReportResult> report = BuildReportWithoutPlots(dir.path());
  ASSERT_TRUE(report) << report.error().ToString();
  const std::string html = chorus::testing::ReadTextFile(report->html_path);
  EXPECT_EQ(SettingsCell(html, "single-node baseline (S)"), "58,727 samples/s (one node, 0.26 s of training)");
  EXPECT_THAT(html, Not(HasSubstr("samples_per_s")));
  EXPECT_THAT(report->environment_text,
              HasSubstr("Single-node baseline: 58,727 samples/s (one node, 0.26 s of training)\n"));
  EXPECT_EQ(SingleNodeBaselineText(nullptr), "not measured (efficiency unknown)");
}

TEST(ReportEnvironmentTest, ObjectSettingsAreSentences) {
  chorus::testing::TempDir dir("report_env_sentences");
  json compare = Compare("compare");
  compare["link"] = {{"bandwidth", "100mbit"}, {"latency", "20ms"}, {"emulated", true}, {"latency_emulated", true}};
  compare["straggler"] = {{"node", 2}, {"slowdown", 2.0}};
  compare["late_joiner"] = {{"node", 3}, {"after_s", 5.0}};
  compare["node_profiles"] = {{"speeds", {1, 1, 0.5, 1}}, {"batch_sizes", {32, 32, 64, 32}}};
  WriteComparison(dir.path(), compare, Summary(nullptr, nullptr), {2, 2, 2, 2});
  Result<ReportResult> report = BuildReportWithoutPlots(dir.path());
  ASSERT_TRUE(report) << report.error().ToString();
  const std::string html = chorus::testing::ReadTextFile(report->html_path);
  EXPECT_EQ(SettingsCell(html, "link"), "100mbit per node, 20ms latency, emulated (tc)");
  EXPECT_EQ(SettingsCell(html, "straggler"),
            "node 2 waits 2 times its step time after each step (0.333 of full speed)");
  EXPECT_EQ(SettingsCell(html, "late_joiner"),
            "node 3 joins 5 s after the others start (in the full-size run of each method)");
  EXPECT_EQ(SettingsCell(html, "node_profiles"),
            "speeds 1 / 1 / 0.5 / 1 (node 0 first); batch sizes 32 / 32 / 64 / 32 (node 0 first)");
  EXPECT_THAT(html, Not(HasSubstr("after_s")));
  EXPECT_THAT(html, Not(HasSubstr("slowdown:")));
  EXPECT_EQ(SettingSentence("link", {{"emulated", false}, {"note", "no tc here"}}),
            "unlimited per node, no added latency, not emulated: the runs used loopback unshaped (no tc here)");
  EXPECT_EQ(SettingSentence("straggler", nullptr), "none");
  EXPECT_EQ(SettingSentence("model", "mlp"), "");
}

TEST(ReportEnvironmentTest, NodesOnFewerCoresThanThreadsCapTheEfficiency) {
  chorus::testing::TempDir dir("report_env_shared");
  WriteComparison(dir.path(), Compare("compare"), Summary({{"cpu", "AMD EPYC 7B13"}, {"cores", 2}}, 1),
                  {2, 2, 2, 2});
  Result<ReportResult> report = BuildReportWithoutPlots(dir.path());
  ASSERT_TRUE(report) << report.error().ToString();
  const std::string html = chorus::testing::ReadTextFile(report->html_path);
  EXPECT_EQ(SettingsCell(html, "host CPU"), "AMD EPYC 7B13");
  EXPECT_EQ(SettingsCell(html, "cores"), "2");
  EXPECT_EQ(SettingsCell(html, "threads per node"), "1");
  // 4 nodes x 1 thread on 2 cores: at most half of 4 nodes' single-node speed.
  EXPECT_EQ(SettingsCell(html, "nodes shared cores"),
            "yes: 4 nodes x 1 thread = 4 threads on 2 cores, which caps the efficiency column near 2 / 4 = 0.50");
  EXPECT_THAT(report->environment_text, HasSubstr("host AMD EPYC 7B13 (2 cores), 1 thread per node"));
  EXPECT_THAT(report->environment_text,
              HasSubstr(": 4 nodes x 1 thread = 4 threads on 2 cores, so the nodes shared cores, which caps the "
                        "efficiency column near 2 / 4 = 0.50\n"));
}

TEST(ReportEnvironmentTest, NodesWithCoresOfTheirOwnAreNotCapped) {
  chorus::testing::TempDir dir("report_env_own");
  WriteComparison(dir.path(), Compare("compare"), Summary({{"cpu", "Xeon"}, {"cores", 16}}, 2), {2, 2, 2, 2});
  Result<ReportResult> report = BuildReportWithoutPlots(dir.path());
  ASSERT_TRUE(report) << report.error().ToString();
  const std::string html = chorus::testing::ReadTextFile(report->html_path);
  EXPECT_EQ(SettingsCell(html, "nodes shared cores"), "no: 4 nodes x 2 threads = 8 threads on 16 cores");
  EXPECT_THAT(report->environment_text,
              HasSubstr("host Xeon (16 cores), 2 threads per node: 4 nodes x 2 threads = 8 threads on 16 cores, "
                        "no core shared\n"));
}

TEST(ReportEnvironmentTest, RunsWithoutTheFieldsSayNotRecorded) {
  chorus::testing::TempDir dir("report_env_old");
  json compare = Compare("compare");
  compare.erase("single_node");
  WriteComparison(dir.path(), compare, Summary(nullptr, nullptr), {2, 2, 2, 2});
  Result<ReportResult> report = BuildReportWithoutPlots(dir.path());
  ASSERT_TRUE(report) << report.error().ToString();
  const std::string html = chorus::testing::ReadTextFile(report->html_path);
  for (const char* heading : {"host CPU", "cores", "threads per node", "nodes shared cores"}) {
    EXPECT_EQ(SettingsCell(html, heading), "not recorded") << heading;
  }
  EXPECT_EQ(report->environment_text,
            "Ran on: host not recorded, cores not recorded, threads per node not recorded\n");
}

TEST(ReportEnvironmentTest, VirtualTimeIsNotCappedBySharedCores) {
  chorus::testing::TempDir dir("report_env_virtual");
  WriteComparison(dir.path(), Compare("simulate"), Summary({{"cpu", "AMD EPYC"}, {"cores", 2}}, 1), {2, 2, 2, 2});
  Result<ReportResult> report = BuildReportWithoutPlots(dir.path());
  ASSERT_TRUE(report) << report.error().ToString();
  const std::string html = chorus::testing::ReadTextFile(report->html_path);
  EXPECT_THAT(SettingsCell(html, "nodes shared cores"), HasSubstr("no effect: time is virtual"));
  EXPECT_THAT(report->environment_text, Not(HasSubstr("caps")));
}

// A simulation's time to target is only as fine as its evaluation points:
// the text says how far apart they are. Real runs say nothing of it.
TEST(ReportEnvironmentTest, ASimulationSaysHowFarApartItsEvaluationPointsAre) {
  json compare = Compare("simulate");
  compare["epochs"] = 4;
  compare["simulation"] = {{"evals", 16}};
  chorus::testing::TempDir dir("report_env_points");
  WriteComparison(dir.path(), compare, Summary(nullptr, nullptr), {2, 2, 2, 2});
  Result<ReportResult> report = BuildReportWithoutPlots(dir.path());
  ASSERT_TRUE(report) << report.error().ToString();
  EXPECT_THAT(report->environment_text,
              HasSubstr("Time to target: the first of 16 evaluation points, one every 0.25 epochs, at or above the "
                        "target (--evals places more)\n"));
  chorus::testing::TempDir real("report_env_points_real");
  WriteComparison(real.path(), Compare("compare"), Summary(nullptr, nullptr), {2, 2, 2, 2});
  Result<ReportResult> real_report = BuildReportWithoutPlots(real.path());
  ASSERT_TRUE(real_report) << real_report.error().ToString();
  EXPECT_THAT(real_report->environment_text, Not(HasSubstr("Time to target")));
}

bool NotesUnequalEvaluations(const std::vector<std::string>& warnings) {
  for (const std::string& w : warnings) {
    if (w.find("different numbers of evaluation records") != std::string::npos) return true;
  }
  return false;
}

// A simulation lets nodes 0 and 2 evaluate during training (simulation.eval_nodes);
// the others' having no evaluation records is by design, not a note.
TEST(ReportEnvironmentTest, SampledEvaluatorsAreNoAnomalyButOtherDifferencesAre) {
  json compare = Compare("simulate");
  compare["simulation"] = {{"eval_nodes", {0, 2}}, {"evals", 2}};
  {
    chorus::testing::TempDir dir("report_sampled_ok");
    WriteComparison(dir.path(), compare, Summary(nullptr, nullptr), {2, 0, 2, 0});
    Result<ReportData> data = LoadReportData({dir.path()}, -1);
    ASSERT_TRUE(data) << data.error().ToString();
    EXPECT_FALSE(NotesUnequalEvaluations(data->runs.warnings)) << ::testing::PrintToString(data->runs.warnings);
  }
  // An evaluating node that stopped short, or a node outside the sample that
  // evaluated: both still noted.
  for (const std::vector<int>& evals : {std::vector<int>{2, 0, 1, 0}, std::vector<int>{2, 1, 2, 0}}) {
    chorus::testing::TempDir dir("report_sampled_bad");
    WriteComparison(dir.path(), compare, Summary(nullptr, nullptr), evals);
    Result<ReportData> data = LoadReportData({dir.path()}, -1);
    ASSERT_TRUE(data) << data.error().ToString();
    EXPECT_TRUE(NotesUnequalEvaluations(data->runs.warnings)) << evals[1] << evals[2];
  }
  // Without the sample every node is meant to evaluate: the same files are a note.
  chorus::testing::TempDir dir("report_unsampled");
  WriteComparison(dir.path(), Compare("compare"), Summary(nullptr, nullptr), {2, 0, 2, 0});
  Result<ReportData> data = LoadReportData({dir.path()}, -1);
  ASSERT_TRUE(data) << data.error().ToString();
  EXPECT_TRUE(NotesUnequalEvaluations(data->runs.warnings));
}

}  // namespace
}  // namespace chorus::node
