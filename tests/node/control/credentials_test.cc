// Per-node credentials: files that round-trip and refuse edits, signatures
// that bind a name and a handshake, and control planes on 127.0.0.1 that
// admit only the issuer's credentials under their own names.
#include "node/control/credentials.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "common/files.h"
#include "node/control/control_client.h"
#include "node/control/control_plane.h"
#include "tests/node/control/control_test_util.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using testing::Local;
using testing::StartOrDie;
using testing::TestConfig;

constexpr double kCredentialWait = 10.0;

class CredentialFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("chorus-credentials-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    Result<Issuer> issuer = Issuer::Generate();
    ASSERT_TRUE(issuer) << issuer.error().ToString();
    issuer_.emplace(*issuer);
    ASSERT_TRUE(issuer_->Save(Path("issuer.toml")).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  // A credential for `name` from `issuer` (default: this test's), saved as name.cred.
  std::string IssueFile(const std::string& name, const Issuer* issuer = nullptr) {
    Result<NodeCredentials> c = (issuer ? *issuer : *issuer_).Issue(name);
    EXPECT_TRUE(c) << c.error().ToString();
    const std::string path = Path(name + ".cred");
    EXPECT_TRUE(c->Save(path).ok());
    return path;
  }
  std::shared_ptr<const NodeCredentials> LoadOrDie(const std::string& path, const std::string& name) {
    auto c = NodeCredentials::Load(path, issuer_->public_key(), name);
    EXPECT_TRUE(c) << c.error().ToString();
    return c ? *c : nullptr;
  }
  // The file at `path` with `key`'s value replaced by `value`.
  void Edit(const std::string& path, const std::string& key, const std::string& value) {
    Result<std::string> text = ReadFileText(path);
    ASSERT_TRUE(text);
    const std::string edited =
        std::regex_replace(*text, std::regex("(^|\n)" + key + " = \"[^\"]*\""), "$1" + key + " = \"" + value + "\"");
    ASSERT_NE(edited, *text);
    std::ofstream(path) << edited;
  }
  ClusterConfig WithCredential(ClusterConfig config, const std::string& credential) const {
    config.issuer = KeyHex(issuer_->public_key());
    config.credential = credential;
    return config;
  }

  fs::path dir_;
  std::optional<Issuer> issuer_;
};

TEST_F(CredentialFiles, AnIssuedCredentialRoundTripsThroughItsFileWhichOnlyItsOwnerReads) {
  const std::string path = IssueFile("node3");
  struct stat st{};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(Path("issuer.toml").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto c = LoadOrDie(path, "node3");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->credential().name, "node3");
  EXPECT_EQ(c->issuer(), issuer_->public_key());
  Result<std::string> name = CredentialName(path);
  ASSERT_TRUE(name);
  EXPECT_EQ(*name, "node3");
  // The issuer file loads back to the same key pair: it issues credentials that verify.
  Result<Issuer> again = Issuer::Load(Path("issuer.toml"));
  ASSERT_TRUE(again) << again.error().ToString();
  EXPECT_EQ(again->public_key(), issuer_->public_key());
}

TEST_F(CredentialFiles, AnEditedOrForeignCredentialIsRefusedNamingTheFile) {
  const std::string path = IssueFile("node3");
  auto refused = [&](const std::string& why, const std::string& name = "") {
    auto c = NodeCredentials::Load(path, issuer_->public_key(), name);
    ASSERT_FALSE(c) << why;
    EXPECT_NE(c.error().message().find(path), std::string::npos) << c.error().message();
    EXPECT_NE(c.error().message().find(why), std::string::npos) << c.error().message();
  };
  // Another node's name: only the issuer signs names.
  refused("a credential for 'node3', and this node is 'node4'", "node4");
  Edit(path, "name", "node4");
  refused("its signature does not verify");
  IssueFile("node3");
  // Another node's public key with this secret key.
  Result<NodeCredentials> other = issuer_->Issue("node9");
  ASSERT_TRUE(other);
  Edit(path, "public_key", KeyHex(other->credential().node_key));
  refused("secret_key is not public_key's");
  // A credential of another issuer.
  Result<Issuer> stranger = Issuer::Generate();
  ASSERT_TRUE(stranger);
  IssueFile("node3", &*stranger);
  refused("not by cluster.issuer");
  // Not a credential at all.
  std::ofstream(path) << "name = \"node3\"\nissuer = \"12\"\n";
  refused("issuer: expected 64 hex digits");
}

TEST_F(CredentialFiles, ASignatureBindsTheNameAndTheTranscript) {
  auto a = LoadOrDie(IssueFile("a"), "a");
  auto b = LoadOrDie(IssueFile("b"), "b");
  ASSERT_TRUE(a && b);
  const std::vector<uint8_t> transcript = {1, 2, 3, 4};
  const Signature by_a = a->Sign(transcript);
  EXPECT_TRUE(b->CheckPeer(a->credential(), "a", by_a, transcript).ok());
  // a's credential shown under another name.
  Status renamed = b->CheckPeer(a->credential(), "c", by_a, transcript);
  EXPECT_EQ(renamed.code(), StatusCode::kPermissionDenied);
  Credential as_c = a->credential();
  as_c.name = "c";
  EXPECT_FALSE(b->CheckPeer(as_c, "c", by_a, transcript).ok()) << "the issuer signed a, not c";
  // Another handshake's signature (a replayed proof), or b's signature on a's credential (no secret key).
  const std::vector<uint8_t> other_transcript = {1, 2, 3, 5};
  Status replayed = b->CheckPeer(a->credential(), "a", by_a, other_transcript);
  EXPECT_NE(replayed.message().find("did not sign the handshake"), std::string::npos) << replayed.message();
  EXPECT_FALSE(b->CheckPeer(a->credential(), "a", b->Sign(transcript), transcript).ok());
}

TEST(EphemeralKeyTest, BothSidesShareOneSecretAndADegenerateKeyIsRefused) {
  ASSERT_TRUE(InitSodium().ok());
  EphemeralKey a, b, c;
  Result<SharedSecret> ab = a.Shared(b.public_key());
  Result<SharedSecret> ba = b.Shared(a.public_key());
  Result<SharedSecret> ac = a.Shared(c.public_key());
  ASSERT_TRUE(ab && ba && ac);
  EXPECT_EQ(*ab, *ba);
  EXPECT_NE(*ab, *ac);
  EXPECT_FALSE(a.Shared(EphemeralPublic{}).has_value()) << "the zero point gives a known secret";
  EXPECT_FALSE(a.Shared(std::vector<uint8_t>(31, 1)).has_value());
}

TEST_F(CredentialFiles, ControlPlanesAdmitOnlyTheIssuersCredentialsUnderTheirNames) {
  auto a = StartOrDie(WithCredential(TestConfig(2, {}), IssueFile("a")), Local("a"));
  ASSERT_TRUE(a);
  const std::string boot = a->advertise_address();
  // No name given: the credential's.
  auto b = StartOrDie(WithCredential(TestConfig(2, {boot}), IssueFile("b")), Local(""));
  ASSERT_TRUE(b);
  EXPECT_EQ(b->name(), "b");
  for (ControlPlane* n : {a.get(), b.get()}) {
    Result<MembershipView> v = n->WaitForEpoch0(Deadline::AfterSeconds(kCredentialWait));
    ASSERT_TRUE(v) << v.error().ToString();
    EXPECT_EQ(v->size(), 2);
  }
  auto refused = [&](ClusterConfig config, const std::string& name, const std::string& why) {
    auto n = StartOrDie(config, Local(name));
    ASSERT_TRUE(n);
    Result<MembershipView> v = n->WaitForEpoch0(Deadline::AfterSeconds(kCredentialWait));
    ASSERT_FALSE(v) << name << " was admitted";
    EXPECT_EQ(v.error().code(), StatusCode::kPermissionDenied) << v.error().ToString();
    EXPECT_NE(v.error().message().find(why), std::string::npos) << v.error().message();
  };
  // The token alone, and a credential of another issuer (which the node
  // itself trusts): refused by a's handshake, at once.
  refused(TestConfig(2, {boot}), "c", "'c' showed no credential of this cluster's issuer");
  Result<Issuer> stranger = Issuer::Generate();
  ASSERT_TRUE(stranger);
  ClusterConfig foreign = TestConfig(2, {boot});
  foreign.issuer = KeyHex(stranger->public_key());
  foreign.credential = IssueFile("d", &*stranger);
  refused(foreign, "d", "'d' showed no credential of this cluster's issuer");
  EXPECT_EQ(a->View().size(), 2);

  // A node cannot start under another name than its credential's.
  Result<std::unique_ptr<ControlPlane>> renamed =
      ControlPlane::Start(WithCredential(TestConfig(2, {boot}), Path("b.cred")), Local("b2"));
  ASSERT_FALSE(renamed);
  EXPECT_NE(renamed.error().message().find("a credential for 'b', and this node is 'b2'"), std::string::npos)
      << renamed.error().message();
  // And a process that says another name with b's credential (as an expelled
  // b would, to come back) is refused by the member it dials.
  const VersionInfo versions{"0.1.0", "1.17", "tcp;ofi_rxm", "117.0"};
  auto b_credential = LoadOrDie(Path("b.cred"), "b");
  Result<ProbeResult> as_b2 =
      ProbeNode(boot, "t0k3n", versions, "b2", Deadline::AfterSeconds(kCredentialWait), b_credential);
  ASSERT_FALSE(as_b2);
  EXPECT_NE(as_b2.error().message().find("'b2' showed no credential"), std::string::npos)
      << as_b2.error().message();
  // Under its own name the same credential is answered.
  Result<ProbeResult> as_b =
      ProbeNode(boot, "t0k3n", versions, "b", Deadline::AfterSeconds(kCredentialWait), b_credential);
  ASSERT_TRUE(as_b) << as_b.error().ToString();
  EXPECT_EQ(as_b->peer_name, "a");
  // And the other way: a node with credentials refuses a peer that shows none.
  auto plain = StartOrDie(TestConfig(1, {}), Local("plain"));
  ASSERT_TRUE(plain);
  Result<ProbeResult> to_plain = ProbeNode(plain->advertise_address(), "t0k3n", versions, "b",
                                           Deadline::AfterSeconds(kCredentialWait), b_credential);
  ASSERT_FALSE(to_plain);
  EXPECT_NE(to_plain.error().message().find("'plain' showed no credential"), std::string::npos)
      << to_plain.error().message();
}

// cluster.revoked: a credential the issuer revoked is refused by the member
// it dials, under its own name too, and a node cannot start with its own.
TEST_F(CredentialFiles, ARevokedCredentialIsRefused) {
  auto b_credential = LoadOrDie(IssueFile("b"), "b");
  ASSERT_TRUE(b_credential);
  ClusterConfig revoking = WithCredential(TestConfig(2, {}), IssueFile("a"));
  revoking.revoked = {KeyHex(b_credential->credential().node_key)};
  auto a = StartOrDie(revoking, Local("a"));
  ASSERT_TRUE(a);
  const VersionInfo versions{"0.1.0", "1.17", "tcp;ofi_rxm", "117.0"};
  Result<ProbeResult> as_b = ProbeNode(a->advertise_address(), "t0k3n", versions, "b",
                                       Deadline::AfterSeconds(kCredentialWait), b_credential);
  ASSERT_FALSE(as_b);
  EXPECT_NE(as_b.error().message().find("'b' showed a revoked credential"), std::string::npos)
      << as_b.error().message();

  ClusterConfig own = WithCredential(TestConfig(2, {a->advertise_address()}), Path("b.cred"));
  own.revoked = revoking.revoked;
  Result<std::unique_ptr<ControlPlane>> b = ControlPlane::Start(own, Local("b"));
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message().find("is in cluster.revoked"), std::string::npos) << b.error().message();

  // Another credential of the issuer joins.
  ClusterConfig c_config = WithCredential(TestConfig(2, {a->advertise_address()}), IssueFile("c"));
  c_config.revoked = revoking.revoked;
  auto c = StartOrDie(c_config, Local("c"));
  ASSERT_TRUE(c);
  Result<MembershipView> v = c->WaitForEpoch0(Deadline::AfterSeconds(kCredentialWait));
  ASSERT_TRUE(v) << v.error().ToString();
  EXPECT_EQ(v->size(), 2);
}

}  // namespace
}  // namespace chorus::node
