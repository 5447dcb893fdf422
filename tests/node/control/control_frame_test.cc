// Framing and keys of the control plane: frames round-trip with their HMAC,
// session frames are encrypted, and a tampered, replayed, reordered,
// oversized or foreign frame is refused.
#include "node/control/control_frame.h"

#include <gtest/gtest.h>

#include <vector>

#include "node/control/control_auth.h"

namespace chorus::node {
namespace {

class ControlFrameTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(InitSodium().ok()); }
  static std::vector<uint8_t> Payload(size_t n) {
    std::vector<uint8_t> p(n);
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(i * 7 + 3);
    return p;
  }
};

TEST_F(ControlFrameTest, SealedFrameOpensWithTheSameKey) {
  const MacKey key = ClusterKey::FromToken("token").HandshakeKey(Direction::kDialerToAcceptor);
  FrameSealer sealer(key);
  FrameOpener opener(key);
  const std::vector<uint8_t> payload = Payload(40);
  const std::vector<uint8_t> frame = sealer.Seal(payload);
  ASSERT_EQ(frame.size(), kFrameLengthBytes + payload.size() + kFrameMacBytes);
  // Little-endian length header.
  EXPECT_EQ(frame[0], 40);
  EXPECT_EQ(frame[1], 0);
  EXPECT_EQ(frame[2], 0);
  EXPECT_EQ(frame[3], 0);
  Result<std::vector<uint8_t>> opened = OpenFrame(frame, opener);
  ASSERT_TRUE(opened.has_value()) << opened.error().ToString();
  EXPECT_EQ(*opened, payload);
  EXPECT_EQ(opener.next_seq(), 1u);
}

TEST_F(ControlFrameTest, SessionFramesCarryCiphertextThatOnlyTheirKeyOpens) {
  const MacKey key = ClusterKey::FromToken("token").SessionKey(Direction::kDialerToAcceptor, RandomNonce(),
                                                               RandomNonce(), SharedSecret{3});
  FrameSealer sealer(key, /*encrypt=*/true);
  FrameOpener opener(key, /*encrypt=*/true);
  const std::vector<uint8_t> payload = Payload(40);
  for (int i = 0; i < 2; ++i) {
    const std::vector<uint8_t> frame = sealer.Seal(payload);
    ASSERT_EQ(frame.size(), kFrameLengthBytes + payload.size() + kFrameMacBytes);
    const std::vector<uint8_t> body(frame.begin() + kFrameLengthBytes, frame.end() - kFrameMacBytes);
    size_t same = 0;
    for (size_t b = 0; b < body.size(); ++b) same += body[b] == payload[b];
    EXPECT_LT(same, 4u) << "frame " << i << " carries its payload in clear";
    Result<std::vector<uint8_t>> opened = OpenFrame(frame, opener);
    ASSERT_TRUE(opened.has_value()) << opened.error().ToString();
    EXPECT_EQ(*opened, payload) << "frame " << i;
  }
  // An opener that does not decrypt sees only the ciphertext, and one of
  // another key nothing at all.
  FrameSealer again(key, /*encrypt=*/true);
  FrameOpener plain(key);
  Result<std::vector<uint8_t>> ciphertext = OpenFrame(again.Seal(payload), plain);
  ASSERT_TRUE(ciphertext.has_value());
  EXPECT_NE(*ciphertext, payload);
  FrameOpener other(ClusterKey::FromToken("token").HandshakeKey(Direction::kDialerToAcceptor), true);
  EXPECT_FALSE(OpenFrame(FrameSealer(key, true).Seal(payload), other).has_value());
}

TEST_F(ControlFrameTest, EveryTamperedByteIsRejected) {
  const MacKey key = ClusterKey::FromToken("token").HandshakeKey(Direction::kDialerToAcceptor);
  FrameSealer sealer(key);
  const std::vector<uint8_t> frame = sealer.Seal(Payload(24));
  // Flip one bit of each payload and MAC byte in turn (the header is covered by
  // the length check and, through the MAC input, by the HMAC as well).
  for (size_t i = kFrameLengthBytes; i < frame.size(); ++i) {
    std::vector<uint8_t> bad = frame;
    bad[i] ^= 0x10;
    FrameOpener opener(key);
    Result<std::vector<uint8_t>> opened = OpenFrame(bad, opener);
    ASSERT_FALSE(opened.has_value()) << "byte " << i;
    EXPECT_EQ(opened.error().code(), StatusCode::kPermissionDenied) << "byte " << i;
    EXPECT_EQ(opener.next_seq(), 0u) << "a rejected frame must not advance the sequence";
  }
}

TEST_F(ControlFrameTest, OtherTokenDoesNotVerify) {
  FrameSealer sealer(ClusterKey::FromToken("right").HandshakeKey(Direction::kDialerToAcceptor));
  FrameOpener opener(ClusterKey::FromToken("wrong").HandshakeKey(Direction::kDialerToAcceptor));
  Result<std::vector<uint8_t>> opened = OpenFrame(sealer.Seal(Payload(16)), opener);
  ASSERT_FALSE(opened.has_value());
  EXPECT_EQ(opened.error().code(), StatusCode::kPermissionDenied);
}

