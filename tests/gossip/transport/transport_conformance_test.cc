// The Transport conformance suite: the semantics promised in gossip/transport/transport.h,
// checked against every implementation (local hub; libfabric tcp;ofi_rxm; libfabric
// shm, with several endpoints in this process, the bytes going through the
// provider). A provider missing in the sandbox is skipped with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "tests/gossip/transport/transport_test_util.h"

namespace chorus::gossip {
namespace {

using testing::AsBytes;
using testing::AsWritableBytes;
using testing::FirstMismatch;
using testing::MakeWorld;
using testing::Pattern;
using testing::TransportKind;
using testing::World;

// Generous: only a hang (a bug) should ever reach it.
Deadline Soon() { return Deadline::AfterSeconds(30); }

class TransportConformance : public ::testing::TestWithParam<TransportKind> {
 protected:
  void SetUp() override {
    if (GetParam() == TransportKind::kLocal) return;
    auto version = FabricProviderVersion(testing::ProviderOf(GetParam()));
    if (!version) GTEST_SKIP() << "provider unavailable here: " << version.error().ToString();
  }

  World Make(int n) {
    auto world = MakeWorld(GetParam(), n);
    EXPECT_TRUE(world.has_value()) << (world ? "" : world.error().ToString());
    if (!world) return {};
    return std::move(*world);
  }
};

// Each rank sends kCount numbered messages with one tag to its right
// neighbour; some receives are posted before the sends, the rest after.
TEST_P(TransportConformance, MessagesWithOneTagArriveInSendOrder) {
  for (int n : {2, 4}) {
    World w = Make(n);
    ASSERT_EQ(w.size(), n);
    constexpr int kCount = 200;
    constexpr Tag kTag = 5;
    std::vector<std::vector<uint64_t>> got(n, std::vector<uint64_t>(kCount));
    std::vector<uint64_t> sent(static_cast<size_t>(n) * kCount);
    std::vector<RequestPtr> reqs;
    for (int r = 0; r < n; ++r) {  // first half of the receives: before the sends
      const int left = (r + n - 1) % n;
      for (int i = 0; i < kCount / 2; ++i) {
        auto req = w[r].Irecv(left, kTag, AsWritableBytes(got[r][i]));
        ASSERT_TRUE(req) << req.error().ToString();
        reqs.push_back(std::move(*req));
      }
    }
    for (int r = 0; r < n; ++r) {
      for (int i = 0; i < kCount; ++i) {
        uint64_t& v = sent[static_cast<size_t>(r) * kCount + i];
        v = (static_cast<uint64_t>(r) << 32) | static_cast<uint64_t>(i);
        auto req = w[r].Isend((r + 1) % n, kTag, AsBytes(v));
        ASSERT_TRUE(req) << req.error().ToString();
        reqs.push_back(std::move(*req));
      }
    }
    for (int r = 0; r < n; ++r) {  // second half: after the sends
      const int left = (r + n - 1) % n;
      for (int i = kCount / 2; i < kCount; ++i) {
        auto req = w[r].Irecv(left, kTag, AsWritableBytes(got[r][i]));
        ASSERT_TRUE(req) << req.error().ToString();
        reqs.push_back(std::move(*req));
      }
    }
    ASSERT_TRUE(WaitAll(reqs, Soon()).ok());
    for (int r = 0; r < n; ++r) {
      const uint64_t left = static_cast<uint64_t>((r + n - 1) % n);
      for (int i = 0; i < kCount; ++i) {
        ASSERT_EQ(got[r][i], (left << 32) | static_cast<uint64_t>(i))
            << "world " << n << " rank " << r << " message " << i;
      }
    }
  }
}

// Tags 1..8 sent in increasing order, received in reverse: each receive gets
// the message of its own tag.
TEST_P(TransportConformance, DifferentTagsAreMatchedIndependently) {
  World w = Make(2);
  ASSERT_EQ(w.size(), 2);
  constexpr int kTags = 8;
  std::vector<uint64_t> sent(kTags + 1), got(kTags + 1, 0);
  std::vector<RequestPtr> reqs;
  for (int t = 1; t <= kTags; ++t) {
    sent[t] = 1000 + static_cast<uint64_t>(t);
    auto req = w[0].Isend(1, static_cast<Tag>(t), AsBytes(sent[t]));
    ASSERT_TRUE(req) << req.error().ToString();
    reqs.push_back(std::move(*req));
  }
  for (int t = kTags; t >= 1; --t) {
    auto done = w[1].Recv(0, static_cast<Tag>(t), AsWritableBytes(got[t]), Soon());
    ASSERT_TRUE(done) << done.error().ToString();
    EXPECT_EQ(done->tag, static_cast<Tag>(t));
    EXPECT_EQ(done->source, 0);
    EXPECT_EQ(done->bytes, sizeof(uint64_t));
    EXPECT_EQ(got[t], 1000 + static_cast<uint64_t>(t));
  }
  ASSERT_TRUE(WaitAll(reqs, Soon()).ok());
  // All 63 tag bits are usable (transport.h: kMaxTag).
  const Tag big = kMaxTag - 3;
  uint64_t v = 77, r = 0;
  auto send = w[1].Isend(0, big, AsBytes(v));
  ASSERT_TRUE(send);
  auto done = w[0].Recv(1, big, AsWritableBytes(r), Soon());
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(done->tag, big);
  EXPECT_EQ(r, 77u);
  ASSERT_TRUE((*send)->Wait(Soon()));
  // The 64th bit is refused up front, on both sides, naming the tag.
  auto too_big = w[1].Isend(0, kMaxTag + 1, AsBytes(v));
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.error().message().find(std::to_string(kMaxTag + 1)), std::string::npos)
      << too_big.error().ToString();
  auto too_big_recv = w[0].Irecv(1, kMaxTag + 1, AsWritableBytes(r));
  ASSERT_FALSE(too_big_recv);
  EXPECT_EQ(too_big_recv.error().code(), StatusCode::kInvalidArgument);
  // So is the transports' own tag.
  auto reserved_send = w[1].Isend(0, kReservedTag, AsBytes(v));
  auto reserved_recv = w[0].Irecv(1, kReservedTag, AsWritableBytes(r));
  for (const Status& refused : {reserved_send ? Status::Ok() : reserved_send.error(),
                                reserved_recv ? Status::Ok() : reserved_recv.error()}) {
    EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.ToString();
    EXPECT_NE(refused.message().find("reserved"), std::string::npos) << refused.ToString();
  }
}

TEST_P(TransportConformance, AnySourceReceiveNamesTheSource) {
  for (int n : {2, 4}) {
    World w = Make(n);
    ASSERT_EQ(w.size(), n);
    constexpr Tag kTag = 11;
    constexpr int kPerSender = 3;
    std::vector<uint64_t> sent(static_cast<size_t>(n) * kPerSender);
    std::vector<RequestPtr> sends;
    for (int r = 1; r < n; ++r) {
      for (int i = 0; i < kPerSender; ++i) {
        uint64_t& v = sent[static_cast<size_t>(r) * kPerSender + i];
        v = static_cast<uint64_t>(r) * 100 + static_cast<uint64_t>(i);
        auto req = w[r].Isend(0, kTag, AsBytes(v));
        ASSERT_TRUE(req) << req.error().ToString();
        sends.push_back(std::move(*req));
      }
    }
    std::multiset<Rank> sources;
    std::vector<int> next(n, 0);
    for (int k = 0; k < (n - 1) * kPerSender; ++k) {
      uint64_t v = ~uint64_t{0};
      auto done = w[0].Recv(kAnySource, kTag, AsWritableBytes(v), Soon());
      ASSERT_TRUE(done) << done.error().ToString();
      ASSERT_GE(done->source, 1);
      ASSERT_LT(done->source, n);
      // The payload names its sender, and per-sender order holds.
      EXPECT_EQ(v, static_cast<uint64_t>(done->source) * 100 + next[done->source]);
      ++next[done->source];
      sources.insert(done->source);
    }
    for (int r = 1; r < n; ++r) EXPECT_EQ(sources.count(r), static_cast<size_t>(kPerSender));
    ASSERT_TRUE(WaitAll(sends, Soon()).ok());
  }
}

TEST_P(TransportConformance, LargeMessagesArriveIntact) {
  World w = Make(2);
  ASSERT_EQ(w.size(), 2);
  constexpr size_t kBytes = size_t{64} << 20;
  const auto data = Pattern(42, kBytes);
  std::vector<std::byte> got(kBytes);
  auto recv = w[1].Irecv(0, 3, got);
  ASSERT_TRUE(recv) << recv.error().ToString();
  auto send = w[0].Isend(1, 3, data);
  ASSERT_TRUE(send) << send.error().ToString();
  auto done = (*recv)->Wait(Soon());
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(done->bytes, kBytes);
  ASSERT_TRUE((*send)->Wait(Soon())) << "send of 64 MiB";
  EXPECT_EQ(FirstMismatch(got, 42, kBytes), kBytes);
  EXPECT_GE(w[0].Stats().bytes_sent, kBytes);
  EXPECT_GE(w[1].Stats().bytes_received, kBytes);
}

TEST_P(TransportConformance, ManySmallMessages) {
  World w = Make(2);
  ASSERT_EQ(w.size(), 2);
  constexpr int kCount = 10000;
  std::vector<uint64_t> sent(kCount), got(kCount, 0);
  std::vector<RequestPtr> reqs;
  reqs.reserve(2 * kCount);
  for (int i = 0; i < kCount; ++i) {
    auto req = w[1].Irecv(0, 9, AsWritableBytes(got[i]));
    ASSERT_TRUE(req) << req.error().ToString();
    reqs.push_back(std::move(*req));
  }
  for (int i = 0; i < kCount; ++i) {
    sent[i] = 0xABCD0000ull + static_cast<uint64_t>(i);
    auto req = w[0].Isend(1, 9, AsBytes(sent[i]));
    ASSERT_TRUE(req) << req.error().ToString();
    reqs.push_back(std::move(*req));
  }
  ASSERT_TRUE(WaitAll(reqs, Soon()).ok());
  EXPECT_EQ(got, sent);
  EXPECT_EQ(w[0].Stats().messages_sent, static_cast<uint64_t>(kCount));
  EXPECT_EQ(w[1].Stats().messages_received, static_cast<uint64_t>(kCount));
}

// The sender posts every send (eager-sized and rendezvous-sized) before the
// receiver posts a single receive; everything completes.
TEST_P(TransportConformance, SendsPostedBeforeReceivesAllComplete) {
  World w = Make(2);
  ASSERT_EQ(w.size(), 2);
  constexpr int kSmall = 1000;
  constexpr size_t kSmallBytes = 4096;
  constexpr int kLarge = 8;
  constexpr size_t kLargeBytes = size_t{1} << 20;
  std::vector<std::vector<std::byte>> out, in;
  for (int i = 0; i < kSmall + kLarge; ++i) {
    const size_t bytes = i < kSmall ? kSmallBytes : kLargeBytes;
    out.push_back(Pattern(static_cast<uint64_t>(i), bytes));
    in.emplace_back(bytes);
  }
  std::atomic<bool> sends_posted{false};
  Status send_status;
  std::thread sender([&] {
    std::vector<RequestPtr> reqs;
    for (int i = 0; i < kSmall + kLarge; ++i) {
      auto req = w[0].Isend(1, i < kSmall ? 1 : 2, out[i]);
      if (!req) {
        send_status = req.error();
        sends_posted = true;
        return;
      }
      reqs.push_back(std::move(*req));
    }
    sends_posted = true;
    send_status = WaitAll(reqs, Soon());
  });
  // Let the sends pile up (a provider may block a post until the receiver
  // drains, so do not wait for all of them forever).
  const auto give_up = Clock::now() + std::chrono::milliseconds(500);
  while (!sends_posted && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<RequestPtr> reqs;
  for (int i = 0; i < kSmall + kLarge; ++i) {
    auto req = w[1].Irecv(0, i < kSmall ? 1 : 2, in[i]);
    ASSERT_TRUE(req) << req.error().ToString();
    reqs.push_back(std::move(*req));
  }
  const Status recv_status = WaitAll(reqs, Soon());
  sender.join();
  ASSERT_TRUE(send_status.ok()) << send_status.ToString();
  ASSERT_TRUE(recv_status.ok()) << recv_status.ToString();
  for (int i = 0; i < kSmall + kLarge; ++i) {
    ASSERT_EQ(in[i], out[i]) << "message " << i;
  }
}

TEST_P(TransportConformance, MessageLargerThanReceiveBufferIsAnError) {
  World w = Make(2);
  ASSERT_EQ(w.size(), 2);
  for (size_t bytes : {size_t{4096}, size_t{1} << 20}) {
    SCOPED_TRACE("message of " + std::to_string(bytes) + " bytes");
    if (GetParam() == TransportKind::kShm && bytes > 4096) {
      // libfabric 1.17 shm: a truncated CMA receive loops forever in
      // smr_cma_loop (it asks for the whole message into the shorter buffer),
      // and with CMA off the SAR path never completes. Only messages up to the
      // inject size (4 KiB) can be checked without wedging the provider.
      continue;
    }
    if (GetParam() == TransportKind::kTcpRendezvousSealed && bytes > 16384) {
      // rxm 1.17: a rendezvous message longer than a receive of two iovecs
      // (payload, seal) never completes on either side (docs/libfabric.md,
      // "Sealed messages"): nothing to check but a deadline. In the eager
      // mode a message of 1 MiB fits the receive's overflow iovec.
      continue;
    }
    const auto data = Pattern(bytes, bytes);
    std::vector<std::byte> small(bytes / 4);
    const uint64_t rejected_before = w[1].Stats().messages_rejected;
    const bool may_lose = testing::ProviderOf(GetParam()) == FabricProvider::kNet;
    if (testing::Sealed(GetParam())) {
      // Sealed, a truncated message cannot be authenticated: it is dropped
      // (counted below) like any that fails its seal (checked in the thread
      // that waits), and the receive stays posted for the real message that
      // follows.
      auto pending = w[1].Irecv(0, 21, small);
      ASSERT_TRUE(pending) << pending.error().ToString();
      auto send = w[0].Isend(1, 21, data);
      ASSERT_TRUE(send) << send.error().ToString();
      uint64_t v = 4;
      auto real = w[0].Isend(1, 21, AsBytes(v));
      ASSERT_TRUE(real) << real.error().ToString();
      auto got = (*pending)->Wait(may_lose ? Deadline::AfterSeconds(3) : Soon());
      (void)(*send)->Wait(Soon());  // may succeed or fail: the receiver dropped it
      if (got || !may_lose) {  // over net the truncation may lose it (below)
        ASSERT_TRUE(got) << got.error().ToString();
        EXPECT_EQ(got->bytes, sizeof(v));
        EXPECT_EQ(std::memcmp(small.data(), &v, sizeof(v)), 0);
      }
      (*pending)->Cancel();
      (void)(*real)->Wait(Soon());
    } else {
      auto send = w[0].Isend(1, 21, data);
      ASSERT_TRUE(send) << send.error().ToString();
      auto done = w[1].Recv(0, 21, small, Soon());
      ASSERT_FALSE(done) << bytes << " bytes fit into " << small.size();
      EXPECT_EQ(done.error().code(), StatusCode::kDataLoss) << done.error().ToString();
      EXPECT_NE(done.error().message().find("rank 0"), std::string::npos) << done.error().ToString();
      (void)(*send)->Wait(Soon());  // may succeed or fail: the receiver got none of it
    }
    // The transport stays usable on the same tag. Over net the truncation
    // closed the connection, and a message the sender wrote before it noticed
    // is lost (transport.h; about 1 run in 100 here): there, a later message
    // must arrive within three tries of 3 s.
    bool arrived = false;
    for (uint64_t v = 5; v < 8 && !arrived; ++v) {
      uint64_t r = 0;
      auto send2 = w[0].Isend(1, 21, AsBytes(v));
      ASSERT_TRUE(send2);
      auto again = w[1].Recv(0, 21, AsWritableBytes(r),
                             may_lose ? Deadline::AfterSeconds(3) : Soon());
      if (!again && may_lose && again.error().code() == StatusCode::kDeadlineExceeded) continue;
      ASSERT_TRUE(again) << again.error().ToString();
      EXPECT_EQ(r, v);
      ASSERT_TRUE((*send2)->Wait(Soon()));
      arrived = true;
    }
    EXPECT_TRUE(arrived) << "no message arrived after the truncation";
    if (testing::Sealed(GetParam())) {
      EXPECT_EQ(w[1].Stats().messages_rejected, rejected_before + 1);
    }
  }
}

TEST_P(TransportConformance, ReceiveFromSilentPeerReachesDeadline) {
  World w = Make(2);
  ASSERT_EQ(w.size(), 2);
  uint64_t v = 0;
  const auto start = Clock::now();
  auto done = w[1].Recv(0, 99, AsWritableBytes(v), Deadline::After(std::chrono::milliseconds(100)));
  const auto elapsed = Clock::now() - start;
  ASSERT_FALSE(done);
  EXPECT_EQ(done.error().code(), StatusCode::kDeadlineExceeded) << done.error().ToString();
  EXPECT_NE(done.error().message().find("rank 0 (node0)"), std::string::npos)
      << done.error().ToString();
  EXPECT_GE(elapsed, std::chrono::milliseconds(100));
  // Upper bound only catches a wait that ignores its deadline; loose for a
  // loaded 2-core CI machine.
  EXPECT_LT(elapsed, std::chrono::seconds(5));
  // The timed-out receive was cancelled: it must not swallow a later message.
  uint64_t sent = 1234, got = 0;
  auto send = w[0].Isend(1, 99, AsBytes(sent));
  ASSERT_TRUE(send);
  auto again = w[1].Recv(0, 99, AsWritableBytes(got), Soon());
  ASSERT_TRUE(again) << again.error().ToString();
  EXPECT_EQ(got, 1234u);
  ASSERT_TRUE((*send)->Wait(Soon()));
}

TEST_P(TransportConformance, MarkPeerDeadFailsPendingAndFutureOperations) {
  World w = Make(4);
  ASSERT_EQ(w.size(), 4);
  uint64_t a = 0, b = 0, c = 0;
  auto from_dead = w[0].Irecv(2, 7, AsWritableBytes(a));
  ASSERT_TRUE(from_dead);
  auto any = w[0].Irecv(kAnySource, 7, AsWritableBytes(b));
  ASSERT_TRUE(any);
  const auto start = Clock::now();
  w[0].MarkPeerDead(2);
  auto failed = (*from_dead)->Wait(Soon());
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code(), StatusCode::kUnavailable) << failed.error().ToString();
  EXPECT_NE(failed.error().message().find("rank 2 (node2)"), std::string::npos)
      << failed.error().ToString();
  // "At once": far below the 30 s deadline; loose for a loaded machine.
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));

  // Future operations with the dead peer fail with kUnavailable, at post or wait.
  auto check_unavailable = [](Result<RequestPtr> req) {
    if (req) {
      auto r = (*req)->Wait(Deadline::AfterSeconds(5));
      ASSERT_FALSE(r);
      EXPECT_EQ(r.error().code(), StatusCode::kUnavailable) << r.error().ToString();
      EXPECT_NE(r.error().message().find("rank 2"), std::string::npos) << r.error().ToString();
    } else {
      EXPECT_EQ(req.error().code(), StatusCode::kUnavailable) << req.error().ToString();
      EXPECT_NE(req.error().message().find("rank 2"), std::string::npos)
          << req.error().ToString();
    }
  };
  check_unavailable(w[0].Isend(2, 7, AsBytes(c)));
  check_unavailable(w[0].Irecv(2, 7, AsWritableBytes(c)));

  // The any-source receive is still pending and matches a live peer.
  EXPECT_FALSE((*any)->Done());
  uint64_t v = 31;
  auto send = w[3].Isend(0, 7, AsBytes(v));
  ASSERT_TRUE(send);
  auto got = (*any)->Wait(Soon());
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_EQ(got->source, 3);
  EXPECT_EQ(b, 31u);
  ASSERT_TRUE((*send)->Wait(Soon()));
}

