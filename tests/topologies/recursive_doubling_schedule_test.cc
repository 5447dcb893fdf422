// Tests for the recursive doubling schedule: run every rank's step list over
// in-memory mailboxes (one FIFO per ordered pair of ranks) and compare with the
// closed-form sum, for power-of-two and folded (n = 3, 5, 6, 7, 12) world sizes;
// and, with inexact float inputs, that every rank ends with the same bits.
#include "topologies/recursive_doubling_schedule.h"

#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace chorus::topologies {
namespace {

using RdPhase = RecursiveDoublingPhase;

struct RdMessage {
  RdPhase phase;
  int round;
  std::vector<float> values;
};

// Runs the schedules of n ranks over `data` (one buffer per rank, equal lengths),
// adding received buffers in as `acc[i] = acc[i] + in[i]` like the gossip code.
void RunSchedules(int n, std::vector<std::vector<float>>& data) {
  std::vector<std::vector<RecursiveDoublingStep>> schedules;
  for (int r = 0; r < n; ++r) {
    auto s = RecursiveDoublingSchedule(r, n);
    ASSERT_TRUE(s) << s.error().ToString();
    schedules.push_back(*s);
  }
  // Each step sends (a snapshot of the whole buffer) before it receives.
  std::map<std::pair<int, int>, std::deque<RdMessage>> mailbox;  // (from, to) -> FIFO
  std::vector<size_t> next_step(n, 0);
  std::vector<bool> sent(n, false);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      if (next_step[r] == schedules[r].size()) continue;
      const RecursiveDoublingStep& step = schedules[r][next_step[r]];
      ASSERT_GE(step.peer, 0);
      ASSERT_LT(step.peer, n);
      ASSERT_NE(step.peer, r);
      ASSERT_TRUE(step.send || step.recv);
      if (step.send && !sent[r]) {
        mailbox[{r, step.peer}].push_back(RdMessage{step.phase, step.round, data[r]});
        sent[r] = true;
        progress = true;
      }
      if (step.recv) {
        auto& queue = mailbox[{step.peer, r}];
        if (queue.empty()) continue;
        const RdMessage m = std::move(queue.front());
        queue.pop_front();
        // Both sides of an exchange agree on the phase and round (the tag).
        ASSERT_EQ(m.phase, step.phase) << "n = " << n << " rank " << r;
        ASSERT_EQ(m.round, step.round) << "n = " << n << " rank " << r;
        for (size_t i = 0; i < data[r].size(); ++i) {
          data[r][i] = step.reduce ? data[r][i] + m.values[i] : m.values[i];
        }
      }
      ++next_step[r];
      sent[r] = false;
      progress = true;
    }
  }
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(next_step[r], schedules[r].size()) << "deadlock: n = " << n << " rank " << r;
  }
  for (const auto& [pair, queue] : mailbox) EXPECT_TRUE(queue.empty()) << "left-over message";
}

TEST(RecursiveDoubling, AllreduceGivesTheSumEverywhere) {
  for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 12, 16}) {
    // Rank r holds (r + 1) * 1000 + i: small integers, exact in float.
    const size_t length = 37;
    std::vector<std::vector<float>> data(n, std::vector<float>(length));
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < length; ++i) data[r][i] = (r + 1) * 1000.0f + static_cast<float>(i);
    }
    ASSERT_NO_FATAL_FAILURE(RunSchedules(n, data));
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < length; ++i) {
        ASSERT_EQ(data[r][i], 1000.0f * n * (n + 1) / 2 + static_cast<float>(n * i))
            << "n = " << n << " rank " << r << " element " << i;
      }
    }
  }
}

TEST(RecursiveDoubling, EveryRankEndsWithTheSameBits) {
  for (int n : {3, 5, 6, 7, 8, 12}) {
    // Inexact inputs of mixed magnitude: the rounding of each addition shows, so
    // any rank summing in a different order than its partner would differ.
    const size_t length = 101;
    std::vector<std::vector<float>> data(n, std::vector<float>(length));
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < length; ++i) {
        data[r][i] = 0.1f * static_cast<float>(r + 1) + 1e-3f * static_cast<float>(i) +
                     (r % 2 ? 1e4f : 1e-4f);
      }
    }
    ASSERT_NO_FATAL_FAILURE(RunSchedules(n, data));
    for (int r = 1; r < n; ++r) {
      ASSERT_EQ(std::memcmp(data[r].data(), data[0].data(), length * sizeof(float)), 0)
          << "n = " << n << ": rank " << r << " differs from rank 0";
    }
  }
}

TEST(RecursiveDoubling, PartnersAndFold) {
  // n = 8: no fold, rank 5 meets 4, 7, 1 in rounds 0, 1, 2.
  auto five = RecursiveDoublingSchedule(5, 8);
  ASSERT_TRUE(five);
  ASSERT_EQ(five->size(), 3u);
  const int partners[] = {4, 7, 1};
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ((*five)[k].phase, RdPhase::kExchange);
    EXPECT_EQ((*five)[k].peer, partners[k]);
    EXPECT_EQ((*five)[k].round, k);
    EXPECT_TRUE((*five)[k].send && (*five)[k].recv && (*five)[k].reduce);
  }
  // n = 6: p2 = 4, rem = 2; ranks 0 and 2 fold into 1 and 3 and sit out.
  for (int r : {0, 2}) {
    auto s = RecursiveDoublingSchedule(r, 6);
    ASSERT_TRUE(s);
    ASSERT_EQ(s->size(), 2u);
    EXPECT_EQ((*s)[0].phase, RdPhase::kFoldIn);
    EXPECT_EQ((*s)[0].peer, r + 1);
    EXPECT_TRUE((*s)[0].send);
    EXPECT_FALSE((*s)[0].recv);
    EXPECT_EQ((*s)[1].phase, RdPhase::kFoldOut);
    EXPECT_TRUE((*s)[1].recv);
    EXPECT_FALSE((*s)[1].reduce);
  }
  // Rank 1 (virtual 0) folds rank 0 in, meets virtual 1 (rank 3) and virtual 2
  // (rank 4), and hands the result back.
  auto one = RecursiveDoublingSchedule(1, 6);
  ASSERT_TRUE(one);
  ASSERT_EQ(one->size(), 4u);
  EXPECT_EQ((*one)[0].phase, RdPhase::kFoldIn);
  EXPECT_TRUE((*one)[0].recv && (*one)[0].reduce);
  EXPECT_EQ((*one)[1].peer, 3);
  EXPECT_EQ((*one)[2].peer, 4);
  EXPECT_EQ((*one)[3].phase, RdPhase::kFoldOut);
  EXPECT_EQ((*one)[3].peer, 0);
  EXPECT_TRUE((*one)[3].send);
  // Rank 5 (virtual 3) never folds: two exchanges, with virtual 2 and 1.
  auto last = RecursiveDoublingSchedule(5, 6);
  ASSERT_TRUE(last);
  ASSERT_EQ(last->size(), 2u);
  EXPECT_EQ((*last)[0].peer, 4);
  EXPECT_EQ((*last)[1].peer, 3);
  // One rank: nothing to do.
  auto alone = RecursiveDoublingSchedule(0, 1);
  ASSERT_TRUE(alone);
  EXPECT_TRUE(alone->empty());
}

TEST(RecursiveDoubling, RejectsBadArguments) {
  EXPECT_FALSE(RecursiveDoublingSchedule(0, 0));
  EXPECT_FALSE(RecursiveDoublingSchedule(4, 4));
  EXPECT_FALSE(RecursiveDoublingSchedule(-1, 4));
}

}  // namespace
}  // namespace chorus::topologies
