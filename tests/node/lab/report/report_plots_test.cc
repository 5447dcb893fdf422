// Tests of what the plots of `chorus report` draw (node/lab/report/report_plots.h):
// consensus only from points over two nodes or more, the consensus plot
// holding exactly the methods whose table row shows a consensus distance and
// titled by their families, accuracy in percent as in the table, and a style
// of its own for each of a dozen and more methods. The gnuplot scripts are
// read; gnuplot is not run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "node/lab/report/report.h"
#include "node/lab/report/report_plots.h"
#include "tests/node/lab/report/report_test_util.h"
#include "tests/util/temp_dir.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using nlohmann::json;

struct Method {
  std::string name;
  std::string family;
  bool consensus_after;  // the summary has consensus_distance_after (gossip's consensus phase)
};

// `root`: a comparison of `methods` on 2 nodes. Every node logs steps 5 and 10
// with a loss and a neighbour estimate, evaluates at step 10 (accuracy 0.6,
// exact distance 0.01); node0 also logs step 15, which it alone reached.
void WriteComparison(const fs::path& root, const std::vector<Method>& methods) {
  json list = json::array();
  for (const Method& m : methods) {
    list.push_back({{"name", m.name}, {"dir", m.name}, {"family", m.family}, {"exit_code", 0}});
    for (int n = 0; n < 2; ++n) {
      std::string lines;
      for (int step = 5; step <= (n == 0 ? 15 : 10); step += 5) {
        lines += json({{"step", step},
                       {"time", 0.1 * step},
                       {"loss", 1.0 / step},
                       {"bytes_sent", 1e6 * step},
                       {"epoch_progress", step / 10.0},
                       {"consensus_distance_estimate", 1e-3 * step}})
                     .dump() +
                 "\n";
      }
      lines += json({{"step", 10},
                     {"time", 1.05},
                     {"epoch", 1},
                     {"epoch_progress", 1.0},
                     {"bytes_sent", 1e7},
                     {"eval_accuracy", 0.6},
                     {"consensus_distance_exact", 0.01}})
                   .dump() +
               "\n";
      json summary = {{"test_accuracy", 0.6}, {"train_seconds", 1.5}, {"samples_per_s", 100.0}, {"steps", 10}};
      if (m.consensus_after) summary["consensus_distance_after"] = 1e-4;
      const fs::path dir = root / m.name / ("node" + std::to_string(n));
      chorus::testing::WriteTextFile(dir / "metrics.jsonl", lines);
      chorus::testing::WriteTextFile(dir / "summary.json", summary.dump());
    }
  }
  chorus::testing::WriteTextFile(root / "compare.json",
                         json({{"name", "plots"}, {"nodes", 2}, {"target_accuracy", 0.85}, {"methods", list}}).dump());
}

std::string Script(const std::string& dir, const std::string& id) {
  return chorus::testing::ReadTextFile(fs::path(dir) / "report" / (id + ".gp"));
}

TEST(ReportPlotsTest, ConsensusIsNeverFromASingleNode) {
  chorus::testing::TempDir dir("report_consensus_nodes");
  WriteComparison(dir.path(), {{"dpsgd", "gossip", true}});
  Result<ReportData> data = LoadReportData({dir.path()}, -1);
  ASSERT_TRUE(data) << data.error().ToString();
  // Step 15 has node0's record alone: no point there.
  const std::vector<CurvePoint>& estimate = data->curves[0].consensus_estimate;
  ASSERT_EQ(estimate.size(), 2u);
  for (const CurvePoint& p : estimate) EXPECT_EQ(p.nodes, 2) << p.step;
  EXPECT_EQ(estimate.back().step, 10);
  ASSERT_EQ(data->curves[0].consensus.size(), 1u);
  // The training loss of one node is still a point of its curve.
  EXPECT_EQ(data->curves[0].train_loss.back().nodes, 1);
}

// Pairwise nodes measure at their own steps: their records of one
// measurement share its consensus_point, and one point of two nodes results.
TEST(ReportPlotsTest, ConsensusRecordsOfOnePointAtDifferentStepsMakeOnePoint) {
  chorus::testing::TempDir dir("report_consensus_points");
  WriteComparison(dir.path(), {{"pairwise", "gossip", true}});
  for (int n = 0; n < 2; ++n) {
    const fs::path metrics = fs::path(dir.path()) / "pairwise" / ("node" + std::to_string(n)) / "metrics.jsonl";
    std::string lines = chorus::testing::ReadTextFile(metrics);
    for (int point = 1; point <= 2; ++point) {
      lines += json({{"step", 7 * point + 3 * n},
                     {"time", 0.7 * point},
                     {"epoch", point},
                     {"consensus_distance_exact", 0.1 / point},
                     {"consensus_point", point}})
                   .dump() +
               "\n";
    }
    chorus::testing::WriteTextFile(metrics, lines);
  }
  Result<ReportData> data = LoadReportData({dir.path()}, -1);
  ASSERT_TRUE(data) << data.error().ToString();
  // The evaluation record's distance has no point: grouped by points, the
  // two measurements, each over both nodes.
  const std::vector<CurvePoint>& consensus = data->curves[0].consensus;
  ASSERT_EQ(consensus.size(), 2u);
  EXPECT_EQ(consensus[0].nodes, 2);
  EXPECT_DOUBLE_EQ(consensus[0].value, 0.1);
  EXPECT_EQ(consensus[0].step, -1) << "the nodes measured at different steps";
  EXPECT_DOUBLE_EQ(consensus[1].value, 0.05);
}

