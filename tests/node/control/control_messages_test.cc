// Control-plane messages: every kind survives Cap'n Proto encoding, garbage
// never throws out of DecodeMessage, and a version mismatch names both sides.
#include "node/control/control_messages.h"

#include <gtest/gtest.h>

#include <random>

namespace chorus::node {
namespace {

Member SampleMember(int rank, const std::string& name) {
  Member m;
  m.rank = rank;
  m.name = name;
  m.control_address = "127.0.0.1:" + std::to_string(4000 + rank);
  m.data_address = {0x00, 0x01, 0xfe, 0xff, static_cast<uint8_t>(rank)};
  m.device = rank % 2 ? trainer::Device::Cuda(0) : trainer::Device::Cpu();
  m.batch_size = 64 + rank;
  m.host_group = "host" + std::to_string(rank / 2);
  m.site = "site" + std::to_string(rank % 2);
  m.rank_hint = rank == 1 ? 7 : -1;
  return m;
}

msg::EpochView SampleView() {
  msg::EpochView v;
  v.epoch = 12345678901ull;
  v.proposal_id = 0xfedcba9876543210ull;
  v.proposer = "node0";
  v.members = {SampleMember(0, "node0"), SampleMember(1, "node1"), SampleMember(2, "node5")};
  v.departed = {2, 4};
  v.joined = {"node5"};
  v.finished = {"node4"};
  v.stopped = {"node2"};
  v.expelled = {{"node3", {"its contributions were rejected 3 times",
                            {{"node0", {1, 2, 3}, {4, 5}, {6, 7, 8, 9}}, {"node1", {10}, {11}, {12}}}}},
                {"node7", {"sent NaN"}}};
  v.data_salt = {9, 8, 7};
  v.run_salt = {6, 5, 4, 3};
  v.reform = true;
  return v;
}

ControlMessage RoundTrip(const ControlMessage& m) {
  Result<std::vector<uint8_t>> bytes = EncodeMessage(m);
  EXPECT_TRUE(bytes.has_value());
  EXPECT_EQ(bytes->size() % 8, 0u);
  Result<ControlMessage> back = DecodeMessage(*bytes);
  EXPECT_TRUE(back.has_value()) << back.error().ToString();
  EXPECT_EQ(back->index(), m.index());
  return *back;
}

void ExpectSameView(const msg::EpochView& a, const msg::EpochView& b) {
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.proposal_id, b.proposal_id);
  EXPECT_EQ(a.proposer, b.proposer);
  EXPECT_EQ(a.members, b.members);
  EXPECT_EQ(a.departed, b.departed);
  EXPECT_EQ(a.joined, b.joined);
  EXPECT_EQ(a.finished, b.finished);
  EXPECT_EQ(a.stopped, b.stopped);
  EXPECT_EQ(a.expelled, b.expelled);
  EXPECT_EQ(a.data_salt, b.data_salt);
  EXPECT_EQ(a.run_salt, b.run_salt);
  EXPECT_EQ(a.reform, b.reform);
}

TEST(ControlMessagesTest, HelloAndProofRoundTrip) {
  msg::Hello hello{{"0.1.0", "1.17", "tcp;ofi_rxm", "117.0"}, "node3", std::vector<uint8_t>(32, 0xab),
                   std::vector<uint8_t>(32, 0xcd),  std::vector<uint8_t>(32, 0x11),
                   std::vector<uint8_t>(32, 0x22),  std::vector<uint8_t>(64, 0x33),
                   std::vector<uint8_t>(64, 0x44)};
  auto back = std::get<msg::Hello>(RoundTrip(hello));
  EXPECT_EQ(back.versions, hello.versions);
  EXPECT_EQ(back.node_name, "node3");
  EXPECT_EQ(back.nonce, hello.nonce);
  EXPECT_EQ(back.proof, hello.proof);
  EXPECT_EQ(back.ephemeral, hello.ephemeral);
  EXPECT_EQ(back.credential_key, hello.credential_key);
  EXPECT_EQ(back.credential_signature, hello.credential_signature);
  EXPECT_EQ(back.transcript_signature, hello.transcript_signature);
  auto proof =
      std::get<msg::Proof>(RoundTrip(msg::Proof{std::vector<uint8_t>(32, 9), std::vector<uint8_t>(64, 5)}));
  EXPECT_EQ(proof.proof, std::vector<uint8_t>(32, 9));
  EXPECT_EQ(proof.transcript_signature, std::vector<uint8_t>(64, 5));
}

TEST(ControlMessagesTest, MembershipMessagesRoundTrip) {
  const Member joiner = SampleMember(-1, "node9");
  const auto join = std::get<msg::Join>(RoundTrip(msg::Join{joiner, "exchange.kind = \"gossip\"\n", true}));
  EXPECT_EQ(join.info, joiner);
  EXPECT_EQ(join.shared_settings, "exchange.kind = \"gossip\"\n");
  EXPECT_TRUE(join.resume);
  EXPECT_FALSE(std::get<msg::Join>(RoundTrip(msg::Join{joiner, ""})).resume);
  ExpectSameView(std::get<msg::Welcome>(RoundTrip(msg::Welcome{SampleView()})).view, SampleView());
  ExpectSameView(std::get<msg::EpochProposal>(RoundTrip(msg::EpochProposal{SampleView()})).view, SampleView());

  auto ack = std::get<msg::EpochAck>(RoundTrip(msg::EpochAck{7, 99, "node2"}));
  EXPECT_EQ(ack.epoch, 7u);
  EXPECT_EQ(ack.proposal_id, 99u);
  EXPECT_EQ(ack.sender, "node2");
  auto hb = std::get<msg::Heartbeat>(RoundTrip(msg::Heartbeat{
      3, "node1", 640, 4, {"node2", "node3"}, "node1#00ff", {{"node1#00ff", 640}, {"node2#01", uint64_t{1} << 40}},
      {{"node6", {"sent NaN", {{"node1", {1}, {2}, {3}}}}}}, true}));
  EXPECT_EQ(hb.epoch, 3u);
  EXPECT_EQ(hb.sender, "node1");
  EXPECT_EQ(hb.samples, 640u);
  EXPECT_EQ(hb.joiners_at, 4u);
  EXPECT_EQ(hb.dead, (std::vector<std::string>{"node2", "node3"}));
  EXPECT_EQ(hb.incarnation, "node1#00ff");
  EXPECT_EQ(hb.counts, (std::map<std::string, uint64_t>{{"node1#00ff", 640}, {"node2#01", uint64_t{1} << 40}}));
  EXPECT_EQ(hb.accusations, (msg::Expulsions{{"node6", {"sent NaN", {{"node1", {1}, {2}, {3}}}}}}));
  EXPECT_TRUE(hb.reform);
  EXPECT_FALSE(std::get<msg::Heartbeat>(RoundTrip(msg::Heartbeat{3, "node1"})).reform);
  auto leave = std::get<msg::Leave>(RoundTrip(msg::Leave{4, "node4"}));
  EXPECT_EQ(leave.epoch, 4u);
  EXPECT_EQ(leave.name, "node4");
  EXPECT_FALSE(leave.stopping);
  EXPECT_TRUE(std::get<msg::Leave>(RoundTrip(msg::Leave{4, "node4", true})).stopping);
  auto barrier = std::get<msg::Barrier>(RoundTrip(msg::Barrier{"step", 5, 11, "node0", true, true, -42}));
  EXPECT_EQ(barrier.name, "step");
  EXPECT_EQ(barrier.epoch, 5u);
  EXPECT_EQ(barrier.seq, 11u);
  EXPECT_EQ(barrier.sender, "node0");
  EXPECT_TRUE(barrier.advance);
  EXPECT_TRUE(barrier.reply);
  EXPECT_EQ(barrier.value, -42);
}

TEST(ControlMessagesTest, StateRedirectAndRejectRoundTrip) {
  msg::StateRequest tool;
  tool.sender = "probe";
  auto t = std::get<msg::StateRequest>(RoundTrip(tool));
  EXPECT_EQ(t.sender, "probe");
  EXPECT_TRUE(t.control_address.empty());
  msg::StateRequest probe;
  probe.sender = "node3";
  probe.control_address = "10.0.0.3:4000";
  probe.known = {"10.0.0.1:4000", "h2:4000"};
  probe.shared_settings = "exchange.kind = \"gossip\"\n";
  probe.resume = true;
  auto p = std::get<msg::StateRequest>(RoundTrip(probe));
  EXPECT_EQ(p.control_address, probe.control_address);
  EXPECT_EQ(p.known, probe.known);
  EXPECT_EQ(p.shared_settings, probe.shared_settings);
  EXPECT_TRUE(p.resume);

  msg::State state;
  state.formed = true;
  state.epoch = 8;
  state.members = SampleView().members;
  state.pending = {"node7", "node8"};
  state.coordinator = "node0";
  state.address = "10.0.0.1:4000";
  state.step = 1234;
  state.next_admission_step = 100;
  state.reform = true;
  auto s = std::get<msg::State>(RoundTrip(state));
  EXPECT_TRUE(s.reform);
  EXPECT_TRUE(s.formed);
  EXPECT_EQ(s.epoch, 8u);
  EXPECT_EQ(s.members, state.members);
  EXPECT_EQ(s.pending, state.pending);
  EXPECT_EQ(s.coordinator, "node0");
  EXPECT_EQ(s.address, "10.0.0.1:4000");
  EXPECT_EQ(s.step, 1234);
  EXPECT_EQ(s.next_admission_step, 100);

  msg::State forming;
  forming.address = "10.0.0.5:4000";
  forming.applied_to = "10.0.0.1:4000";
  forming.applied_formed = true;
  forming.known = {"10.0.0.1:4000"};
  auto f = std::get<msg::State>(RoundTrip(forming));
  EXPECT_FALSE(f.formed);
  EXPECT_FALSE(f.candidate);
  EXPECT_EQ(f.applied_to, forming.applied_to);
  EXPECT_TRUE(f.applied_formed);
  EXPECT_EQ(f.known, forming.known);
  EXPECT_EQ(f.step, -1) << "no progress reported";
  forming.candidate = true;
  EXPECT_TRUE(std::get<msg::State>(RoundTrip(forming)).candidate);

  auto r = std::get<msg::Redirect>(RoundTrip(msg::Redirect{"node0", "10.0.0.1:4000", true}));
  EXPECT_EQ(r.coordinator_name, "node0");
  EXPECT_EQ(r.coordinator_address, "10.0.0.1:4000");
  EXPECT_TRUE(r.formed);
  EXPECT_FALSE(std::get<msg::Redirect>(RoundTrip(msg::Redirect{"node0", "10.0.0.1:4000", false})).formed);
  for (RejectCode code : {RejectCode::kOther, RejectCode::kVersionMismatch, RejectCode::kAuthenticationFailed,
                          RejectCode::kDuplicateName, RejectCode::kNotMember, RejectCode::kProtocol,
                          RejectCode::kSettingsMismatch, RejectCode::kRunEnded}) {
    auto rej = std::get<msg::Reject>(RoundTrip(msg::Reject{code, "because"}));
    EXPECT_EQ(rej.code, code);
    EXPECT_EQ(rej.reason, "because");
  }
}

TEST(ControlMessagesTest, MalformedBytesAreDataLossNotExceptions) {
  EXPECT_EQ(DecodeMessage({}).error().code(), StatusCode::kDataLoss);
  const std::vector<uint8_t> odd(13, 0);
  Result<ControlMessage> r = DecodeMessage(odd);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.error().message().find("13 bytes"), std::string::npos) << r.error().message();

