// The device codecs (kernels/cuda/codecs.cu) against the CPU codecs of gossip/:
// the payload after the 16-byte header must be byte for byte what
// gossip::MakeCodec(...)->Encode writes (no tolerance: the wire format is the
// contract between a GPU node and a CPU node), the GPU decoders must read CPU
// payloads to the same floats as the CPU decoder, and the CPU decoder must accept
// GPU payloads. Shapes: n = 1, odd n, n < chunk, chunks of 1 and 65536, values
// with ties, zeros, -0.0, subnormals, Inf and NaN.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

// cuda_test_util.h first: its helpers call kernels::RoundToHalf & co.
// unqualified, which kernels/cuda/ops.h (same names, device overloads) hides.
#include "tests/cuda/cuda_test_util.h"
// (separate block: keep after the helper header)
#include "gossip/codecs/codec.h"
#include "kernels/cuda/ops.h"

namespace chorus::kernels::cuda {
namespace {

constexpr size_t kHeader = 16;  // gossip's codec header, which the device codecs leave out
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

gossip::CodecOptions Options(gossip::CodecKind kind, int chunk = 256, double ratio = 0.01) {
  gossip::CodecOptions o;
  o.kind = kind;
  o.chunk = chunk;
  o.ratio = ratio;
  return o;
}

std::unique_ptr<gossip::Codec> Make(const gossip::CodecOptions& options) {
  auto codec = gossip::MakeCodec(options);
  EXPECT_TRUE(codec.has_value()) << codec.error().ToString();
  return std::move(*codec);
}

std::vector<std::byte> CpuEncode(const gossip::CodecOptions& options, const std::vector<float>& x) {
  std::vector<std::byte> out;
  const Status s = Make(options)->Encode(x, /*seed=*/0, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

// Floats whose magnitudes span many binades, below 2^max_exponent (so that the
// order of a double sum matters), with zeros, -0.0 and subnormals mixed in; no
// Inf / NaN.
std::vector<float> WideValues(size_t n, uint32_t seed, int max_exponent = 40) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-40, max_exponent);
  std::uniform_int_distribution<int> special(0, 31);
  std::vector<float> x(n);
  for (float& v : x) {
    switch (special(rng)) {
      case 0:
        v = 0.0f;
        break;
      case 1:
        v = -0.0f;
        break;
      case 2:
        v = std::ldexp(mantissa(rng), -135);  // subnormal
        break;
      default:
        v = std::ldexp(mantissa(rng), exponent(rng));
    }
  }
  return x;
}

// Magnitudes from a small set, so that top-k must break many ties by index.
std::vector<float> TiedValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, 8);
  const float set[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 0.5f, -3.0f, 3.0f};
  std::vector<float> x(n);
  for (float& v : x) v = set[pick(rng)];
  return x;
}

