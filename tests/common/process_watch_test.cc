// ProcessWatch: a process that exits is seen as exited while it is a zombie
// (kill(pid, 0) still succeeds then) and after it is reaped; one that runs is not.
#include "common/process_watch.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace chorus {
namespace {

TEST(ProcessWatchTest, SeesAnExitBeforeAndAfterTheReap) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  Result<ProcessWatch> watch = ProcessWatch::Open(child);
  if (!watch && watch.error().code() == StatusCode::kUnimplemented) {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    GTEST_SKIP() << watch.error().ToString();
  }
  ASSERT_TRUE(watch) << watch.error().ToString();
  EXPECT_EQ(watch->pid(), child);
  EXPECT_FALSE(watch->Exited());
  ASSERT_EQ(kill(child, SIGKILL), 0);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  EXPECT_EQ(kill(child, 0), 0) << "a zombie still answers kill(pid, 0)";
  EXPECT_TRUE(watch->Exited());
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_TRUE(watch->Exited());
  ProcessWatch moved = std::move(*watch);
  EXPECT_TRUE(moved.Exited());
}

TEST(ProcessWatchTest, ThisProcessRunsAndABadPidIsRefused) {
  Result<ProcessWatch> self = ProcessWatch::Open(getpid());
  if (!self && self.error().code() == StatusCode::kUnimplemented) GTEST_SKIP() << self.error().ToString();
  ASSERT_TRUE(self) << self.error().ToString();
  EXPECT_FALSE(self->Exited());
  EXPECT_FALSE(ProcessWatch().Exited());
  EXPECT_EQ(ProcessWatch::Open(0).error().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace chorus
