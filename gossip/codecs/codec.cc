// Codec names, option checks, the factory, and the header checks shared by the
// codec kinds (codec_wire.h). The kinds themselves are in codec_dense.cc,
// codec_sign.cc and codec_sparse.cc.
#include "gossip/codecs/codec.h"

#include <cmath>
#include <string>

#include "gossip/codecs/codec_wire.h"
#include "kernels/ops.h"

namespace chorus::gossip {

Result<CodecKind> ParseCodecKind(std::string_view text) {
  if (auto kind = FromName(kCodecKindNames, text)) return *kind;
  return Err(InvalidArgument("unknown codec \"" + std::string(text) + "\" (expected " +
                             JoinNames(NamesOf(kCodecKindNames), ", ") + ")"));
}

Status ValidateCodecOptions(const CodecOptions& options) {
  switch (options.kind) {
    case CodecKind::kNone:
    case CodecKind::kFp16:
      return Status::Ok();
    case CodecKind::kInt8:
    case CodecKind::kSign:
      if (options.chunk < 1 || options.chunk > 65536) {
        return InvalidArgument("codec " + std::string(CodecKindName(options.kind)) +
                               ": chunk must be in [1, 65536], got " +
                               std::to_string(options.chunk));
      }
      return Status::Ok();
    case CodecKind::kTopK:
    case CodecKind::kRandomK:
      if (!(options.ratio > 0.0 && options.ratio <= 1.0)) {
        return InvalidArgument("codec " + std::string(CodecKindName(options.kind)) +
                               ": ratio must be in (0, 1], got " + std::to_string(options.ratio));
      }
      if (options.value_bits != 32 && options.value_bits != 16 && options.value_bits != 8) {
        return InvalidArgument("codec " + std::string(CodecKindName(options.kind)) +
                               ": value_bits must be 32, 16 or 8, got " +
                               std::to_string(options.value_bits));
      }
      return Status::Ok();
  }
  return InvalidArgument("codec: unknown kind " + std::to_string(static_cast<int>(options.kind)));
}

Result<std::unique_ptr<Codec>> MakeCodec(const CodecOptions& options) {
  CHORUS_RETURN_IF_ERROR(ValidateCodecOptions(options));
  switch (options.kind) {
    case CodecKind::kNone:
      return codec_wire::MakeNoneCodec();
    case CodecKind::kFp16:
      return codec_wire::MakeFp16Codec();
    case CodecKind::kInt8:
      return codec_wire::MakeInt8Codec(options.chunk, options.stochastic_rounding);
    case CodecKind::kSign:
      return codec_wire::MakeSignCodec(options.chunk);
    case CodecKind::kTopK:
      return codec_wire::MakeTopKCodec(options.ratio, options.value_bits);
    case CodecKind::kRandomK:
      return codec_wire::MakeRandomKCodec(options.ratio, options.value_bits);
  }
  return Err(InvalidArgument("codec: unknown kind"));
}

size_t SparseCount(double ratio, size_t n) {
  if (n == 0) return 0;
  const double k = std::ceil(ratio * static_cast<double>(n));
  if (!(k >= 1.0)) return 1;
  if (k >= static_cast<double>(n)) return n;
  return static_cast<size_t>(k);
}

namespace codec_wire {

Result<Header> ReadHeader(std::span<const std::byte> bytes, CodecKind expected, size_t expected_n) {
  const std::string name(CodecKindName(expected));
  if (bytes.size() < kHeaderBytes) {
    return Err(DataLoss("codec " + name + ": message of " + std::to_string(bytes.size()) +
                        " bytes is shorter than the " + std::to_string(kHeaderBytes) +
                        "-byte header"));
  }
  if (static_cast<uint8_t>(bytes[0]) != kCodecMagic) {
    return Err(DataLoss("codec " + name + ": bad magic byte " +
                        std::to_string(static_cast<int>(bytes[0])) + " (not a codec message)"));
  }
  Header h;
  const auto kind = static_cast<uint8_t>(bytes[1]);
  if (kind != static_cast<uint8_t>(expected)) {
    return Err(DataLoss("codec " + name + ": message was encoded by codec id " +
                        std::to_string(kind) + " (" +
                        std::string(CodecKindName(static_cast<CodecKind>(kind))) + ")"));
  }
  h.kind = expected;
  h.param = Get<uint16_t>(bytes.data() + 2);
  if (Get<uint32_t>(bytes.data() + 4) != 0) {
    return Err(DataLoss("codec " + name + ": reserved header bytes are not zero"));
  }
  h.n = Get<uint64_t>(bytes.data() + 8);
  if (h.n != expected_n) {
    return Err(DataLoss("codec " + name + ": message holds " + std::to_string(h.n) +
                        " elements but the receiver expects " + std::to_string(expected_n)));
  }
  return h;
}

Status CheckSize(std::span<const std::byte> bytes, size_t expected, CodecKind kind) {
  if (bytes.size() == expected) return Status::Ok();
  return DataLoss("codec " + std::string(CodecKindName(kind)) + ": message is " +
                  std::to_string(bytes.size()) + " bytes, expected " + std::to_string(expected) +
                  (bytes.size() < expected ? " (truncated)" : " (trailing bytes)"));
}

Status CheckChunk(const Header& h, size_t chunk, CodecKind kind) {
  const size_t got = static_cast<size_t>(h.param) + 1;
  if (got == chunk) return Status::Ok();
  return DataLoss("codec " + std::string(CodecKindName(kind)) + ": message quantized in chunks of " +
                  std::to_string(got) + " elements but the receiver expects " + std::to_string(chunk));
}

Status CheckFinite(std::span<const float> out, CodecKind kind) {
  // The kernels' vectorised scan; the element is looked for only on a failure.
  if (kernels::AllFinite(kernels::Context{}, out.size(), out.data())) return Status::Ok();
  size_t i = 0;
  while (i < out.size() && std::isfinite(out[i])) ++i;
  return OutOfRange("codec " + std::string(CodecKindName(kind)) + ": non-finite value at element " +
                    std::to_string(i));
}

}  // namespace codec_wire
}  // namespace chorus::gossip
