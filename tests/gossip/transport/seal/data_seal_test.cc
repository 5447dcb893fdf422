// DataSeal: a sealed message opens only as it was sealed (every byte, the
// sender, receiver, tag, epoch and key), once, and encryption round-trips.
#include "gossip/transport/seal/data_seal.h"

#include <gtest/gtest.h>

#include <vector>

namespace chorus::gossip {
namespace {

std::vector<std::byte> Payload(size_t n) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>((i * 131 + 7) & 0xFF);
  return out;
}

SealTrailer SealOf(DataSeal& seal, Rank from, Rank to, Tag tag, std::span<const std::byte> payload,
                   std::span<std::byte> ciphertext = {}) {
  auto trailer = seal.Seal(from, to, tag, payload, ciphertext);
  EXPECT_TRUE(trailer) << trailer.error().ToString();
  return trailer ? *trailer : SealTrailer{};
}

std::shared_ptr<DataSeal> Make(uint64_t epoch, const std::string& label, SealMode mode = SealMode::kAuthenticate) {
  auto seal = DataSeal::Make(epoch, PublicTestKey(label), mode);
  EXPECT_TRUE(seal) << seal.error().ToString();
  return seal ? *seal : nullptr;
}

TEST(DataSealTest, AlteringAnyByteOfTheMessageOrItsSealIsRefused) {
  auto sender = Make(3, "k");
  const auto payload = Payload(97);  // not a multiple of Poly1305's 16-byte block
  const SealTrailer trailer = SealOf(*sender, 0, 1, 42, payload);
  {
    auto receiver = Make(3, "k");
    auto copy = payload;
    EXPECT_TRUE(receiver->Open(0, 1, 42, copy, trailer).ok());
  }
  for (size_t i = 0; i < payload.size(); ++i) {
    auto receiver = Make(3, "k");
    auto copy = payload;
    copy[i] ^= std::byte{0x01};
    const Status s = receiver->Open(0, 1, 42, copy, trailer);
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << "payload byte " << i;
  }
  for (size_t i = 0; i < trailer.size(); ++i) {
    auto receiver = Make(3, "k");
    auto copy = payload;
    SealTrailer altered = trailer;
    altered[i] ^= 0x80;
    EXPECT_EQ(receiver->Open(0, 1, 42, copy, altered).code(), StatusCode::kPermissionDenied) << "seal byte " << i;
  }
  auto copy = payload;
  copy.pop_back();  // one byte short
  EXPECT_FALSE(Make(3, "k")->Open(0, 1, 42, copy, trailer).ok());
}

TEST(DataSealTest, AMessageOpensOnlyForItsSenderReceiverTagEpochAndKey) {
  auto sender = Make(3, "k");
  const auto payload = Payload(64);
  const SealTrailer trailer = SealOf(*sender, 0, 1, 42, payload);
  auto open = [&](const std::shared_ptr<DataSeal>& receiver, Rank from, Rank to, Tag tag) {
    auto copy = payload;
    return receiver->Open(from, to, tag, copy, trailer);
  };
  EXPECT_FALSE(open(Make(3, "k"), 2, 1, 42).ok()) << "another sender";
  EXPECT_FALSE(open(Make(3, "k"), 0, 2, 42).ok()) << "another receiver";
  EXPECT_FALSE(open(Make(3, "k"), 0, 1, 43).ok()) << "another tag";
  EXPECT_FALSE(open(Make(4, "k"), 0, 1, 42).ok()) << "another epoch";
  EXPECT_FALSE(open(Make(3, "other"), 0, 1, 42).ok()) << "another key";
  EXPECT_TRUE(open(Make(3, "k"), 0, 1, 42).ok());
}

TEST(DataSealTest, AReplayIsRefusedAndOutOfOrderMessagesInsideTheWindowAreNot) {
  auto sender = Make(0, "k");
  auto receiver = Make(0, "k");
  const auto payload = Payload(8);
  std::vector<SealTrailer> trailers;
  for (int i = 0; i < 5; ++i) trailers.push_back(SealOf(*sender, 0, 1, 7, payload));
  auto open = [&](int i) {
    auto copy = payload;
    return receiver->Open(0, 1, 7, copy, trailers[i]);
  };
  EXPECT_TRUE(open(3).ok());
  EXPECT_TRUE(open(0).ok());  // earlier, arriving later: fine
  EXPECT_TRUE(open(4).ok());
  EXPECT_EQ(open(3).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(open(0).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(open(1).ok());
  // A message more than the window behind the newest is refused too.
  SealTrailer old = SealOf(*sender, 0, 1, 7, payload);
  SealTrailer newest;
  for (uint64_t i = 0; i <= DataSeal::kReplayWindow; ++i) newest = SealOf(*sender, 0, 1, 7, payload);
  auto copy = payload;
  EXPECT_TRUE(receiver->Open(0, 1, 7, copy, newest).ok());
  EXPECT_EQ(receiver->Open(0, 1, 7, copy, old).code(), StatusCode::kPermissionDenied);
  // Each receiver counts on its own: rank 2's first message is not a replay.
  auto to_two = SealOf(*sender, 0, 2, 7, payload);
  auto at_two = Make(0, "k");
  EXPECT_TRUE(at_two->Open(0, 2, 7, copy, to_two).ok());
}

TEST(DataSealTest, EncryptionHidesThePayloadAndRoundTrips) {
  auto sender = Make(1, "k", SealMode::kEncrypt);
  auto receiver = Make(1, "k", SealMode::kEncrypt);
  const auto payload = Payload(1000);
  std::vector<std::byte> wire(payload.size());
  const SealTrailer trailer = SealOf(*sender, 5, 6, 9, payload, wire);
  size_t same = 0;
  for (size_t i = 0; i < payload.size(); ++i) same += wire[i] == payload[i] ? 1 : 0;
  EXPECT_LT(same, 20u) << "the ciphertext looks like the payload";
  auto altered = wire;
  altered[500] ^= std::byte{4};
  EXPECT_FALSE(Make(1, "k", SealMode::kEncrypt)->Open(5, 6, 9, altered, trailer).ok());
  EXPECT_EQ(altered[500], wire[500] ^ std::byte{4}) << "a refused message is left as it came";
  ASSERT_TRUE(receiver->Open(5, 6, 9, wire, trailer).ok());
  EXPECT_EQ(wire, payload);
}

}  // namespace
}  // namespace chorus::gossip
