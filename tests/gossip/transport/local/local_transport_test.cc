// LocalTransport beyond the conformance suite: killing a slot, the link model,
// membership changes and address encoding.
#include <gtest/gtest.h>

#include <chrono>

#include "tests/gossip/transport/transport_test_util.h"

namespace chorus::gossip {
namespace {

using testing::AsBytes;
using testing::AsWritableBytes;

TEST(LocalHub, KillFailsPeersPendingAndFutureOperations) {
  LocalHubOptions options;
  options.world_size = 3;
  auto hub = LocalHub::Create(options);
  auto t = hub->MakeAll();
  uint64_t v = 0, w = 0;
  auto pending = t[0]->Irecv(2, 1, AsWritableBytes(v));
  ASSERT_TRUE(pending);
  // A message sent before the kill can still be received.
  uint64_t last = 9;
  ASSERT_TRUE(t[2]->Isend(1, 1, AsBytes(last)));
  hub->Kill(2);
  EXPECT_TRUE(hub->IsDead(2));
  auto failed = (*pending)->Wait(Deadline::AfterSeconds(10));
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code(), StatusCode::kUnavailable);
  EXPECT_NE(failed.error().message().find("rank 2"), std::string::npos) << failed.error().ToString();
  auto send = t[0]->Isend(2, 1, AsBytes(v));
  ASSERT_FALSE(send);
  EXPECT_EQ(send.error().code(), StatusCode::kUnavailable);
  auto delivered = t[1]->Recv(2, 1, AsWritableBytes(w), Deadline::AfterSeconds(10));
  ASSERT_TRUE(delivered) << delivered.error().ToString();
  EXPECT_EQ(w, 9u);
  auto none = t[1]->Irecv(2, 1, AsWritableBytes(w));
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code(), StatusCode::kUnavailable);
  // The killed endpoint itself cannot post.
  EXPECT_FALSE(t[2]->Isend(0, 1, AsBytes(v)));
}

TEST(LocalHub, LinkModelDelaysByLatencyPlusBytesOverBandwidth) {
  LocalHubOptions options;
  options.world_size = 2;
  options.link.latency = std::chrono::milliseconds(20);
  options.link.bytes_per_second = 1e6;  // 10 kB -> 10 ms
  auto hub = LocalHub::Create(options);
  auto t = hub->MakeAll();
  std::vector<std::byte> out(10000, std::byte{1}), in(10000);
  const auto start = Clock::now();
  auto send = t[0]->Isend(1, 1, out);
  ASSERT_TRUE(send);
  auto recv = t[1]->Irecv(0, 1, in);
  ASSERT_TRUE(recv);
  EXPECT_FALSE((*recv)->Done());
  ASSERT_TRUE((*recv)->Wait(Deadline::AfterSeconds(10)));
  const auto elapsed = Clock::now() - start;
  // 20 ms latency + 10 ms serialisation; the upper bound is loose for a loaded machine.
  EXPECT_GE(elapsed, std::chrono::milliseconds(30));
  EXPECT_LT(elapsed, std::chrono::seconds(2));
  EXPECT_EQ(in, out);
  // A deadline shorter than the delay is exceeded.
  auto send2 = t[0]->Isend(1, 2, out);
  ASSERT_TRUE(send2);
  auto late = t[1]->Recv(0, 2, in, Deadline::After(std::chrono::milliseconds(5)));
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code(), StatusCode::kDeadlineExceeded);
}

TEST(LocalHub, SetPeersRenumbersAndFailsReceivesFromLeavers) {
  LocalHubOptions options;
  options.world_size = 3;
  auto hub = LocalHub::Create(options);
  auto t = hub->MakeAll();
  uint64_t v = 0;
  auto from_leaver = t[0]->Irecv(1, 3, AsWritableBytes(v));
  ASSERT_TRUE(from_leaver);
  // New epoch: slot 1 left; slot 2 is now rank 1.
  std::vector<PeerInfo> peers = {{0, t[0]->LocalAddress(), "a"}, {1, t[2]->LocalAddress(), "c"}};
  ASSERT_TRUE(t[0]->SetPeers(0, peers).ok());
  ASSERT_TRUE(t[2]->SetPeers(1, peers).ok());
  EXPECT_EQ(t[0]->size(), 2);
  EXPECT_EQ(t[2]->rank(), 1);
  auto failed = (*from_leaver)->Wait(Deadline::AfterSeconds(10));
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code(), StatusCode::kUnavailable);
  uint64_t x = 5;
  ASSERT_TRUE(t[2]->Isend(0, 3, AsBytes(x)));
  auto got = t[0]->Recv(kAnySource, 3, AsWritableBytes(v), Deadline::AfterSeconds(10));
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_EQ(got->source, 1);
  EXPECT_EQ(v, 5u);
  // A self rank that does not name this endpoint is rejected.
  EXPECT_EQ(t[0]->SetPeers(1, peers).code(), StatusCode::kInvalidArgument);
}

TEST(LocalHub, AddressRoundTripAndRejectsGarbage) {
  auto slot = LocalHub::DecodeAddress(LocalHub::EncodeAddress(7));
  ASSERT_TRUE(slot);
  EXPECT_EQ(*slot, 7);
  std::vector<uint8_t> bad = {1, 2};
  EXPECT_FALSE(LocalHub::DecodeAddress(bad));
  LocalHubOptions options;
  auto hub = LocalHub::Create(options);
  EXPECT_FALSE(hub->MakeTransport(5));
}

}  // namespace
}  // namespace chorus::gossip
