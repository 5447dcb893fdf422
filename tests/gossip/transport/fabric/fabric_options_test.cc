// FabricTransport's options beyond the conformance suite: provider and
// library versions, busy polling, the progress thread's naps, the
// memory-registration cache, and rxm's opt-in eager limit.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gossip/transport/fabric/fabric_core.h"
#include "tests/gossip/transport/transport_test_util.h"

namespace chorus::gossip {
namespace {

using testing::FirstMismatch;
using testing::MakeWorld;
using testing::Pattern;
using testing::TransportKind;

TEST(FabricTransport, ReportsVersions) {
  EXPECT_EQ(LibfabricVersion().find('.') != std::string::npos, true) << LibfabricVersion();
  auto tcp = FabricProviderVersion(FabricProvider::kTcpRxm);
  if (!tcp) GTEST_SKIP() << tcp.error().ToString();
  EXPECT_NE(tcp->find('.'), std::string::npos) << *tcp;
  // A provider this libfabric lacks (configs name only the three above: an
  // unknown name is the config parser's error) is NotFound, naming it.
  auto missing = fabric::GetInfo("no-such-provider", "");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), StatusCode::kNotFound) << missing.error().ToString();
  EXPECT_NE(missing.error().message().find("no-such-provider"), std::string::npos);
}

TEST(FabricTransport, UnknownProviderIsNotFound) {
  auto t = fabric::GetInfo("no-such-provider", "127.0.0.1");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code(), StatusCode::kNotFound) << t.error().ToString();
}

// Waits that first poll without yielding (FabricOptions::busy_poll) deliver
// every message of a two-thread ping-pong intact and still end at their deadline.
TEST(FabricTransport, BusyPollingWaitsDeliverAndKeepDeadlines) {
  if (!FabricProviderVersion(FabricProvider::kShm)) GTEST_SKIP() << "shm unavailable";
  FabricOptions options;
  options.busy_poll = std::chrono::microseconds(200);
  auto world = MakeWorld(TransportKind::kShm, 2, options);
  ASSERT_TRUE(world) << world.error().ToString();
  constexpr int kRounds = 200;
  std::thread echo([&] {
    std::vector<std::byte> in(64 << 10);
    for (int i = 0; i < kRounds; ++i) {
      auto got = (*world)[1].Recv(0, 7, in, Deadline::AfterSeconds(30));
      ASSERT_TRUE(got) << got.error().ToString();
      const Status sent = (*world)[1].Send(0, 8, std::span<const std::byte>(in).first(got->bytes),
                                           Deadline::AfterSeconds(30));
      ASSERT_TRUE(sent.ok()) << sent.ToString();
    }
  });
  for (int i = 0; i < kRounds; ++i) {
    const size_t bytes = size_t{1} << (i % 17);  // 1 B to 64 KiB: inject, inline and CMA
    const auto out = Pattern(i, bytes);
    std::vector<std::byte> back(bytes);
    const Status sent = (*world)[0].Send(1, 7, out, Deadline::AfterSeconds(30));
    ASSERT_TRUE(sent.ok()) << sent.ToString();
    auto got = (*world)[0].Recv(1, 8, back, Deadline::AfterSeconds(30));
    ASSERT_TRUE(got) << got.error().ToString();
    ASSERT_EQ(got->bytes, bytes);
    ASSERT_EQ(FirstMismatch(back, i, bytes), bytes) << "round " << i;
  }
  echo.join();

  // A busy phase longer than the deadline stops at the deadline.
  FabricOptions long_busy;
  long_busy.busy_poll = std::chrono::seconds(5);
  auto pair = MakeWorld(TransportKind::kShm, 2, long_busy);
  ASSERT_TRUE(pair) << pair.error().ToString();
  std::vector<std::byte> in(16);
  const auto start = Clock::now();
  auto got = (*pair)[0].Recv(1, 1, in, Deadline::After(std::chrono::milliseconds(100)));
  const double waited_s = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code(), StatusCode::kDeadlineExceeded) << got.error().ToString();
  EXPECT_LT(waited_s, 2.5) << "the busy phase ignored the deadline";
}

TEST(FabricTransport, BusyPollingIsChosenOnlyForShmWithACorePerProcess) {
  EXPECT_EQ(BusyPollFor(FabricProvider::kTcpRxm, 1).count(), 0);
  EXPECT_GT(BusyPollFor(FabricProvider::kShm, 1).count(), 0);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  EXPECT_EQ(BusyPollFor(FabricProvider::kShm, cores + 1).count(), 0);
  // An explicit value (a bench's --busy-poll-us) wins, 0 included.
  EXPECT_EQ(BusyPollFor(FabricProvider::kTcpRxm, 1, 50).count(), 50);
  EXPECT_EQ(BusyPollFor(FabricProvider::kShm, 1, 0).count(), 0);
}

