// CredentialPartSigner: a member's signature of a gathered part checks for
// that member, that gather and that epoch only, and carries the credential
// that any member checks against the issuer.
#include "node/cluster/part_signatures.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace chorus::node {
namespace {

// A view of members a, b, c (ranks 0-2) at `epoch`, seen from `self`.
MembershipView ViewOf(int self, uint8_t key_byte) {
  MembershipView v;
  v.epoch = 3;
  v.self_rank = self;
  for (const char* name : {"a", "b", "c"}) {
    Member m;
    m.rank = static_cast<int>(v.members.size());
    m.name = name;
    v.members.push_back(m);
  }
  v.data_key.fill(key_byte);
  return v;
}

std::shared_ptr<const NodeCredentials> Issued(const Issuer& issuer, const std::string& name) {
  Result<NodeCredentials> c = issuer.Issue(name);
  EXPECT_TRUE(c.has_value()) << c.error().ToString();
  return std::make_shared<const NodeCredentials>(*c);
}

TEST(CredentialPartSignerTest, ASignatureChecksForItsSignerGatherEpochAndPartOnly) {
  Result<Issuer> issuer = Issuer::Generate();
  ASSERT_TRUE(issuer.has_value()) << issuer.error().ToString();
  const CredentialPartSigner a(Issued(*issuer, "a"), ViewOf(0, 7));
  const CredentialPartSigner c(Issued(*issuer, "c"), ViewOf(2, 7));
  const std::vector<float> part = {1.5f, -2.0f, 3.25f, 0.0f, 1e30f, -7.0f};
  std::vector<float> signature(a.SignatureFloats());
  ASSERT_EQ(signature.size() * sizeof(float), CredentialPartSigner::kSignatureBytes);
  a.Sign(41, part, signature);
  EXPECT_TRUE(c.Verify(0, 41, part, signature));
  EXPECT_FALSE(c.Verify(1, 41, part, signature)) << "a's signature taken for b's";
  EXPECT_FALSE(c.Verify(0, 42, part, signature)) << "taken for another gather";
  std::vector<float> altered = part;
  altered[4] = 1e31f;
  EXPECT_FALSE(c.Verify(0, 41, altered, signature)) << "taken for another part";
  const CredentialPartSigner next_epoch(Issued(*issuer, "c"), ViewOf(2, 8));
  EXPECT_FALSE(next_epoch.Verify(0, 41, part, signature)) << "taken in another epoch";
  // A byte altered anywhere: in the key, in the issuer's signature of it
  // (seen by a member that has not checked a's credential yet; one that
  // has knows the key), in the signature of the part.
  for (size_t i = 0; i < CredentialPartSigner::kSignatureBytes; i += 7) {
    std::vector<float> tampered = signature;
    reinterpret_cast<uint8_t*>(tampered.data())[i] ^= 0x10;
    const CredentialPartSigner fresh(Issued(*issuer, "b"), ViewOf(1, 7));
    EXPECT_FALSE(fresh.Verify(0, 41, part, tampered)) << "byte " << i << " of the signature altered";
    const bool issuer_signature = i >= kSignPublicKeyBytes && i < kSignPublicKeyBytes + kSignatureBytes;
    if (!issuer_signature) {
      EXPECT_FALSE(c.Verify(0, 41, part, tampered)) << "byte " << i << " altered";
    }
  }
  EXPECT_FALSE(c.Verify(5, 41, part, signature)) << "a rank outside the view";
}

// A credential of another issuer, even for the right name, does not check.
TEST(CredentialPartSignerTest, AnotherIssuersCredentialIsRefused) {
  Result<Issuer> ours = Issuer::Generate();
  Result<Issuer> theirs = Issuer::Generate();
  ASSERT_TRUE(ours.has_value() && theirs.has_value());
  const CredentialPartSigner forger(Issued(*theirs, "a"), ViewOf(0, 7));
  const CredentialPartSigner c(Issued(*ours, "c"), ViewOf(2, 7));
  const std::vector<float> part = {1.0f, 2.0f};
  std::vector<float> signature(forger.SignatureFloats());
  forger.Sign(9, part, signature);
  EXPECT_FALSE(c.Verify(0, 9, part, signature));
}

}  // namespace
}  // namespace chorus::node
