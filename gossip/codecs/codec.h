// gossip/codecs/: compression of FP32 vectors on the wire (fp16, int8, sign,
// top-k, random-k).
//
// Codec: how a gossip message carries an FP32 vector on the wire (lossless or
// compressed), and the factory that builds one from CodecOptions.
//
// Every encoded message starts with the same 16-byte header (codec_wire.h):
// codec id, a codec parameter byte, and the element count n; then the codec's
// payload. The kinds:
//   none       raw little-endian f32, 4n bytes. Lossless.
//   fp16       IEEE binary16, 2n bytes, round to nearest even: relative error
//              <= 2^-11 for values in the normal fp16 range; values beyond 65504
//              become Inf and are rejected by the receiver.
//   int8       per chunk of `chunk` elements one f32 scale = max|x| / 127 and one
//              int8 q per element, x ~ q * scale. Nearest rounding (default):
//              error <= scale / 2 per element. Stochastic rounding
//              (stochastic_rounding = true): q = floor(x / scale + u), u uniform in
//              [0, 1) from the encode seed; unbiased, error < scale.
//   sign       1 bit per element (set = negative) and one f32 scale per chunk =
//              mean |x| over the chunk (signSGD with scale, EF-SGD): x ~ +-scale.
//              Zero encodes as +scale.
//   top-k      k = max(1, ceil(ratio * n)) elements of largest |x| (ties: lower
//              index first), as ascending u32 indices + the k kept values; the rest
//              decode to 0. Values are not rescaled by n/k.
//   random-k   k = max(1, ceil(ratio * n)) distinct indices drawn from a u64 seed
//              that travels in the payload (8 bytes), so only the seed and the k
//              kept values travel; the receiver redraws the same indices. Values
//              are not rescaled: a biased but contractive operator (E||Q(x) - x||^2
//              = (1 - k/n) ||x||^2 with exact values), which CHOCO-gossip needs;
//              not the unbiased n/k scaling.
//   The kept values of top-k and random-k travel in value_bits bits each:
//     32       f32, exact (the default).
//     16       IEEE binary16, round to nearest even: the fp16 bounds above;
//              values beyond 65504 become Inf and are rejected by the receiver.
//     8        one f32 scale per message = max |v| / 127 over the k kept values,
//              then one int8 q = round(v / scale) per value, v ~ q * scale:
//              error <= scale / 2 per kept element; a zero scale decodes to 0.
//              (Top-k 1% with 8-bit values is SparseLoCo's pseudo-gradient
//              compression.)
//
// Decode checks the header (codec id, n == out.size(), and for top-k and random-k
// that the value width equals the decoder's value_bits) and the exact payload
// size, and rejects malformed input with kDataLoss naming the codec and the
// defect. Decoded non-finite values are rejected with kOutOfRange ("non-finite
// value at element i"; IsNonFiniteRejection), so a diverged peer is never mixed
// in and protocols can count such messages apart from corrupt ones. Encode does not look at
// the values: it encodes whatever it is given (non-finite inputs travel and are
// caught by the receiver, which counts them); it fails only on a vector too long
// for the format (top-k indices are u32: n < 2^32).
//
// Codecs are stateless and const: one object may encode and decode on several
// threads. Must not: send anything or keep per-message state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/enum_names.h"
#include "common/status.h"

namespace chorus::gossip {

enum class CodecKind : uint8_t {
  kNone = 1,
  kFp16 = 2,
  kInt8 = 3,
  kSign = 4,
  kTopK = 5,
  kRandomK = 6,
};

// The one spelling of each codec (configs, logs, error messages).
inline constexpr EnumName<CodecKind> kCodecKindNames[] = {
    {CodecKind::kNone, "none"}, {CodecKind::kFp16, "fp16"},  {CodecKind::kInt8, "int8"},
    {CodecKind::kSign, "sign"}, {CodecKind::kTopK, "top-k"}, {CodecKind::kRandomK, "random-k"},
};

inline std::string_view CodecKindName(CodecKind kind) { return NameOf(kCodecKindNames, kind); }
// One of kCodecKindNames; an error names the value and lists them.
Result<CodecKind> ParseCodecKind(std::string_view text);

struct CodecOptions {
  CodecKind kind = CodecKind::kNone;
  // int8 and sign: elements per scale, 1..65536. Small chunks follow the local
  // magnitude more closely at 4 bytes per chunk.
  int chunk = 256;
  // top-k and random-k: fraction of elements kept, in (0, 1].
  double ratio = 0.01;
  // top-k and random-k: bits per kept value on the wire: 32 (f32, exact), 16
  // (fp16) or 8 (int8 with one f32 scale per message). Encoder and decoder must
  // agree; the header carries it and Decode checks it.
  int value_bits = 32;
  // int8 only: stochastic (unbiased) instead of nearest rounding.
  bool stochastic_rounding = false;
};

// Checks the fields the kind uses; errors name the field.
Status ValidateCodecOptions(const CodecOptions& options);

class Codec {
 public:
  virtual ~Codec() = default;

  virtual CodecKind kind() const = 0;
  // A description such as "int8(chunk=256, nearest)", "top-k(ratio=0.01)" or
  // "top-k(ratio=0.01, 8-bit values)".
  virtual std::string Describe() const = 0;
  // True when Decode(Encode(x)) == x bit for bit (none only).
  virtual bool Lossless() const { return false; }

  // Exact size in bytes of Encode's output for n elements (header included).
  virtual size_t WireBytes(size_t n) const = 0;

  // Replaces *out with the encoding of x (n = x.size() elements). `seed` feeds the
  // codec's randomness (int8 stochastic rounding, random-k indices); sender-side
  // only: the receiver needs nothing but the bytes.
  [[nodiscard]] virtual Status Encode(std::span<const float> x, uint64_t seed,
                                      std::vector<std::byte>* out) const = 0;

  // Decodes `bytes` into out (which must have the encoded n elements): see the
  // file comment for what is rejected. On error `out` holds unspecified values.
  [[nodiscard]] virtual Status Decode(std::span<const std::byte> bytes,
                                      std::span<float> out) const = 0;
};

Result<std::unique_ptr<Codec>> MakeCodec(const CodecOptions& options);

// True for the status Decode returns on decoded non-finite values.
inline bool IsNonFiniteRejection(const Status& status) {
  return status.code() == StatusCode::kOutOfRange;
}

// k of top-k and random-k: max(1, ceil(ratio * n)) clamped to n; 0 for n == 0.
size_t SparseCount(double ratio, size_t n);

}  // namespace chorus::gossip
