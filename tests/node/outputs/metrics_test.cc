// Tests of node/metrics: metrics.jsonl lines (valid JSON, flushed, appended or
// truncated, whole under concurrent writers) and the atomic summary.json.
#include "node/outputs/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>
#include <vector>

namespace chorus::node {
namespace {

using ::testing::HasSubstr;

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("chorus_metrics_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::vector<std::string> ReadLines(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  static std::string ReadAll(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

  std::filesystem::path dir_;
};

TEST_F(MetricsTest, NodeRunDirIsOutputRunNode) {
  RunConfig run;
  run.output_dir = "out";
  run.name = "trial";
  EXPECT_EQ(NodeRunDir(run, "node3"), "out/trial/node3");
}

TEST_F(MetricsTest, WritesOneJsonObjectPerLineVisibleBeforeClose) {
  const std::string path = (dir_ / "run" / "node0" / "metrics.jsonl").string();
  Result<std::unique_ptr<MetricsWriter>> writer = MetricsWriter::Open(path, /*append=*/false);
  ASSERT_TRUE(writer) << writer.error().message();
  EXPECT_EQ((*writer)->path(), path);
  for (int step = 1; step <= 3; ++step) {
    nlohmann::json record = {{"step", step}, {"epoch", 1}, {"time", 0.5 * step}, {"loss", 2.0 / step},
                             {"lr", 0.1}, {"loss_scale", 65536.0}, {"skipped_steps", 0},
                             {"samples_per_s", 1000.0}};
    ASSERT_TRUE((*writer)->Append(record).ok());
  }
  // Flushed as written: readable while the writer is still open.
  const std::vector<std::string> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    nlohmann::json parsed = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(parsed.is_object()) << lines[i];
    EXPECT_EQ(parsed["step"], i + 1);
    EXPECT_EQ(parsed["loss"].get<double>(), 2.0 / (i + 1));  // exact: JSON doubles round-trip
    EXPECT_EQ(parsed["loss_scale"].get<double>(), 65536.0);
  }
}

TEST_F(MetricsTest, NonFiniteNumbersBecomeNullAndBadUtf8IsReplaced) {
  const std::string path = (dir_ / "metrics.jsonl").string();
  auto writer = MetricsWriter::Open(path, false);
  ASSERT_TRUE(writer);
  ASSERT_TRUE((*writer)
                  ->Append({{"loss", std::numeric_limits<double>::quiet_NaN()},
                            {"lr", std::numeric_limits<double>::infinity()},
                            {"note", std::string("bad \xff byte")}})
                  .ok());
  const std::vector<std::string> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 1u);
  nlohmann::json parsed = nlohmann::json::parse(lines[0], nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << lines[0];
  EXPECT_TRUE(parsed["loss"].is_null());
  EXPECT_TRUE(parsed["lr"].is_null());
  EXPECT_TRUE(parsed["note"].is_string());
}

TEST_F(MetricsTest, RejectsRecordsThatAreNotObjects) {
  auto writer = MetricsWriter::Open((dir_ / "metrics.jsonl").string(), false);
  ASSERT_TRUE(writer);
  Status status = (*writer)->Append(nlohmann::json::array({1, 2}));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("metrics.jsonl"));
  EXPECT_THAT(status.message(), HasSubstr("array"));
}

TEST_F(MetricsTest, AppendKeepsEarlierLinesAndTruncateStartsEmpty) {
  const std::string path = (dir_ / "metrics.jsonl").string();
  {
    auto writer = MetricsWriter::Open(path, false);
    ASSERT_TRUE(writer);
    ASSERT_TRUE((*writer)->Append({{"step", 1}}).ok());
  }
  {
    auto writer = MetricsWriter::Open(path, /*append=*/true);
    ASSERT_TRUE(writer);
    ASSERT_TRUE((*writer)->Append({{"step", 2}}).ok());
  }
  EXPECT_EQ(ReadLines(path), (std::vector<std::string>{"{\"step\":1}", "{\"step\":2}"}));
  {
    auto writer = MetricsWriter::Open(path, /*append=*/false);
    ASSERT_TRUE(writer);
    ASSERT_TRUE((*writer)->Append({{"step", 3}}).ok());
  }
  EXPECT_EQ(ReadLines(path), (std::vector<std::string>{"{\"step\":3}"}));
}

