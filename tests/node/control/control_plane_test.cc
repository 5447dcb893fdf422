// ControlPlane in one process: several nodes on 127.0.0.1, each with its own
// control thread. Covers forming with no designated founder (start order,
// deferring to a lower address, what a node that cannot form says), joining
// (redirects, refusals, a restart under the same name), epoch 0, barriers,
// leaving, and admission of a late joiner at an epoch boundary. The
// multi-process behaviour (kill -9, garbage on the port, random start orders)
// is in cluster_process_test.cc and formation_process_test.cc.
#include "node/control/control_plane.h"
#include "node/control/control_client.h"
#include "node/control/listen_socket.h"
#include "tests/node/control/control_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <future>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <unistd.h>

namespace chorus::node {
namespace {

using testing::Local;
using testing::StartOrDie;
using testing::TestConfig;


std::vector<std::string> Names(const MembershipView& v) {
  std::vector<std::string> names;
  for (const Member& m : v.members) names.push_back(m.name);
  return names;
}

constexpr double kWait = 10.0;  // generous upper bound for any single wait in these tests

// The coordinator's waiting joiners, once there is one (or after kWait).
std::vector<std::string> AwaitPendingJoiners(ControlPlane& coordinator) {
  const Deadline by = Deadline::AfterSeconds(kWait);
  while (coordinator.PendingJoiners().empty() && !by.Expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return coordinator.PendingJoiners();
}

// `joiner`'s join is refused (kFailedPrecondition) with each of `words` in the message.
void ExpectRefused(ControlPlane& joiner, std::initializer_list<std::string> words) {
  Result<MembershipView> v = joiner.WaitForEpoch0(Deadline::AfterSeconds(kWait));
  ASSERT_FALSE(v.has_value());
  EXPECT_EQ(v.error().code(), StatusCode::kFailedPrecondition) << v.error().ToString();
  for (const std::string& w : words) EXPECT_NE(v.error().message().find(w), std::string::npos) << v.error().message();
}

TEST(ControlPlaneTest, ThreeNodesFormEpochZeroAndPassABarrier) {
  auto a = StartOrDie(TestConfig(3, {}), Local("alpha"));
  ASSERT_TRUE(a);
  const std::string boot = a->advertise_address();
  // rank hints put gamma first although it joins last.
  ClusterConfig cfg_c = TestConfig(3, {boot});
  cfg_c.rank_hint = 0;
  auto b = StartOrDie(TestConfig(3, {boot}), Local("beta"));
  auto c = StartOrDie(cfg_c, Local("gamma"));
  ASSERT_TRUE(b && c);
  std::vector<MembershipView> views;
  for (ControlPlane* cp : {a.get(), b.get(), c.get()}) {
    Result<MembershipView> v = cp->WaitForEpoch0(Deadline::AfterSeconds(kWait));
    ASSERT_TRUE(v.has_value()) << v.error().ToString();
    views.push_back(*v);
  }
  const std::vector<std::string> expected = {"gamma", "alpha", "beta"};
  for (size_t i = 0; i < views.size(); ++i) {
    EXPECT_EQ(views[i].epoch, 0u);
    EXPECT_EQ(Names(views[i]), expected);
    EXPECT_EQ(views[i].members, views[0].members) << "every node sees the same join info";
  }
  EXPECT_EQ(views[0].self_rank, 1);
  EXPECT_EQ(views[1].self_rank, 2);
  EXPECT_EQ(views[2].self_rank, 0);
  EXPECT_EQ(views[0].members[2].data_address, (std::vector<uint8_t>{1, 2, 3, 4}));
  EXPECT_EQ(views[0].members[0].control_address, c->advertise_address());

  // The same barrier name again and again: the per-name sequence keeps them
  // apart, also past the 16 completed barriers a node remembers per name.
  for (int round = 0; round < 20; ++round) {
    auto fb = std::async(std::launch::async, [&] { return b->Barrier("sync", 0, Deadline::AfterSeconds(kWait)); });
    auto fc = std::async(std::launch::async, [&] { return c->Barrier("sync", 0, Deadline::AfterSeconds(kWait)); });
    Status sa = a->Barrier("sync", 0, Deadline::AfterSeconds(kWait));
    EXPECT_TRUE(sa.ok()) << sa.ToString();
    EXPECT_TRUE(fb.get().ok());
    EXPECT_TRUE(fc.get().ok());
  }
}

TEST(ControlPlaneTest, BarrierDeadlineNamesTheMissingMember) {
  auto a = StartOrDie(TestConfig(2, {}), Local("a1"));
  ASSERT_TRUE(a);
  auto b = StartOrDie(TestConfig(2, {a->advertise_address()}), Local("b1"));
  ASSERT_TRUE(b);
  ASSERT_TRUE(a->WaitForEpoch0(Deadline::AfterSeconds(kWait)).has_value());
  ASSERT_TRUE(b->WaitForEpoch0(Deadline::AfterSeconds(kWait)).has_value());
  Status s = a->Barrier("lonely", 0, Deadline::AfterSeconds(0.3));
  ASSERT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("b1"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("a1"), std::string::npos) << s.message();
}

// A leave at the end of a run reports no failure (the others may still be
// completing operations the leaver took part in); one before the end
// (LeaveKind::kStopping) is reported once, as kStopped, to every other member.
TEST(ControlPlaneTest, OnlyALeaveBeforeTheEndOfTheRunIsReportedAsAFailure) {
  auto a = StartOrDie(TestConfig(4, {}), Local("n0"));
  ASSERT_TRUE(a);
  auto b = StartOrDie(TestConfig(4, {a->advertise_address()}), Local("n1"));
  auto c = StartOrDie(TestConfig(4, {a->advertise_address()}), Local("n2"));
  auto d = StartOrDie(TestConfig(4, {a->advertise_address()}), Local("n3"));
  ASSERT_TRUE(b && c && d);
  for (ControlPlane* cp : {a.get(), b.get(), c.get(), d.get()}) {
    ASSERT_TRUE(cp->WaitForEpoch0(Deadline::AfterSeconds(kWait)).has_value());
  }
  // Shared with the callbacks, which may run until the control planes are gone.
  struct Seen {
    std::mutex mu;
    std::vector<std::string> failures;  // "observer: name kind"
  };
  auto seen = std::make_shared<Seen>();
  for (auto [cp, observer] : {std::pair{a.get(), "n0"}, std::pair{b.get(), "n1"}}) {
    cp->OnMemberFailure([seen, observer = std::string(observer)](const MemberFailure& f) {
      std::lock_guard<std::mutex> lock(seen->mu);
      seen->failures.push_back(observer + ": " + f.name + " " + std::to_string(static_cast<int>(f.kind)));
    });
  }
  ASSERT_TRUE(d->Leave(Deadline::AfterSeconds(kWait)).ok());
  ASSERT_TRUE(b->WaitForEpochAbove(0, Deadline::AfterSeconds(kWait)).has_value());
  ASSERT_TRUE(c->Leave(Deadline::AfterSeconds(kWait), LeaveKind::kStopping).ok());
  ASSERT_TRUE(b->WaitForEpochAbove(1, Deadline::AfterSeconds(kWait)).has_value());
  // Well past the heartbeats that could report anything more.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::lock_guard<std::mutex> lock(seen->mu);
  std::vector<std::string> failures = seen->failures;
  std::sort(failures.begin(), failures.end());
  const std::string stopped = std::to_string(static_cast<int>(MemberFailure::Kind::kStopped));
  EXPECT_EQ(failures, (std::vector<std::string>{"n0: n2 " + stopped, "n1: n2 " + stopped}));
}

TEST(ControlPlaneTest, LeaveMovesTheOthersToTheNextEpochAtOnce) {
  auto a = StartOrDie(TestConfig(3, {}), Local("n0"));
  ASSERT_TRUE(a);
  auto b = StartOrDie(TestConfig(3, {a->advertise_address()}), Local("n1"));
  auto c = StartOrDie(TestConfig(3, {a->advertise_address()}), Local("n2"));
  ASSERT_TRUE(b && c);
  for (ControlPlane* cp : {a.get(), b.get(), c.get()}) {
    ASSERT_TRUE(cp->WaitForEpoch0(Deadline::AfterSeconds(kWait)).has_value());
  }
  std::vector<MembershipView> seen_by_b;
  std::mutex mu;
  b->OnViewChange([&](const MembershipView& v) {
    std::lock_guard<std::mutex> lock(mu);
    seen_by_b.push_back(v);
  });
  // The coordinator (rank 0) leaves: the next one takes over.
  const Clock::time_point start = Clock::now();
  Status left = a->Leave(Deadline::AfterSeconds(kWait));
  EXPECT_TRUE(left.ok()) << left.ToString();
  for (ControlPlane* cp : {b.get(), c.get()}) {
    Result<MembershipView> v = cp->WaitForEpochAbove(0, Deadline::AfterSeconds(kWait));
    ASSERT_TRUE(v.has_value()) << v.error().ToString();
    EXPECT_EQ(v->epoch, 1u);
    EXPECT_EQ(Names(*v), (std::vector<std::string>{"n1", "n2"}));
    EXPECT_EQ(v->departed, std::vector<int>{0});
  }
  // Well before dead_timeout_s (1 s): the leave made it immediate.
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 0.9);
  // The callbacks run on the control thread after the view is installed, so
  // WaitForEpochAbove may return first: give them a moment.
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!seen_by_b.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(seen_by_b.size(), 1u);
  EXPECT_EQ(seen_by_b[0].epoch, 1u);
  EXPECT_EQ(seen_by_b[0].self_rank, 0);
}

// Every node leaves the moment it has epoch 0, as `chorus launch --command
// cluster -- --hold 0` does: a Leave may reach a node before its own copy of
// epoch 0, or wait in an outbox for a connection still being set up. Each
// node's leave must still be confirmed by all the others, long before anyone
// is found dead (before the fix, 1 launch of 8 processes in 4-10 waited for the
// dead timeout).
TEST(ControlPlaneTest, NodesLeavingAtOnceConfirmEachOtherBeforeTheDeadTimeout) {
  constexpr int kNodes = 6;
  auto config = [](std::vector<std::string> bootstrap) {
    ClusterConfig c = TestConfig(kNodes, std::move(bootstrap));
    c.suspect_timeout_s = 4.0;
    c.dead_timeout_s = 8.0;
    return c;
  };
  std::vector<std::unique_ptr<ControlPlane>> nodes;
  nodes.push_back(StartOrDie(config({}), Local("n0")));
  ASSERT_TRUE(nodes[0]);
  for (int i = 1; i < kNodes; ++i) {
    nodes.push_back(StartOrDie(config({nodes[0]->advertise_address()}), Local("n" + std::to_string(i))));
    ASSERT_TRUE(nodes.back());
  }
  std::vector<Status> left(kNodes);
  std::vector<std::thread> threads;
  for (int i = 0; i < kNodes; ++i) {
    threads.emplace_back([&, i] {
      Result<MembershipView> v = nodes[i]->WaitForEpoch0(Deadline::AfterSeconds(kWait));
      if (!v) {
        left[i] = v.error();
        return;
      }
      left[i] = nodes[i]->Leave(Deadline::AfterSeconds(4.0));  // half the dead timeout
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kNodes; ++i) EXPECT_TRUE(left[i].ok()) << "n" << i << ": " << left[i].ToString();
}

TEST(ControlPlaneTest, LateJoinerIsRedirectedAndAdmittedAtTheBoundary) {
  auto a = StartOrDie(TestConfig(2, {}), Local("first"));
  ASSERT_TRUE(a);
  auto b = StartOrDie(TestConfig(2, {a->advertise_address()}), Local("second"));
  ASSERT_TRUE(b);
  ASSERT_TRUE(a->WaitForEpoch0(Deadline::AfterSeconds(kWait)).has_value());
  ASSERT_TRUE(b->WaitForEpoch0(Deadline::AfterSeconds(kWait)).has_value());

  // The joiner only knows `second`, which is not the coordinator: it is redirected.
  auto c = StartOrDie(TestConfig(2, {b->advertise_address()}), Local("third"));
  ASSERT_TRUE(c);
  EXPECT_EQ(AwaitPendingJoiners(*a), std::vector<std::string>{"third"});
  EXPECT_TRUE(b->PendingJoiners().empty());
  // Not admitted before the boundary.
  EXPECT_EQ(c->WaitForEpoch0(Deadline::AfterSeconds(0.3)).error().code(), StatusCode::kDeadlineExceeded);

  auto fb = std::async(std::launch::async, [&] { return b->AdvanceEpochIfPending(Deadline::AfterSeconds(kWait)); });
  Result<MembershipView> va = a->AdvanceEpochIfPending(Deadline::AfterSeconds(kWait));
  Result<MembershipView> vb = fb.get();
  ASSERT_TRUE(va.has_value()) << va.error().ToString();
  ASSERT_TRUE(vb.has_value()) << vb.error().ToString();
  Result<MembershipView> vc = c->WaitForEpoch0(Deadline::AfterSeconds(kWait));
  ASSERT_TRUE(vc.has_value()) << vc.error().ToString();
  for (const MembershipView* v : {&*va, &*vb, &*vc}) {
    EXPECT_EQ(v->epoch, 1u);
    EXPECT_EQ(Names(*v), (std::vector<std::string>{"first", "second", "third"}));
    EXPECT_EQ(v->joined, std::vector<std::string>{"third"});
  }
  EXPECT_EQ(vc->self_rank, 2);

  // With nobody waiting, the boundary changes nothing, and every member gets
  // the largest of the values proposed (the loop's next admission step).
  int64_t agreed_a = 0, agreed_b = 0, agreed_c = 0;
  auto fc = std::async(std::launch::async,
                       [&] { return c->AdvanceEpochIfPending(Deadline::AfterSeconds(kWait), 20, &agreed_c); });
  auto fb2 = std::async(std::launch::async,
                        [&] { return b->AdvanceEpochIfPending(Deadline::AfterSeconds(kWait), 30, &agreed_b); });
  Result<MembershipView> same = a->AdvanceEpochIfPending(Deadline::AfterSeconds(kWait), 10, &agreed_a);
  ASSERT_TRUE(same.has_value()) << same.error().ToString();
  EXPECT_EQ(same->epoch, 1u);
  EXPECT_TRUE(fc.get().has_value());
  EXPECT_TRUE(fb2.get().has_value());
  EXPECT_EQ(agreed_a, 30);
  EXPECT_EQ(agreed_b, 30);
  EXPECT_EQ(agreed_c, 30);
  // All three now barrier together, the joiner included. `second` first calls
  // the barrier of epoch 0, as a node still installing an older epoch would
  // (seen in a kill test: its arrival counted in the newer epoch's barrier,
  // the others went on without it, and it waited alone at the next one): that
  // call ends at once, and its epoch-1 call is the one the others meet.
  auto f1 = std::async(std::launch::async, [&] {
    Status stale = b->Barrier("all", 0, Deadline::AfterSeconds(kWait));
    return std::make_pair(stale, b->Barrier("all", 1, Deadline::AfterSeconds(kWait)));
  });
  auto f2 = std::async(std::launch::async, [&] { return c->Barrier("all", 1, Deadline::AfterSeconds(kWait)); });
  EXPECT_TRUE(a->Barrier("all", 1, Deadline::AfterSeconds(kWait)).ok());
  auto [stale, current] = f1.get();
  EXPECT_EQ(stale.code(), StatusCode::kAborted) << stale.ToString();
  EXPECT_NE(stale.message().find("changed to epoch 1"), std::string::npos) << stale.message();
  EXPECT_TRUE(current.ok()) << current.ToString();
  EXPECT_TRUE(f2.get().ok());
  // An epoch this node has not seen is the caller's mistake.
  EXPECT_EQ(a->Barrier("all", 2, Deadline::AfterSeconds(kWait)).code(), StatusCode::kFailedPrecondition);
}

TEST(ControlPlaneTest, WrongTokenEndsJoiningAtOnce) {
  auto a = StartOrDie(TestConfig(1, {}, "right"), Local("keeper"));
  ASSERT_TRUE(a);
  auto b = StartOrDie(TestConfig(1, {a->advertise_address()}, "wrong"), Local("intruder"));
  ASSERT_TRUE(b);
  const Clock::time_point start = Clock::now();
  Result<MembershipView> v = b->WaitForEpoch0(Deadline::AfterSeconds(kWait));
  ASSERT_FALSE(v.has_value());
  EXPECT_EQ(v.error().code(), StatusCode::kPermissionDenied) << v.error().ToString();
  EXPECT_NE(v.error().message().find("tokens differ"), std::string::npos) << v.error().message();
  // Refused by the first answer, not after join_timeout_s (10 s).
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 3.0);
  EXPECT_EQ(a->View().size(), 1);
}

TEST(ControlPlaneTest, VersionMismatchIsRefusedNamingBothVersions) {
  auto a = StartOrDie(TestConfig(1, {}), Local("old", "0.1.0"));
  ASSERT_TRUE(a);
  auto b = StartOrDie(TestConfig(1, {a->advertise_address()}), Local("new", "0.2.0"));
  ASSERT_TRUE(b);
  ExpectRefused(*b, {"chorus 0.1.0", "chorus 0.2.0"});
}

// Members that disagree on [exchange] or [topology] would run different
// collectives and time out; the coordinator refuses the join instead, naming
// the first setting that differs on both sides.
TEST(ControlPlaneTest, DifferentSharedSettingsAreRefusedNamingTheSetting) {
  LocalNodeInfo ring = Local("ring");
  ring.shared_settings = "exchange.kind = \"allreduce\"\nexchange.algorithm = \"ring\"\ntopology.kind = \"ring\"\n";
  LocalNodeInfo tree = Local("tree");
  tree.shared_settings = "exchange.kind = \"allreduce\"\nexchange.algorithm = \"tree\"\ntopology.kind = \"ring\"\n";
  auto a = StartOrDie(TestConfig(2, {}), ring);
  ASSERT_TRUE(a);
  auto b = StartOrDie(TestConfig(2, {a->advertise_address()}), tree);
  ASSERT_TRUE(b);
  ExpectRefused(*b, {"ring has exchange.algorithm = \"ring\", tree has exchange.algorithm = \"tree\""});

  // The same text joins.
  LocalNodeInfo same = Local("same");
  same.shared_settings = ring.shared_settings;
  auto c = StartOrDie(TestConfig(2, {a->advertise_address()}), same);
  ASSERT_TRUE(c);
  Result<MembershipView> joined = c->WaitForEpoch0(Deadline::AfterSeconds(kWait));
  ASSERT_TRUE(joined.has_value()) << joined.error().ToString();
  EXPECT_EQ(joined->size(), 2);
}

// The founding members synchronise a resumed state collectively at epoch 0: a
// node without --resume among resuming ones would wait in its first step while
// they wait in that synchronisation (both failed after about a minute). The
// coordinator refuses it at once, naming both sides; a node that joins the
// formed cluster is synchronised by its admission, so its flag is not compared.
TEST(ControlPlaneTest, FoundingNodesThatDisagreeOnResumeAreRefusedNamingBoth) {
  LocalNodeInfo resuming = Local("n0");
  resuming.resume = true;
  auto a = StartOrDie(TestConfig(2, {}), resuming);
  ASSERT_TRUE(a);
  auto b = StartOrDie(TestConfig(2, {a->advertise_address()}), Local("n1"));
  ASSERT_TRUE(b);
  ExpectRefused(*b, {"n0 resumes from its checkpoint (--resume) and n1 does not"});

  LocalNodeInfo also = Local("n2");
  also.resume = true;
  auto c = StartOrDie(TestConfig(2, {a->advertise_address()}), also);
  ASSERT_TRUE(c);
  ASSERT_TRUE(a->WaitForEpoch0(Deadline::AfterSeconds(kWait)).has_value());
  Result<MembershipView> formed = c->WaitForEpoch0(Deadline::AfterSeconds(kWait));
  ASSERT_TRUE(formed.has_value()) << formed.error().ToString();
  EXPECT_EQ(formed->size(), 2);

  // Once formed, a node without --resume joins at the next boundary.
  auto d = StartOrDie(TestConfig(2, {a->advertise_address()}), Local("n3"));
  ASSERT_TRUE(d);
  EXPECT_EQ(AwaitPendingJoiners(*a), std::vector<std::string>{"n3"});
  auto fc = std::async(std::launch::async, [&] { return c->AdvanceEpochIfPending(Deadline::AfterSeconds(kWait)); });
  Result<MembershipView> va = a->AdvanceEpochIfPending(Deadline::AfterSeconds(kWait));
  ASSERT_TRUE(va.has_value()) << va.error().ToString();
  EXPECT_TRUE(fc.get().has_value());
  Result<MembershipView> vd = d->WaitForEpoch0(Deadline::AfterSeconds(kWait));
  ASSERT_TRUE(vd.has_value()) << vd.error().ToString();
  EXPECT_EQ(Names(*vd), (std::vector<std::string>{"n0", "n2", "n3"}));
}

// A duplicate name is retried until cluster.join_timeout_s (the coordinator
// may not have seen an old process die yet), then refused: the coordinator's
// own name, and a live, connected member's.
TEST(ControlPlaneTest, DuplicateNameIsRefused) {
  auto a = StartOrDie(TestConfig(2, {}), Local("twin"));
  ASSERT_TRUE(a);
  auto other = StartOrDie(TestConfig(2, {a->advertise_address()}), Local("other"));
  ASSERT_TRUE(other);
  ASSERT_TRUE(a->WaitForEpoch0(Deadline::AfterSeconds(kWait)).has_value());
  ClusterConfig cfg = TestConfig(2, {a->advertise_address()});
  cfg.join_timeout_s = 1;
  auto b = StartOrDie(cfg, Local("twin"));
  auto c = StartOrDie(cfg, Local("other"));
  ASSERT_TRUE(b && c);
  ExpectRefused(*b, {"'twin' is already used by " + a->advertise_address()});
  ExpectRefused(*c, {"'other' is already used by " + other->advertise_address()});
  EXPECT_EQ(a->View().size(), 2);
}

TEST(ControlPlaneTest, UnreachableBootstrapFailsAfterTheJoinTimeout) {
  // A port that nothing listens on: bind a node, note its address, stop it.
  std::string dead_address;
  {
    auto gone = StartOrDie(TestConfig(1, {}), Local("gone"));
    ASSERT_TRUE(gone);
    dead_address = gone->advertise_address();
  }
  ClusterConfig cfg = TestConfig(1, {dead_address});
  cfg.join_timeout_s = 0.5;
  auto b = StartOrDie(cfg, Local("seeker"));
  ASSERT_TRUE(b);
  Result<MembershipView> v = b->WaitForEpoch0(Deadline::AfterSeconds(kWait));
  ASSERT_FALSE(v.has_value());
  EXPECT_EQ(v.error().code(), StatusCode::kUnavailable) << v.error().ToString();
  EXPECT_NE(v.error().message().find(dead_address), std::string::npos) << v.error().message();
}

TEST(ControlPlaneTest, SelfCheckFailsForAnUnreachableAdvertisedAddress) {
  ClusterConfig cfg = TestConfig(1, {});
  // Port 1 on loopback: nothing listens there, so the self-check cannot connect.
  cfg.advertise = "127.0.0.1:1";
  Result<std::unique_ptr<ControlPlane>> cp = ControlPlane::Start(cfg, Local("lost"));
  ASSERT_FALSE(cp.has_value());
  EXPECT_NE(cp.error().message().find("self-check failed"), std::string::npos) << cp.error().message();
  EXPECT_NE(cp.error().message().find("127.0.0.1:1"), std::string::npos) << cp.error().message();
}

// A TCP socket bound to a free port of 127.0.0.1; listening when `listen_too`
// (as chorus launch binds node0's). Returns the fd and the port.
std::pair<int, uint16_t> BoundSocket(bool listen_too) {
  if (listen_too) {
    auto listener = ListenOnFreePort("127.0.0.1");
    EXPECT_TRUE(listener.has_value()) << listener.error().ToString();
    return listener ? *listener : std::pair<int, uint16_t>{-1, 0};
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  return {fd, ntohs(addr.sin_port)};
}

// chorus launch hands node0 its bound, listening socket: the control plane
// serves it (others join through its port) instead of binding cluster.listen.
TEST(ControlPlaneTest, ServesAListeningSocketHandedOver) {
  auto [fd, port] = BoundSocket(/*listen_too=*/true);
  ClusterConfig cfg = TestConfig(2, {});
  cfg.listen = "127.0.0.1:" + std::to_string(port);
  LocalNodeInfo local = Local("zero");
  local.listen_fd = fd;
  auto a = StartOrDie(cfg, local);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->port(), port);
  auto b = StartOrDie(TestConfig(2, {a->advertise_address()}), Local("one"));
  ASSERT_TRUE(b);
  Result<MembershipView> v = b->WaitForEpoch0(Deadline::AfterSeconds(kWait));
  ASSERT_TRUE(v.has_value()) << v.error().ToString();
  EXPECT_EQ(Names(*v), (std::vector<std::string>{"one", "zero"}));  // by name: no rank hints
}

TEST(ControlPlaneTest, RefusesAHandedOverSocketThatDoesNotListenOrDisagreesWithListen) {
  auto [idle, idle_port] = BoundSocket(/*listen_too=*/false);
  LocalNodeInfo local = Local("zero");
  local.listen_fd = idle;
  Result<std::unique_ptr<ControlPlane>> cp = ControlPlane::Start(TestConfig(1, {}), local);
  ASSERT_FALSE(cp.has_value());
  EXPECT_NE(cp.error().message().find("fd " + std::to_string(idle) + ") is not a listening TCP/IP socket"),
            std::string::npos)
      << cp.error().message();
  EXPECT_EQ(fcntl(idle, F_GETFD), -1) << "the refused socket stays open";

  auto [fd, port] = BoundSocket(/*listen_too=*/true);
  ClusterConfig cfg = TestConfig(1, {});
  cfg.listen = "127.0.0.1:" + std::to_string(port == 65535 ? 1 : port + 1);
  local.listen_fd = fd;
  cp = ControlPlane::Start(cfg, local);
  ASSERT_FALSE(cp.has_value());
  EXPECT_NE(cp.error().message().find("listens on port " + std::to_string(port)), std::string::npos)
      << cp.error().message();
  EXPECT_NE(cp.error().message().find("cluster.listen=" + cfg.listen), std::string::npos) << cp.error().message();
}

// ---------------------------------------------------------------------------
// Forming with no designated founder

// A port of 127.0.0.1 that nothing listens on now (bound, noted, closed), for a
// node that starts later.
uint16_t FreePort() {
  auto [fd, port] = BoundSocket(/*listen_too=*/false);
  close(fd);
  return port;
}

std::string Loopback(uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

ClusterConfig At(uint16_t port, int min_nodes, std::vector<std::string> bootstrap) {
  ClusterConfig c = TestConfig(min_nodes, std::move(bootstrap));
  c.listen = Loopback(port);
  return c;
}

// `count` free ports, lowest first.
std::vector<uint16_t> AscendingPorts(int count) {
  std::vector<uint16_t> ports;
  while (static_cast<int>(ports.size()) < count) {
    const uint16_t p = FreePort();
    if (std::find(ports.begin(), ports.end(), p) == ports.end()) ports.push_back(p);
  }
  std::sort(ports.begin(), ports.end());
  return ports;
}

// The state a tool sees at `address` (no discovery: the node learns nothing).
Result<ProbeResult> StateOf(const std::string& address) {
  const VersionInfo versions{"0.1.0", "1.17", "tcp;ofi_rxm", "117.0"};
  return ProbeNode(address, "t0k3n", versions, "observer", Deadline::AfterSeconds(kWait));
}

// Polls `address` until `ready` holds for its state (or kWait passes).
bool AwaitState(const std::string& address, const std::function<bool(const msg::State&)>& ready) {
  const Deadline by = Deadline::AfterSeconds(kWait);
  while (!by.Expired()) {
    Result<ProbeResult> probe = StateOf(address);
    if (probe && ready(probe->state)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// configs/examples/local-pair-node*.toml: each node bootstraps through the
// other and min_nodes is 2. Either may start first; both form one epoch 0.
TEST(ControlPlaneTest, TwoNodesBootstrappingEachOtherFormOneEpochInEitherOrder) {
  for (bool first_is_zero : {true, false}) {
    SCOPED_TRACE(first_is_zero ? "node0 first" : "node1 first");
    const uint16_t p0 = FreePort();
    const uint16_t p1 = FreePort();
    ASSERT_NE(p0, p1);
    const ClusterConfig c0 = At(p0, 2, {Loopback(p1)});
    const ClusterConfig c1 = At(p1, 2, {Loopback(p0)});
    std::unique_ptr<ControlPlane> n0, n1;
    if (first_is_zero) {
      n0 = StartOrDie(c0, Local("node0"));
    } else {
      n1 = StartOrDie(c1, Local("node1"));
    }
    // The first one probes a port where nothing listens yet, for a while.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (first_is_zero) {
      n1 = StartOrDie(c1, Local("node1"));
    } else {
      n0 = StartOrDie(c0, Local("node0"));
    }
    ASSERT_TRUE(n0 && n1);
    Result<MembershipView> v0 = n0->WaitForEpoch0(Deadline::AfterSeconds(kWait));
    Result<MembershipView> v1 = n1->WaitForEpoch0(Deadline::AfterSeconds(kWait));
    ASSERT_TRUE(v0.has_value()) << v0.error().ToString();
    ASSERT_TRUE(v1.has_value()) << v1.error().ToString();
    EXPECT_EQ(v0->epoch, 0u);
    EXPECT_EQ(Names(*v0), (std::vector<std::string>{"node0", "node1"}));
    EXPECT_EQ(v0->members, v1->members);
  }
}

// Three nodes started together by hand with min_nodes 1, each bootstrapping
// the one before, the first not listening yet: the other two reach each
// other but not it. They wait for it (up to the dead timeout) instead of
// founding a cluster of their own beside it, and both join its cluster.
TEST(ControlPlaneTest, NodesWhoseBootstrapDoesNotListenYetFoundNoClusterBesideIt) {
  const std::vector<uint16_t> ports = AscendingPorts(3);
  const std::string lo = Loopback(ports[0]), mid = Loopback(ports[1]);
  auto n_mid = StartOrDie(At(ports[1], 1, {lo}), Local("mid"));
  auto n_hi = StartOrDie(At(ports[2], 1, {mid}), Local("hi"));
  ASSERT_TRUE(n_mid && n_hi);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // their probes of `lo` fail meanwhile
  auto n_lo = StartOrDie(At(ports[0], 1, {}), Local("lo"));
  ASSERT_TRUE(n_lo);
  Result<MembershipView> v_lo = n_lo->WaitForEpoch0(Deadline::AfterSeconds(kWait));
  ASSERT_TRUE(v_lo.has_value()) << v_lo.error().ToString();
  EXPECT_EQ(Names(*v_lo), std::vector<std::string>{"lo"});  // alone at once: min_nodes 1
  // The other two wait to be admitted at its next boundary instead of
  // training a cluster of their own.
  std::vector<std::string> pending;
  for (int t = 0; t < 100 && pending.size() < 2; ++t) {
    pending = n_lo->PendingJoiners();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::sort(pending.begin(), pending.end());
  EXPECT_EQ(pending, (std::vector<std::string>{"hi", "mid"}));
  EXPECT_EQ(n_mid->WaitForEpoch0(Deadline::AfterSeconds(0.2)).error().code(), StatusCode::kDeadlineExceeded);
}

// min_nodes 4 with three nodes started keeps them forming, so each one's
// state shows who defers to whom: `mid` is the candidate until `lo` (which
// only knows `hi`) appears; then `mid` redirects `hi` to `lo` and joins `lo`
// too. A fourth node completes epoch 0 for all.
TEST(ControlPlaneTest, AFounderCandidateDefersToALowerAddressThatAppearsLater) {
  const std::vector<uint16_t> ports = AscendingPorts(4);
  const std::string lo = Loopback(ports[0]), mid = Loopback(ports[1]), hi = Loopback(ports[2]);
  auto n_mid = StartOrDie(At(ports[1], 4, {}), Local("b"));
  auto n_hi = StartOrDie(At(ports[2], 4, {mid}), Local("c"));
  ASSERT_TRUE(n_mid && n_hi);
  EXPECT_TRUE(AwaitState(mid, [](const msg::State& s) { return s.candidate && s.pending.size() == 1; }))
      << "mid is the candidate, hi its applicant";
  auto n_lo = StartOrDie(At(ports[0], 4, {hi}), Local("a"));
  ASSERT_TRUE(n_lo);
  EXPECT_TRUE(AwaitState(lo, [](const msg::State& s) { return s.candidate && s.pending.size() == 2; }))
      << "lo collects both";
  Result<ProbeResult> mid_state = StateOf(mid);
  ASSERT_TRUE(mid_state.has_value()) << mid_state.error().ToString();
  EXPECT_FALSE(mid_state->state.candidate);
  EXPECT_EQ(mid_state->state.applied_to, lo);
  Result<ProbeResult> hi_state = StateOf(hi);
  ASSERT_TRUE(hi_state.has_value()) << hi_state.error().ToString();
  EXPECT_EQ(hi_state->state.applied_to, lo);

  auto n_last = StartOrDie(At(ports[3], 4, {mid}), Local("d"));
  ASSERT_TRUE(n_last);
  std::vector<MembershipView> views;
  for (ControlPlane* cp : {n_lo.get(), n_mid.get(), n_hi.get(), n_last.get()}) {
    Result<MembershipView> v = cp->WaitForEpoch0(Deadline::AfterSeconds(kWait));
    ASSERT_TRUE(v.has_value()) << v.error().ToString();
    views.push_back(*v);
  }
  for (const MembershipView& v : views) {
    EXPECT_EQ(v.epoch, 0u);
    EXPECT_EQ(v.members, views[0].members);
  }
  EXPECT_EQ(Names(views[0]), (std::vector<std::string>{"a", "b", "c", "d"}));
}

// A node that cannot form says whom it reached (and in what state), whom it
// did not (and why), and its role: the candidate and its applicant alike.
TEST(ControlPlaneTest, TheDeadlineErrorListsReachedAndUnreachedAddressesAndTheRole) {
  const std::vector<uint16_t> ports = AscendingPorts(3);
  const std::string lo = Loopback(ports[0]), hi = Loopback(ports[1]), nobody = Loopback(ports[2]);
  auto n_lo = StartOrDie(At(ports[0], 3, {}), Local("low"));
  ASSERT_TRUE(n_lo);
  auto n_hi = StartOrDie(At(ports[1], 3, {lo, nobody}), Local("high"));
  ASSERT_TRUE(n_hi);
  ASSERT_TRUE(AwaitState(lo, [](const msg::State& s) { return s.candidate && s.pending.size() == 1; }));

  Result<MembershipView> v = n_hi->WaitForEpoch0(Deadline::AfterSeconds(0.5));
  ASSERT_FALSE(v.has_value());
  EXPECT_EQ(v.error().code(), StatusCode::kDeadlineExceeded);
  const std::string& applicant = v.error().message();
  for (const std::string& words :
       {"applied to low (" + lo + "), which has 2 of cluster.min_nodes=3 present",
        "reached: " + lo + " (low, founder candidate with ", "not reached: connecting to " + nobody + ": "}) {
    EXPECT_NE(applicant.find(words), std::string::npos) << words << "\nin: " << applicant;
  }
  v = n_lo->WaitForEpoch0(Deadline::AfterSeconds(0.1));
  ASSERT_FALSE(v.has_value());
  const std::string& candidate = v.error().message();
  for (const std::string& words :
       {std::string("founder candidate with 2 of cluster.min_nodes=3 present: low, high; waiting for: 1 more node"),
        "reached: " + hi + " (high, applied to " + lo + ")", "not reached: connecting to " + nobody + ": "}) {
    EXPECT_NE(candidate.find(words), std::string::npos) << words << "\nin: " << candidate;
  }
}

// A member killed (its ControlPlane gone without Leave) and started again
// under its name and address: the coordinator takes the join as the old
// process's death (long before the dead timeout here) and admits the new one
// at the next epoch boundary. The old port keeps listening in between (a dup
// of the socket), so no refused dial tells the others first.
TEST(ControlPlaneTest, ARestartedMemberIsAdmittedUnderItsNameAtTheNextBoundary) {
  auto config = [](uint16_t port, std::vector<std::string> bootstrap) {
    ClusterConfig c = At(port, 3, std::move(bootstrap));
    c.suspect_timeout_s = 10;
    c.dead_timeout_s = 20;
    return c;
  };
  auto [fd, port] = BoundSocket(/*listen_too=*/true);
  const int kept = dup(fd);
  auto n0 = StartOrDie(config(0, {}), Local("n0"));
  ASSERT_TRUE(n0);
  const std::string boot = n0->advertise_address();
  auto n1 = StartOrDie(config(0, {boot}), Local("n1"));
  LocalNodeInfo local2 = Local("n2");
  local2.listen_fd = fd;
  auto n2 = StartOrDie(config(port, {boot}), local2);
  ASSERT_TRUE(n1 && n2);
  for (ControlPlane* cp : {n0.get(), n1.get(), n2.get()}) {
    ASSERT_TRUE(cp->WaitForEpoch0(Deadline::AfterSeconds(kWait)).has_value());
  }
  const Clock::time_point killed = Clock::now();
  n2.reset();
  LocalNodeInfo again = Local("n2");
  again.listen_fd = kept;
  auto restarted = StartOrDie(config(port, {boot}), again);
  ASSERT_TRUE(restarted);
  // The old n2 is declared dead at the join: epoch 1 without it.
  for (ControlPlane* cp : {n0.get(), n1.get()}) {
    Result<MembershipView> v = cp->WaitForEpochAbove(0, Deadline::AfterSeconds(kWait));
    ASSERT_TRUE(v.has_value()) << v.error().ToString();
    EXPECT_EQ(Names(*v), (std::vector<std::string>{"n0", "n1"}));
  }
  EXPECT_EQ(n0->PendingJoiners(), std::vector<std::string>{"n2"});
  auto f1 = std::async(std::launch::async, [&] { return n1->AdvanceEpochIfPending(Deadline::AfterSeconds(kWait)); });
  Result<MembershipView> v0 = n0->AdvanceEpochIfPending(Deadline::AfterSeconds(kWait));
  ASSERT_TRUE(v0.has_value()) << v0.error().ToString();
  ASSERT_TRUE(f1.get().has_value());
  Result<MembershipView> v2 = restarted->WaitForEpoch0(Deadline::AfterSeconds(kWait));
  ASSERT_TRUE(v2.has_value()) << v2.error().ToString();
  EXPECT_EQ(v2->epoch, 2u);
  EXPECT_EQ(Names(*v2), (std::vector<std::string>{"n0", "n1", "n2"}));
  EXPECT_EQ(v2->joined, std::vector<std::string>{"n2"});
  EXPECT_EQ(v0->members, v2->members);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - killed).count(), 10.0) << "before any timeout";
}

// The coordinator tells a joiner where training stands (ReportProgress).
TEST(ControlPlaneTest, TheStateTellsJoinersTheReportedStep) {
  auto a = StartOrDie(TestConfig(1, {}), Local("solo"));
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->WaitForEpoch0(Deadline::AfterSeconds(kWait)).has_value());
  Result<ProbeResult> before = StateOf(a->advertise_address());
  ASSERT_TRUE(before.has_value()) << before.error().ToString();
  EXPECT_EQ(before->state.step, -1);
  a->ReportProgress(1234, 1300);
  Result<ProbeResult> after = StateOf(a->advertise_address());
  ASSERT_TRUE(after.has_value()) << after.error().ToString();
  EXPECT_EQ(after->state.step, 1234);
  EXPECT_EQ(after->state.next_admission_step, 1300);
}

// Heartbeats carry each member's sample count. ClusterSamples adds up what
// was heard, a lower bound that a stop on the budget can trust; the estimate
// runs ahead at the member's last rate, as a schedule wants.
TEST(ControlPlaneTest, ClusterSamplesAddTheHeardCountsAndTheEstimateRunsAhead) {
  auto a = StartOrDie(TestConfig(2, {}), Local("alpha"));
  ASSERT_TRUE(a);
  auto b = StartOrDie(TestConfig(2, {a->advertise_address()}), Local("beta"));
  ASSERT_TRUE(b);
  for (ControlPlane* cp : {a.get(), b.get()}) ASSERT_TRUE(cp->WaitForEpoch0(Deadline::AfterSeconds(kWait)).has_value());
  a->ReportSamples(10);
  EXPECT_EQ(a->ClusterSamples(), 10u);
  const auto await_heard = [&](uint64_t total) {
    const Deadline by = Deadline::AfterSeconds(kWait);
    while (a->ClusterSamples() != total && !by.Expired()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return a->ClusterSamples();
  };
  b->ReportSamples(1000);
  ASSERT_EQ(await_heard(1010), 1010u);
  b->ReportSamples(2000);
  ASSERT_EQ(await_heard(2010), 2010u);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(a->ClusterSamples(), 2010u) << "what was heard, nothing more";
  EXPECT_GT(a->ClusterSamplesEstimate(), 2010u) << "beta's count extrapolated at its rate";
}

}  // namespace
}  // namespace chorus::node
