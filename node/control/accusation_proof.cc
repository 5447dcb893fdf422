// Signed accusations (see accusation_proof.h).
#include "node/control/accusation_proof.h"

#include <algorithm>

namespace chorus::node {
namespace {

constexpr std::string_view kDomain = "chorus accusation v1";

void AppendField(std::vector<uint8_t>& out, std::span<const uint8_t> bytes) {
  const uint32_t n = static_cast<uint32_t>(bytes.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));  // length-prefixed: unambiguous
  out.insert(out.end(), bytes.begin(), bytes.end());
}

std::span<const uint8_t> BytesOf(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

std::vector<uint8_t> AccusationTranscript(std::span<const uint8_t> cluster, std::string_view accused,
                                          std::string_view accuser) {
  std::vector<uint8_t> out;
  AppendField(out, BytesOf(kDomain));
  AppendField(out, cluster);
  AppendField(out, BytesOf(accused));
  AppendField(out, BytesOf(accuser));
  return out;
}

msg::AccusationProof SignAccusation(const NodeCredentials& self, std::span<const uint8_t> cluster,
                                    std::string_view accused) {
  const Credential& c = self.credential();
  const Signature s = self.Sign(AccusationTranscript(cluster, accused, c.name));
  return {c.name, std::vector<uint8_t>(c.node_key.begin(), c.node_key.end()),
          std::vector<uint8_t>(c.issuer_signature.begin(), c.issuer_signature.end()),
          std::vector<uint8_t>(s.begin(), s.end())};
}

Status CheckAccusation(const NodeCredentials& verifier, std::span<const uint8_t> cluster, std::string_view accused,
                       const msg::AccusationProof& proof) {
  Credential c;
  c.name = proof.accuser;
  if (proof.credential_key.size() != c.node_key.size() ||
      proof.credential_signature.size() != c.issuer_signature.size()) {
    return PermissionDenied("the accusation of '" + std::string(accused) + "' by '" + proof.accuser +
                            "' carries no credential");
  }
  std::copy(proof.credential_key.begin(), proof.credential_key.end(), c.node_key.begin());
  std::copy(proof.credential_signature.begin(), proof.credential_signature.end(), c.issuer_signature.begin());
  return verifier.CheckPeer(c, proof.accuser, proof.signature, AccusationTranscript(cluster, accused, proof.accuser),
                           "the accusation of '" + std::string(accused) + "' in this run");
}

ProvenAccusers CheckAccusations(const NodeCredentials& verifier, std::span<const uint8_t> cluster,
                                std::string_view accused, std::span<const msg::AccusationProof> proofs) {
  ProvenAccusers out;
  for (const msg::AccusationProof& p : proofs) {
    if (out.accusers.count(p.accuser)) continue;
    Status s = CheckAccusation(verifier, cluster, accused, p);
    if (s.ok()) {
      out.accusers.insert(p.accuser);
    } else if (out.refused.empty()) {
      out.refused = s.message();
    }
  }
  return out;
}

}  // namespace chorus::node
