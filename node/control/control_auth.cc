// Key derivation, nonces and proofs of the control plane (see control_auth.h).
#include "node/control/control_auth.h"

#include <sodium.h>

#include <string>

namespace chorus::node {
namespace {

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string_view DirectionLabel(Direction d) {
  return d == Direction::kDialerToAcceptor ? "dialer->acceptor" : "acceptor->dialer";
}

}  // namespace

Status InitSodium() {
  // sodium_init returns 0 the first time, 1 when already initialised, -1 on failure.
  if (sodium_init() < 0) return Internal("libsodium failed to initialise (sodium_init)");
  return Status::Ok();
}

Nonce RandomNonce() {
  Nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

Mac HmacParts(const MacKey& key, std::initializer_list<std::span<const uint8_t>> parts) {
  static_assert(crypto_auth_hmacsha256_BYTES == kMacBytes);
  crypto_auth_hmacsha256_state state;
  crypto_auth_hmacsha256_init(&state, key.data(), key.size());
  for (std::span<const uint8_t> p : parts) crypto_auth_hmacsha256_update(&state, p.data(), p.size());
  Mac mac;
  crypto_auth_hmacsha256_final(&state, mac.data());
  sodium_memzero(&state, sizeof(state));
  return mac;
}

bool MacEquals(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

ClusterKey ClusterKey::FromToken(std::string_view token) {
  static constexpr std::string_view kDomain = "chorus control plane v1";
  crypto_generichash_state state;
  crypto_generichash_init(&state, nullptr, 0, kMacKeyBytes);
  crypto_generichash_update(&state, Bytes(kDomain).data(), kDomain.size());
  crypto_generichash_update(&state, Bytes(token).data(), token.size());
  MacKey key;
  crypto_generichash_final(&state, key.data(), key.size());
  sodium_memzero(&state, sizeof(state));
  return ClusterKey(key);
}

MacKey ClusterKey::HandshakeKey(Direction direction) const {
  return HmacParts(key_, {Bytes("handshake "), Bytes(DirectionLabel(direction))});
}

Mac ClusterKey::ProveNonce(Direction direction, const Nonce& peer_nonce) const {
  return HmacParts(key_, {Bytes("nonce proof "), Bytes(DirectionLabel(direction)), peer_nonce});
}

bool ClusterKey::CheckNonceProof(Direction direction, const Nonce& peer_nonce,
                                 std::span<const uint8_t> proof) const {
  const Mac expected = ProveNonce(direction, peer_nonce);
  return MacEquals(expected, proof);
}

MacKey ClusterKey::DataKey(uint64_t epoch, std::span<const uint8_t> salt) const {
  static constexpr std::string_view kDataDomain = "chorus data plane v1";
  uint8_t epoch_bytes[8];
  for (int i = 0; i < 8; ++i) epoch_bytes[i] = static_cast<uint8_t>(epoch >> (8 * i));
  crypto_generichash_state state;
  crypto_generichash_init(&state, key_.data(), key_.size(), kMacKeyBytes);
  crypto_generichash_update(&state, reinterpret_cast<const uint8_t*>(kDataDomain.data()), kDataDomain.size());
  crypto_generichash_update(&state, epoch_bytes, sizeof(epoch_bytes));
  crypto_generichash_update(&state, salt.data(), salt.size());
  MacKey out;
  crypto_generichash_final(&state, out.data(), out.size());
  sodium_memzero(&state, sizeof(state));
  return out;
}

MacKey ClusterKey::Tag(std::string_view label, std::span<const uint8_t> run) const {
  crypto_generichash_state state;
  crypto_generichash_init(&state, key_.data(), key_.size(), kMacKeyBytes);
  crypto_generichash_update(&state, reinterpret_cast<const uint8_t*>(label.data()), label.size());
  crypto_generichash_update(&state, run.data(), run.size());
  MacKey out;
  crypto_generichash_final(&state, out.data(), out.size());
  sodium_memzero(&state, sizeof(state));
  return out;
}

MacKey ClusterKey::SessionKey(Direction direction, const Nonce& dialer_nonce, const Nonce& acceptor_nonce,
                              const SharedSecret& ephemeral) const {
  return HmacParts(key_, {Bytes("session "), Bytes(DirectionLabel(direction)), dialer_nonce, acceptor_nonce,
                          ephemeral});
}

EphemeralKey::EphemeralKey() {
  randombytes_buf(secret_.data(), secret_.size());
  crypto_scalarmult_base(public_.data(), secret_.data());
}

EphemeralKey::~EphemeralKey() { sodium_memzero(secret_.data(), secret_.size()); }

Result<SharedSecret> EphemeralKey::Shared(std::span<const uint8_t> peer) const {
  static_assert(crypto_scalarmult_BYTES == kEphemeralKeyBytes && crypto_scalarmult_SCALARBYTES == kEphemeralKeyBytes);
  if (peer.size() != kEphemeralKeyBytes) {
    return Err(InvalidArgument("an ephemeral key of " + std::to_string(peer.size()) + " bytes, not 32"));
  }
  SharedSecret shared;
  if (crypto_scalarmult(shared.data(), secret_.data(), peer.data()) != 0) {
    return Err(InvalidArgument("a degenerate ephemeral key (a low-order point)"));
  }
  return shared;
}

}  // namespace chorus::node
