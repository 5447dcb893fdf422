// Tests of ShareLiveState over the in-process transport: the members that
// need the state get the lowest-ranked holder's bytes (several chunks) and its
// step; nobody needing it costs one small all-reduce; nobody holding it is
// refused.
#include "node/cluster/live_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gossip/transport/local/local_transport.h"
#include "node/cluster/live_state_wire.h"

namespace chorus::node {
namespace {

// A member's state: `bytes`, or nothing yet.
class FakeState final : public LiveState {
 public:
  FakeState(std::vector<uint8_t> bytes, int64_t step, bool needs)
      : bytes_(std::move(bytes)), step_(step), needs_(needs) {}
  bool NeedsState() const override { return needs_; }
  void NeedState() override { needs_ = true; }
  int64_t NextStep() const override { return step_; }
  Result<std::vector<uint8_t>> Capture(int64_t next_step) override {
    ++captures;
    captured_step = next_step;
    return bytes_;
  }
  Status Restore(std::span<const uint8_t> bytes, const std::string& from) override {
    bytes_.assign(bytes.begin(), bytes.end());
    restored_from = from;
    needs_ = false;
    return Status::Ok();
  }
  void PutBackStep() override {}
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  int captures = 0;
  int64_t captured_step = -1;
  std::string restored_from;

 private:
  std::vector<uint8_t> bytes_;
  int64_t step_;
  bool needs_;
};

MembershipView LiveView(int n, int self, uint64_t epoch) {
  MembershipView v;
  v.epoch = epoch;
  v.self_rank = self;
  for (int r = 0; r < n; ++r) {
    Member m;
    m.rank = r;
    m.name = "node" + std::to_string(r);
    v.members.push_back(m);
  }
  return v;
}

// Runs ShareLiveState on every member at once.
std::vector<Result<LiveStateShared>> ShareOnAll(std::vector<FakeState>& states, const std::vector<int64_t>& steps,
                                                int max_sources = 1) {
  const int n = static_cast<int>(states.size());
  gossip::LocalHubOptions options;
  options.world_size = n;
  auto hub = gossip::LocalHub::Create(options);
  std::vector<std::unique_ptr<gossip::Transport>> transports = hub->MakeAll();
  std::vector<Result<LiveStateShared>> results(static_cast<size_t>(n), Err(Cancelled("not run")));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto collective = gossip::Collective::Create(*transports[static_cast<size_t>(r)]);
      if (!collective) {
        results[static_cast<size_t>(r)] = Err(collective.error());
        return;
      }
      results[static_cast<size_t>(r)] = ShareLiveState(*collective, LiveView(n, r, 3), states[static_cast<size_t>(r)],
                                                       steps[static_cast<size_t>(r)], Deadline::AfterSeconds(20),
                                                       /*round=*/0, max_sources);
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 31 + (i >> 12));
  return v;
}

TEST(LiveStateTest, JoinersTakeTheLowestHoldersStateInChunksWithItsStep) {
  const size_t size = 2 * kLiveStateChunkBytes + 12345;  // three chunks, the last short
  std::vector<FakeState> states;
  states.emplace_back(Pattern(size, 1), 120, false);  // rank 0: the holder that sends
  states.emplace_back(Pattern(size, 1), 120, false);
  states.emplace_back(std::vector<uint8_t>{}, 0, true);  // joiners
  states.emplace_back(std::vector<uint8_t>{}, 0, true);
  auto results = ShareOnAll(states, {120, 120, 0, 0});
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(results[static_cast<size_t>(r)]) << r << ": " << results[static_cast<size_t>(r)].error().ToString();
    EXPECT_EQ(results[static_cast<size_t>(r)]->receivers, 2);
    EXPECT_EQ(results[static_cast<size_t>(r)]->sender, "node0");
    EXPECT_EQ(results[static_cast<size_t>(r)]->next_step, 120) << r;
  }
  EXPECT_EQ(states[0].captures, 1);
  EXPECT_EQ(states[0].captured_step, 120);
  EXPECT_EQ(states[1].captures, 0);
  for (int r : {2, 3}) {
    EXPECT_FALSE(states[static_cast<size_t>(r)].NeedsState());
    EXPECT_EQ(states[static_cast<size_t>(r)].bytes(), Pattern(size, 1)) << r;
    EXPECT_EQ(states[static_cast<size_t>(r)].restored_from, "live state from node0");
  }
}

