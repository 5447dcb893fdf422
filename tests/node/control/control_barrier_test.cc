// ControlPlane::BarrierWhileTraining: a member that misses the deadline while
// its heartbeats' trained-sample count rises is waited for; one whose count
// stands still ends the wait, named alone. Nodes in one process on 127.0.0.1
// (heartbeats every 0.1 s).
#include "node/control/control_plane.h"
#include "tests/node/control/control_test_util.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace chorus::node {
namespace {

using testing::Local;
using testing::StartOrDie;
using testing::TestConfig;

constexpr double kBarrierTestWait = 10.0;

// `n` formed members named m0, m1, ...; empty on failure.
std::vector<std::unique_ptr<ControlPlane>> StartMembers(int n) {
  std::vector<std::unique_ptr<ControlPlane>> nodes;
  nodes.push_back(StartOrDie(TestConfig(n, {}), Local("m0")));
  if (!nodes[0]) return {};
  for (int i = 1; i < n; ++i) {
    nodes.push_back(StartOrDie(TestConfig(n, {nodes[0]->advertise_address()}), Local("m" + std::to_string(i))));
    if (!nodes.back()) return {};
  }
  for (auto& node : nodes) {
    if (!node->WaitForEpoch0(Deadline::AfterSeconds(kBarrierTestWait))) return {};
  }
  return nodes;
}

// Reports a rising sample count on `node` every 20 ms until Stop() (or the
// end of its scope).
class TrainingReports {
 public:
  explicit TrainingReports(ControlPlane& node)
      : thread_([this, &node] {
          for (uint64_t samples = 64; !stop_.load(); samples += 64) {
            node.ReportSamples(samples);
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
        }) {}
  ~TrainingReports() { Stop(); }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(ControlBarrierTest, WaitsPastTheDeadlineForAMemberThatTrains) {
  auto nodes = StartMembers(2);
  ASSERT_EQ(nodes.size(), 2u);
  TrainingReports training(*nodes[1]);
  // m1 trains for 1.5 s, three of m0's 0.5 s deadlines, then arrives.
  auto late = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    training.Stop();
    return nodes[1]->Barrier("chorus.re-form", 0, Deadline::AfterSeconds(kBarrierTestWait));
  });
  std::vector<std::string> missing;
  Status met = nodes[0]->BarrierWhileTraining("chorus.re-form", 0, Deadline::AfterSeconds(0.5), 8, &missing);
  EXPECT_TRUE(met.ok()) << met.ToString();
  EXPECT_TRUE(late.get().ok());
}

TEST(ControlBarrierTest, NamesOnlyTheMemberThatStoodStill) {
  auto nodes = StartMembers(3);
  ASSERT_EQ(nodes.size(), 3u);
  TrainingReports training(*nodes[2]);
  std::vector<std::string> missing;
  const auto began = std::chrono::steady_clock::now();
  Status met = nodes[0]->BarrierWhileTraining("chorus.re-form", 0, Deadline::AfterSeconds(0.5), 8, &missing);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  ASSERT_EQ(met.code(), StatusCode::kDeadlineExceeded) << met.ToString();
  EXPECT_EQ(missing, std::vector<std::string>{"m1"});
  EXPECT_NE(met.message().find("not training: m1"), std::string::npos) << met.message();
  EXPECT_LT(waited, 3.0) << "one deadline, not eight";
}

TEST(ControlBarrierTest, EndsAfterItsLastWaitEvenWhileTheMemberTrains) {
  auto nodes = StartMembers(2);
  ASSERT_EQ(nodes.size(), 2u);
  TrainingReports training(*nodes[1]);
  std::vector<std::string> missing;
  Status met = nodes[0]->BarrierWhileTraining("chorus.re-form", 0, Deadline::AfterSeconds(0.3), 2, &missing);
  ASSERT_EQ(met.code(), StatusCode::kDeadlineExceeded) << met.ToString();
  EXPECT_EQ(missing, std::vector<std::string>{"m1"});
}

}  // namespace
}  // namespace chorus::node
