// Tests of node/progress_display and node/console_line: mode resolution, lines
// every N steps, bar redraw throttling, ETA, and log lines written above a bar.
#include "node/run/progress_display.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/log.h"
#include "node/config/config_parse.h"
#include "node/run/console_line.h"

namespace chorus::node {
namespace {

using ::testing::HasSubstr;

// A ConsoleLine writing into memory.
class MemoryConsole {
 public:
  MemoryConsole() : file_(open_memstream(&buffer_, &size_)), console_(file_) {}
  ~MemoryConsole() {
    std::fclose(file_);
    std::free(buffer_);
  }
  ConsoleLine* console() { return &console_; }
  std::FILE* file() { return file_; }
  std::string text() {
    std::fflush(file_);
    return std::string(buffer_, size_);
  }

 private:
  char* buffer_ = nullptr;
  size_t size_ = 0;
  std::FILE* file_;
  ConsoleLine console_;
};

// Collects the lines sent to the log facade while alive.
class CapturedLog {
 public:
  CapturedLog() {
    SetLogSink([this](LogLevel, Subsys subsys, std::string_view message) {
      std::string line = "[";
      line.append(SubsysName(subsys)).append("] ").append(message);
      lines_.push_back(std::move(line));
    });
  }
  ~CapturedLog() { SetLogSink(nullptr); }
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  std::vector<std::string> lines_;
};

ProgressUpdate Step(int epoch, int64_t step, double elapsed_s) {
  ProgressUpdate u;
  u.epoch = epoch;
  u.epochs = 2;
  u.step = step;
  u.steps_per_epoch = 50;
  u.loss = 0.5;
  u.samples_per_s = 1280;
  u.elapsed_s = elapsed_s;
  return u;
}

TEST(ProgressModeTest, AutoAndBarNeedATerminal) {
  EXPECT_EQ(ResolveProgressMode(ProgressSetting::kAuto, true), ProgressMode::kBar);
  EXPECT_EQ(ResolveProgressMode(ProgressSetting::kAuto, false), ProgressMode::kLines);
  EXPECT_EQ(ResolveProgressMode(ProgressSetting::kBar, true), ProgressMode::kBar);
  EXPECT_EQ(ResolveProgressMode(ProgressSetting::kBar, false), ProgressMode::kLines);
  EXPECT_EQ(ResolveProgressMode(ProgressSetting::kLines, true), ProgressMode::kLines);
  EXPECT_EQ(ResolveProgressMode(ProgressSetting::kOff, true), ProgressMode::kOff);
  // The setting is a name the config parser checks.
  Result<Config> bad = ParseConfigString("[run]\nprogress = \"fancy\"\n", "x.toml");
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message(), HasSubstr("run.progress"));
}

TEST(ProgressDisplayTest, FormatsDurations) {
  EXPECT_EQ(ProgressDisplay::FormatDuration(-1), "?");
  EXPECT_EQ(ProgressDisplay::FormatDuration(0), "0s");
  EXPECT_EQ(ProgressDisplay::FormatDuration(59.4), "59s");
  EXPECT_EQ(ProgressDisplay::FormatDuration(192), "3m12s");
  EXPECT_EQ(ProgressDisplay::FormatDuration(3720), "1h02m");
}

TEST(ProgressDisplayTest, LinesModeLogsEveryNStepsAndAtEpochEnd) {
  CapturedLog log;
  ProgressOptions options;
  options.mode = ProgressMode::kLines;
  options.log_every_steps = 20;
  {
    ProgressDisplay display(options, nullptr);
    for (int64_t step = 1; step <= 50; ++step) display.Update(Step(1, step, step * 1.0));
  }
  ASSERT_EQ(log.lines().size(), 3u);  // steps 20, 40 and 50 (end of epoch)
  EXPECT_THAT(log.lines()[0], HasSubstr("[trainer] epoch 1/2 20/50 loss 0.5000 1280 samples/s"));
  EXPECT_THAT(log.lines()[2], HasSubstr("epoch 1/2 50/50"));
}

TEST(ProgressDisplayTest, EtaCountsOnlyStepsSinceTheFirstUpdate) {
  CapturedLog log;
  ProgressOptions options;
  options.mode = ProgressMode::kLines;
  options.log_every_steps = 10;
  ProgressDisplay display(options, nullptr);
  // Resumed in epoch 2 at step 5: 100 steps in all, 55 done at the first update.
  display.Update(Step(2, 5, 100.0));
  display.Update(Step(2, 10, 110.0));  // 5 steps in 10 s: 2 s per step, 40 steps left
  ASSERT_EQ(log.lines().size(), 1u);
  EXPECT_THAT(log.lines()[0], HasSubstr("epoch 2/2 10/50"));
  EXPECT_THAT(log.lines()[0], HasSubstr("ETA 1m20s"));
}

TEST(ProgressDisplayTest, OffShowsNothing) {
  CapturedLog log;
  MemoryConsole console;
  ProgressOptions options;
  options.mode = ProgressMode::kOff;
  {
    ProgressDisplay display(options, console.console());
    for (int64_t step = 1; step <= 50; ++step) display.Update(Step(1, step, step * 0.5));
  }
  EXPECT_TRUE(log.lines().empty());
  EXPECT_EQ(console.text(), "");
}

TEST(ProgressDisplayTest, BarRedrawsAtMostTenTimesASecond) {
  MemoryConsole console;
  ProgressOptions options;
  options.mode = ProgressMode::kBar;
  options.width = 200;
  ProgressDisplay display(options, console.console());
  // 49 steps 12 ms apart (0 to 0.576 s), spaced so that no step lands on a
  // 0.1 s boundary: redraws at 0, 0.108, 0.216, 0.324, 0.432 and 0.540 s.
  for (int64_t step = 1; step < 50; ++step) display.Update(Step(1, step, (step - 1) * 0.012));
  EXPECT_EQ(display.redraws(), 6);
  const std::string text = console.text();
  EXPECT_THAT(text, HasSubstr("\r\033[Kepoch 1/2 [#"));
  EXPECT_EQ(text.find('\n'), std::string::npos);  // redrawn in place
  // The end of an epoch is always drawn, and kept on its own line.
  display.Update(Step(1, 50, 0.58));
  EXPECT_EQ(display.redraws(), 7);
  EXPECT_THAT(console.text(), HasSubstr("epoch 1/2 [####################] 50/50 loss 0.5000"));
  EXPECT_EQ(console.text().back(), '\n');
}

TEST(ProgressDisplayTest, BarIsCutToTheTerminalWidth) {
  MemoryConsole console;
  ProgressOptions options;
  options.mode = ProgressMode::kBar;
  options.width = 30;
  ProgressDisplay display(options, console.console());
  display.Update(Step(1, 1, 0.0));
  const std::string text = console.text();
  const size_t start = text.rfind("\033[K") + 3;
  EXPECT_EQ(text.size() - start, 29u);  // one column short of the width: no wrap
}

TEST(ConsoleLineTest, WritesLogLinesAboveTheTransientLine) {
  MemoryConsole memory;
  ConsoleLine* console = memory.console();
  console->WriteAbove([] {});
  EXPECT_EQ(memory.text(), "");  // nothing to erase or redraw yet
  console->Show("bar 1");
  EXPECT_TRUE(console->visible());
  console->WriteAbove([&] { std::fputs("log line\n", memory.file()); });
  console->Hide();
  EXPECT_FALSE(console->visible());
  // Drawn; erased, the log line, redrawn; erased.
  EXPECT_EQ(memory.text(), "\r\033[Kbar 1\r\033[Klog line\n\r\033[Kbar 1\r\033[K");
}

}  // namespace
}  // namespace chorus::node
