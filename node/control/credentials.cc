// Per-node credentials (see credentials.h).
//
// toml++ throws toml::parse_error; it is caught in ParseTable() and nowhere else.
#include "node/control/credentials.h"

#include <sodium.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <toml++/toml.h>

#include "common/files.h"
#include "node/control/control_auth.h"

namespace chorus::node {
namespace {

constexpr std::string_view kCredentialDomain = "chorus node credential v1";

// The bytes the issuer signs: the domain, the name's length and bytes, the
// node's public key (the length keeps (name, key) pairs from colliding).
std::string SignedPart(std::string_view name, const SignPublicKey& node_key) {
  std::string m(kCredentialDomain);
  const uint32_t n = static_cast<uint32_t>(name.size());
  for (int i = 0; i < 4; ++i) m.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  m.append(name);
  m.append(reinterpret_cast<const char*>(node_key.data()), node_key.size());
  return m;
}

template <size_t N>
Result<std::array<uint8_t, N>> FromHex(std::string_view hex, const std::string& what) {
  std::array<uint8_t, N> out{};
  size_t written = 0;
  const char* end = nullptr;
  if (hex.size() != 2 * N ||
      sodium_hex2bin(out.data(), out.size(), hex.data(), hex.size(), nullptr, &written, &end) != 0 ||
      written != N || end != hex.data() + hex.size()) {
    return Err(InvalidArgument(what + ": expected " + std::to_string(2 * N) + " hex digits (" + std::to_string(N) +
                               " bytes), got " + std::to_string(hex.size()) + " characters"));
  }
  return out;
}

// The file's top-level string keys; InvalidArgument naming the file when it
// is not TOML or a value is not a string.
Result<std::map<std::string, std::string>> ParseTable(const std::string& path) {
  CHORUS_ASSIGN_OR_RETURN(std::string text, ReadFileText(path, 1 << 16));
  toml::table table;
  try {
    table = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    std::ostringstream why;
    why << path << ":" << e.source().begin.line << ": " << e.description();
    return Err(InvalidArgument(why.str()));
  }
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : table) {
    const auto* s = value.as_string();
    if (s == nullptr) return Err(InvalidArgument(path + ": " + std::string(key.str()) + " must be a string"));
    out.emplace(std::string(key.str()), s->get());
  }
  return out;
}

template <size_t N>
Result<std::array<uint8_t, N>> HexKey(const std::map<std::string, std::string>& table, const std::string& key,
                                      const std::string& path) {
  auto it = table.find(key);
  if (it == table.end()) return Err(InvalidArgument(path + ": no " + key));
  return FromHex<N>(it->second, path + ": " + key);
}

// Whether `secret` is the Ed25519 secret key of `pub`.
bool KeyPairMatches(const SignSecretKey& secret, const SignPublicKey& pub) {
  SignPublicKey derived;
  crypto_sign_ed25519_sk_to_pk(derived.data(), secret.data());
  return sodium_memcmp(derived.data(), pub.data(), pub.size()) == 0;
}

bool IssuerSigned(const SignPublicKey& issuer, const Credential& c) {
  const std::string m = SignedPart(c.name, c.node_key);
  return crypto_sign_verify_detached(c.issuer_signature.data(), reinterpret_cast<const uint8_t*>(m.data()),
                                     m.size(), issuer.data()) == 0;
}

Status SaveSecretFile(const std::string& path, const std::string& text) {
  return WriteFileAtomic(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()),
                         0600);
}

std::string Quoted(std::string_view key, std::string_view value) {
  return std::string(key) + " = \"" + std::string(value) + "\"\n";
}

}  // namespace

std::string KeyHex(std::span<const uint8_t> bytes) {
  std::string hex(2 * bytes.size() + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), bytes.data(), bytes.size());
  hex.pop_back();
  return hex;
}

Result<std::string> CredentialName(const std::string& path) {
  CHORUS_ASSIGN_OR_RETURN(auto table, ParseTable(path));
  auto it = table.find("name");
  if (it == table.end() || it->second.empty()) return Err(InvalidArgument(path + ": no name"));
  return it->second;
}

