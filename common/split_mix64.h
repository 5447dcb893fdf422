// SplitMix64: a tiny deterministic pseudo-random generator (Steele, Lea and Flood
// 2014) with an unbiased bounded draw. Used where every node must draw the same
// numbers from the same seed (random-regular graphs) and for reproducible random
// start vectors; <random>'s distributions are implementation-defined, this is not.
// Not for cryptography. Std only, header-only.
#pragma once

#include <cstdint>

namespace chorus {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, bound); bound must be > 0. Rejection sampling, so no modulo bias.
  uint64_t Below(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    for (;;) {
      const uint64_t r = Next();
      if (r >= threshold) return r % bound;
    }
  }

  // Uniform in [-1, 1), using the top 53 bits.
  double Symmetric() {
    return static_cast<double>(Next() >> 11) * 0x1.0p-52 - 1.0;
  }

 private:
  uint64_t state_;
};

}  // namespace chorus