::testing::AssertionResult SameBytes(const std::vector<std::byte>& gpu_message,
                                     const std::vector<std::byte>& cpu_message) {
  if (gpu_message.size() != cpu_message.size()) {
    return ::testing::AssertionFailure()
           << "message sizes differ: " << gpu_message.size() << " vs " << cpu_message.size();
  }
  for (size_t i = kHeader; i < cpu_message.size(); ++i) {
    if (gpu_message[i] != cpu_message[i]) {
      return ::testing::AssertionFailure()
             << "payload byte " << i - kHeader << " differs: gpu "
             << static_cast<int>(gpu_message[i]) << ", cpu " << static_cast<int>(cpu_message[i]);
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult SameFloats(const std::vector<float>& got,
                                      const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  }
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want "
                                           << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

class CudaCodecTest : public testing::GpuTest {
 protected:
  // A device message of header + payload bytes (payload at +16, as the node
  // lays it out), zeroed.
  DeviceArray<std::byte> Message(size_t payload_bytes) {
    return Zeros<std::byte>(kHeader + payload_bytes);
  }

  // The GPU payload behind the CPU message's header, so that the CPU decoder
  // can read it and SameBytes can compare it.
  std::vector<std::byte> WithCpuHeader(const DeviceArray<std::byte>& message,
                                       const std::vector<std::byte>& cpu_message) {
    std::vector<std::byte> bytes = Download(message);
    std::memcpy(bytes.data(), cpu_message.data(), kHeader);
    return bytes;
  }

  // Uploads a CPU message (header included) and returns the device copy.
  DeviceArray<std::byte> UploadMessage(const std::vector<std::byte>& cpu_message) {
    return Upload(cpu_message);
  }

  int32_t Flag(const DeviceArray<int32_t>& flag) { return Download(flag)[0]; }

  // Encodes x on the GPU and on the CPU, compares the payloads, has the CPU
  // decode the GPU message and the GPU decode the CPU message; both decodes
  // must give the same floats, and the GPU's nonfinite flag must agree with
  // the CPU decoder's non-finite rejection.
  void CheckDense(const gossip::CodecOptions& options, const std::vector<float>& x) {
    SCOPED_TRACE(std::string(gossip::CodecKindName(options.kind)) + " n=" +
                 std::to_string(x.size()) + " chunk=" + std::to_string(options.chunk));
    const size_t n = x.size();
    const std::vector<std::byte> cpu = CpuEncode(options, x);
    size_t payload_bytes = 0;
    switch (options.kind) {
      case gossip::CodecKind::kFp16:
        payload_bytes = Fp16PayloadBytes(n);
        break;
      case gossip::CodecKind::kInt8:
        payload_bytes = Int8PayloadBytes(n, options.chunk);
        break;
      case gossip::CodecKind::kSign:
        payload_bytes = SignPayloadBytes(n, options.chunk);
        break;
      default:
        FAIL() << "not a dense codec";
    }
    ASSERT_EQ(payload_bytes + kHeader, cpu.size());

    DeviceArray<float> dx = Upload(x);
    DeviceArray<std::byte> message = Message(payload_bytes);
    std::byte* payload = message.data() + kHeader;
    Status s;
    switch (options.kind) {
      case gossip::CodecKind::kFp16:
        s = EncodeFp16(device(), dx.data(), n, payload);
        break;
      case gossip::CodecKind::kInt8:
        s = EncodeInt8(device(), dx.data(), n, options.chunk, payload);
        break;
      default:
        s = EncodeSign(device(), dx.data(), n, options.chunk, payload);
        break;
    }
    ASSERT_TRUE(s.ok()) << s.ToString();
    const std::vector<std::byte> gpu = WithCpuHeader(message, cpu);
    EXPECT_TRUE(SameBytes(gpu, cpu));

    // CPU decodes the GPU message, GPU decodes the CPU message.
    std::vector<float> cpu_out(n);
    const Status cpu_status = Make(options)->Decode(gpu, cpu_out);
    DeviceArray<std::byte> cpu_message = UploadMessage(cpu);
    DeviceArray<float> out = Zeros<float>(n);
    DeviceArray<int32_t> nonfinite = Zeros<int32_t>(1);
    const std::byte* cpu_payload = cpu_message.data() + kHeader;
    switch (options.kind) {
      case gossip::CodecKind::kFp16:
        s = DecodeFp16(device(), cpu_payload, n, out.data(), nonfinite.data());
        break;
      case gossip::CodecKind::kInt8:
        s = DecodeInt8(device(), cpu_payload, n, options.chunk, out.data(), nonfinite.data());
        break;
      default:
        s = DecodeSign(device(), cpu_payload, n, options.chunk, out.data(), nonfinite.data());
        break;
    }
    ASSERT_TRUE(s.ok()) << s.ToString();
    const int32_t flag = Flag(nonfinite);
    if (cpu_status.ok()) {
      EXPECT_EQ(flag, 0);
      EXPECT_TRUE(SameFloats(Download(out), cpu_out));
    } else {
      EXPECT_TRUE(gossip::IsNonFiniteRejection(cpu_status)) << cpu_status.ToString();
      EXPECT_EQ(flag, 1) << "the CPU rejects it: " << cpu_status.ToString();
    }
  }
};

const size_t kSizes[] = {1, 2, 7, 31, 32, 33, 255, 1000, 4097, 70001};

TEST_F(CudaCodecTest, PayloadSizesMatchTheCpuCodecs) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{9}, size_t{1000}}) {
    for (int chunk : {1, 7, 256, 65536}) {
      EXPECT_EQ(Int8PayloadBytes(n, chunk) + kHeader,
                Make(Options(gossip::CodecKind::kInt8, chunk))->WireBytes(n));
      EXPECT_EQ(SignPayloadBytes(n, chunk) + kHeader,
                Make(Options(gossip::CodecKind::kSign, chunk))->WireBytes(n));
    }
    EXPECT_EQ(Fp16PayloadBytes(n) + kHeader,
              Make(Options(gossip::CodecKind::kFp16))->WireBytes(n));
    const size_t k = gossip::SparseCount(0.01, n);
    EXPECT_EQ(TopKPayloadBytes(k) + kHeader,
              Make(Options(gossip::CodecKind::kTopK, 256, 0.01))->WireBytes(n));
  }
}