TEST_P(TransportConformance, CancelledReceiveDoesNotMatch) {
  World w = Make(2);
  ASSERT_EQ(w.size(), 2);
  uint64_t stale = 0, fresh = 0, v = 8;
  {
    auto req = w[1].Irecv(0, 4, AsWritableBytes(stale));
    ASSERT_TRUE(req);
    (*req)->Cancel();
    auto r = (*req)->Wait(Soon());
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), StatusCode::kCancelled) << r.error().ToString();
  }
  {
    // Destroyed while pending: cancelled as well.
    auto req = w[1].Irecv(0, 4, AsWritableBytes(stale));
    ASSERT_TRUE(req);
  }
  auto send = w[0].Isend(1, 4, AsBytes(v));
  ASSERT_TRUE(send);
  auto done = w[1].Recv(0, 4, AsWritableBytes(fresh), Soon());
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(fresh, 8u);
  EXPECT_EQ(stale, 0u);
  ASSERT_TRUE((*send)->Wait(Soon()));
}

// Messages of a finished "epoch" (tags 0x100..0x1ff here) that no receive
// will take are dropped, whether they arrived before Discard or after it, and
// hold back nothing: not the data the same sender sends next (net streams
// every message whole), nor the stale send itself (tcp;ofi_rxm's rendezvous). Over libfabric's net (a
// byte stream per peer) a 1 MiB message nobody receives would otherwise block
// the connection for good.
TEST_P(TransportConformance, DiscardedMessagesDoNotHoldBackLaterOnes) {
  constexpr size_t kBig = 1 << 20;
  constexpr Tag kStaleEpoch = 0x100, kIgnore = 0xff, kFresh = 0x201;
  for (bool discard_first : {false, true}) {
    SCOPED_TRACE(discard_first ? "filter before the messages" : "messages before the filter");
    World w = Make(2);
    ASSERT_EQ(w.size(), 2);
    if (discard_first) w[1].Discard({kStaleEpoch, kIgnore});
    const std::vector<std::byte> stale_big = Pattern(1, kBig), fresh = Pattern(2, kBig);
    const uint64_t stale_small = 7;
    std::vector<RequestPtr> sends;
    for (auto [tag, data] : {std::pair{kStaleEpoch | 1, std::span<const std::byte>(stale_big)},
                             std::pair{kStaleEpoch | 2, AsBytes(stale_small)},
                             std::pair{kFresh, std::span<const std::byte>(fresh)}}) {
      auto req = w[0].Isend(1, tag, data);
      ASSERT_TRUE(req) << req.error().ToString();
      sends.push_back(std::move(*req));
    }
    if (!discard_first) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let them arrive first
      w[1].Discard({kStaleEpoch, kIgnore});
    }
    std::vector<std::byte> got(kBig);
    auto done = w[1].Recv(0, kFresh, got, Deadline::AfterSeconds(10));
    ASSERT_TRUE(done) << done.error().ToString();
    EXPECT_EQ(FirstMismatch(got, 2, kBig), kBig);
    // shm (1.17) cannot drop them (no FI_PEEK; transport.h): the data flows,
    // but the stale send and the sender's later ones never complete.
    if (GetParam() == TransportKind::kShm) continue;
    // Every send completes: tcp;ofi_rxm keeps a big message at its sender
    // until a receive takes it (rendezvous).
    ASSERT_TRUE(WaitAll(sends, Soon()).ok());
    // Both stale messages are counted as dropped (a provider that does not
    // stream them ahead of the fresh one may drop them a little later).
    const Deadline counted = Deadline::AfterSeconds(10);
    while (w[1].Stats().messages_discarded < 2 && !counted.Expired()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(w[1].Stats().messages_discarded, 2u);
    EXPECT_EQ(w[1].Stats().messages_received, 1u);
  }
}

