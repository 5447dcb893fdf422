// Framing of the control plane: one authenticated message per frame.
//
//   [u32 little-endian L][L payload bytes (a capnp flat message)][32-byte HMAC]
//
// The HMAC-SHA256 covers (u64 LE sequence number, u32 LE L, payload) under the
// key of the frame's direction (control_auth.h). Each direction of a connection
// numbers its frames 0, 1, 2, ...; a FrameSealer writes them and a FrameOpener
// checks them in order, so a frame replayed, dropped or reordered within a
// connection does not verify either. L is checked against a limit before
// anything is allocated. Session frames (after the handshake) are encrypted
// too: the payload is ChaCha20 ciphertext (RFC 8439, nonce the sequence
// number) under a key derived from the direction's key, and the HMAC covers
// the ciphertext (encrypt-then-MAC). So what the members tell each other (a
// view's data-plane salt among it) stays between them. Must not: parse the payload (control_messages.h does),
// touch sockets, or log.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"
#include "node/control/control_auth.h"

namespace chorus::node {

inline constexpr size_t kFrameLengthBytes = 4;
inline constexpr size_t kFrameMacBytes = kMacBytes;
// Largest payload accepted by default: a member list of a few thousand nodes fits.
inline constexpr uint32_t kDefaultMaxFramePayload = 1u << 20;

// The MAC of frame number `seq` carrying `payload`.
Mac FrameMac(const MacKey& key, uint64_t seq, std::span<const uint8_t> payload);

// Reads L from the 4 header bytes; ResourceExhausted when L > max_payload,
// DataLoss when L == 0.
[[nodiscard]] Result<uint32_t> ParseFrameLength(std::span<const uint8_t, kFrameLengthBytes> header,
                                                uint32_t max_payload);

// Writes the frames of one direction.
class FrameSealer {
 public:
  // `encrypt`: session frames (see the file comment).
  explicit FrameSealer(const MacKey& key, bool encrypt = false);
  // The whole frame (header, payload, MAC) for the next sequence number.
  std::vector<uint8_t> Seal(std::span<const uint8_t> payload);
  uint64_t next_seq() const { return seq_; }

 private:
  MacKey key_;
  std::optional<MacKey> cipher_key_;  // session frames only
  uint64_t seq_ = 0;
};

// Checks the frames of one direction, in order.
class FrameOpener {
 public:
  // `encrypt`: session frames, decrypted once they verified.
  explicit FrameOpener(const MacKey& key, bool encrypt = false);
  // Verifies `mac` for the next sequence number and decrypts `payload` in
  // place; advances only on success. PermissionDenied (naming the sequence
  // number) when it does not verify; `payload` is then left as it came.
  [[nodiscard]] Status Open(std::span<uint8_t> payload, std::span<const uint8_t> mac);
  uint64_t next_seq() const { return seq_; }

 private:
  MacKey key_;
  std::optional<MacKey> cipher_key_;
  uint64_t seq_ = 0;
};

// Splits and verifies one complete frame held in memory (tests, and anything
// that is not reading a stream). Returns the payload.
[[nodiscard]] Result<std::vector<uint8_t>> OpenFrame(std::span<const uint8_t> frame, FrameOpener& opener,
                                                     uint32_t max_payload = kDefaultMaxFramePayload);

}  // namespace chorus::node