TEST(FabricTransport, ABlockedRequestsProgressNapsGrowToTheLongestSleepOnlyInALongWait) {
  using std::chrono::microseconds;
  using std::chrono::milliseconds;
  const microseconds longest(1000);
  EXPECT_EQ(fabric::BlockedNapCap(microseconds(0), longest), microseconds(100));
  EXPECT_EQ(fabric::BlockedNapCap(milliseconds(19), longest), microseconds(100));
  EXPECT_EQ(fabric::BlockedNapCap(milliseconds(20), longest), longest);
  EXPECT_EQ(fabric::BlockedNapCap(std::chrono::seconds(30), longest), longest);
  // A longest sleep under 100 us is kept.
  EXPECT_EQ(fabric::BlockedNapCap(std::chrono::seconds(30), microseconds(50)), microseconds(50));
}

TEST(FabricTransport, RegistrationCacheIsReused) {
  if (!FabricProviderVersion(FabricProvider::kTcpRxm)) GTEST_SKIP() << "tcp;ofi_rxm unavailable";
  FabricOptions options;
  options.force_memory_registration = true;
  options.mr_cache_capacity = 4;
  auto world = MakeWorld(TransportKind::kTcp, 2, options);
  ASSERT_TRUE(world) << world.error().ToString();
  constexpr int kRounds = 10;
  constexpr size_t kBytes = 64 << 10;
  const auto out = Pattern(3, kBytes);
  std::vector<std::byte> in(kBytes);
  for (int i = 0; i < kRounds; ++i) {
    auto send = (*world)[0].Isend(1, 1, out);
    ASSERT_TRUE(send) << send.error().ToString();
    auto done = (*world)[1].Recv(0, 1, in, Deadline::AfterSeconds(30));
    ASSERT_TRUE(done) << done.error().ToString();
    ASSERT_TRUE((*send)->Wait(Deadline::AfterSeconds(30)));
  }
  EXPECT_EQ(FirstMismatch(in, 3, kBytes), kBytes);
  auto sender = GetFabricMrStats((*world)[0]);
  auto receiver = GetFabricMrStats((*world)[1]);
  ASSERT_TRUE(sender && receiver);
  EXPECT_TRUE(sender->registering);
  // One registration per buffer, every later use a hit.
  EXPECT_EQ(sender->misses, 1u);
  EXPECT_EQ(sender->hits, static_cast<uint64_t>(kRounds - 1));
  EXPECT_EQ(receiver->misses, 1u);
  EXPECT_EQ(receiver->hits, static_cast<uint64_t>(kRounds - 1));
  // A sub-range of a registered buffer is covered by it.
  auto part = (*world)[0].Isend(1, 2, std::span<const std::byte>(out).subspan(100, 1000));
  ASSERT_TRUE(part);
  auto got = (*world)[1].Recv(0, 2, in, Deadline::AfterSeconds(30));
  ASSERT_TRUE(got) << got.error().ToString();
  ASSERT_TRUE((*part)->Wait(Deadline::AfterSeconds(30)));
  EXPECT_EQ(GetFabricMrStats((*world)[0])->hits, static_cast<uint64_t>(kRounds));

  // Without forcing, neither provider here asks for FI_MR_LOCAL: nothing is registered.
  auto plain = MakeWorld(TransportKind::kTcp, 1);
  ASSERT_TRUE(plain) << plain.error().ToString();
  EXPECT_FALSE(GetFabricMrStats((*plain)[0])->registering);
  LocalHubOptions local_options;
  auto hub = LocalHub::Create(local_options);
  auto local = hub->MakeTransport(0);
  ASSERT_TRUE(local);
  EXPECT_EQ(GetFabricMrStats(**local).error().code(), StatusCode::kInvalidArgument);
}

