// Frame header, sealing and verification (see control_frame.h).
#include "node/control/control_frame.h"

#include <sodium.h>

#include <array>
#include <cstring>
#include <string>
#include <string_view>

namespace chorus::node {
namespace {

std::array<uint8_t, 8> Le64(uint64_t v) {
  std::array<uint8_t, 8> out;
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
  return out;
}

std::array<uint8_t, 4> Le32(uint32_t v) {
  std::array<uint8_t, 4> out;
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
  return out;
}

// The key that encrypts a direction's session frames, derived from its MAC key.
MacKey CipherKey(const MacKey& mac_key) {
  static constexpr std::string_view kLabel = "frame cipher";
  return HmacParts(mac_key, {std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(kLabel.data()),
                                                      kLabel.size())});
}

// ChaCha20 of `bytes` in place; frame `seq`'s nonce (unique under one key:
// every connection has fresh keys, and each direction numbers its frames).
void CipherInPlace(const MacKey& key, uint64_t seq, std::span<uint8_t> bytes) {
  std::array<uint8_t, crypto_stream_chacha20_ietf_NONCEBYTES> nonce{};
  const auto seq_bytes = Le64(seq);
  std::memcpy(nonce.data(), seq_bytes.data(), seq_bytes.size());
  crypto_stream_chacha20_ietf_xor(bytes.data(), bytes.data(), bytes.size(), nonce.data(), key.data());
}

}  // namespace

FrameSealer::FrameSealer(const MacKey& key, bool encrypt) : key_(key) {
  if (encrypt) cipher_key_ = CipherKey(key);
}

FrameOpener::FrameOpener(const MacKey& key, bool encrypt) : key_(key) {
  if (encrypt) cipher_key_ = CipherKey(key);
}

Mac FrameMac(const MacKey& key, uint64_t seq, std::span<const uint8_t> payload) {
  const auto seq_bytes = Le64(seq);
  const auto len_bytes = Le32(static_cast<uint32_t>(payload.size()));
  return HmacParts(key, {seq_bytes, len_bytes, payload});
}

Result<uint32_t> ParseFrameLength(std::span<const uint8_t, kFrameLengthBytes> header,
                                  uint32_t max_payload) {
  const uint32_t length = static_cast<uint32_t>(header[0]) | (static_cast<uint32_t>(header[1]) << 8) |
                          (static_cast<uint32_t>(header[2]) << 16) |
                          (static_cast<uint32_t>(header[3]) << 24);
  if (length == 0) return Err(DataLoss("frame with an empty payload"));
  if (length > max_payload) {
    return Err(ResourceExhausted("frame of " + std::to_string(length) + " bytes is over the limit of " +
                                 std::to_string(max_payload) + " bytes"));
  }
  return length;
}

std::vector<uint8_t> FrameSealer::Seal(std::span<const uint8_t> payload) {
  const auto len_bytes = Le32(static_cast<uint32_t>(payload.size()));
  std::vector<uint8_t> frame(kFrameLengthBytes + payload.size() + kFrameMacBytes);
  std::memcpy(frame.data(), len_bytes.data(), kFrameLengthBytes);
  const std::span<uint8_t> body(frame.data() + kFrameLengthBytes, payload.size());
  if (!payload.empty()) std::memcpy(body.data(), payload.data(), payload.size());
  if (cipher_key_) CipherInPlace(*cipher_key_, seq_, body);
  const Mac mac = FrameMac(key_, seq_++, body);
  std::memcpy(frame.data() + kFrameLengthBytes + payload.size(), mac.data(), kFrameMacBytes);
  return frame;
}

Status FrameOpener::Open(std::span<uint8_t> payload, std::span<const uint8_t> mac) {
  const Mac expected = FrameMac(key_, seq_, payload);
  if (!MacEquals(expected, mac)) {
    return PermissionDenied("HMAC of frame " + std::to_string(seq_) + " does not verify");
  }
  if (cipher_key_) CipherInPlace(*cipher_key_, seq_, payload);
  ++seq_;
  return Status::Ok();
}

Result<std::vector<uint8_t>> OpenFrame(std::span<const uint8_t> frame, FrameOpener& opener,
                                       uint32_t max_payload) {
  if (frame.size() < kFrameLengthBytes) {
    return Err(DataLoss("truncated frame: " + std::to_string(frame.size()) + " bytes, no complete header"));
  }
  CHORUS_ASSIGN_OR_RETURN(uint32_t length,
                          ParseFrameLength(frame.first<kFrameLengthBytes>(), max_payload));
  const size_t expected = kFrameLengthBytes + length + kFrameMacBytes;
  if (frame.size() != expected) {
    return Err(DataLoss("frame of " + std::to_string(frame.size()) + " bytes, header says " +
                        std::to_string(expected)));
  }
  std::span<const uint8_t> body = frame.subspan(kFrameLengthBytes, length);
  std::span<const uint8_t> mac = frame.subspan(kFrameLengthBytes + length, kFrameMacBytes);
  std::vector<uint8_t> payload(body.begin(), body.end());
  CHORUS_RETURN_IF_ERROR(opener.Open(payload, mac));
  return payload;
}

}  // namespace chorus::node