TEST_F(MetricsTest, ConcurrentAppendsKeepLinesWhole) {
  const std::string path = (dir_ / "metrics.jsonl").string();
  auto writer = MetricsWriter::Open(path, false);
  ASSERT_TRUE(writer);
  constexpr int kThreads = 4;
  constexpr int kLines = 200;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kLines; ++i) {
        nlohmann::json record = {{"thread", t}, {"i", i}, {"payload", std::string(100 + t, 'x')}};
        if (!(*writer)->Append(record).ok()) ++failures;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  const std::vector<std::string> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLines));
  std::vector<int> next(kThreads, 0);
  for (const std::string& line : lines) {
    nlohmann::json parsed = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(parsed.is_object()) << line;
    const int t = parsed["thread"];
    EXPECT_EQ(parsed["i"], next[t]++);  // each thread's lines stay in its order
  }
}

TEST_F(MetricsTest, OpenFailsNamingThePath) {
  std::filesystem::create_directories(dir_);
  const std::string blocker = (dir_ / "file").string();
  std::ofstream(blocker) << "not a folder";
  auto writer = MetricsWriter::Open(blocker + "/metrics.jsonl", false);
  ASSERT_FALSE(writer);
  EXPECT_THAT(writer.error().message(), HasSubstr(blocker));
}

TEST_F(MetricsTest, SummaryIsWrittenWholeAndReplacesTheOldOne) {
  const std::filesystem::path path = dir_ / "run" / "node0" / "summary.json";
  ASSERT_TRUE(WriteSummary(path.string(), {{"final_accuracy", 0.5}, {"epochs", 1}}).ok());
  ASSERT_TRUE(WriteSummary(path.string(), {{"final_accuracy", 0.9}, {"epochs", 5}}).ok());
  nlohmann::json parsed = nlohmann::json::parse(ReadAll(path), nullptr, false);
  ASSERT_TRUE(parsed.is_object());
  EXPECT_EQ(parsed["final_accuracy"].get<double>(), 0.9);
  EXPECT_EQ(parsed["epochs"], 5);
  // Only summary.json is left: no temporary file next to it.
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(path.parent_path())) {
    ++entries;
    EXPECT_EQ(entry.path().filename(), "summary.json");
  }
  EXPECT_EQ(entries, 1);
}

TEST_F(MetricsTest, ReadersNeverSeeAHalfWrittenSummary) {
  const std::string path = (dir_ / "summary.json").string();
  // Large enough that a non-atomic rewrite would be observed half-written.
  auto summary_with = [](int version) {
    return nlohmann::json{{"version", version}, {"padding", std::string(256 * 1024, 'a' + version % 26)}};
  };
  ASSERT_TRUE(WriteSummary(path, summary_with(0)).ok());
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::atomic<int> reads{0};
  std::thread reader([&] {
    while (!done.load()) {
      nlohmann::json parsed = nlohmann::json::parse(ReadAll(path), nullptr, false);
      if (parsed.is_discarded() || !parsed.contains("version")) ++torn;
      ++reads;
    }
  });
  for (int version = 1; version <= 10; ++version) {
    ASSERT_TRUE(WriteSummary(path, summary_with(version)).ok());
  }
  done = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0) << "of " << reads.load() << " reads";
  EXPECT_GT(reads.load(), 0);
  nlohmann::json last = nlohmann::json::parse(ReadAll(path), nullptr, false);
  EXPECT_EQ(last["version"], 10);
}

}  // namespace
}  // namespace chorus::node
