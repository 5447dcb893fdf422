// Tests of the scaling view: the table of methods by node count, the CSV and
// the plot scripts written from the report tables of each count.
#include "node/lab/report/report_scaling.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace chorus::node {
namespace {

namespace fs = std::filesystem;

std::vector<ScalingPoint> Points() {
  ScalingPoint a{16, nlohmann::json::array()}, b{128, nlohmann::json::array()};
  a.table.push_back({{"method", "ring-allreduce"}, {"label", "ring all-reduce"}, {"final_accuracy", 0.8588},
                     {"bytes_sent_per_node", 825.36e6}, {"time_to_target_s", 0.41}});
  a.table.push_back({{"method", "diloco"}, {"label", "DiLoCo"}, {"final_accuracy", 0.853},
                     {"bytes_sent_per_node", 82.89e6}, {"time_to_target_s", nullptr}});
  b.table.push_back({{"method", "diloco"}, {"label", "DiLoCo"}, {"final_accuracy", 0.815},
                     {"bytes_sent_per_node", 22.42e6}});
  b.table.push_back({{"method", "ring-allreduce"}, {"label", "ring all-reduce"}, {"final_accuracy", 0.869},
                     {"bytes_sent_per_node", 60.0e6}});
  b.table.push_back({{"method", "noloco"}, {"label", "NoLoCo"}, {"final_accuracy", 0.696},
                     {"bytes_sent_per_node", 5.0e6}});
  return {a, b};
}

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ReportScalingTest, TableHasAMethodPerRowAndTwoColumnsPerNodeCount) {
  const std::string text = ScalingTableText(Points());
  EXPECT_EQ(text,
            "method           acc% n=16  MB/node n=16  acc% n=128  MB/node n=128\n"
            "ring all-reduce      85.88        825.36       86.90          60.00\n"
            "DiLoCo               85.30         82.89       81.50          22.42\n"
            "NoLoCo                   -             -       69.60           5.00\n");
}

TEST(ReportScalingTest, WritesTheCsvAndOneScriptPerPlot) {
  const fs::path dir = fs::temp_directory_path() / ("chorus_scaling_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Result<ScalingView> view = WriteScalingView(dir.string(), Points(), /*render=*/false);
  ASSERT_TRUE(view) << view.error().ToString();
  const std::string csv = Read(dir / "scaling.csv");
  EXPECT_NE(csv.find("method,label,nodes,final_accuracy,bytes_sent_per_node,time_to_target_s"), std::string::npos);
  EXPECT_NE(csv.find("ring-allreduce,ring all-reduce,16,0.8588,825360000,0.41"), std::string::npos) << csv;
  EXPECT_NE(csv.find("diloco,DiLoCo,16,0.853,82890000,,"), std::string::npos) << csv;  // null: empty field
  const std::string acc = Read(dir / "scaling_accuracy.gp");
  EXPECT_NE(acc.find("set logscale x 2"), std::string::npos);
  EXPECT_NE(acc.find("16 85.88"), std::string::npos) << acc;
  EXPECT_NE(acc.find("128 69.6"), std::string::npos) << acc;
  EXPECT_NE(acc.find("title 'NoLoCo'"), std::string::npos) << acc;
  EXPECT_NE(Read(dir / "scaling_bytes.gp").find("set logscale y"), std::string::npos);
  EXPECT_EQ(Read(dir / "scaling.txt"), view->table_text);
  EXPECT_TRUE(view->svg_paths.empty());  // not rendered
  fs::remove_all(dir);
}

}  // namespace
}  // namespace chorus::node