Result<SignPublicKey> ParseIssuerKey(std::string_view hex) {
  CHORUS_RETURN_IF_ERROR(InitSodium());
  return FromHex<kSignPublicKeyBytes>(hex, "cluster.issuer");
}

Result<std::vector<SignPublicKey>> ParseRevokedKeys(const std::vector<std::string>& hex) {
  std::vector<SignPublicKey> keys;
  for (size_t i = 0; i < hex.size(); ++i) {
    CHORUS_ASSIGN_OR_RETURN(SignPublicKey key,
                            FromHex<kSignPublicKeyBytes>(hex[i], "cluster.revoked[" + std::to_string(i) + "]"));
    keys.push_back(key);
  }
  return keys;
}

// ---------------------------------------------------------------------------
// Issuer

Result<Issuer> Issuer::Generate() {
  CHORUS_RETURN_IF_ERROR(InitSodium());
  Issuer issuer;
  crypto_sign_keypair(issuer.public_.data(), issuer.secret_.data());
  return issuer;
}

Result<Issuer> Issuer::Load(const std::string& path) {
  CHORUS_RETURN_IF_ERROR(InitSodium());
  CHORUS_ASSIGN_OR_RETURN(auto table, ParseTable(path));
  Issuer issuer;
  CHORUS_ASSIGN_OR_RETURN(issuer.public_, HexKey<kSignPublicKeyBytes>(table, "public_key", path));
  CHORUS_ASSIGN_OR_RETURN(issuer.secret_, HexKey<kSignSecretKeyBytes>(table, "secret_key", path));
  if (!KeyPairMatches(issuer.secret_, issuer.public_)) {
    return Err(InvalidArgument(path + ": secret_key is not public_key's (not an issuer file, or edited)"));
  }
  return issuer;
}

Issuer::Issuer(const Issuer& other) : public_(other.public_), secret_(other.secret_) {}
Issuer::~Issuer() { sodium_memzero(secret_.data(), secret_.size()); }

Status Issuer::Save(const std::string& path) const {
  return SaveSecretFile(path, "# A Chorus cluster's credential issuer. Keep this file secret: it makes node\n"
                              "# credentials. Nodes need only the public key, as cluster.issuer.\n" +
                                  Quoted("public_key", KeyHex(public_)) + Quoted("secret_key", KeyHex(secret_)));
}

Result<NodeCredentials> Issuer::Issue(const std::string& name) const {
  if (name.empty()) return Err(InvalidArgument("a credential needs a node name"));
  NodeCredentials c;
  c.credential_.name = name;
  c.issuer_ = public_;
  crypto_sign_keypair(c.credential_.node_key.data(), c.secret_.data());
  const std::string m = SignedPart(name, c.credential_.node_key);
  crypto_sign_detached(c.credential_.issuer_signature.data(), nullptr, reinterpret_cast<const uint8_t*>(m.data()),
                       m.size(), secret_.data());
  return c;
}

// ---------------------------------------------------------------------------
// NodeCredentials