TEST_F(CudaCodecTest, Fp16MatchesCpu) {
  for (size_t n : kSizes) {
    // Below 2^15: every value is finite in fp16 (normal, subnormal or 0), so
    // the decoded floats are compared too.
    CheckDense(Options(gossip::CodecKind::kFp16),
               WideValues(n, 11 + static_cast<uint32_t>(n), /*max_exponent=*/15));
    // Up to 2^40: values beyond 65504 overflow to Inf, which both sides reject.
    CheckDense(Options(gossip::CodecKind::kFp16), WideValues(n, 12 + static_cast<uint32_t>(n)));
  }
}

TEST_F(CudaCodecTest, Fp16RoundingEdgesMatchCpu) {
  // Halfway cases, the overflow threshold (65520 rounds to Inf), subnormal
  // halves and values below half the smallest one, signed zeros.
  std::vector<float> x = {0.0f,      -0.0f,        1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f,
                          65504.0f,  65519.99f,    -65520.0f,       0x1p-24f,
                          0x1p-25f,  0x1.8p-25f,   -0x1p-26f,       0x1.ffcp-15f,
                          1e-40f,    3.14159265f,  -2.71828182f,    1e6f};
  // 16 values (the four-at-a-time path only), then 15 (three in the scalar tail).
  CheckDense(Options(gossip::CodecKind::kFp16), x);
  std::vector<float> shifted(x.begin() + 1, x.end());
  CheckDense(Options(gossip::CodecKind::kFp16), shifted);
}

TEST_F(CudaCodecTest, Fp16NonFiniteValuesTravelAndAreFlagged) {
  // NaN keeps its sign and top payload bits, Inf stays Inf: both CPU paths
  // (scalar and F16C) write the same bits, and so must the GPU.
  const std::vector<float> x = {1.0f,  kNan, -kNan, kInf, -kInf,
                                1e9f,  std::bit_cast<float>(0x7fa00001u)};
  CheckDense(Options(gossip::CodecKind::kFp16), x);
}

TEST_F(CudaCodecTest, Fp16UnalignedInputTakesTheScalarPath) {
  const std::vector<float> x = WideValues(1001, 5, /*max_exponent=*/15);
  const gossip::CodecOptions options = Options(gossip::CodecKind::kFp16);
  const std::vector<float> tail(x.begin() + 1, x.end());
  const std::vector<std::byte> cpu = CpuEncode(options, tail);
  DeviceArray<float> dx = Upload(x);
  DeviceArray<std::byte> message = Message(Fp16PayloadBytes(tail.size()));
  ASSERT_TRUE(EncodeFp16(device(), dx.data() + 1, tail.size(), message.data() + kHeader).ok());
  EXPECT_TRUE(SameBytes(WithCpuHeader(message, cpu), cpu));
}

TEST_F(CudaCodecTest, Int8MatchesCpu) {
  for (int chunk : {1, 3, 31, 32, 33, 256, 65536}) {
    for (size_t n : kSizes) {
      CheckDense(Options(gossip::CodecKind::kInt8, chunk),
                 WideValues(n, 100 + static_cast<uint32_t>(n) + static_cast<uint32_t>(chunk)));
    }
  }
}

TEST_F(CudaCodecTest, Int8RoundsHalfwayToEven) {
  // max |x| = 127 gives scale 1: x / scale lands exactly on .5 (rint: to even)
  // and on values just beside it. One chunk of zeros (scale 0, q = 0).
  std::vector<float> x = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f,
                          -126.5f, 0.49999997f, -0.0f, 3.5f};
  x.resize(24, 0.0f);  // chunk 2 (elements 12..23) is all zeros
  CheckDense(Options(gossip::CodecKind::kInt8, 12), x);
  // A scale that is not a power of two: q comes from the double product.
  std::vector<float> y = WideValues(300, 3);
  y[0] = 1.0f;
  for (size_t i = 1; i < 64; ++i) y[i] = static_cast<float>(i) / 127.0f * 0.5f;
  CheckDense(Options(gossip::CodecKind::kInt8, 64), y);
}