  // Random word-sized garbage: either a (meaningless) message or DataLoss, never a throw.
  std::mt19937 rng(42);
  int rejected = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> bytes(8 * (1 + rng() % 32));
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    Result<ControlMessage> m = DecodeMessage(bytes);
    if (!m.has_value()) {
      EXPECT_EQ(m.error().code(), StatusCode::kDataLoss);
      ++rejected;
    }
  }
  // A random segment table almost never matches the buffer size.
  EXPECT_GT(rejected, 1900);
}

TEST(ControlMessagesTest, TruncatedOrExtendedMessagesAreRejected) {
  Result<std::vector<uint8_t>> bytes = EncodeMessage(msg::Welcome{SampleView()});
  ASSERT_TRUE(bytes.has_value());
  for (size_t words = 0; words < bytes->size() / 8; ++words) {
    std::vector<uint8_t> cut(bytes->begin(), bytes->begin() + static_cast<long>(words * 8));
    EXPECT_FALSE(DecodeMessage(cut).has_value()) << "cut to " << words << " words";
  }
  std::vector<uint8_t> longer = *bytes;
  longer.resize(longer.size() + 8, 0);
  Result<ControlMessage> r = DecodeMessage(longer);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("trailing"), std::string::npos) << r.error().message();
}

TEST(ControlMessagesTest, FlippedBitsNeverThrow) {
  Result<std::vector<uint8_t>> bytes = EncodeMessage(msg::Welcome{SampleView()});
  ASSERT_TRUE(bytes.has_value());
  for (size_t i = 0; i < bytes->size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bad = *bytes;
      bad[i] ^= static_cast<uint8_t>(1u << bit);
      Result<ControlMessage> m = DecodeMessage(bad);  // must return, whatever it returns
      if (!m.has_value()) {
        EXPECT_EQ(m.error().code(), StatusCode::kDataLoss);
      }
    }
  }
}

TEST(ControlMessagesTest, VersionMismatchNamesBothVersions) {
  const VersionInfo ours{"0.1.0", "1.17", "tcp;ofi_rxm", "117.0"};
  EXPECT_TRUE(CheckVersions(ours, ours, "node1").ok());
  VersionInfo theirs = ours;
  theirs.libfabric = "1.18";
  theirs.provider_version = "118.0";
  Status s = CheckVersions(ours, theirs, "node1 (127.0.0.1:4001)");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("node1 (127.0.0.1:4001)"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("ours chorus 0.1.0, libfabric 1.17, provider tcp;ofi_rxm 117.0"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("theirs chorus 0.1.0, libfabric 1.18, provider tcp;ofi_rxm 118.0"),
            std::string::npos)
      << s.message();
  // Any single field differing is a mismatch.
  for (std::string VersionInfo::*field : {&VersionInfo::chorus, &VersionInfo::libfabric, &VersionInfo::provider,
                                          &VersionInfo::provider_version}) {
    VersionInfo other = ours;
    other.*field += "x";
    EXPECT_FALSE(CheckVersions(ours, other, "peer").ok());
  }
}

}  // namespace
}  // namespace chorus::node
