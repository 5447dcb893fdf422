// F16C fast path for FP16 <-> FP32 conversion (vcvtph2ps / vcvtps2ph, round to
// nearest even by immediate, independent of MXCSR). This file is compiled with
// -mf16c -mavx2 -mfma, so it must not define or instantiate anything that other
// files could link to by accident (no inline library templates, no
// common/fp16.h): an AVX2 copy of a shared inline function could be picked by
// the linker and run on a CPU without it. Tails (count % 8) go through a padded
// 8-lane buffer so every element takes the same hardware path.
#include "kernels/cpu/fp16_f16c.h"

#include <immintrin.h>

namespace chorus::kernels::cpu {

void F16cHalfToFloat(const uint16_t* in, float* out, size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m128i h0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m128i h1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 8));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h0));
    _mm256_storeu_ps(out + i + 8, _mm256_cvtph_ps(h1));
  }
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  if (i < count) {
    const size_t rest = count - i;
    alignas(32) uint16_t hbuf[8] = {};
    alignas(32) float fbuf[8];
    __builtin_memcpy(hbuf, in + i, rest * sizeof(uint16_t));
    _mm256_store_ps(fbuf, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(hbuf))));
    __builtin_memcpy(out + i, fbuf, rest * sizeof(float));
  }
}

void F16cFloatToHalf(const float* in, uint16_t* out, size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m128i h0 = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    const __m128i h1 = _mm256_cvtps_ph(_mm256_loadu_ps(in + i + 8), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 8), h1);
  }
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  if (i < count) {
    const size_t rest = count - i;
    alignas(32) float fbuf[8] = {};
    alignas(32) uint16_t hbuf[8];
    __builtin_memcpy(fbuf, in + i, rest * sizeof(float));
    _mm_store_si128(reinterpret_cast<__m128i*>(hbuf),
                    _mm256_cvtps_ph(_mm256_load_ps(fbuf), _MM_FROUND_TO_NEAREST_INT));
    __builtin_memcpy(out + i, hbuf, rest * sizeof(uint16_t));
  }
}

void F16cRoundToHalf(const float* in, float* out, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  if (i < count) {
    const size_t rest = count - i;
    alignas(32) float fbuf[8] = {};
    __builtin_memcpy(fbuf, in + i, rest * sizeof(float));
    const __m128i h = _mm256_cvtps_ph(_mm256_load_ps(fbuf), _MM_FROUND_TO_NEAREST_INT);
    _mm256_store_ps(fbuf, _mm256_cvtph_ps(h));
    __builtin_memcpy(out + i, fbuf, rest * sizeof(float));
  }
}

void F16cRoundToHalfScaled(float* x, size_t count, float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_cvtph_ps(h), s));
  }
  if (i < count) {
    const size_t rest = count - i;
    alignas(32) float fbuf[8] = {};
    __builtin_memcpy(fbuf, x + i, rest * sizeof(float));
    const __m128i h = _mm256_cvtps_ph(_mm256_load_ps(fbuf), _MM_FROUND_TO_NEAREST_INT);
    _mm256_store_ps(fbuf, _mm256_mul_ps(_mm256_cvtph_ps(h), s));
    __builtin_memcpy(x + i, fbuf, rest * sizeof(float));
  }
}

void F16cRoundToHalfKeepBits(const float* in, float* out, uint16_t* bits, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(bits + i), h);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  if (i < count) {
    const size_t rest = count - i;
    alignas(32) float fbuf[8] = {};
    alignas(32) uint16_t hbuf[8];
    __builtin_memcpy(fbuf, in + i, rest * sizeof(float));
    const __m128i h = _mm256_cvtps_ph(_mm256_load_ps(fbuf), _MM_FROUND_TO_NEAREST_INT);
    _mm_store_si128(reinterpret_cast<__m128i*>(hbuf), h);
    _mm256_store_ps(fbuf, _mm256_cvtph_ps(h));
    __builtin_memcpy(bits + i, hbuf, rest * sizeof(uint16_t));
    __builtin_memcpy(out + i, fbuf, rest * sizeof(float));
  }
}

void F16cAddHalves(uint16_t* acc, const uint16_t* in, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + i)));
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(acc + i),
                     _mm256_cvtps_ph(_mm256_add_ps(a, b), _MM_FROUND_TO_NEAREST_INT));
  }
  if (i < count) {
    const size_t rest = count - i;
    alignas(32) uint16_t abuf[8] = {};
    alignas(32) uint16_t bbuf[8] = {};
    __builtin_memcpy(abuf, acc + i, rest * sizeof(uint16_t));
    __builtin_memcpy(bbuf, in + i, rest * sizeof(uint16_t));
    const __m256 a = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(abuf)));
    const __m256 b = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(bbuf)));
    _mm_store_si128(reinterpret_cast<__m128i*>(abuf),
                    _mm256_cvtps_ph(_mm256_add_ps(a, b), _MM_FROUND_TO_NEAREST_INT));
    __builtin_memcpy(acc + i, abuf, rest * sizeof(uint16_t));
  }
}

// AVX-512 (16 lanes): the same instructions' wider forms, which round the same
// way; the last count % 16 elements go through the AVX2 functions above.
// GCC 12's avx512fintrin.h passes an uninitialized `__Y` (_mm512_undefined)
// to the masked conversion builtins and then warns about it (GCC PR 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

__attribute__((target("avx512f"))) void Avx512HalfToFloat(const uint16_t* in, float* out,
                                                          size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
  if (i < count) F16cHalfToFloat(in + i, out + i, count - i);
}

__attribute__((target("avx512f"))) void Avx512FloatToHalf(const float* in, uint16_t* out,
                                                          size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
  if (i < count) F16cFloatToHalf(in + i, out + i, count - i);
}

__attribute__((target("avx512f"))) void Avx512RoundToHalf(const float* in, float* out,
                                                          size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
  if (i < count) F16cRoundToHalf(in + i, out + i, count - i);
}

__attribute__((target("avx512f"))) void Avx512RoundToHalfScaled(float* x, size_t count,
                                                                float scale) {
  const __m512 s = _mm512_set1_ps(scale);
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_cvtph_ps(h), s));
  }
  if (i < count) F16cRoundToHalfScaled(x + i, count - i, scale);
}

__attribute__((target("avx512f"))) void Avx512RoundToHalfKeepBits(const float* in, float* out,
                                                                  uint16_t* bits, size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bits + i), h);
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
  if (i < count) F16cRoundToHalfKeepBits(in + i, out + i, bits + i, count - i);
}

__attribute__((target("avx512f"))) void Avx512AddHalves(uint16_t* acc, const uint16_t* in,
                                                        size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + i)));
    const __m512 b = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + i),
                        _mm512_cvtps_ph(_mm512_add_ps(a, b), _MM_FROUND_TO_NEAREST_INT));
  }
  if (i < count) F16cAddHalves(acc + i, in + i, count - i);
}

#pragma GCC diagnostic pop

}  // namespace chorus::kernels::cpu
