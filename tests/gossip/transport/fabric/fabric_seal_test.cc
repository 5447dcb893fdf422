// The fabric transport under an epoch key: what a non-member endpoint sends,
// what a member sends under another epoch's key, and a replayed sequence
// number are dropped and counted, and the receive still takes the real message.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "tests/gossip/transport/transport_test_util.h"

namespace chorus::gossip {
namespace {

using testing::AsBytes;
using testing::AsWritableBytes;
using testing::MakeWorld;
using testing::TransportKind;
using testing::WorldKey;

Deadline SealSoon() { return Deadline::AfterSeconds(20); }

class FabricSeal : public ::testing::TestWithParam<TransportKind> {
 protected:
  void SetUp() override {
    if (!FabricProviderVersion(testing::ProviderOf(GetParam()))) GTEST_SKIP() << "provider unavailable";
  }
  // An endpoint that is not a member and knows `victim`'s address (its own
  // view names it as rank 1), sealing under a key of its own when `sealed`.
  Result<std::unique_ptr<Transport>> Rogue(Transport& victim, bool sealed) {
    FabricOptions options;
    options.provider = testing::ProviderOf(GetParam());
    options.node_name = "rogue";
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Transport> rogue, MakeFabricTransport(options));
    const std::vector<PeerInfo> view = {{0, rogue->LocalAddress(), "rogue"}, {1, victim.LocalAddress(), "node1"}};
    if (sealed) CHORUS_RETURN_IF_ERROR(rogue->SetEpochKey(0, WorldKey(7)));
    CHORUS_RETURN_IF_ERROR(rogue->SetPeers(0, view));
    return rogue;
  }
};

// A rogue endpoint that knows the victim's address and the protocol's tags
// (an unsealed transport whose own view names the victim) sends forged
// values to an any-source receive and to a receive from a member.
TEST_P(FabricSeal, MessagesFromAnEndpointThatIsNotAMemberAreDropped) {
  auto world = MakeWorld(GetParam(), 2);
  ASSERT_TRUE(world) << world.error().ToString();
  Transport& victim = (*world)[1];
  auto rogue = Rogue(victim, /*sealed=*/false);
  ASSERT_TRUE(rogue) << rogue.error().ToString();

  uint64_t any = 0;
  uint64_t directed = 0;
  auto any_recv = victim.Irecv(kAnySource, 6, AsWritableBytes(any));
  auto directed_recv = victim.Irecv(0, 7, AsWritableBytes(directed));
  ASSERT_TRUE(any_recv && directed_recv);
  const uint64_t forged = 666;
  // The victim never receives from the rogue by name, so its sends stay
  // pending; they are not waited on.
  auto f1 = (*rogue)->Isend(1, 6, AsBytes(forged));
  auto f2 = (*rogue)->Isend(1, 7, AsBytes(forged));
  ASSERT_TRUE(f1 && f2);
  // Over net the rogue's first send may wait out its first-contact gate
  // (10 s) when its address sorts after the victim's.
  const Deadline dropped = Deadline::AfterSeconds(25);
  while (victim.Stats().messages_rejected < 1 && !dropped.Expired()) {
    (void)(*any_recv)->Done();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(victim.Stats().messages_rejected, 1u) << "the forged any-source message was not seen";
  EXPECT_FALSE((*any_recv)->Done()) << "a forged message was delivered: " << any;
  EXPECT_FALSE((*directed_recv)->Done()) << "a forged message was delivered: " << directed;

  const uint64_t real = 5;
  ASSERT_TRUE((*world)[0].Send(1, 6, AsBytes(real), SealSoon()).ok());
  ASSERT_TRUE((*world)[0].Send(1, 7, AsBytes(real), SealSoon()).ok());
  auto got = (*any_recv)->Wait(SealSoon());
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_EQ(got->source, 0);
  EXPECT_EQ(got->bytes, sizeof(uint64_t));
  EXPECT_EQ(any, real);
  ASSERT_TRUE((*directed_recv)->Wait(SealSoon()));
  EXPECT_EQ(directed, real);
  (*f1)->Cancel();
  (*f2)->Cancel();
}

// A rogue sends a message far longer than an any-source receive, sealed
// under a key of its own (two iovecs, as a member's messages go): rxm 1.17
// never completes that receive (docs/libfabric.md, "Sealed messages"), but
// a receiver that gives up on it and posts again (pairwise gossip's
// responder does, every responder_wake) takes the next member's message.
TEST_P(FabricSeal, AReceiveHeldByALongForeignMessageCanBeCancelledAndPostedAgain) {
  auto world = MakeWorld(GetParam(), 2);
  ASSERT_TRUE(world) << world.error().ToString();
  Transport& victim = (*world)[1];
  auto rogue = Rogue(victim, /*sealed=*/true);
  ASSERT_TRUE(rogue) << rogue.error().ToString();

  // A rendezvous-sized receive (above rxm's 16 KiB eager limit).
  std::vector<uint8_t> any(256 * 1024, 0);
  auto held = victim.Irecv(kAnySource, 6, std::as_writable_bytes(std::span<uint8_t>(any)));
  ASSERT_TRUE(held);
  const std::vector<uint8_t> huge(1 << 20, 0x66);
  auto f = (*rogue)->Isend(1, 6, std::as_bytes(std::span<const uint8_t>(huge)));
  ASSERT_TRUE(f);
  // Given up on as a responder does (over net the rogue's first send may
  // still wait at its first-contact gate then: the repost is what counts).
  auto first = (*held)->Wait(Deadline::AfterSeconds(3));
  EXPECT_FALSE(first.has_value() && first->bytes > 0) << "a forged message was delivered";
  (*held)->Cancel();

  std::vector<uint8_t> again_buffer(256 * 1024, 0);
  auto again = victim.Irecv(kAnySource, 6, std::as_writable_bytes(std::span<uint8_t>(again_buffer)));
  ASSERT_TRUE(again);
  const std::vector<uint8_t> real(100 * 1024, 5);
  auto sent = (*world)[0].Isend(1, 6, std::as_bytes(std::span<const uint8_t>(real)));
  ASSERT_TRUE(sent);
  auto got = (*again)->Wait(SealSoon());
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_EQ(got->source, 0);
  EXPECT_EQ(got->bytes, real.size());
  EXPECT_TRUE(std::equal(real.begin(), real.end(), again_buffer.begin()));
  ASSERT_TRUE((*sent)->Wait(SealSoon()));
  (*f)->Cancel();
}

// Rank 0 seals under epoch 1's key while rank 1 is still at epoch 0 (a
// message of another epoch), then again under epoch 0's key from a fresh
// seal, whose first sequence number rank 1 accepted already (a replay): each
// is dropped and counted, and the receive that took it stays posted and
// takes the real message that follows, even from a member's connection.
TEST_P(FabricSeal, AnotherEpochsMessageAndAReplayAreDropped) {
  auto world = MakeWorld(GetParam(), 2);
  ASSERT_TRUE(world) << world.error().ToString();
  Transport& sender = (*world)[0];
  Transport& receiver = (*world)[1];
  uint64_t v = 1;
  uint64_t got = 0;
  ASSERT_TRUE(sender.Send(1, 7, AsBytes(v), SealSoon()).ok());
  ASSERT_TRUE(receiver.Recv(0, 7, AsWritableBytes(got), SealSoon()));
  EXPECT_EQ(got, 1u);

  auto pending = receiver.Irecv(0, 7, AsWritableBytes(got));
  ASSERT_TRUE(pending) << pending.error().ToString();
  ASSERT_TRUE(sender.SetEpochKey(1, WorldKey(1)).ok());
  v = 2;
  ASSERT_TRUE(sender.Send(1, 7, AsBytes(v), SealSoon()).ok());  // another epoch's
  ASSERT_TRUE(sender.SetEpochKey(0, WorldKey(0)).ok());  // a fresh seal: sequence numbers from 0 again
  v = 3;
  ASSERT_TRUE(sender.Send(1, 7, AsBytes(v), SealSoon()).ok());  // a replay of sequence number 0
  v = 4;
  ASSERT_TRUE(sender.Send(1, 7, AsBytes(v), SealSoon()).ok());  // sequence number 1: new to rank 1
  auto done = (*pending)->Wait(SealSoon());
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(done->source, 0);
  EXPECT_EQ(got, 4u) << "the receive took a dropped message";
  EXPECT_EQ(receiver.Stats().messages_rejected, 2u);
  EXPECT_EQ(receiver.Stats().messages_received, 2u);
}

// A message shorter than the receive buffer: its seal lands partly in the
// buffer, and the completion names the payload's length.
TEST_P(FabricSeal, AMessageShorterThanTheBufferOpens) {
  auto world = MakeWorld(GetParam(), 2);
  ASSERT_TRUE(world) << world.error().ToString();
  for (size_t n : {size_t{0}, size_t{5}, size_t{100}, size_t{117}, size_t{200000}}) {
    const auto data = testing::Pattern(n + 1, n);
    std::vector<std::byte> buffer(n + 13);
    auto send = (*world)[0].Isend(1, 3, data);
    ASSERT_TRUE(send) << send.error().ToString();
    auto got = (*world)[1].Recv(0, 3, buffer, SealSoon());
    ASSERT_TRUE(got) << n << ": " << got.error().ToString();
    ASSERT_TRUE((*send)->Wait(SealSoon()));
    EXPECT_EQ(got->bytes, n);
    buffer.resize(n);
    EXPECT_EQ(testing::FirstMismatch(buffer, n + 1, n), n) << n << " bytes";
  }
  EXPECT_EQ((*world)[1].Stats().messages_rejected, 0u);
}

INSTANTIATE_TEST_SUITE_P(Providers, FabricSeal,
                         ::testing::Values(TransportKind::kTcpSealed, TransportKind::kNetSealed),
                         [](const auto& info) { return testing::KindName(info.param); });

}  // namespace
}  // namespace chorus::gossip
