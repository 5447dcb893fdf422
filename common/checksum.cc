// WeightsChecksum (see checksum.h).
#include "common/checksum.h"

#include <cstring>

namespace chorus {

uint64_t WeightsChecksum(std::span<const float> x) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(x.data());
  const size_t size = x.size_bytes();
  constexpr uint64_t kBasis = 14695981039346656037ull;  // FNV-1a 64
  constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t lane[4] = {kBasis, kBasis ^ 1, kBasis ^ 2, kBasis ^ 3};
  size_t i = 0;
  for (; i + 32 <= size; i += 32) {
    for (int j = 0; j < 4; ++j) {
      uint64_t word;
      std::memcpy(&word, bytes + i + 8 * j, sizeof(word));
      lane[j] = (lane[j] ^ word) * kPrime;
    }
  }
  uint64_t hash = kBasis;
  for (uint64_t v : lane) {
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdull;
    v ^= v >> 33;
    v *= 0xc4ceb9fe1a85ec53ull;
    v ^= v >> 33;
    hash = (hash ^ v) * kPrime;
  }
  for (; i < size; ++i) hash = (hash ^ bytes[i]) * kPrime;
  return hash;
}

}  // namespace chorus
