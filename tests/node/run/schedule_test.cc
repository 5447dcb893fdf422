// The cluster's schedule among unequal nodes: steps per epoch from the global
// batch, the learning-rate position in global samples (equal on every rank
// whatever its batch, across a re-partition), the speed split of load
// balancing, and the straggler emulation's sleep.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "gossip/protocols/outer_step.h"
#include "node/config/config.h"
#include "node/config/config_check.h"
#include "node/run/training_loop.h"
#include "trainer/batch_sampler.h"
#include "trainer/lr_schedule.h"

namespace chorus::node {
namespace {

// train.slowdown sleeps a multiple of the step's compute, not of a stop in
// it. A child process begins a step, stops itself (SIGSTOP, as a frozen node)
// and is continued 0.3 s later: at slowdown 20 it sleeps about nothing, where
// slowdown x wall would be 6 s. A step that computed sleeps slowdown times
// that.
TEST(ScheduleTest, StragglerSleepFollowsTheComputeNotAStopInIt) {
  using Seconds = std::chrono::duration<double>;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    WallClock clock(20.0);
    clock.ComputeStarts(32);
    const auto t0 = std::chrono::steady_clock::now();
    raise(SIGSTOP);
    const auto t1 = std::chrono::steady_clock::now();
    clock.ComputeEnded(Seconds(t1 - t0).count());
    _exit(Seconds(std::chrono::steady_clock::now() - t1).count() < 1.0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, WUNTRACED), child);
  ASSERT_TRUE(WIFSTOPPED(status));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(child, SIGCONT);
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the stopped step slept slowdown x the stop";

  WallClock busy(2.0);
  busy.ComputeStarts(32);
  const double cpu0 = ProcessCpuSeconds();
  volatile double sink = 0.0;
  while (ProcessCpuSeconds() - cpu0 < 0.05) sink = sink + 1.0;
  const auto t0 = std::chrono::steady_clock::now();
  busy.ComputeEnded(0.05);
  EXPECT_GE(Seconds(std::chrono::steady_clock::now() - t0).count(), 0.09);  // 2 x the 0.05 s of compute
}

TEST(ScheduleTest, StepsPerEpochFollowTheGlobalBatch) {
  Config config;
  EXPECT_EQ(ClusterStepsPerEpoch(config, 60000, 288).value(), 208);
  EXPECT_EQ(ClusterStepsPerEpoch(config, 60000, 4 * 64).value(), 60000 / 256);
  Result<int64_t> none = ClusterStepsPerEpoch(config, 100, 288);
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().message().find("train.batch_size"), std::string::npos) << none.error().message();
  EXPECT_NE(none.error().message().find("288"), std::string::npos) << none.error().message();
}

// Ranks of batches 32/64/64/128 stand at the same schedule position at every
// step, and warm-up ends (the lr peaks) exactly when the cluster has trained
// warmup_epochs of the data: for this mix as for equal batches.
TEST(ScheduleTest, PositionIsInGlobalSamplesAndEqualOnEveryRank) {
  const int n = 2880;
  const std::vector<int> shares = {32, 64, 64, 128};
  const int64_t spe = n / 288;
  trainer::LrScheduleOptions lr;
  lr.base_lr = 2.0;
  lr.global_batch = 288;
  lr.warmup_epochs = 1.0;
  std::vector<trainer::BatchSampler> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(*trainer::BatchSampler::Create(n, shares, 3, r));
  trainer::Batch batch;
  const trainer::Dataset data = [&] {
    trainer::Dataset d;
    d.count = n;
    d.channels = d.height = d.width = 1;
    d.images.assign(n, 0.0f);
    d.labels.assign(n, 0);
    return d;
  }();
  for (int64_t step = 0; step < spe; ++step) {
    std::vector<double> positions;
    for (trainer::BatchSampler& s : ranks) {
      ASSERT_TRUE(s.Next(data, &batch));
      positions.push_back(SchedulePositionOf(s, 0, spe));
    }
    for (double p : positions) EXPECT_DOUBLE_EQ(p, static_cast<double>(step)) << "step " << step;
  }
  const double peak = trainer::PeakLearningRate(lr);
  // The last warm-up step (the epoch's last) reaches the peak; the one before does not.
  EXPECT_LT(trainer::LearningRate(SchedulePositionOf(ranks[0], 0, spe) - 1.0, spe, 3, lr), peak);
  EXPECT_DOUBLE_EQ(trainer::LearningRate(SchedulePositionOf(ranks[0], 0, spe), spe, 3, lr), peak);
}

