// DataSeal: authenticates (and optionally encrypts) the data plane's messages
// of one membership epoch (libsodium).
//
// Every message carries a trailer of kSealTrailerBytes: the sender's sequence
// number for that receiver and a Poly1305 tag over a header (epoch, sender,
// receiver, tag, payload length, sequence number) and the payload. The
// Poly1305 key is used once: it is the first 32 bytes of the ChaCha20
// keystream of the message's key and nonce, as in RFC 8439's AEAD, where the
// message's key is the HChaCha20 subkey of the epoch key for (sender,
// receiver) and its nonce the sequence number (XChaCha20's construction).
// With encryption the payload is ChaCha20 ciphertext from keystream block 1
// on, and the tag covers the ciphertext (encrypt-then-MAC). Poly1305 and
// ChaCha20 over the payload are OpenSSL's (vectorised), the rest libsodium's. So a message verifies only under the epoch's key, from
// the sender and to the receiver it was sealed for, with the tag it was sent
// with and its exact bytes; a message of another epoch (another key) or a
// forged one does not, and a replayed one (a sequence number this receiver
// already accepted from that sender, or one more than kReplayWindow behind
// the newest) is refused.
//
// The epoch key comes from the control plane (ClusterKey::DataKey: the
// cluster token and a random salt of the epoch's view), so it is fresh per
// epoch and a sequence number never repeats under one key unless a DataSeal
// is made twice for the same epoch key (the transport keeps one per epoch).
//
// Thread-safe: sends and receives of several threads may seal and open at
// once; only the counters and replay windows take a lock, not the MAC.
// Must not: log key material; accept a message before its tag verified.
// (libsodium and OpenSSL are both kept to this folder.)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "gossip/transport/transport.h"

namespace chorus::gossip {

inline constexpr size_t kSealTrailerBytes = 24;
using SealTrailer = std::array<uint8_t, kSealTrailerBytes>;

enum class SealMode {
  kAuthenticate,  // a MAC on every message; the payload goes as it is
  kEncrypt,       // the payload encrypted too (a copy on every send)
};

class DataSeal {
 public:
  // How far behind the newest accepted sequence number from a sender a
  // message may arrive (messages of different tags complete out of order).
  static constexpr uint64_t kReplayWindow = 4096;

  // kInternal when libsodium cannot initialise.
  [[nodiscard]] static Result<std::shared_ptr<DataSeal>> Make(uint64_t epoch, const DataKey& key,
                                                             SealMode mode);
  ~DataSeal();
  DataSeal(const DataSeal&) = delete;
  DataSeal& operator=(const DataSeal&) = delete;

  uint64_t epoch() const { return epoch_; }
  SealMode mode() const { return mode_; }
  // Whether this seal was made for `epoch` with `key`.
  bool Matches(uint64_t epoch, const DataKey& key) const;

  // The trailer of the next message from `from` to `to` with `tag`. With
  // kEncrypt, `ciphertext` (payload.size() bytes) receives the encrypted
  // payload, which is what goes on the wire; with kAuthenticate it is unused.
  // kInternal only when the crypto library fails.
  [[nodiscard]] Result<SealTrailer> Seal(Rank from, Rank to, Tag tag, std::span<const std::byte> payload,
                                         std::span<std::byte> ciphertext);

  // Verifies a received message (`payload` as it came off the wire, then the
  // trailer) and, with kEncrypt, decrypts `payload` in place. kPermissionDenied
  // saying why (tag mismatch, replay) when it must be dropped; `payload` is
  // left as it came then.
  [[nodiscard]] Status Open(Rank from, Rank to, Tag tag, std::span<std::byte> payload,
                            const SealTrailer& trailer);

 private:
  DataSeal(uint64_t epoch, const DataKey& key, SealMode mode) : epoch_(epoch), key_(key), mode_(mode) {}
  // Which sequence numbers of one sender this receiver accepted, the newest
  // kReplayWindow of them (a ring of bits indexed by sequence number).
  struct Window {
    uint64_t next = 0;  // one past the newest accepted
    std::vector<uint64_t> bits = std::vector<uint64_t>(kReplayWindow / 64, 0);
  };
  // The one-time Poly1305 tag of a message; nullopt when the library fails.
  std::optional<std::array<uint8_t, 16>> Mac(Rank from, Rank to, Tag tag, uint64_t seq,
                                             std::span<const std::byte> wire_payload) const;
  // Records `seq` from `from`; false when it is a replay or too old. mu_ held.
  bool AcceptLocked(Rank from, uint64_t seq);

  const uint64_t epoch_;
  const DataKey key_;
  const SealMode mode_;
  std::mutex mu_;
  std::unordered_map<Rank, uint64_t> next_seq_;  // by receiver; under mu_
  std::unordered_map<Rank, Window> windows_;     // by sender; under mu_
};

// A key for benchmarks and tests that have no control plane: the BLAKE2b
// hash of `label`. Never for a cluster (anyone can compute it).
DataKey PublicTestKey(std::string_view label);

}  // namespace chorus::gossip
