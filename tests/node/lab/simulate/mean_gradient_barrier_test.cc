// The members' mean gradient of each step (`chorus simulate
// --exact-lars-norm`): every member gets the mean of the gradients given,
// summed in rank order, a skipped step's member adds none, and a step
// without any gives none.
#include "node/lab/simulate/mean_gradient_barrier.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace chorus::node {
namespace {

TEST(MeanGradientBarrierTest, EveryMemberGetsTheMeanOfTheGradientsGiven) {
  constexpr int kMembers = 3;
  MeanGradientBarrier barrier(kMembers, 30.0);
  // Step 0: all give r + 1 and 10 (r + 1); step 1: rank 2 skips; step 2: all skip.
  std::vector<std::vector<std::vector<float>>> got(kMembers);
  std::vector<std::thread> threads;
  for (int r = 0; r < kMembers; ++r) {
    threads.emplace_back([&, r] {
      const std::vector<float> g = {static_cast<float>(r + 1), static_cast<float>(10 * (r + 1))};
      for (int step = 0; step < 3; ++step) {
        const bool skip = step == 2 || (step == 1 && r == 2);
        const std::span<const float> mean = barrier.Arrive(r, skip ? std::span<const float>() : std::span<const float>(g));
        got[r].emplace_back(mean.begin(), mean.end());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kMembers; ++r) {
    EXPECT_EQ(got[r][0], (std::vector<float>{2.0f, 20.0f})) << "rank " << r;
    EXPECT_EQ(got[r][1], (std::vector<float>{1.5f, 15.0f})) << "rank " << r;
    EXPECT_TRUE(got[r][2].empty()) << "rank " << r;
  }
}

TEST(MeanGradientBarrierTest, AMemberThatNeverComesEndsTheWaitEmpty) {
  MeanGradientBarrier barrier(2, 0.1);
  const std::vector<float> g = {1.0f};
  EXPECT_TRUE(barrier.Arrive(0, g).empty());
}

}  // namespace
}  // namespace chorus::node