// Half-way through an epoch the membership changes (rank 3 leaves): the
// survivors' positions stay equal, keep rising, and the epoch's last step
// maps just below the next epoch's start, whatever the new global batch.
TEST(ScheduleTest, PositionStaysEqualAcrossARepartition) {
  const int n = 5760;
  const int64_t spe = n / 288;
  std::vector<trainer::BatchSampler> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(*trainer::BatchSampler::Create(n, {32, 64, 64, 128}, 9, r));
  trainer::Dataset data;
  data.count = n;
  data.channels = data.height = data.width = 1;
  data.images.assign(n, 0.0f);
  data.labels.assign(n, 0);
  trainer::Batch batch;
  for (int k = 0; k < 10; ++k) {
    for (trainer::BatchSampler& s : ranks) ASSERT_TRUE(s.Next(data, &batch));
  }
  ranks.pop_back();
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(ranks[r].Repartition(r, {32, 64, 64}, 1).ok());
  double last = SchedulePositionOf(ranks[0], 1, spe);
  while (true) {
    std::vector<double> positions;
    for (trainer::BatchSampler& s : ranks) {
      if (!s.Next(data, &batch)) break;
      positions.push_back(SchedulePositionOf(s, 1, spe));
    }
    if (positions.size() < 3) {
      EXPECT_TRUE(positions.empty()) << "the ranks ran different steps";
      break;
    }
    EXPECT_DOUBLE_EQ(positions[0], positions[1]);
    EXPECT_DOUBLE_EQ(positions[0], positions[2]);
    EXPECT_GT(positions[0], last);
    last = positions[0];
  }
  EXPECT_LT(last, 2.0 * spe);
  EXPECT_GT(last, 2.0 * spe - 1.0);
}

TEST(ScheduleTest, SplitBySpeedIsProportionalWholeAndTheSameForEveryone) {
  EXPECT_EQ(SplitBySpeed(256, {1, 1, 1, 1}), (std::vector<int>{64, 64, 64, 64}));
  const std::vector<int> split = SplitBySpeed(256, {3, 1});  // 3x faster
  EXPECT_EQ(split, (std::vector<int>{192, 64}));
  const std::vector<int> odd = SplitBySpeed(100, {1, 1, 1});
  EXPECT_EQ(odd, (std::vector<int>{34, 33, 33})) << "ties go to the lower rank";
  std::vector<int> tiny = SplitBySpeed(10, {1000, 1, 1});
  EXPECT_EQ(tiny, (std::vector<int>{8, 1, 1})) << "everyone trains at least one sample";
  EXPECT_TRUE(SplitBySpeed(256, {1, 0}).empty());
  EXPECT_TRUE(SplitBySpeed(2, {1, 1, 1}).empty());
}

// Under an outer optimizer the speeds are gathered right after a sync: the
// interval rounds balance_every_steps up to a multiple of the period.
TEST(ScheduleTest, BalanceIntervalMeetsTheOuterSyncs) {
  Config config;
  config.train.balance_every_steps = 20;
  EXPECT_EQ(BalanceInterval(config), 20);
  config.exchange.outer.optimizer = OuterOptimizer::kNesterov;
  config.exchange.outer.period = 10;
  EXPECT_EQ(BalanceInterval(config), 20);
  config.exchange.outer.period = 8;
  EXPECT_EQ(BalanceInterval(config), 24);
  config.exchange.outer.period = 50;
  EXPECT_EQ(BalanceInterval(config), 50);
}

// Under streaming syncs (each fragment's sync lands `delay` steps after it
// began) the speeds are gathered where no sync's communication runs, for
// every period, fragment count and delay the config allows; the config
// check takes the setting.
TEST(ScheduleTest, BalanceIsDueWhereNoStreamingSyncIsInFlight) {
  Config config;
  config.train.balance = BalanceSetting::kTime;
  config.train.balance_every_steps = 20;
  config.exchange.kind = ExchangeKind::kAllreduce;
  config.exchange.outer.optimizer = OuterOptimizer::kNesterov;
  int checked = 0;
  for (int period : {1, 4, 8, 10, 30}) {
    for (int fragments = 1; fragments <= period; ++fragments) {
      for (int delay = 0; delay < period / fragments; ++delay) {
        config.exchange.outer.period = period;
        config.exchange.outer.fragments = fragments;
        config.exchange.outer.delay = delay;
        ASSERT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config).ToString();
        int due = 0;
        for (int64_t step = 0; step < 400; ++step) {
          if (!BalanceDue(config, step)) continue;
          ++due;
          // A sync begun after step b (b + 1 steps done) lands after step b + delay:
          // in flight before step `step` when b <= step - 1 < b + delay.
          for (int64_t b = std::max<int64_t>(0, step - delay); b < step; ++b) {
            EXPECT_LT(gossip::FragmentDue(b + 1, fragments, period), 0)
                << "H " << period << ", F " << fragments << ", delay " << delay << ": a sync begun after step " << b
                << " is in flight at the gather before step " << step;
          }
        }
        EXPECT_EQ(due, (400 - 1 - delay) / BalanceInterval(config)) << "H " << period << ", F " << fragments;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 40);
}

}  // namespace
}  // namespace chorus::node
