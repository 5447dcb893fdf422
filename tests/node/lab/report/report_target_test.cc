// Where the table reads time to target, for lock-step nodes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "node/lab/report/report_data.h"
#include "tests/util/temp_dir.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;

// Lock-step nodes whose clocks differ a little: node0 logs each evaluation
// first. Merged by time, node0's second evaluation (0.9) with the others'
// first (0.7) averages 0.75 and crosses the target before the round is
// complete; the table reads the whole second round instead.
TEST(ReportTargetTest, LockStepNodesReachTheTargetWithTheirWholeEvaluationRound) {
  chorus::testing::TempDir dir("report_lock_step");
  const double progress[2] = {0.25, 0.5};
  const int steps[2] = {10, 20};
  const double accuracy[2] = {0.7, 0.9};
  for (int n = 0; n < 4; ++n) {
    std::string lines;
    for (int k = 0; k < 2; ++k) {
      lines += nlohmann::json({{"step", steps[k]},
                               {"epoch", 0},
                               {"epoch_progress", progress[k]},
                               {"time", 4.0 * progress[k] + 0.001 * n},
                               {"eval_accuracy", accuracy[k]},
                               {"bytes_sent", 100.0 * steps[k]}})
                   .dump() +
               "\n";
    }
    chorus::testing::WriteTextFile(fs::path(dir.path()) / "sync" / ("node" + std::to_string(n)) / "metrics.jsonl", lines);
  }
  Result<ReportData> data = LoadReportData({dir.File("sync")}, 0.74);
  ASSERT_TRUE(data) << data.error().ToString();
  const std::vector<CurvePoint>& by_time = data->curves[0].accuracy_by_time;
  ASSERT_FALSE(by_time.empty());
  EXPECT_TRUE(std::any_of(by_time.begin(), by_time.end(), [](const CurvePoint& p) {
    return p.value >= 0.74 && p.time_s < 2.003;  // the round's first node alone
  }));
  EXPECT_DOUBLE_EQ(data->rows[0].time_to_target_s, 2.003);  // the round's last node
  EXPECT_DOUBLE_EQ(data->rows[0].bytes_to_target, 2000.0);
  EXPECT_DOUBLE_EQ(data->rows[0].epochs_to_target, 0.5);
}

}  // namespace
}  // namespace chorus::node
