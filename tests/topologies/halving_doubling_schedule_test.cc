// Tests for the recursive halving-doubling schedule: run every rank's step list over
// in-memory mailboxes (one FIFO per ordered pair of ranks) and compare with the
// closed-form sum, for power-of-two and folded (n = 3, 5, 6, 7, 12) world sizes.
#include "topologies/halving_doubling_schedule.h"

#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace chorus::topologies {
namespace {

using Phase = HalvingDoublingPhase;

struct Message {
  Range range;
  std::vector<double> values;
};

// Rank r starts with (r + 1) * 1000 + i: integer sums, exact in double.
double ExpectedSum(int n, int64_t i) { return 1000.0 * n * (n + 1) / 2 + static_cast<double>(n * i); }

void CheckHalvingDoubling(int n, int64_t length) {
  std::vector<std::vector<HalvingDoublingStep>> schedules;
  std::vector<std::vector<double>> data(n, std::vector<double>(length));
  for (int r = 0; r < n; ++r) {
    auto s = HalvingDoublingSchedule(r, n, length);
    ASSERT_TRUE(s) << s.error().ToString();
    schedules.push_back(*s);
    for (int64_t i = 0; i < length; ++i) data[r][i] = (r + 1) * 1000.0 + static_cast<double>(i);
  }
  // Each step is one exchange: post the send (possibly empty) to the peer's mailbox,
  // then take the peer's message for this rank when it is there.
  std::map<std::pair<int, int>, std::deque<Message>> mailbox;  // (from, to) -> FIFO
  std::vector<size_t> next_step(n, 0);
  std::vector<bool> sent(n, false);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      if (next_step[r] == schedules[r].size()) continue;
      const HalvingDoublingStep& step = schedules[r][next_step[r]];
      ASSERT_GE(step.peer, 0);
      ASSERT_LT(step.peer, n);
      ASSERT_NE(step.peer, r);
      if (!sent[r]) {
        Message m{step.send, std::vector<double>(data[r].begin() + step.send.begin,
                                                 data[r].begin() + step.send.end)};
        mailbox[{r, step.peer}].push_back(std::move(m));
        sent[r] = true;
        progress = true;
      }
      auto& queue = mailbox[{step.peer, r}];
      if (queue.empty()) continue;
      const Message m = std::move(queue.front());
      queue.pop_front();
      // What the peer sent is exactly what this rank expects to receive.
      ASSERT_EQ(m.range, step.recv) << "n = " << n << " rank " << r << " step " << next_step[r];
      for (int64_t i = step.recv.begin; i < step.recv.end; ++i) {
        const double v = m.values[i - step.recv.begin];
        data[r][i] = step.reduce ? data[r][i] + v : v;
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
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < length; ++i) {
      ASSERT_EQ(data[r][i], ExpectedSum(n, i))
          << "n = " << n << " length " << length << " rank " << r << " element " << i;
    }
  }
}

TEST(HalvingDoubling, AllreduceGivesTheSumEverywhere) {
  for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 12, 16}) {
    for (int64_t length : {int64_t{0}, int64_t{1}, int64_t{n - 1}, int64_t{7} * n + 3, int64_t{1000}}) {
      ASSERT_NO_FATAL_FAILURE(CheckHalvingDoubling(n, length));
    }
  }
}

TEST(HalvingDoubling, FoldedRanksSitOut) {
  // n = 6: p2 = 4, rem = 2; ranks 0 and 2 fold into 1 and 3.
  for (int r : {0, 2}) {
    auto s = HalvingDoublingSchedule(r, 6, 100);
    ASSERT_TRUE(s);
    ASSERT_EQ(s->size(), 2u);
    EXPECT_EQ((*s)[0].phase, Phase::kFold);
    EXPECT_EQ((*s)[0].peer, r + 1);
    EXPECT_EQ((*s)[0].send, (Range{0, 100}));
    EXPECT_EQ((*s)[1].phase, Phase::kUnfold);
    EXPECT_EQ((*s)[1].recv, (Range{0, 100}));
    EXPECT_FALSE((*s)[1].reduce);
  }
  // Rank 5 (virtual 3) never folds: 2 halving steps then 2 doubling steps.
  auto s = HalvingDoublingSchedule(5, 6, 100);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->size(), 4u);
  EXPECT_EQ((*s)[0].phase, Phase::kReduceScatter);
  EXPECT_EQ((*s)[0].peer, 3);  // virtual 3 ^ 2 = 1 -> real rank 3
  EXPECT_EQ((*s)[0].recv, (Range{50, 100}));
  EXPECT_EQ((*s)[1].peer, 4);  // virtual 3 ^ 1 = 2 -> real rank 4
  EXPECT_EQ((*s)[1].recv, (Range{75, 100}));
  EXPECT_EQ((*s)[3].phase, Phase::kAllGather);
  EXPECT_EQ((*s)[3].recv, (Range{0, 50}));
  // Rank 1 folds in rank 0, and hands the result back at the end.
  auto one = HalvingDoublingSchedule(1, 6, 100);
  ASSERT_TRUE(one);
  ASSERT_EQ(one->size(), 6u);
  EXPECT_EQ(one->front().phase, Phase::kFold);
  EXPECT_TRUE(one->front().reduce);
  EXPECT_EQ(one->back().phase, Phase::kUnfold);
  EXPECT_EQ(one->back().send, (Range{0, 100}));
}

TEST(HalvingDoubling, RejectsBadArguments) {
  EXPECT_FALSE(HalvingDoublingSchedule(0, 0, 10));
  EXPECT_FALSE(HalvingDoublingSchedule(4, 4, 10));
  EXPECT_FALSE(HalvingDoublingSchedule(0, 4, -1));
}

}  // namespace
}  // namespace chorus::topologies