TEST(ReportPlotsTest, ConsensusPlotHoldsTheMethodsTheTableShowsAConsensusFor) {
  chorus::testing::TempDir dir("report_consensus_members");
  WriteComparison(dir.path(),
                  {{"ring", "allreduce", false}, {"dpsgd", "gossip", true}, {"diloco", "low-communication", false}});
  Result<ReportResult> report = BuildReportWithoutPlots(dir.path());
  ASSERT_TRUE(report) << report.error().ToString();
  // The table: DiLoCo's consensus cell is empty, D-PSGD's is not.
  ASSERT_EQ(report->table.size(), 3u);
  EXPECT_TRUE(report->table[2]["consensus_distance_after"].is_null());
  EXPECT_FALSE(report->table[1]["consensus_distance_after"].is_null());
  // The plot: D-PSGD only, although DiLoCo recorded distances too.
  const std::string gp = Script(dir.path(), "consensus_time");
  EXPECT_THAT(gp, HasSubstr("title 'dpsgd'"));
  EXPECT_THAT(gp, Not(HasSubstr("diloco")));
  EXPECT_THAT(gp, Not(HasSubstr("'ring")));
  EXPECT_THAT(gp, HasSubstr("set title 'Consensus distance vs wall time (gossip)'"));
}

TEST(ReportPlotsTest, ConsensusPlotIsNamedByTheFamiliesItHolds) {
  chorus::testing::TempDir dir("report_consensus_title");
  WriteComparison(dir.path(), {{"dpsgd", "gossip", true}, {"local", "local-sgd", true}});
  Result<ReportResult> report = BuildReportWithoutPlots(dir.path());
  ASSERT_TRUE(report) << report.error().ToString();
  const std::string gp = Script(dir.path(), "consensus_time");
  EXPECT_THAT(gp, HasSubstr("title 'local'"));
  EXPECT_THAT(gp, HasSubstr("set title 'Consensus distance vs wall time (gossip, local-sgd)'"));
}

TEST(ReportPlotsTest, AccuracyIsDrawnInPercentAsInTheTable) {
  chorus::testing::TempDir dir("report_percent");
  WriteComparison(dir.path(), {{"dpsgd", "gossip", true}});
  Result<ReportResult> report = BuildReportWithoutPlots(dir.path());
  ASSERT_TRUE(report) << report.error().ToString();
  EXPECT_THAT(report->table_text, HasSubstr("60.00"));
  for (const char* id : {"accuracy_time", "accuracy_bytes", "accuracy_epochs"}) {
    const std::string gp = Script(dir.path(), id);
    EXPECT_THAT(gp, HasSubstr("($7*100)")) << id;
    EXPECT_THAT(gp, HasSubstr("set ylabel 'test accuracy (%, mean over nodes)'")) << id;
    EXPECT_THAT(gp, HasSubstr("85 with lines dt 2")) << id;  // the target 0.85, in percent
  }
  EXPECT_THAT(Script(dir.path(), "loss_time"), Not(HasSubstr("*100")));
}

// Each series' (dash type, colour, point type) in the order of `gp`.
std::vector<std::tuple<int, std::string, int>> Styles(const std::string& gp) {
  std::vector<std::tuple<int, std::string, int>> styles;
  const std::regex style(R"(dt (\d+) lc rgb '(#[0-9A-Fa-f]{6})' pt (\d+))");
  for (std::sregex_iterator it(gp.begin(), gp.end(), style), end; it != end; ++it) {
    styles.emplace_back(std::stoi((*it)[1]), (*it)[2], std::stoi((*it)[3]));
  }
  return styles;
}

TEST(ReportPlotsTest, ADozenMethodsAndMoreStayApart) {
  chorus::testing::TempDir dir("report_styles");
  std::vector<Method> methods;
  for (int m = 0; m < 16; ++m) methods.push_back({"method" + std::to_string(m), "gossip", true});
  WriteComparison(dir.path(), methods);
  Result<ReportResult> report = BuildReportWithoutPlots(dir.path());
  ASSERT_TRUE(report) << report.error().ToString();
  const auto styles = Styles(Script(dir.path(), "accuracy_epochs"));
  ASSERT_EQ(styles.size(), 16u);
  std::set<std::string> first_colours;
  std::set<int> first_points;
  for (size_t m = 0; m < 12; ++m) {
    first_colours.insert(std::get<1>(styles[m]));
    first_points.insert(std::get<2>(styles[m]));
  }
  EXPECT_EQ(first_colours.size(), 12u);  // a dozen colours
  EXPECT_EQ(first_points.size(), 12u);   // and a dozen point types
  const std::set<std::tuple<int, std::string, int>> distinct(styles.begin(), styles.end());
  EXPECT_EQ(distinct.size(), styles.size());  // past a dozen, the dash pattern tells them apart
  // The neighbour estimate (dotted) never takes a method's own dash pattern.
  for (const auto& s : styles) EXPECT_NE(std::get<0>(s), 3);
  const auto consensus = Styles(Script(dir.path(), "consensus_time"));
  ASSERT_EQ(consensus.size(), 32u);  // exact and estimate per method
  EXPECT_EQ(std::get<0>(consensus[1]), 3);
  EXPECT_EQ(std::get<1>(consensus[1]), std::get<1>(consensus[0]));
}

}  // namespace
}  // namespace chorus::node