// Holders with the same bytes (all-reduce replicas) stripe the transfer:
// the chunks dealt evenly among the sources, the header from the first.
// Five chunks over three sources: two from each of the first two, one from
// the third.
TEST(LiveStateTest, HoldersOfTheSameBytesStripeTheTransfer) {
  const size_t size = 4 * kLiveStateChunkBytes + 777;
  for (int max_sources : {4, 2}) {
    std::vector<FakeState> states;
    for (int r = 0; r < 3; ++r) states.emplace_back(Pattern(size, 9), 50, false);
    states.emplace_back(std::vector<uint8_t>{}, 0, true);
    states.emplace_back(std::vector<uint8_t>{}, 0, true);
    auto results = ShareOnAll(states, {50, 50, 50, 0, 0}, max_sources);
    const int sources = std::min(3, max_sources);
    for (int r = 0; r < 5; ++r) {
      ASSERT_TRUE(results[static_cast<size_t>(r)]) << r << ": " << results[static_cast<size_t>(r)].error().ToString();
      EXPECT_EQ(results[static_cast<size_t>(r)]->sources, sources) << r;
      EXPECT_EQ(results[static_cast<size_t>(r)]->sender, "node0");
      EXPECT_EQ(results[static_cast<size_t>(r)]->next_step, 50) << r;
    }
    for (int r : {0, 1, 2}) EXPECT_EQ(states[static_cast<size_t>(r)].captures, 1) << "each holder's fingerprint";
    for (int r : {3, 4}) {
      EXPECT_EQ(states[static_cast<size_t>(r)].bytes(), Pattern(size, 9)) << r;
      EXPECT_EQ(states[static_cast<size_t>(r)].restored_from,
                sources == 3 ? "live state from node0, node1, node2" : "live state from node0, node1");
    }
  }
}

// Holders whose bytes differ in every chunk (a GPU replica's last bits) do
// not stripe: the lowest-ranked one sends it all, and the receivers hold exactly its bytes.
TEST(LiveStateTest, HoldersOfDifferentBytesSendFromOne) {
  const size_t size = 3 * kLiveStateChunkBytes;
  std::vector<FakeState> states;
  states.emplace_back(Pattern(size, 1), 8, false);
  states.emplace_back(Pattern(size, 2), 8, false);
  states.emplace_back(std::vector<uint8_t>{}, 0, true);
  auto results = ShareOnAll(states, {8, 8, 0}, 4);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(results[static_cast<size_t>(r)]) << r << ": " << results[static_cast<size_t>(r)].error().ToString();
    EXPECT_EQ(results[static_cast<size_t>(r)]->sources, 1) << r;
  }
  EXPECT_EQ(states[2].bytes(), Pattern(size, 1));
  EXPECT_EQ(states[2].restored_from, "live state from node0");
}

// Holders alike but for one chunk (BatchNorm statistics beside the
// all-reduced weights) stripe the chunks they hold alike; the chunk that
// differs comes from the lowest-ranked, whose bytes the joiners restore.
TEST(LiveStateTest, HoldersAlikeButForOneChunkStripeTheRest) {
  const size_t size = 5 * kLiveStateChunkBytes + 99;  // six chunks
  std::vector<FakeState> states;
  for (int r = 0; r < 3; ++r) {
    std::vector<uint8_t> bytes = Pattern(size, 4);
    bytes[2 * kLiveStateChunkBytes + 17] = static_cast<uint8_t>(100 + r);  // chunk 2 differs on each
    states.emplace_back(std::move(bytes), 30, false);
  }
  const std::vector<uint8_t> first = states[0].bytes();
  states.emplace_back(std::vector<uint8_t>{}, 0, true);
  auto results = ShareOnAll(states, {30, 30, 30, 0}, 4);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(results[static_cast<size_t>(r)]) << r << ": " << results[static_cast<size_t>(r)].error().ToString();
    EXPECT_EQ(results[static_cast<size_t>(r)]->sources, 3) << r;
  }
  EXPECT_EQ(states[3].bytes(), first);
  EXPECT_EQ(states[3].restored_from, "live state from node0, node1, node2");
}

// Holders whose states differ in size (gossip replicas' metadata) cannot
// match chunks: the lowest-ranked sends it all.
TEST(LiveStateTest, HoldersOfDifferentSizesSendFromOne) {
  std::vector<FakeState> states;
  states.emplace_back(Pattern(2 * kLiveStateChunkBytes, 1), 8, false);
  states.emplace_back(Pattern(2 * kLiveStateChunkBytes + 1, 1), 8, false);
  states.emplace_back(std::vector<uint8_t>{}, 0, true);
  auto results = ShareOnAll(states, {8, 8, 0}, 4);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(results[static_cast<size_t>(r)]) << r << ": " << results[static_cast<size_t>(r)].error().ToString();
    EXPECT_EQ(results[static_cast<size_t>(r)]->sources, 1) << r;
  }
  EXPECT_EQ(states[2].bytes(), Pattern(2 * kLiveStateChunkBytes, 1));
}