// FabricOptions::rxm_eager_limit: large messages go eagerly (also one sent
// before its receive is posted), and the setting stays with its endpoints: the
// environment has no trace of it afterwards, and a later endpoint without it
// (0) still moves large messages by rendezvous. Other providers ignore it.
TEST(FabricTransport, RxmEagerLimitMovesLargeMessagesAndStaysWithItsEndpoints) {
  if (!FabricProviderVersion(FabricProvider::kTcpRxm)) GTEST_SKIP() << "tcp;ofi_rxm unavailable";
  if (std::getenv("FI_OFI_RXM_ENABLE_DYN_RBUF") != nullptr || std::getenv("FI_OFI_RXM_EAGER_LIMIT") != nullptr) {
    GTEST_SKIP() << "rxm's eager variables set in the environment";
  }
  constexpr size_t kBytes = 1 << 20;
  const auto out = Pattern(7, kBytes);
  auto exchange = [&](testing::World& world, bool send_first) {
    std::vector<std::byte> in(kBytes);
    RequestPtr send;
    if (send_first) {
      auto posted = world[0].Isend(1, 3, out);
      ASSERT_TRUE(posted) << posted.error().ToString();
      send = std::move(*posted);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // arrives before its receive
    }
    auto recv = world[1].Irecv(0, 3, in);
    ASSERT_TRUE(recv) << recv.error().ToString();
    if (!send_first) {
      auto posted = world[0].Isend(1, 3, out);
      ASSERT_TRUE(posted) << posted.error().ToString();
      send = std::move(*posted);
    }
    auto done = (*recv)->Wait(Deadline::AfterSeconds(30));
    ASSERT_TRUE(done) << done.error().ToString();
    EXPECT_EQ(done->bytes, kBytes);
    ASSERT_TRUE(send->Wait(Deadline::AfterSeconds(30)));
    EXPECT_EQ(FirstMismatch(in, 7, kBytes), kBytes);
  };
  {
    FabricOptions options;
    options.rxm_eager_limit = kBytes;
    auto world = MakeWorld(TransportKind::kTcp, 2, options);
    ASSERT_TRUE(world) << world.error().ToString();
    exchange(*world, /*send_first=*/false);
    exchange(*world, /*send_first=*/true);
  }
  // Nothing stays in the environment, where a process this one starts would
  // take it for the user's.
  EXPECT_EQ(std::getenv("FI_OFI_RXM_ENABLE_DYN_RBUF"), nullptr);
  EXPECT_EQ(std::getenv("FI_OFI_RXM_EAGER_LIMIT"), nullptr);
  FabricOptions rendezvous;
  rendezvous.rxm_eager_limit = 0;
  auto plain = MakeWorld(TransportKind::kTcp, 2, rendezvous);
  ASSERT_TRUE(plain) << plain.error().ToString();
  exchange(*plain, /*send_first=*/false);

  if (FabricProviderVersion(FabricProvider::kNet)) {
    FabricOptions net;
    net.provider = FabricProvider::kNet;
    net.rxm_eager_limit = kBytes;
    auto opened = MakeFabricTransport(net);
    EXPECT_TRUE(opened) << opened.error().ToString();
  }
}

// rxm's variables set by the user win over the configuration, and a user who
// turned rxm's dynamic receive buffers off gets the rendezvous mode, not an
// eager limit rxm would serve with a thousand bounce buffers of its size.
TEST(FabricTransport, RxmEagerPlanFollowsTheUsersVariables) {
  using fabric::PlanRxmEager;
  constexpr size_t kMiB = size_t{1} << 20;
  EXPECT_EQ(PlanRxmEager(kMiB, nullptr, nullptr).eager_limit, kMiB);
  EXPECT_TRUE(PlanRxmEager(kMiB, nullptr, nullptr).note.empty());
  EXPECT_EQ(PlanRxmEager(0, nullptr, nullptr).eager_limit, 0u);
  EXPECT_EQ(PlanRxmEager(kMiB, "1", nullptr).eager_limit, kMiB);
  for (const char* off : {"0", "false", "No", "OFF"}) {
    const fabric::RxmEagerPlan plan = PlanRxmEager(kMiB, off, nullptr);
    EXPECT_EQ(plan.eager_limit, 0u) << off;
    EXPECT_NE(plan.note.find("FI_OFI_RXM_ENABLE_DYN_RBUF=" + std::string(off)), std::string::npos) << plan.note;
    EXPECT_NE(plan.note.find("fabric.rxm_eager_kib = 1024"), std::string::npos) << plan.note;
  }
  EXPECT_TRUE(PlanRxmEager(0, "0", nullptr).note.empty());
  const fabric::RxmEagerPlan user = PlanRxmEager(kMiB, "0", "262144");
  EXPECT_EQ(user.eager_limit, 262144u);
  EXPECT_NE(user.note.find("FI_OFI_RXM_EAGER_LIMIT=262144"), std::string::npos) << user.note;
  EXPECT_TRUE(PlanRxmEager(262144, nullptr, "262144").note.empty());
  EXPECT_EQ(PlanRxmEager(kMiB, nullptr, "16384").eager_limit, 0u);
  for (const char* bad : {"", "lots", "-1", "12k"}) {
    const fabric::RxmEagerPlan plan = PlanRxmEager(kMiB, nullptr, bad);
    EXPECT_EQ(plan.eager_limit, 0u) << bad;
    EXPECT_NE(plan.note.find("not a byte count"), std::string::npos) << plan.note;
  }
}

}  // namespace
}  // namespace chorus::gossip
