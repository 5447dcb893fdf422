// The pairwise gossip header (see pairwise_wire.h).
#include "gossip/protocols/pairwise_wire.h"

#include <cstring>
#include <string>

namespace chorus::gossip {
namespace {

constexpr uint8_t kPairwiseFlagFinished = 1;
constexpr uint8_t kLastPairwiseType = static_cast<uint8_t>(PairwiseType::kClear);

}  // namespace

void WritePairwiseHeader(const PairwiseHeader& header, std::span<std::byte> out) {
  std::memset(out.data(), 0, kPairwiseHeaderBytes);
  out[0] = static_cast<std::byte>(header.type);
  out[1] = static_cast<std::byte>(header.finished ? kPairwiseFlagFinished : 0);
  std::memcpy(out.data() + 8, &header.seq, 8);  // little-endian hosts only (x86-64, aarch64)
  std::memcpy(out.data() + 16, &header.step, 8);
}

std::vector<std::byte> PairwiseHeaderOnly(const PairwiseHeader& header) {
  std::vector<std::byte> out(kPairwiseHeaderBytes);
  WritePairwiseHeader(header, out);
  return out;
}

Result<PairwiseHeader> ReadPairwiseHeader(std::span<const std::byte> message) {
  if (message.size() < kPairwiseHeaderBytes) {
    return Err(DataLoss("pairwise message of " + std::to_string(message.size()) + " bytes is shorter than its " +
                        std::to_string(kPairwiseHeaderBytes) + "-byte header"));
  }
  const uint8_t type = static_cast<uint8_t>(message[0]);
  if (type == 0 || type > kLastPairwiseType) {
    return Err(DataLoss("pairwise message: unknown type " + std::to_string(type) + " at byte 0"));
  }
  const uint8_t flags = static_cast<uint8_t>(message[1]);
  if ((flags & ~kPairwiseFlagFinished) != 0) {
    return Err(DataLoss("pairwise message: unknown flags " + std::to_string(flags) + " at byte 1"));
  }
  for (size_t i = 2; i < 8; ++i) {
    if (message[i] != std::byte{0}) {
      return Err(DataLoss("pairwise message: reserved byte " + std::to_string(i) + " is " +
                          std::to_string(static_cast<unsigned>(message[i])) + ", not 0"));
    }
  }
  PairwiseHeader header;
  header.type = static_cast<PairwiseType>(type);
  header.finished = (flags & kPairwiseFlagFinished) != 0;
  std::memcpy(&header.seq, message.data() + 8, 8);
  std::memcpy(&header.step, message.data() + 16, 8);
  return header;
}

}  // namespace chorus::gossip