TEST(LiveStateTest, NobodyNeedingItSendsNothing) {
  std::vector<FakeState> states;
  for (int r = 0; r < 3; ++r) states.emplace_back(Pattern(100, static_cast<uint8_t>(r)), 7, false);
  auto results = ShareOnAll(states, {7, 7, 7});
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(results[static_cast<size_t>(r)]);
    EXPECT_EQ(results[static_cast<size_t>(r)]->receivers, 0);
    EXPECT_EQ(results[static_cast<size_t>(r)]->next_step, 7);
    EXPECT_EQ(states[static_cast<size_t>(r)].captures, 0);
  }
}

TEST(LiveStateTest, NobodyHoldingItIsRefusedOnEveryMember) {
  std::vector<FakeState> states;
  for (int r = 0; r < 2; ++r) states.emplace_back(std::vector<uint8_t>{}, 0, true);
  auto results = ShareOnAll(states, {0, 0});
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(results[static_cast<size_t>(r)]);
    EXPECT_EQ(results[static_cast<size_t>(r)].error().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(results[static_cast<size_t>(r)].error().message().find("holds the cluster's state"), std::string::npos);
  }
}

// The header and a fingerprint decode to what was encoded.
TEST(LiveStateWireTest, HeaderAndFingerprintRoundTrip) {
  const LiveStateHeader sent{3 * kLiveStateChunkBytes + 5, -9, 0xdeadbeef};
  const std::vector<uint8_t> bytes = EncodeLiveStateHeader(sent);
  ASSERT_EQ(bytes.size(), kLiveStateHeaderBytes);
  auto header = DecodeLiveStateHeader(std::as_bytes(std::span(bytes)));
  ASSERT_TRUE(header.has_value()) << header.error().ToString();
  EXPECT_EQ(header->bytes, sent.bytes);
  EXPECT_EQ(header->next_step, sent.next_step);
  EXPECT_EQ(header->crc32, sent.crc32);
  EXPECT_EQ(LiveStateChunks(header->bytes), 4u);

  const LiveStateFingerprint held{true, 0xfedcba98, (uint64_t{5} << 32) + 77};
  const auto floats = EncodeLiveStateFingerprint(held);
  auto fingerprint = DecodeLiveStateFingerprint(floats);
  ASSERT_TRUE(fingerprint.has_value()) << fingerprint.error().ToString();
  EXPECT_TRUE(fingerprint->holds);
  EXPECT_EQ(fingerprint->crc32, held.crc32);
  EXPECT_EQ(fingerprint->bytes, held.bytes);
}

// A header of another size, magic or chunk size, and a fingerprint whose
// floats are not 16-bit integers or that names a size past the limit, are
// refused: a corrupt size never becomes an allocation.
TEST(LiveStateWireTest, RefusesBadHeadersAndFingerprints) {
  std::vector<uint8_t> bytes = EncodeLiveStateHeader({10, 1, 2});
  auto refused = [](Result<LiveStateHeader> r, const std::string& what) {
    ASSERT_FALSE(r.has_value()) << what;
    EXPECT_NE(r.error().message().find(what), std::string::npos) << r.error().message();
  };
  refused(DecodeLiveStateHeader(std::as_bytes(std::span(bytes)).first(31)), "31 bytes");
  bytes[0] ^= 1;
  refused(DecodeLiveStateHeader(std::as_bytes(std::span(bytes))), "magic");
  bytes[0] ^= 1;
  const uint64_t huge = kMaxLiveStateBytes + 1;
  std::memcpy(bytes.data() + 8, &huge, sizeof(huge));
  refused(DecodeLiveStateHeader(std::as_bytes(std::span(bytes))), "above the limit");

  std::array<float, kLiveStateFingerprintFloats> floats = EncodeLiveStateFingerprint({true, 1, 2});
  floats[4] = 0.5f;
  EXPECT_FALSE(DecodeLiveStateFingerprint(floats).has_value());
  floats[4] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(DecodeLiveStateFingerprint(floats).has_value());
  floats[4] = 0.0f;
  floats[3] = 65535.0f;  // a size of about 2^48 bytes
  auto past = DecodeLiveStateFingerprint(floats);
  ASSERT_FALSE(past.has_value());
  EXPECT_NE(past.error().message().find("above the limit"), std::string::npos) << past.error().message();
}

}  // namespace
}  // namespace chorus::node