TEST_F(CudaCodecTest, Int8NonFiniteChunkGetsItsScaleAndZeros) {
  for (float bad : {kNan, -kNan, kInf, -kInf}) {
    std::vector<float> x = WideValues(100, 9);
    x[40] = bad;  // chunk 1 of 32
    CheckDense(Options(gossip::CodecKind::kInt8, 32), x);
  }
}

TEST_F(CudaCodecTest, Int8DecoderFlagsMalformedPayloads) {
  const gossip::CodecOptions options = Options(gossip::CodecKind::kInt8, 8);
  const std::vector<float> x = WideValues(20, 4);
  const std::vector<std::byte> good = CpuEncode(options, x);
  const size_t chunks = 3;
  // q = -128 and a negative scale: the CPU rejects both (kDataLoss).
  std::vector<std::byte> minus128 = good;
  minus128[kHeader + 4 * chunks + 5] = std::byte{0x80};
  std::vector<std::byte> negative = good;
  const float minus_one = -1.0f;
  std::memcpy(negative.data() + kHeader + 4, &minus_one, 4);
  for (const auto& bytes : {minus128, negative}) {
    std::vector<float> cpu_out(x.size());
    EXPECT_FALSE(Make(options)->Decode(bytes, cpu_out).ok());
    DeviceArray<std::byte> message = Upload(bytes);
    DeviceArray<float> out = Zeros<float>(x.size());
    DeviceArray<int32_t> flag = Zeros<int32_t>(1);
    ASSERT_TRUE(DecodeInt8(device(), message.data() + kHeader, x.size(), options.chunk,
                           out.data(), flag.data())
                    .ok());
    EXPECT_EQ(Flag(flag), 1);
  }
}

TEST_F(CudaCodecTest, SignMatchesCpu) {
  for (int chunk : {1, 3, 8, 31, 32, 33, 100, 256, 65536}) {
    for (size_t n : kSizes) {
      CheckDense(Options(gossip::CodecKind::kSign, chunk),
                 WideValues(n, 200 + static_cast<uint32_t>(n) + static_cast<uint32_t>(chunk)));
    }
  }
}

TEST_F(CudaCodecTest, SignScaleIsTheSequentialDoubleSum) {
  // Magnitudes 2^60 apart: every partial sum in double rounds, so any other
  // order of additions would change the float scale for some chunk.
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(1.0f, 2.0f);
  std::vector<float> x(5000);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = (i % 3 == 0 ? 0x1p30f : (i % 3 == 1 ? 0x1p-30f : 1.0f)) * u(rng);
  }
  for (int chunk : {5, 32, 129, 1000, 65536}) {
    CheckDense(Options(gossip::CodecKind::kSign, chunk), x);
  }
}

TEST_F(CudaCodecTest, SignBitsOfZerosAndNaNs) {
  // -0.0 and -NaN are negative (their sign bit is set), +0.0 and +NaN are not;
  // a NaN or Inf makes its chunk's scale Inf, which the receiver rejects.
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.0f, 0.0f, -0.0f, -2.0f, 3.0f, -0.0f};
  CheckDense(Options(gossip::CodecKind::kSign, 4), x);
  x.push_back(-kNan);
  x.push_back(kNan);
  CheckDense(Options(gossip::CodecKind::kSign, 4), x);
  x.push_back(-kInf);
  CheckDense(Options(gossip::CodecKind::kSign, 64), x);
}

TEST_F(CudaCodecTest, SignDecoderFlagsMalformedPayloads) {
  const gossip::CodecOptions options = Options(gossip::CodecKind::kSign, 4);
  const std::vector<float> x = WideValues(13, 6);  // 4 chunks, 2 bytes of bits, 3 unused bits
  const std::vector<std::byte> good = CpuEncode(options, x);
  std::vector<std::byte> unused_bit = good;
  unused_bit.back() |= std::byte{0x80};
  std::vector<std::byte> negative = good;
  const float minus_one = -1.0f;
  std::memcpy(negative.data() + kHeader, &minus_one, 4);
  std::vector<std::byte> infinite = good;
  std::memcpy(infinite.data() + kHeader + 8, &kInf, 4);
  for (const auto& bytes : {unused_bit, negative, infinite}) {
    std::vector<float> cpu_out(x.size());
    EXPECT_FALSE(Make(options)->Decode(bytes, cpu_out).ok());
    DeviceArray<std::byte> message = Upload(bytes);
    DeviceArray<float> out = Zeros<float>(x.size());
    DeviceArray<int32_t> flag = Zeros<int32_t>(1);
    ASSERT_TRUE(DecodeSign(device(), message.data() + kHeader, x.size(), options.chunk,
                           out.data(), flag.data())
                    .ok());
    EXPECT_EQ(Flag(flag), 1);
  }
}