TEST_F(ControlFrameTest, ReplayedAndReorderedFramesAreRejected) {
  const MacKey key = ClusterKey::FromToken("token").HandshakeKey(Direction::kDialerToAcceptor);
  FrameSealer sealer(key);
  const std::vector<uint8_t> first = sealer.Seal(Payload(8));
  const std::vector<uint8_t> second = sealer.Seal(Payload(8));
  FrameOpener opener(key);
  // The second frame first: its sequence number (1) is not the expected 0.
  EXPECT_FALSE(OpenFrame(second, opener).has_value());
  ASSERT_TRUE(OpenFrame(first, opener).has_value());
  // Replaying the first frame: sequence 0 again.
  EXPECT_FALSE(OpenFrame(first, opener).has_value());
  EXPECT_TRUE(OpenFrame(second, opener).has_value());
}

TEST_F(ControlFrameTest, SessionKeysDifferPerConnectionAndDirection) {
  const ClusterKey key = ClusterKey::FromToken("token");
  const Nonce dialer_a = RandomNonce(), acceptor_a = RandomNonce();
  const Nonce dialer_b = RandomNonce(), acceptor_b = RandomNonce();
  const SharedSecret ephemeral{7};
  const MacKey a_up = key.SessionKey(Direction::kDialerToAcceptor, dialer_a, acceptor_a, ephemeral);
  const MacKey a_down = key.SessionKey(Direction::kAcceptorToDialer, dialer_a, acceptor_a, ephemeral);
  const MacKey b_up = key.SessionKey(Direction::kDialerToAcceptor, dialer_b, acceptor_b, ephemeral);
  EXPECT_NE(a_up, a_down);
  EXPECT_NE(a_up, b_up);
  // The same nonces with another ephemeral secret (a relay that made its own): another key.
  EXPECT_NE(a_up, key.SessionKey(Direction::kDialerToAcceptor, dialer_a, acceptor_a, SharedSecret{8}));
  // A frame recorded on connection A does not verify on connection B.
  FrameSealer sealer_a(a_up);
  FrameOpener opener_b(b_up);
  EXPECT_FALSE(OpenFrame(sealer_a.Seal(Payload(8)), opener_b).has_value());
  // Nor does a frame sent one way verify as coming the other way.
  FrameSealer sealer_up(a_up);
  FrameOpener opener_down(a_down);
  EXPECT_FALSE(OpenFrame(sealer_up.Seal(Payload(8)), opener_down).has_value());
}

TEST_F(ControlFrameTest, NonceProofBindsTheNonceAndTheDirection) {
  const ClusterKey key = ClusterKey::FromToken("token");
  const Nonce nonce = RandomNonce();
  const Mac proof = key.ProveNonce(Direction::kAcceptorToDialer, nonce);
  EXPECT_TRUE(key.CheckNonceProof(Direction::kAcceptorToDialer, nonce, proof));
  EXPECT_FALSE(key.CheckNonceProof(Direction::kDialerToAcceptor, nonce, proof));
  EXPECT_FALSE(key.CheckNonceProof(Direction::kAcceptorToDialer, RandomNonce(), proof));
  EXPECT_FALSE(ClusterKey::FromToken("other").CheckNonceProof(Direction::kAcceptorToDialer, nonce, proof));
  EXPECT_FALSE(key.CheckNonceProof(Direction::kAcceptorToDialer, nonce,
                                   std::span<const uint8_t>(proof.data(), proof.size() - 1)));
}

TEST_F(ControlFrameTest, OversizedLengthIsRejectedBeforeReadingThePayload) {
  const uint8_t header[4] = {0x01, 0x00, 0x10, 0x00};  // 0x100001 = 1 MiB + 1
  Result<uint32_t> length = ParseFrameLength(std::span<const uint8_t, 4>(header), kDefaultMaxFramePayload);
  ASSERT_FALSE(length.has_value());
  EXPECT_EQ(length.error().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(length.error().message().find("1048577"), std::string::npos) << length.error().message();

  const uint8_t at_limit[4] = {0x00, 0x00, 0x10, 0x00};  // exactly 1 MiB
  Result<uint32_t> ok = ParseFrameLength(std::span<const uint8_t, 4>(at_limit), kDefaultMaxFramePayload);
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(*ok, kDefaultMaxFramePayload);

  const uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
  EXPECT_FALSE(ParseFrameLength(std::span<const uint8_t, 4>(huge), kDefaultMaxFramePayload).has_value());
  const uint8_t empty[4] = {0, 0, 0, 0};
  Result<uint32_t> zero = ParseFrameLength(std::span<const uint8_t, 4>(empty), kDefaultMaxFramePayload);
  ASSERT_FALSE(zero.has_value());
  EXPECT_EQ(zero.error().code(), StatusCode::kDataLoss);
}

TEST_F(ControlFrameTest, TruncatedFramesAreDataLoss) {
  const MacKey key = ClusterKey::FromToken("token").HandshakeKey(Direction::kDialerToAcceptor);
  FrameSealer sealer(key);
  const std::vector<uint8_t> frame = sealer.Seal(Payload(32));
  for (size_t cut : {size_t{0}, size_t{3}, size_t{4}, size_t{20}, frame.size() - 1}) {
    FrameOpener opener(key);
    Result<std::vector<uint8_t>> opened =
        OpenFrame(std::span<const uint8_t>(frame.data(), cut), opener);
    ASSERT_FALSE(opened.has_value()) << "cut at " << cut;
    EXPECT_EQ(opened.error().code(), StatusCode::kDataLoss) << "cut at " << cut;
  }
}

}  // namespace
}  // namespace chorus::node
