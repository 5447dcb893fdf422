// CredentialPartSigner (see part_signatures.h).
#include "node/cluster/part_signatures.h"

#include <cstring>
#include <string_view>

namespace chorus::node {
namespace {

constexpr std::string_view kDomain = "chorus gathered part v1";

}  // namespace

CredentialPartSigner::CredentialPartSigner(std::shared_ptr<const NodeCredentials> self, const MembershipView& view)
    : self_(std::move(self)), context_(view.data_key) {
  for (const Member& m : view.members) names_.push_back(m.name);
}

std::vector<uint8_t> CredentialPartSigner::Transcript(gossip::Tag gather, const std::string& signer,
                                                      std::span<const float> part) const {
  std::vector<uint8_t> t;
  t.reserve(kDomain.size() + context_.size() + sizeof(gather) + 1 + signer.size() + part.size_bytes());
  t.insert(t.end(), kDomain.begin(), kDomain.end());
  t.insert(t.end(), context_.begin(), context_.end());
  for (int i = 0; i < 8; ++i) t.push_back(static_cast<uint8_t>(gather >> (8 * i)));
  t.push_back(static_cast<uint8_t>(signer.size()));
  t.insert(t.end(), signer.begin(), signer.end());
  const auto* bytes = reinterpret_cast<const uint8_t*>(part.data());
  t.insert(t.end(), bytes, bytes + part.size_bytes());
  return t;
}

void CredentialPartSigner::Sign(gossip::Tag gather, std::span<const float> part, std::span<float> signature) const {
  const Credential& c = self_->credential();
  const Signature s = self_->Sign(Transcript(gather, c.name, part));
  auto* out = reinterpret_cast<uint8_t*>(signature.data());
  std::memcpy(out, c.node_key.data(), c.node_key.size());
  std::memcpy(out + c.node_key.size(), c.issuer_signature.data(), c.issuer_signature.size());
  std::memcpy(out + c.node_key.size() + c.issuer_signature.size(), s.data(), s.size());
}

bool CredentialPartSigner::Verify(gossip::Rank sender, gossip::Tag gather, std::span<const float> part,
                                  std::span<const float> signature) const {
  if (sender < 0 || static_cast<size_t>(sender) >= names_.size() || signature.size_bytes() != kSignatureBytes) {
    return false;
  }
  const auto* in = reinterpret_cast<const uint8_t*>(signature.data());
  Credential c;
  c.name = names_[static_cast<size_t>(sender)];
  std::memcpy(c.node_key.data(), in, c.node_key.size());
  std::memcpy(c.issuer_signature.data(), in + c.node_key.size(), c.issuer_signature.size());
  const std::span<const uint8_t> s(in + c.node_key.size() + c.issuer_signature.size(), node::kSignatureBytes);
  // A member's credential is checked once (two signature checks a part cost
  // twice one).
  const std::string key(c.node_key.begin(), c.node_key.end());
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto known = issued_.find(c.name);
    if (known == issued_.end() || known->second != key) {
      if (!self_->CheckIssued(c, c.name).ok()) return false;
      issued_[c.name] = key;
    }
  }
  return NodeCredentials::SignedBy(c.node_key, s, Transcript(gather, c.name, part));
}

}  // namespace chorus::node
