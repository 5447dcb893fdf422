// LocalHub in virtual time (the clock model of `chorus simulate`): arrival =
// max(send clock, NIC free) + bytes / bandwidth + latency, sends serialised on
// the sender's NIC, a Wait moving the owner's clock to max(clock, completion),
// Done() moving nothing, and no wall-clock delay. Expected times in closed form.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "tests/gossip/transport/transport_test_util.h"

namespace chorus::gossip {
namespace {

// Sums of a few binary fractions of seconds: only the last bits of a double
// may differ from the closed form.
constexpr double kTol = 1e-12;

constexpr double kLatency = 1e-3;          // alpha: 1 ms
constexpr double kBytesPerSecond = 1e6;    // beta: 1 MB/s
constexpr size_t kBytes = 10000;           // B / beta = 10 ms
constexpr double kSerialise = kBytes / kBytesPerSecond;

std::shared_ptr<LocalHub> VirtualHub(int n) { return testing::VirtualTimeHub(n, kLatency, kBytesPerSecond); }

Deadline VirtualSoon() { return Deadline::AfterSeconds(10); }

TEST(LocalVirtualTime, OneMessageArrivesAfterLatencyPlusBytesOverBandwidth) {
  auto hub = VirtualHub(2);
  auto t = hub->MakeAll();
  std::vector<std::byte> out(kBytes, std::byte{7}), in(kBytes);
  auto send = t[0]->Isend(1, 1, out);
  ASSERT_TRUE(send);
  ASSERT_TRUE(t[1]->Recv(0, 1, in, VirtualSoon()));
  EXPECT_EQ(in, out);
  EXPECT_NEAR(hub->VirtualNow(1), kLatency + kSerialise, kTol);
  // The sender's clock moves only when it waits for its send: to the NIC done time.
  EXPECT_EQ(hub->VirtualNow(0), 0.0);
  ASSERT_TRUE((*send)->Wait(VirtualSoon()));
  EXPECT_NEAR(hub->VirtualNow(0), kSerialise, kTol);
  EXPECT_NEAR(hub->VirtualNicFree(0), kSerialise, kTol);
}

TEST(LocalVirtualTime, ReceivePostedBeforeTheSendGetsTheSameArrival) {
  auto hub = VirtualHub(2);
  auto t = hub->MakeAll();
  std::vector<std::byte> out(kBytes, std::byte{3}), in(kBytes);
  auto recv = t[1]->Irecv(0, 1, in);
  ASSERT_TRUE(recv);
  hub->AdvanceVirtual(0, 0.5);  // the sender computes for 0.5 s first
  ASSERT_TRUE(t[0]->Isend(1, 1, out));
  ASSERT_TRUE((*recv)->Wait(VirtualSoon()));
  EXPECT_NEAR(hub->VirtualNow(1), 0.5 + kSerialise + kLatency, kTol);
}

TEST(LocalVirtualTime, CpuChargeMovesTheClockBeforeEachCallIsStamped) {
  // Slot 0 reports 0.25 s of CPU work before each of its calls, slot 1 none.
  LocalHubOptions options;
  options.world_size = 2;
  options.virtual_time.enabled = true;
  options.virtual_time.latency_s = kLatency;
  options.virtual_time.bytes_per_second = kBytesPerSecond;
  std::vector<int> asked(2, 0), resumed(2, 0);
  options.virtual_time.cpu_charge = [&asked, &resumed](int slot) {
    EXPECT_EQ(asked[slot], resumed[slot]);  // the previous call of the slot has returned
    ++asked[slot];
    return slot == 0 ? 0.25 : 0.0;
  };
  options.virtual_time.cpu_resume = [&resumed](int slot) { ++resumed[slot]; };
  auto hub = LocalHub::Create(options);
  auto t = hub->MakeAll();
  std::vector<std::byte> out(kBytes, std::byte{5}), in(kBytes);
  auto send = t[0]->Isend(1, 1, out);
  ASSERT_TRUE(send);
  // The send left after the work before it.
  EXPECT_NEAR(hub->VirtualNow(0), 0.25, kTol);
  ASSERT_TRUE(t[1]->Recv(0, 1, in, VirtualSoon()));
  EXPECT_NEAR(hub->VirtualNow(1), 0.25 + kSerialise + kLatency, kTol);
  // The wait charges again: work done while the send was on the wire.
  ASSERT_TRUE((*send)->Wait(VirtualSoon()));
  EXPECT_NEAR(hub->VirtualNow(0), 0.5, kTol);
  EXPECT_EQ(asked[0], 2);  // Isend, Wait
  EXPECT_GE(asked[1], 2);  // Irecv and Wait at least
  EXPECT_EQ(resumed, asked);  // every call told when it returned
  // Probes charge nothing.
  EXPECT_TRUE((*send)->Done());
  EXPECT_EQ(asked[0], 2);
}

TEST(LocalVirtualTime, BackToBackSendsSerialiseOnTheSendersNic) {
  auto hub = VirtualHub(3);
  auto t = hub->MakeAll();
  std::vector<std::byte> out(kBytes, std::byte{1}), in1(kBytes), in2(kBytes);
  // Two destinations share rank 0's NIC: the second send starts when the first is out.
  ASSERT_TRUE(t[0]->Isend(1, 1, out));
  ASSERT_TRUE(t[0]->Isend(2, 1, out));
  ASSERT_TRUE(t[1]->Recv(0, 1, in1, VirtualSoon()));
  ASSERT_TRUE(t[2]->Recv(0, 1, in2, VirtualSoon()));
  EXPECT_NEAR(hub->VirtualNow(1), kSerialise + kLatency, kTol);
  EXPECT_NEAR(hub->VirtualNow(2), 2 * kSerialise + kLatency, kTol);
  EXPECT_NEAR(hub->VirtualNicFree(0), 2 * kSerialise, kTol);
  // Once the sender's clock is past the idle NIC, a send starts at the clock.
  hub->AdvanceVirtualTo(0, 1.0);
  ASSERT_TRUE(t[0]->Isend(1, 2, out));
  ASSERT_TRUE(t[1]->Recv(0, 2, in1, VirtualSoon()));
  EXPECT_NEAR(hub->VirtualNow(1), 1.0 + kSerialise + kLatency, kTol);
}

TEST(LocalVirtualTime, ReceiverAheadOfTheArrivalKeepsItsClock) {
  auto hub = VirtualHub(2);
  auto t = hub->MakeAll();
  uint64_t v = 42, w = 0;
  hub->AdvanceVirtual(1, 2.0);
  ASSERT_TRUE(t[0]->Isend(1, 1, testing::AsBytes(v)));
  ASSERT_TRUE(t[1]->Recv(0, 1, testing::AsWritableBytes(w), VirtualSoon()));
  EXPECT_EQ(w, 42u);
  EXPECT_EQ(hub->VirtualNow(1), 2.0);
  // AdvanceVirtualTo never moves a clock back.
  hub->AdvanceVirtualTo(1, 1.0);
  EXPECT_EQ(hub->VirtualNow(1), 2.0);
}

TEST(LocalVirtualTime, DoneIsAProbeAndOnlyWaitMovesTheClock) {
  auto hub = VirtualHub(2);
  auto t = hub->MakeAll();
  std::vector<std::byte> out(kBytes), in(kBytes);
  auto recv = t[1]->Irecv(0, 1, in);
  ASSERT_TRUE(recv);
  ASSERT_TRUE(t[0]->Isend(1, 1, out));
  EXPECT_TRUE((*recv)->Done());  // no wall-clock delay under virtual time
  EXPECT_EQ(hub->VirtualNow(1), 0.0);
  ASSERT_TRUE((*recv)->Wait(VirtualSoon()));
  EXPECT_NEAR(hub->VirtualNow(1), kSerialise + kLatency, kTol);
}

TEST(LocalVirtualTime, RealTimeLinkModelIsIgnored) {
  LocalHubOptions options;
  options.world_size = 2;
  options.link.latency = std::chrono::seconds(30);  // would time the receive out
  options.virtual_time.enabled = true;
  options.virtual_time.latency_s = 30.0;
  auto hub = LocalHub::Create(options);
  auto t = hub->MakeAll();
  uint64_t v = 1, w = 0;
  ASSERT_TRUE(t[0]->Isend(1, 1, testing::AsBytes(v)));
  const auto start = Clock::now();
  auto got = t[1]->Recv(0, 1, testing::AsWritableBytes(w), Deadline::AfterSeconds(5));
  ASSERT_TRUE(got) << got.error().ToString();
  // Generous: a loaded 2-core machine may stall a thread, but never 5 s.
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  // Infinite bandwidth: arrival is the latency alone.
  EXPECT_NEAR(hub->VirtualNow(1), 30.0, kTol);
}

TEST(LocalVirtualTime, OffByDefault) {
  LocalHubOptions options;
  options.world_size = 2;
  auto hub = LocalHub::Create(options);
  auto t = hub->MakeAll();
  hub->AdvanceVirtual(0, 1.0);
  EXPECT_EQ(hub->VirtualNow(0), 0.0);
  uint64_t v = 1, w = 0;
  ASSERT_TRUE(t[0]->Isend(1, 1, testing::AsBytes(v)));
  ASSERT_TRUE(t[1]->Recv(0, 1, testing::AsWritableBytes(w), VirtualSoon()));
  EXPECT_EQ(hub->VirtualNow(1), 0.0);
}

// Sites {0, 1} and {2, 3}: inside a site as before; to the other site the
// message also crosses the site's uplink (serialised over both of the site's
// senders) and the extra latency.
TEST(LocalVirtualTime, MessagesBetweenSitesShareTheSiteUplinkAndAddItsLatency) {
  constexpr double kSiteLatency = 0.05, kSiteBytesPerSecond = 1e5;  // 100 ms for kBytes
  LocalHubOptions options;
  options.world_size = 4;
  options.virtual_time.enabled = true;
  options.virtual_time.latency_s = kLatency;
  options.virtual_time.bytes_per_second = kBytesPerSecond;
  options.virtual_time.site_of_slot = {0, 0, 1, 1};
  options.virtual_time.site_latency_s = kSiteLatency;
  options.virtual_time.site_bytes_per_second = kSiteBytesPerSecond;
  auto hub = LocalHub::Create(options);
  auto t = hub->MakeAll();
  std::vector<std::byte> out(kBytes, std::byte{5}), in(kBytes);
  constexpr double kUplink = kBytes / kSiteBytesPerSecond;
  ASSERT_TRUE(t[0]->Isend(1, 1, out));  // inside site 0
  ASSERT_TRUE(t[1]->Recv(0, 1, in, VirtualSoon()));
  EXPECT_NEAR(hub->VirtualNow(1), kSerialise + kLatency, kTol);
  ASSERT_TRUE(t[0]->Isend(2, 2, out));  // site 0 -> 1: NIC, then the uplink
  ASSERT_TRUE(t[2]->Recv(0, 2, in, VirtualSoon()));
  EXPECT_NEAR(hub->VirtualNow(2), 2 * kSerialise + kUplink + kLatency + kSiteLatency, kTol);
  // Node 1 sends out of site 0 too: its message waits for the uplink.
  ASSERT_TRUE(t[1]->Isend(3, 3, out));
  ASSERT_TRUE(t[3]->Recv(1, 3, in, VirtualSoon()));
  EXPECT_NEAR(hub->VirtualNow(3), 2 * kSerialise + 2 * kUplink + kLatency + kSiteLatency, kTol);
  // Site 1's uplink is its own.
  ASSERT_TRUE(t[3]->Isend(0, 4, out));
  ASSERT_TRUE(t[0]->Recv(3, 4, in, VirtualSoon()));
  const double sent = hub->VirtualNow(3);
  EXPECT_NEAR(hub->VirtualNow(0), sent + kSerialise + kUplink + kLatency + kSiteLatency, kTol);
}

}  // namespace
}  // namespace chorus::gossip
