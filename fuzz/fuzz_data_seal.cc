// The data plane's seal (gossip/transport/seal/data_seal.h) against arbitrary
// messages: bytes 0-1 the sender and receiver, 2-9 the tag, 10 the mode, 11-34
// a trailer, the rest the payload. Open must refuse every message that was
// not sealed under the key (a forgery verifies with probability 2^-106), and
// a message sealed here must open once, to its payload, and not after any
// one bit of it or its seal flips.
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "gossip/transport/seal/data_seal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::gossip;
  constexpr size_t kHead = 11 + kSealTrailerBytes;
  if (size < kHead) return 0;
  const Rank from = data[0], to = data[1];
  Tag tag = 0;
  std::memcpy(&tag, data + 2, sizeof(tag));
  const SealMode mode = data[10] % 2 == 0 ? SealMode::kAuthenticate : SealMode::kEncrypt;
  SealTrailer forged;
  std::memcpy(forged.data(), data + 11, forged.size());
  const std::vector<std::byte> payload(reinterpret_cast<const std::byte*>(data + kHead),
                                       reinterpret_cast<const std::byte*>(data + size));
  static const DataKey key = PublicTestKey("fuzz");
  auto receiver = DataSeal::Make(7, key, mode);
  auto sender = DataSeal::Make(7, key, mode);
  if (!receiver || !sender) chorus::fuzz::Broken("no seal: " + receiver.error().ToString());

  std::vector<std::byte> copy = payload;
  if ((*receiver)->Open(from, to, tag, copy, forged).ok()) chorus::fuzz::Broken("a forged message opened");

  std::vector<std::byte> wire(payload.size());
  auto trailer = (*sender)->Seal(from, to, tag, payload, wire);
  if (!trailer) chorus::fuzz::Broken("sealing failed: " + trailer.error().ToString());
  if (mode == SealMode::kAuthenticate) wire = payload;
  // One flipped bit, chosen by the input, in the payload or the seal.
  const size_t bits = 8 * (wire.size() + kSealTrailerBytes);
  const size_t flip = (static_cast<size_t>(data[10]) * 131 + size) % bits;
  std::vector<std::byte> altered = wire;
  SealTrailer altered_trailer = *trailer;
  if (flip / 8 < wire.size()) {
    altered[flip / 8] ^= static_cast<std::byte>(1u << (flip % 8));
  } else {
    altered_trailer[flip / 8 - wire.size()] ^= static_cast<uint8_t>(1u << (flip % 8));
  }
  if ((*receiver)->Open(from, to, tag, altered, altered_trailer).ok()) {
    chorus::fuzz::Broken("a message with a flipped bit opened");
  }
  if (!(*receiver)->Open(from, to, tag, wire, *trailer).ok()) chorus::fuzz::Broken("a sealed message did not open");
  if (wire != payload) chorus::fuzz::Broken("the opened payload differs from the sealed one");
  std::vector<std::byte> again = copy;
  if ((*receiver)->Open(from, to, tag, again, *trailer).ok()) chorus::fuzz::Broken("a replay opened");
  return 0;
}