TEST_F(CudaCodecTest, DenseCodecsAcceptEmptyVectors) {
  DeviceArray<std::byte> message = Message(0);
  DeviceArray<int32_t> flag = Zeros<int32_t>(1);
  std::byte* payload = message.data() + kHeader;
  EXPECT_TRUE(EncodeFp16(device(), nullptr, 0, payload).ok());
  EXPECT_TRUE(EncodeInt8(device(), nullptr, 0, 256, payload).ok());
  EXPECT_TRUE(EncodeSign(device(), nullptr, 0, 256, payload).ok());
  EXPECT_TRUE(DecodeFp16(device(), payload, 0, nullptr, flag.data()).ok());
  EXPECT_TRUE(DecodeInt8(device(), payload, 0, 256, nullptr, flag.data()).ok());
  EXPECT_TRUE(DecodeSign(device(), payload, 0, 256, nullptr, flag.data()).ok());
  EXPECT_TRUE(device().Synchronize().ok());
  EXPECT_EQ(Flag(flag), 0);
}

TEST_F(CudaCodecTest, RejectsBadChunksAndMisalignedPayloads) {
  DeviceArray<float> x = Zeros<float>(8);
  DeviceArray<std::byte> message = Message(64);
  std::byte* payload = message.data() + kHeader;
  EXPECT_EQ(EncodeInt8(device(), x.data(), 8, 0, payload).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeSign(device(), x.data(), 8, 65537, payload).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeInt8(device(), x.data(), 8, 4, payload + 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeFp16(device(), x.data(), 8, payload + 1).code(), StatusCode::kInvalidArgument);
}

// ---- top-k ----------------------------------------------------------------------------------

class CudaTopKTest : public CudaCodecTest {
 protected:
  void CheckTopK(TopKEncoder& encoder, const std::vector<float>& x, double ratio) {
    const size_t n = x.size();
    const size_t k = gossip::SparseCount(ratio, n);
    SCOPED_TRACE("top-k n=" + std::to_string(n) + " k=" + std::to_string(k));
    const gossip::CodecOptions options = Options(gossip::CodecKind::kTopK, 256, ratio);
    const std::vector<std::byte> cpu = CpuEncode(options, x);
    ASSERT_EQ(TopKPayloadBytes(k) + kHeader, cpu.size());

    DeviceArray<float> dx = Upload(x);
    DeviceArray<std::byte> message = Message(TopKPayloadBytes(k));
    const Status s = encoder.Encode(device(), dx.data(), n, k, message.data() + kHeader);
    ASSERT_TRUE(s.ok()) << s.ToString();
    const std::vector<std::byte> gpu = WithCpuHeader(message, cpu);
    EXPECT_TRUE(SameBytes(gpu, cpu));

    std::vector<float> cpu_out(n);
    const Status cpu_status = Make(options)->Decode(gpu, cpu_out);
    DeviceArray<std::byte> cpu_message = UploadMessage(cpu);
    DeviceArray<float> out = Zeros<float>(n);
    DeviceArray<int32_t> bad = Zeros<int32_t>(1);
    ASSERT_TRUE(
        DecodeTopK(device(), cpu_message.data() + kHeader, n, k, out.data(), bad.data()).ok());
    EXPECT_EQ(Flag(bad), 0);
    if (cpu_status.ok()) {
      EXPECT_TRUE(SameFloats(Download(out), cpu_out));
    } else {
      // Only non-finite values are rejected by the CPU; the GPU writes them
      // for the caller's CheckFinite to find.
      EXPECT_TRUE(gossip::IsNonFiniteRejection(cpu_status)) << cpu_status.ToString();
      bool any_nonfinite = false;
      for (float v : Download(out)) any_nonfinite |= !std::isfinite(v);
      EXPECT_TRUE(any_nonfinite);
    }
  }
};

TEST_F(CudaTopKTest, MatchesCpuOnTiesAndOddSizes) {
  auto encoder = TopKEncoder::Create(device(), 70001);
  ASSERT_TRUE(encoder.has_value()) << encoder.error().ToString();
  for (size_t n : kSizes) {
    for (double ratio : {0.01, 0.1, 0.37, 0.5, 1.0}) {
      CheckTopK(**encoder, TiedValues(n, 300 + static_cast<uint32_t>(n)), ratio);
      CheckTopK(**encoder, WideValues(n, 400 + static_cast<uint32_t>(n)), ratio);
    }
  }
}

TEST_F(CudaTopKTest, NaNRanksAboveInfinityAndTravels) {
  auto encoder = TopKEncoder::Create(device(), 1000);
  ASSERT_TRUE(encoder.has_value()) << encoder.error().ToString();
  std::vector<float> x = WideValues(1000, 8);
  x[10] = kInf;
  x[500] = -kNan;
  x[700] = -kInf;
  x[900] = kNan;
  CheckTopK(**encoder, x, 0.001);  // k = 1: the first NaN
  CheckTopK(**encoder, x, 0.003);  // both NaNs, then the Infs by index
  CheckTopK(**encoder, x, 0.05);
}

TEST_F(CudaTopKTest, AllZerosKeepTheLowestIndices) {
  auto encoder = TopKEncoder::Create(device(), 4097);
  ASSERT_TRUE(encoder.has_value()) << encoder.error().ToString();
  std::vector<float> x(4097, 0.0f);
  for (size_t i = 0; i < x.size(); i += 2) x[i] = -0.0f;
  CheckTopK(**encoder, x, 0.01);
}

TEST_F(CudaTopKTest, EmptyVectorAndLimits) {
  auto encoder = TopKEncoder::Create(device(), 16);
  ASSERT_TRUE(encoder.has_value()) << encoder.error().ToString();
  DeviceArray<float> x = Zeros<float>(32);
  DeviceArray<std::byte> message = Message(TopKPayloadBytes(32));
  std::byte* payload = message.data() + kHeader;
  ASSERT_TRUE((*encoder)->Encode(device(), x.data(), 0, 0, payload).ok());
  const std::vector<std::byte> bytes = Download(message);
  uint64_t k = 1;
  std::memcpy(&k, bytes.data() + kHeader, 8);
  EXPECT_EQ(k, 0u);
  EXPECT_EQ((*encoder)->Encode(device(), x.data(), 32, 1, payload).code(),
            StatusCode::kInvalidArgument);  // n > max_n
  EXPECT_EQ((*encoder)->Encode(device(), x.data(), 8, 9, payload).code(),
            StatusCode::kInvalidArgument);  // k > n
  auto empty = TopKEncoder::Create(device(), 0);
  ASSERT_TRUE(empty.has_value()) << empty.error().ToString();
  EXPECT_TRUE((*empty)->Encode(device(), x.data(), 0, 0, payload).ok());
  EXPECT_TRUE(device().Synchronize().ok());
}

TEST_F(CudaTopKTest, DecoderFlagsBadIndices) {
  const gossip::CodecOptions options = Options(gossip::CodecKind::kTopK, 256, 0.3);
  const std::vector<float> x = WideValues(10, 2);
  const std::vector<std::byte> good = CpuEncode(options, x);
  const size_t k = gossip::SparseCount(options.ratio, x.size());
  ASSERT_GE(k, 2u);
  auto index_at = [&](std::vector<std::byte>& bytes, size_t j, uint32_t value) {
    std::memcpy(bytes.data() + kHeader + 8 + 4 * j, &value, 4);
  };
  std::vector<std::byte> out_of_range = good;
  index_at(out_of_range, 2, 10);
  std::vector<std::byte> descending = good;
  index_at(descending, 0, 9);
  for (const auto& bytes : {out_of_range, descending}) {
    std::vector<float> cpu_out(x.size());
    EXPECT_FALSE(Make(options)->Decode(bytes, cpu_out).ok());
    DeviceArray<std::byte> message = Upload(bytes);
    DeviceArray<float> out = Zeros<float>(x.size());
    DeviceArray<int32_t> bad = Zeros<int32_t>(1);
    ASSERT_TRUE(DecodeTopK(device(), message.data() + kHeader, x.size(), k, out.data(), bad.data())
                    .ok());
    EXPECT_EQ(Flag(bad), 1);
  }
}

}  // namespace
}  // namespace chorus::kernels::cuda
