// ControlPlane across a real network partition: three nodes in network
// namespaces (EmulatedLink), one of them cut off and joined again. Needs root
// and iproute2; skipped with the reason otherwise.
#include "node/control/control_plane.h"
#include "node/launch/emulated_link.h"
#include "tests/node/control/control_test_util.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <future>
#include <utility>
#include <thread>

namespace chorus::node {
namespace {

constexpr double kPartitionWait = 15.0;

// Starts a control plane from a thread inside network namespace `ns`: its
// sockets, and those its control thread makes, live there.
Result<std::unique_ptr<ControlPlane>> StartIn(const std::string& ns, const ClusterConfig& config,
                                              LocalNodeInfo local) {
  return std::async(std::launch::async, [&]() -> Result<std::unique_ptr<ControlPlane>> {
           const int fd = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
           if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
             if (fd >= 0) close(fd);
             return Err(Internal("cannot enter network namespace " + ns));
           }
           close(fd);
           return ControlPlane::Start(config, std::move(local));
         })
      .get();
}

using testing::Local;

ClusterConfig PartitionConfig(const std::string& host, std::vector<std::string> bootstrap, double dead_timeout_s) {
  return testing::ControlTestConfig(host + ":0", /*min_nodes=*/3, std::move(bootstrap), dead_timeout_s);
}

// Three nodes in network namespaces of their own (EmulatedLink); skipped
// with the reason where link emulation is unavailable.
class ControlPartitionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Status available = EmulatedLink::Available();
    if (!available.ok()) GTEST_SKIP() << "link emulation unavailable here: " << available.message();
    Result<std::unique_ptr<EmulatedLink>> made = EmulatedLink::Create(3, LinkShape{});
    ASSERT_TRUE(made) << made.error().message();
    link_ = std::move(*made);
  }

  // n0, n1 and n2 started with these dead timeouts, the others
  // bootstrapping from n0, and formed: n0 (the lowest address) coordinates.
  // Fatal failures end the caller (ASSERT_NO_FATAL_FAILURE).
  void FormThree(std::array<double, 3> dead_timeouts) {
    std::string boot;
    for (int i = 0; i < 3; ++i) {
      std::vector<std::string> bootstrap;
      if (i > 0) bootstrap.push_back(boot);
      auto started = StartIn(link_->ns(i), PartitionConfig(link_->host(i), bootstrap, dead_timeouts[i]),
                             Local("n" + std::to_string(i)));
      ASSERT_TRUE(started) << started.error().ToString();
      planes_.push_back(std::move(*started));
      if (i == 0) boot = planes_[0]->advertise_address();
    }
    for (auto& cp : planes_) {
      Result<MembershipView> v = cp->WaitForEpoch0(Deadline::AfterSeconds(kPartitionWait));
      ASSERT_TRUE(v) << v.error().ToString();
    }
    ASSERT_EQ(planes_[1]->View().members[0].name, "n0") << "n0 (lowest address) coordinates";
  }

  std::unique_ptr<EmulatedLink> link_;
  std::vector<std::unique_ptr<ControlPlane>> planes_;  // by name: n0, n1, n2
};

// The coordinator is cut off and, with the shorter dead timeout, declares
// the other two dead first. One member of three is the small side of the
// cut: it leaves rather than form an epoch of its own (which would train a
// second model until the cut heals, or to the end of the run if it never
// does), with the others' addresses to join again through; the two re-form
// without it and are never removed.
TEST_F(ControlPartitionTest, ACoordinatorCutOffFromTheLargerPartLeavesInsteadOfTrainingAlone) {
  ASSERT_NO_FATAL_FAILURE(FormThree({1.0, 3.0, 3.0}));
  EmulatedLink& link = *link_;
  ControlPlane* a = planes_[0].get();
  ControlPlane* b = planes_[1].get();
  ControlPlane* c = planes_[2].get();

  ASSERT_TRUE(link.Cut(0).ok());
  const Deadline by = Deadline::AfterSeconds(kPartitionWait);
  while (!a->Removed() && !by.Expired()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(a->Removed()) << a->Failure().ToString();
  EXPECT_NE(a->Failure().message().find("is cut off from the cluster at epoch 0: it hears 1 of its 3 members"),
            std::string::npos)
      << a->Failure().ToString();
  EXPECT_EQ(a->View().epoch, 0u) << "no epoch of its own";
  const std::vector<std::string> rejoin = a->RejoinAddresses();
  for (auto* cp : {b, c}) {
    EXPECT_NE(std::find(rejoin.begin(), rejoin.end(), cp->advertise_address()), rejoin.end()) << cp->name();
  }
  for (auto* cp : {b, c}) {
    Result<MembershipView> v = cp->WaitForEpochAbove(0, Deadline::AfterSeconds(kPartitionWait));
    ASSERT_TRUE(v) << cp->name() << ": " << v.error().ToString();
    ASSERT_EQ(v->members.size(), 2u) << cp->name();
    EXPECT_EQ(v->members[0].name, "n1");
    EXPECT_EQ(v->members[1].name, "n2");
  }
  ASSERT_TRUE(link.Heal(0).ok());
  std::this_thread::sleep_for(std::chrono::seconds(2));  // a split probe's period: nothing yields
  for (auto* cp : {b, c}) EXPECT_TRUE(cp->Failure().ok()) << cp->Failure().ToString();
}

// n1 and n2 lose the link between them (a blackhole route each way) while
// both still reach the coordinator n0, and each declares the other dead. One
// member's word removes nobody: the coordinator, which hears both, removes
// one of the two (the reporter of the first report it judges), not both, and
// the other two go on in the next epoch.
TEST_F(ControlPartitionTest, OfTwoMembersCutFromEachOtherTheCoordinatorRemovesOne) {
  ASSERT_NO_FATAL_FAILURE(FormThree({2.0, 2.0, 2.0}));
  EmulatedLink& link = *link_;
  ControlPlane* a = planes_[0].get();
  ControlPlane* b = planes_[1].get();
  ControlPlane* c = planes_[2].get();
  for (const auto& [from, to] : {std::pair{1, 2}, std::pair{2, 1}}) {
    Result<std::string> cut = RunCommand({"ip", "-n", link.ns(from), "route", "add", "blackhole", link.host(to) + "/32"});
    ASSERT_TRUE(cut) << cut.error().ToString();
  }
  Result<MembershipView> next = a->WaitForEpochAbove(0, Deadline::AfterSeconds(kPartitionWait));
  ASSERT_TRUE(next) << next.error().ToString();
  ASSERT_EQ(next->members.size(), 2u) << next->Describe();
  EXPECT_EQ(next->members[0].name, "n0");
  const std::string kept = next->members[1].name;
  ControlPlane* kept_plane = kept == "n1" ? b : c;
  ControlPlane* removed_plane = kept == "n1" ? c : b;
  Result<MembershipView> theirs = kept_plane->WaitForEpochAbove(0, Deadline::AfterSeconds(kPartitionWait));
  ASSERT_TRUE(theirs) << kept << ": " << theirs.error().ToString();
  EXPECT_EQ(theirs->epoch, next->epoch);
  const Deadline by = Deadline::AfterSeconds(kPartitionWait);
  while (!removed_plane->Removed() && !by.Expired()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(removed_plane->Removed()) << removed_plane->Failure().ToString();
  EXPECT_TRUE(kept_plane->Failure().ok()) << kept_plane->Failure().ToString();
}

}  // namespace
}  // namespace chorus::node
