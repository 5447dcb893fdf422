// Tests of node/logging: the spdlog sink behind the log facade (line format,
// prefix, level filter, log file, uninstalling).
#include "node/run/logging.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "common/log.h"
#include "node/config/config_parse.h"

namespace chorus::node {
namespace {

using ::testing::HasSubstr;

class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("chorus_logging_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    SetLogLevel(LogLevel::kInfo);  // the facade level is process-wide
    std::filesystem::remove_all(dir_);
  }
  static std::vector<std::string> ReadLines(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  std::filesystem::path dir_;
};

TEST_F(LoggingTest, LinesCarryTimeLevelPrefixAndSubsystem) {
  const std::filesystem::path path = dir_ / "run" / "node3" / "node.log";
  RunConfig run;
  run.log_level = LogLevel::kDebug;
  {
    Result<std::unique_ptr<LogSession>> session = InstallLogging(run, path.string(), "");
    ASSERT_TRUE(session) << session.error().message();
    CHORUS_LOG_INFO(Subsys::kTrainer, "hello ", 42);
    CHORUS_LOG_DEBUG(Subsys::kFabric, "details");
    (*session)->SetPrefix("node3");
    CHORUS_LOG_WARN(Subsys::kControl, "peer late");
  }
  CHORUS_LOG_INFO(Subsys::kNode, "after the session");  // back to plain stderr
  const std::vector<std::string> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 3u);
  const std::string time = R"(\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}\] )";
  EXPECT_TRUE(std::regex_match(lines[0], std::regex(time + R"(\[info\] \[trainer\] hello 42)"))) << lines[0];
  EXPECT_TRUE(std::regex_match(lines[1], std::regex(time + R"(\[debug\] \[fabric\] details)"))) << lines[1];
  EXPECT_TRUE(std::regex_match(lines[2], std::regex(time + R"(\[warning\] \[node3\] \[control\] peer late)")))
      << lines[2];
}

TEST_F(LoggingTest, LevelFromTheConfigFiltersLines) {
  const std::filesystem::path path = dir_ / "node.log";
  RunConfig run;
  run.log_level = LogLevel::kWarn;
  {
    auto session = InstallLogging(run, path.string(), "");
    ASSERT_TRUE(session);
    CHORUS_LOG_INFO(Subsys::kNode, "hidden");
    CHORUS_LOG_ERROR(Subsys::kNode, "shown");
  }
  const std::vector<std::string> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("[error] [node] shown"));
}

TEST_F(LoggingTest, FileCanBeOpenedLaterAndAppends) {
  const std::filesystem::path path = dir_ / "later" / "node.log";
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << "earlier line\n";
  RunConfig run;
  {
    auto session = InstallLogging(run, std::nullopt, "");
    ASSERT_TRUE(session);
    CHORUS_LOG_INFO(Subsys::kNode, "console only");
    ASSERT_TRUE((*session)->OpenFile(path.string()).ok());
    CHORUS_LOG_INFO(Subsys::kNode, "in the file");
  }
  const std::vector<std::string> lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "earlier line");
  EXPECT_THAT(lines[1], HasSubstr("[info] [node] in the file"));
}

TEST_F(LoggingTest, BadLevelAndUnwritableFileAreErrors) {
  // A level is a name the config parser checks (the logging gets a LogLevel).
  auto bad_level = ParseConfigString("[run]\nlog_level = \"loud\"\n", "x.toml");
  ASSERT_FALSE(bad_level);
  EXPECT_THAT(bad_level.error().message(), HasSubstr("run.log_level"));

  std::filesystem::create_directories(dir_);
  const std::string blocker = (dir_ / "file").string();
  std::ofstream(blocker) << "not a folder";
  auto bad_file = InstallLogging(RunConfig{}, blocker + "/node.log", "");
  ASSERT_FALSE(bad_file);
  EXPECT_THAT(bad_file.error().message(), HasSubstr(blocker));
}

}  // namespace
}  // namespace chorus::node