Result<std::shared_ptr<const NodeCredentials>> NodeCredentials::Load(const std::string& path,
                                                                    const std::optional<SignPublicKey>& issuer,
                                                                    const std::string& name,
                                                                    std::vector<SignPublicKey> revoked) {
  CHORUS_RETURN_IF_ERROR(InitSodium());
  CHORUS_ASSIGN_OR_RETURN(auto table, ParseTable(path));
  auto c = std::shared_ptr<NodeCredentials>(new NodeCredentials());
  auto it = table.find("name");
  if (it == table.end() || it->second.empty()) return Err(InvalidArgument(path + ": no name"));
  c->credential_.name = it->second;
  CHORUS_ASSIGN_OR_RETURN(c->issuer_, HexKey<kSignPublicKeyBytes>(table, "issuer", path));
  CHORUS_ASSIGN_OR_RETURN(c->credential_.node_key, HexKey<kSignPublicKeyBytes>(table, "public_key", path));
  CHORUS_ASSIGN_OR_RETURN(c->credential_.issuer_signature, HexKey<kSignatureBytes>(table, "signature", path));
  CHORUS_ASSIGN_OR_RETURN(c->secret_, HexKey<kSignSecretKeyBytes>(table, "secret_key", path));
  if (!KeyPairMatches(c->secret_, c->credential_.node_key)) {
    return Err(InvalidArgument(path + ": secret_key is not public_key's (edited, or two files mixed)"));
  }
  if (!IssuerSigned(c->issuer_, c->credential_)) {
    return Err(InvalidArgument(path + ": its signature does not verify under its own issuer (edited?)"));
  }
  if (issuer && sodium_memcmp(c->issuer_.data(), issuer->data(), issuer->size()) != 0) {
    return Err(InvalidArgument(path + ": issued by " + KeyHex(c->issuer_) + ", not by cluster.issuer " +
                               KeyHex(*issuer)));
  }
  if (!name.empty() && c->credential_.name != name) {
    return Err(InvalidArgument(path + ": a credential for '" + c->credential_.name + "', and this node is '" +
                               name + "' (the name a node uses must be its credential's)"));
  }
  c->revoked_ = std::move(revoked);
  if (c->Revoked(c->credential_.node_key)) {
    return Err(InvalidArgument(path + ": its key " + KeyHex(c->credential_.node_key) + " is in cluster.revoked"));
  }
  return std::shared_ptr<const NodeCredentials>(std::move(c));
}

NodeCredentials::NodeCredentials(const NodeCredentials& other)
    : credential_(other.credential_), issuer_(other.issuer_), secret_(other.secret_), revoked_(other.revoked_) {}
NodeCredentials::~NodeCredentials() { sodium_memzero(secret_.data(), secret_.size()); }

Status NodeCredentials::Save(const std::string& path) const {
  return SaveSecretFile(path, "# A Chorus node credential. Keep this file secret: it holds the node's secret key.\n" +
                                  Quoted("name", credential_.name) + Quoted("issuer", KeyHex(issuer_)) +
                                  Quoted("public_key", KeyHex(credential_.node_key)) +
                                  Quoted("signature", KeyHex(credential_.issuer_signature)) +
                                  Quoted("secret_key", KeyHex(secret_)));
}

Signature NodeCredentials::Sign(std::span<const uint8_t> transcript) const {
  Signature s;
  crypto_sign_detached(s.data(), nullptr, transcript.data(), transcript.size(), secret_.data());
  return s;
}

bool NodeCredentials::SignedBy(const SignPublicKey& key, std::span<const uint8_t> signature,
                               std::span<const uint8_t> transcript) {
  return signature.size() == kSignatureBytes &&
         crypto_sign_verify_detached(signature.data(), transcript.data(), transcript.size(), key.data()) == 0;
}

Status NodeCredentials::CheckIssued(const Credential& peer, std::string_view name) const {
  const std::string who = "'" + std::string(name) + "'";
  if (peer.name != name) return PermissionDenied(who + " showed a credential for '" + peer.name + "'");
  if (!IssuerSigned(issuer_, peer)) {
    return PermissionDenied(who + " showed no credential of this cluster's issuer (cluster.issuer " +
                            KeyHex(issuer_) + ") for that name");
  }
  if (Revoked(peer.node_key)) {
    return PermissionDenied(who + " showed a revoked credential (key " + KeyHex(peer.node_key) +
                            ", in cluster.revoked)");
  }
  return Status::Ok();
}

bool NodeCredentials::Revoked(const SignPublicKey& key) const {
  return std::any_of(revoked_.begin(), revoked_.end(), [&](const SignPublicKey& r) {
    return sodium_memcmp(r.data(), key.data(), key.size()) == 0;
  });
}

Status NodeCredentials::CheckPeer(const Credential& peer, std::string_view name, std::span<const uint8_t> signature,
                                  std::span<const uint8_t> transcript, std::string_view what) const {
  CHORUS_RETURN_IF_ERROR(CheckIssued(peer, name));
  const std::string who = "'" + std::string(name) + "'";
  if (!SignedBy(peer.node_key, signature, transcript)) {
    return PermissionDenied(who + " did not sign " + std::string(what) +
                            " with its credential's key (a copied credential without its secret key?)");
  }
  return Status::Ok();
}

}  // namespace chorus::node
