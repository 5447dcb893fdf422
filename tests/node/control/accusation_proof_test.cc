// Signed accusations: a proof checks only for the accused name, the cluster
// and the accuser it was signed for, under a credential of the verifier's
// issuer that is not revoked; a quorum counts distinct accusers.
#include "node/control/accusation_proof.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <string>
#include <vector>

#include "node/control/control_auth.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;

const std::array<uint8_t, 4> kCluster = {1, 2, 3, 4};

class AccusationProofTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<Issuer> issuer = Issuer::Generate();
    ASSERT_TRUE(issuer) << issuer.error().ToString();
    issuer_.emplace(*issuer);
    for (const char* name : {"node0", "node1", "node2"}) {
      Result<NodeCredentials> c = issuer_->Issue(name);
      ASSERT_TRUE(c) << c.error().ToString();
      nodes_.push_back(*c);
    }
  }
  std::optional<Issuer> issuer_;
  std::vector<NodeCredentials> nodes_;
};

TEST_F(AccusationProofTest, AProofChecksForWhatItWasSignedFor) {
  const msg::AccusationProof proof = SignAccusation(nodes_[1], kCluster, "node3");
  EXPECT_EQ(proof.accuser, "node1");
  EXPECT_TRUE(CheckAccusation(nodes_[0], kCluster, "node3", proof).ok());
  // Another accused name, another cluster.
  EXPECT_FALSE(CheckAccusation(nodes_[0], kCluster, "node2", proof).ok());
  const std::array<uint8_t, 4> other_cluster = {1, 2, 3, 5};
  EXPECT_FALSE(CheckAccusation(nodes_[0], other_cluster, "node3", proof).ok());
  // Another accuser's name on node1's signature and credential.
  msg::AccusationProof renamed = proof;
  renamed.accuser = "node2";
  const Status s = CheckAccusation(nodes_[0], kCluster, "node3", renamed);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("'node2' showed no credential of this cluster's issuer"), std::string::npos)
      << s.message();
  // node2's credential with node1's signature.
  msg::AccusationProof borrowed = SignAccusation(nodes_[2], kCluster, "node3");
  borrowed.signature = proof.signature;
  const Status b = CheckAccusation(nodes_[0], kCluster, "node3", borrowed);
  EXPECT_NE(b.message().find("'node2' did not sign the accusation of 'node3'"), std::string::npos) << b.message();
}

// Two runs of one token and issuer name the cluster differently
// (ClusterKey::Tag over each run's salt), so a conviction signed in one
// cannot be carried into the other.
TEST_F(AccusationProofTest, AProofOfAnotherRunOfTheSameTokenIsRefused) {
  const ClusterKey key = ClusterKey::FromToken("the same token");
  const std::vector<uint8_t> run_a = {1, 1, 1, 1}, run_b = {2, 2, 2, 2};
  const MacKey in_a = key.Tag("chorus accusations", run_a);
  const MacKey in_b = key.Tag("chorus accusations", run_b);
  EXPECT_NE(in_a, in_b);
  EXPECT_EQ(in_a, ClusterKey::FromToken("the same token").Tag("chorus accusations", run_a));
  EXPECT_NE(in_a, ClusterKey::FromToken("another token").Tag("chorus accusations", run_a));
  const msg::AccusationProof proof = SignAccusation(nodes_[1], in_a, "node3");
  EXPECT_TRUE(CheckAccusation(nodes_[0], in_a, "node3", proof).ok());
  const Status s = CheckAccusation(nodes_[0], in_b, "node3", proof);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
}

TEST_F(AccusationProofTest, AnyAlteredByteIsRefused) {
  const msg::AccusationProof proof = SignAccusation(nodes_[1], kCluster, "node3");
  for (auto field : {&msg::AccusationProof::credential_key, &msg::AccusationProof::credential_signature,
                     &msg::AccusationProof::signature}) {
    for (size_t i = 0; i < (proof.*field).size(); i += 7) {
      msg::AccusationProof altered = proof;
      (altered.*field)[i] ^= 0x10;
      EXPECT_FALSE(CheckAccusation(nodes_[0], kCluster, "node3", altered).ok()) << "byte " << i;
    }
    msg::AccusationProof cut = proof;
    (cut.*field).pop_back();
    EXPECT_FALSE(CheckAccusation(nodes_[0], kCluster, "node3", cut).ok());
  }
}

TEST_F(AccusationProofTest, AnotherIssuersCredentialIsRefused) {
  Result<Issuer> stranger = Issuer::Generate();
  ASSERT_TRUE(stranger);
  Result<NodeCredentials> impostor = stranger->Issue("node2");
  ASSERT_TRUE(impostor);
  const msg::AccusationProof proof = SignAccusation(*impostor, kCluster, "node3");
  EXPECT_TRUE(CheckAccusation(*impostor, kCluster, "node3", proof).ok());  // its own issuer's
  EXPECT_FALSE(CheckAccusation(nodes_[0], kCluster, "node3", proof).ok());
}

TEST_F(AccusationProofTest, ARevokedAccuserIsRefused) {
  const fs::path dir = fs::temp_directory_path() / ("chorus-accusation-" + std::to_string(getpid()));
  fs::create_directories(dir);
  ASSERT_TRUE(nodes_[0].Save((dir / "node0.cred").string()).ok());
  auto revoking = NodeCredentials::Load((dir / "node0.cred").string(), issuer_->public_key(), "node0",
                                        {nodes_[1].credential().node_key});
  ASSERT_TRUE(revoking) << revoking.error().ToString();
  const Status s = CheckAccusation(**revoking, kCluster, "node3", SignAccusation(nodes_[1], kCluster, "node3"));
  EXPECT_NE(s.message().find("revoked"), std::string::npos) << s.message();
  fs::remove_all(dir);
}

TEST_F(AccusationProofTest, AQuorumCountsDistinctAccusersWhoseProofsCheck) {
  const msg::AccusationProof by1 = SignAccusation(nodes_[1], kCluster, "node3");
  const msg::AccusationProof by2 = SignAccusation(nodes_[2], kCluster, "node3");
  msg::AccusationProof forged = by1;
  forged.accuser = "node0";
  const std::vector<msg::AccusationProof> proofs = {by1, by1, forged, by2};
  const ProvenAccusers proven = CheckAccusations(nodes_[0], kCluster, "node3", proofs);
  EXPECT_EQ(proven.accusers, (std::set<std::string>{"node1", "node2"}));
  EXPECT_NE(proven.refused.find("'node0'"), std::string::npos) << proven.refused;
  EXPECT_TRUE(CheckAccusations(nodes_[0], kCluster, "node3", std::vector<msg::AccusationProof>{by1, by1})
                  .refused.empty());
  EXPECT_EQ(CheckAccusations(nodes_[0], kCluster, "node3", std::vector<msg::AccusationProof>{by1, by1})
                .accusers.size(),
            1u);
}

}  // namespace
}  // namespace chorus::node