// What a node does when a peer dies mid-exchange (ClusterSession::InstallPeers):
// the epoch it ran in leaves messages that no receive will take (to the dead
// rank, between survivors, from the dead rank), then the survivors begin the
// next epoch (every one BeginEpoch, then every one SetPeers with the published
// addresses and Discard of the old tags) and must talk as if nothing was left:
// every fresh message arrives intact at the rank it was sent to, and every
// stale request ends (done or failed) rather than hang. Over shm this needs
// BeginEpoch's fresh endpoints: with one endpoint for both epochs the
// survivors' fresh 1 MiB sends never completed. Over tcp;ofi_rxm it needs
// drains from any source: the peek reports fi_addr 0 as the source of every
// message, and node1's stale send to node0 never completed.
TEST_P(TransportConformance, ANewEpochLeavesTheEndedOneBehind) {
  constexpr size_t kBig = 1 << 20;
  constexpr int kSurvivors = 3;
  constexpr Tag kStaleEpoch = 0x100, kIgnore = 0xff, kFresh = 0x201, kFreshSmall = 0x202;
  World w = Make(kSurvivors + 1);
  ASSERT_EQ(w.size(), kSurvivors + 1);
  const std::vector<std::byte> stale = Pattern(9, kBig);
  std::vector<RequestPtr> stale_requests;  // the survivors'
  std::vector<RequestPtr> dead_requests;   // rank 3's: nobody waits for them
  for (auto [from, to] : {std::pair{0, 3}, std::pair{0, 1}, std::pair{1, 0}, std::pair{2, 1}, std::pair{3, 1}}) {
    auto req = w[from].Isend(to, kStaleEpoch | static_cast<Tag>(to), stale);
    ASSERT_TRUE(req) << req.error().ToString();
    (from == 3 ? dead_requests : stale_requests).push_back(std::move(*req));
  }
  uint64_t stale_small = 5;
  auto small = w[0].Isend(1, kStaleEpoch | 7, AsBytes(stale_small));
  ASSERT_TRUE(small) << small.error().ToString();
  stale_requests.push_back(std::move(*small));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the stale traffic start

  // Rank 3 died (it is never heard from again); 0, 1 and 2 go on in epoch 1.
  // Every survivor opens the epoch before any installs its peers: shm 1.17
  // gives one address-vector slot to every peer whose endpoint does not exist
  // yet, and their messages then reach the wrong rank.
  std::vector<PeerInfo> survivors;
  for (int r = 0; r < kSurvivors; ++r) survivors.push_back(PeerInfo{r, w[r].LocalAddress(), testing::PeerName(r)});
  for (int r = 0; r < kSurvivors; ++r) {
    w[r].MarkPeerDead(3);
    Status begun = w[r].BeginEpoch(1);
    if (begun.ok() && testing::Sealed(GetParam())) begun = w[r].SetEpochKey(1, testing::WorldKey(1));
    ASSERT_TRUE(begun.ok()) << begun.ToString();
  }
  for (int r = 0; r < kSurvivors; ++r) {
    Status installed = w[r].SetPeers(r, survivors);
    ASSERT_TRUE(installed.ok()) << installed.ToString();
    w[r].Discard({kStaleEpoch, kIgnore});
    EXPECT_EQ(w[r].LocalAddress(), survivors[r].address) << "the published address changed";
  }
  // Every survivor sends 1 MiB and 8 bytes to every other, each its own.
  auto seed = [](int from, int to) { return static_cast<uint64_t>(100 + 10 * from + to); };
  std::vector<std::vector<std::byte>> out, in;
  std::vector<uint64_t> small_in(kSurvivors * kSurvivors, 0), small_out(kSurvivors * kSurvivors);
  for (int i = 0; i < kSurvivors * kSurvivors; ++i) {
    out.push_back(Pattern(seed(i / kSurvivors, i % kSurvivors), kBig));
    in.emplace_back(kBig);
    small_out[i] = seed(i / kSurvivors, i % kSurvivors);
  }
  std::vector<RequestPtr> fresh;
  auto keep = [&](Result<RequestPtr> req) {
    ASSERT_TRUE(req) << req.error().ToString();
    fresh.push_back(std::move(*req));
  };
  for (int from = 0; from < kSurvivors; ++from) {
    for (int to = 0; to < kSurvivors; ++to) {
      if (from == to) continue;
      const int i = from * kSurvivors + to;
      keep(w[to].Irecv(from, kFresh, in[i]));
      keep(w[to].Irecv(from, kFreshSmall, AsWritableBytes(small_in[i])));
      keep(w[from].Isend(to, kFresh, out[i]));
      keep(w[from].Isend(to, kFreshSmall, AsBytes(small_out[i])));
    }
  }
  ASSERT_EQ(fresh.size(), static_cast<size_t>(4 * kSurvivors * (kSurvivors - 1)));
  Status done = WaitAll(fresh, Deadline::AfterSeconds(10));
  ASSERT_TRUE(done.ok()) << done.ToString();
  for (int from = 0; from < kSurvivors; ++from) {
    for (int to = 0; to < kSurvivors; ++to) {
      if (from == to) continue;
      const int i = from * kSurvivors + to;
      EXPECT_EQ(FirstMismatch(in[i], seed(from, to), kBig), kBig) << from << " -> " << to;
      EXPECT_EQ(small_in[i], seed(from, to)) << from << " -> " << to;
    }
  }
  for (size_t i = 0; i < stale_requests.size(); ++i) {
    auto r = stale_requests[i]->Wait(Deadline::AfterSeconds(10));
    EXPECT_TRUE(r || r.error().code() != StatusCode::kDeadlineExceeded)
        << "stale request " << i << " still pending: " << r.error().ToString();
  }
}

