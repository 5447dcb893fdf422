// Keys of the control plane, derived from the cluster token (libsodium).
//
// The token itself never leaves the process. Its BLAKE2b hash
// (crypto_generichash) is the cluster key K; everything on the wire is
// authenticated with HMAC-SHA256 (crypto_auth_hmacsha256) under keys derived
// from K:
//  - handshake keys, one per direction, for the two hellos (and a reject);
//  - nonce proofs: each side MACs the other side's fresh random nonce, so a
//    side that answers proves it holds K now, not that it recorded a hello;
//  - session keys, one per direction, derived from K, both nonces and the
//    X25519 secret of both sides' ephemeral keys (sent in the hellos), for
//    every frame after the handshake. Frames of another connection (other
//    nonces) do not verify here, and per-frame sequence numbers
//    (control_frame.h) stop replays and reordering within one connection.
//    The ephemeral secret keeps a token holder that relays a handshake (with
//    per-node credentials, which sign the transcript: credentials.h) from
//    computing the session keys.
// Must not: log or print key material, or compare MACs with memcmp (timing).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>

#include "common/status.h"

namespace chorus::node {

inline constexpr size_t kMacKeyBytes = 32;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;

using MacKey = std::array<uint8_t, kMacKeyBytes>;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;
inline constexpr size_t kEphemeralKeyBytes = 32;
using EphemeralPublic = std::array<uint8_t, kEphemeralKeyBytes>;
using SharedSecret = std::array<uint8_t, kEphemeralKeyBytes>;

// Which way a frame travels on a connection: from the side that dialed to the
// side that accepted, or back.
enum class Direction { kDialerToAcceptor, kAcceptorToDialer };

// libsodium's one-time initialisation; safe to call from any thread, any number of times.
[[nodiscard]] Status InitSodium();

// A fresh random nonce (randombytes_buf).
Nonce RandomNonce();

// HMAC-SHA256 of the concatenation of `parts` under `key`.
Mac HmacParts(const MacKey& key, std::initializer_list<std::span<const uint8_t>> parts);

// Constant-time comparison (sodium_memcmp); false when the sizes differ.
bool MacEquals(std::span<const uint8_t> a, std::span<const uint8_t> b);

// A connection's fresh X25519 key pair (crypto_scalarmult). InitSodium()
// must have succeeded.
class EphemeralKey {
 public:
  EphemeralKey();
  ~EphemeralKey();
  EphemeralKey(const EphemeralKey&) = delete;
  EphemeralKey& operator=(const EphemeralKey&) = delete;
  const EphemeralPublic& public_key() const { return public_; }
  // The secret shared with the holder of `peer`; InvalidArgument when `peer`
  // is not 32 bytes or is a low-order point (the secret would be known).
  [[nodiscard]] Result<SharedSecret> Shared(std::span<const uint8_t> peer) const;

 private:
  EphemeralPublic public_{};
  std::array<uint8_t, kEphemeralKeyBytes> secret_{};
};

class ClusterKey {
 public:
  // K = BLAKE2b-256("chorus control plane v1" || token). InitSodium() must have succeeded.
  static ClusterKey FromToken(std::string_view token);

  // Key of the unauthenticated-yet phase (the hellos) for one direction.
  MacKey HandshakeKey(Direction direction) const;
  // Proof, sent in `direction`, that the sender holds K: HMAC over the peer's nonce.
  Mac ProveNonce(Direction direction, const Nonce& peer_nonce) const;
  bool CheckNonceProof(Direction direction, const Nonce& peer_nonce,
                       std::span<const uint8_t> proof) const;
  // Key of every frame after the handshake in `direction`.
  MacKey SessionKey(Direction direction, const Nonce& dialer_nonce, const Nonce& acceptor_nonce,
                    const SharedSecret& ephemeral) const;
  // Key of membership epoch `epoch`'s data plane (Transport::SetEpochKey):
  // BLAKE2b keyed with K over a domain label, the epoch and `salt` (the
  // view's random data salt), so that every view, even one that reuses an
  // epoch number (a new run with the same token), has a key of its own.
  MacKey DataKey(uint64_t epoch, std::span<const uint8_t> salt) const;
  // A public name of the cluster for what members sign (accusation_proof.h):
  // BLAKE2b keyed with K over `label` and `run` (the run's salt,
  // EpochView.runSalt), so that two runs of one token have different names.
  // It reveals nothing of K.
  MacKey Tag(std::string_view label, std::span<const uint8_t> run = {}) const;

 private:
  explicit ClusterKey(const MacKey& key) : key_(key) {}
  MacKey key_;
};

}  // namespace chorus::node
