// IEEE 754 binary16 ("half") scalar type and exact scalar conversions.
//
// Round to nearest even on FP32 -> FP16; Inf, NaN (payload kept where it fits,
// always quiet) and subnormals are exact both ways. These scalar functions are
// the portable reference; kernels/cpu has the vectorised F16C path, checked
// against these. Std only.
#pragma once

#include <bit>
#include <cstdint>

namespace chorus {

struct Half {
  uint16_t bits = 0;
  constexpr Half() = default;
  static constexpr Half FromBits(uint16_t b) { Half h; h.bits = b; return h; }
};
static_assert(sizeof(Half) == 2);

constexpr float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;  // signed zero
    } else {
      // Subnormal half: normalise into a float32 normal.
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | mant << 13;  // Inf or NaN (payload kept)
  } else {
    bits = sign | (exp + (127 - 15)) << 23 | mant << 13;
  }
  return std::bit_cast<float>(bits);
}

constexpr uint16_t FloatToHalfBits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN
    if (abs == 0x7f800000u) return sign | 0x7c00u;
    uint16_t payload = static_cast<uint16_t>((abs >> 13) & 0x3ffu);
    return sign | 0x7c00u | 0x200u | payload;  // quiet NaN, top payload bits kept
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow to Inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero) in half: shift the full significand and round.
    if (abs < 0x33000000u) return sign;  // below half of the smallest subnormal: +-0
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 - (e - 127) + 13 - 1 ... yields mantissa in half units
    // value = m * 2^(e-150); half subnormal unit = 2^-24 -> q = m * 2^(e-126) = m >> (126-e)
    const uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    uint32_t r = q;
    if (rem > halfway || (rem == halfway && (q & 1u))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: rebias exponent, round mantissa from 23 to 10 bits, carry may bump exponent.
  uint32_t h = ((abs >> 13) - ((127 - 15) << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

inline float ToFloat(Half h) { return HalfBitsToFloat(h.bits); }
inline Half ToHalf(float f) { return Half::FromBits(FloatToHalfBits(f)); }

constexpr float kHalfMax = 65504.0f;

}  // namespace chorus