TEST_P(TransportConformance, RanksOnThreadsExchangeAllToAll) {
  constexpr int kN = 4;
  World w = Make(kN);
  ASSERT_EQ(w.size(), kN);
  constexpr size_t kBytes = 256 << 10;  // above the eager size of both providers
  std::vector<Status> status(kN);
  std::vector<std::thread> threads;
  for (int r = 0; r < kN; ++r) {
    threads.emplace_back([&, r] {
      std::vector<std::vector<std::byte>> in(kN, std::vector<std::byte>(kBytes));
      std::vector<std::vector<std::byte>> out;
      std::vector<RequestPtr> reqs;
      for (int p = 0; p < kN; ++p) out.push_back(Pattern(static_cast<uint64_t>(r * kN + p), kBytes));
      for (int p = 0; p < kN; ++p) {
        if (p == r) continue;
        auto rq = w[r].Irecv(p, 1, in[p]);
        if (!rq) { status[r] = rq.error(); return; }
        reqs.push_back(std::move(*rq));
        auto sq = w[r].Isend(p, 1, out[p]);
        if (!sq) { status[r] = sq.error(); return; }
        reqs.push_back(std::move(*sq));
      }
      status[r] = WaitAll(reqs, Soon());
      for (int p = 0; p < kN && status[r].ok(); ++p) {
        if (p != r && FirstMismatch(in[p], static_cast<uint64_t>(p * kN + r), kBytes) != kBytes) {
          status[r] = DataLoss("rank " + std::to_string(r) + " got wrong bytes from " +
                               std::to_string(p));
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kN; ++r) EXPECT_TRUE(status[r].ok()) << status[r].ToString();
}

INSTANTIATE_TEST_SUITE_P(AllTransports, TransportConformance,
                         ::testing::Values(TransportKind::kLocal, TransportKind::kTcp, TransportKind::kNet,
                                           TransportKind::kShm, TransportKind::kTcpSealed,
                                           TransportKind::kNetSealed, TransportKind::kTcpRendezvous,
                                           TransportKind::kTcpRendezvousSealed),
                         [](const auto& info) { return testing::KindName(info.param); });

}  // namespace
}  // namespace chorus::gossip
