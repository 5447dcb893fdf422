// Per-node credentials: a node name bound to a signing key by the cluster's
// issuer (libsodium Ed25519).
//
// The cluster token lets a process speak the control protocol; it is shared,
// so it cannot tell one member's process from another's. With `cluster.issuer`
// set, a node must also show a credential for the name it uses: the issuer's
// signature over (domain, name, the node's public key). In the control
// plane's handshake each side sends its credential with its hello and signs
// the handshake's transcript (both nonces, both ephemeral X25519 keys, both
// names) with its node secret key, and the other side checks both signatures
// (control_connection.cc). So only the holder of a credential's secret key
// can use its name, and a member that was expelled can come back only under
// a name the issuer signs for it.
//
// Files are TOML, written atomically with mode 0600 (they hold secret keys):
//   issuer:     public_key, secret_key
//   credential: name, issuer (the issuer's public key), public_key,
//               signature (the issuer's), secret_key
// Keys and signatures are lower-case hex.
// Must not: log or print a secret key; accept a credential whose signature
// or key pair does not verify.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace chorus::node {

inline constexpr size_t kSignPublicKeyBytes = 32;
inline constexpr size_t kSignSecretKeyBytes = 64;
inline constexpr size_t kSignatureBytes = 64;

using SignPublicKey = std::array<uint8_t, kSignPublicKeyBytes>;
using SignSecretKey = std::array<uint8_t, kSignSecretKeyBytes>;
using Signature = std::array<uint8_t, kSignatureBytes>;

// What a node shows: its name and public key, signed by the issuer.
struct Credential {
  std::string name;
  SignPublicKey node_key{};
  Signature issuer_signature{};
};

// Lower-case hex of `bytes`.
std::string KeyHex(std::span<const uint8_t> bytes);
// The issuer's public key from `hex` (cluster.issuer); InvalidArgument saying
// what is wrong with it.
[[nodiscard]] Result<SignPublicKey> ParseIssuerKey(std::string_view hex);
// The node keys of cluster.revoked; InvalidArgument naming the entry.
[[nodiscard]] Result<std::vector<SignPublicKey>> ParseRevokedKeys(const std::vector<std::string>& hex);

class NodeCredentials;

// The name in a credential file, unchecked (a node without run.node_name
// takes it; NodeCredentials::Load checks the file when the node starts).
[[nodiscard]] Result<std::string> CredentialName(const std::string& path);

// The key pair that signs credentials. It stays with whoever admits nodes;
// nodes need only its public key.
class Issuer {
 public:
  [[nodiscard]] static Result<Issuer> Generate();
  // NotFound / InvalidArgument naming `path` and the key.
  [[nodiscard]] static Result<Issuer> Load(const std::string& path);
  Issuer(const Issuer&);
  Issuer& operator=(const Issuer&) = delete;
  ~Issuer();

  [[nodiscard]] Status Save(const std::string& path) const;
  const SignPublicKey& public_key() const { return public_; }
  // A fresh node key pair and the credential for `name` (not empty).
  [[nodiscard]] Result<NodeCredentials> Issue(const std::string& name) const;

 private:
  Issuer() = default;
  SignPublicKey public_{};
  SignSecretKey secret_{};
};

// What a node holds: its credential, the secret key that goes with it, and
// the issuer whose credentials it accepts from peers.
class NodeCredentials {
 public:
  // Reads a credential file. InvalidArgument naming `path` when it is not
  // one, when its key pair or signature does not verify, when it is not
  // `issuer`'s or not for `name` (cluster.issuer, the node's name; nullopt
  // and "": whichever the file names), or when its key is `revoked`, whose
  // credentials CheckIssued refuses too (cluster.revoked).
  [[nodiscard]] static Result<std::shared_ptr<const NodeCredentials>> Load(
      const std::string& path, const std::optional<SignPublicKey>& issuer, const std::string& name,
      std::vector<SignPublicKey> revoked = {});
  NodeCredentials(const NodeCredentials&);
  NodeCredentials& operator=(const NodeCredentials&) = delete;
  ~NodeCredentials();

  [[nodiscard]] Status Save(const std::string& path) const;
  const Credential& credential() const { return credential_; }
  const SignPublicKey& issuer() const { return issuer_; }

  // This node's signature of a handshake transcript.
  Signature Sign(std::span<const uint8_t> transcript) const;
  // Whether `signature` is `key`'s over `transcript` (the key's credential
  // checked apart, CheckIssued).
  static bool SignedBy(const SignPublicKey& key, std::span<const uint8_t> signature,
                       std::span<const uint8_t> transcript);
  // Ok when `peer` is a credential of this node's issuer for `name`;
  // PermissionDenied saying which check failed.
  [[nodiscard]] Status CheckIssued(const Credential& peer, std::string_view name) const;
  // Ok when `peer` is a credential of this node's issuer for `name` and
  // `signature` is its holder's over `transcript` (`what` it signed, for the
  // error); PermissionDenied saying which check failed.
  [[nodiscard]] Status CheckPeer(const Credential& peer, std::string_view name,
                                 std::span<const uint8_t> signature, std::span<const uint8_t> transcript,
                                 std::string_view what = "the handshake") const;

 private:
  friend class Issuer;
  NodeCredentials() = default;
  bool Revoked(const SignPublicKey& key) const;
  Credential credential_;
  SignPublicKey issuer_{};
  SignSecretKey secret_{};
  std::vector<SignPublicKey> revoked_;
};

}  // namespace chorus::node
