// cluster.issuer, cluster.credential and cluster.revoked as the config reads
// them: public keys of 64 hex digits (a bad entry named by its place), and a
// credential file exactly when there is an issuer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "node/config/config_parse.h"

namespace chorus::node {
namespace {

using ::testing::HasSubstr;

TEST(ConfigParseTest, AnIssuerIsAPublicKeyAndNeedsACredential) {
  const std::string key(64, 'a');
  const std::map<std::string, std::string> cases = {
      {"[cluster]\nissuer = \"abc\"\ncredential = \"n.cred\"",
       "x.toml:2:1: cluster.issuer: expected the issuer's public key, 64 hex digits"},
      {"[cluster]\nissuer = \"" + std::string(64, 'g') + "\"\ncredential = \"n.cred\"",
       "x.toml:2:1: cluster.issuer: expected the issuer's public key"},
      {"[cluster]\nissuer = \"" + key + "\"",
       "x.toml:2:1: cluster.credential: expected this node's credential file: cluster.issuer is set"},
      {"[cluster]\ncredential = \"n.cred\"",
       "x.toml:2:1: cluster.credential: a credential without cluster.issuer is never shown"},
      {"[cluster]\nrevoked = [\"" + key + "\", \"xyz\"]\nissuer = \"" + key + "\"\ncredential = \"n.cred\"",
       "x.toml:2:80: cluster.revoked[1]: expected a credential's public key, 64 hex digits"},
      {"[cluster]\nrevoked = [\"" + key + "\"]",
       "x.toml:2:1: cluster.revoked: revoked credentials without cluster.issuer: nobody shows one"},
  };
  for (const auto& [text, expected] : cases) {
    SCOPED_TRACE(text);
    Result<Config> config = ParseConfigString(text, "x.toml");
    ASSERT_FALSE(config);
    EXPECT_THAT(config.error().message(), HasSubstr(expected));
  }
  Result<Config> config =
      ParseConfigString("[cluster]\nissuer = \"" + key + "\"\ncredential = \"n.cred\"", "x.toml");
  ASSERT_TRUE(config) << config.error().ToString();
  EXPECT_EQ(config->cluster.credential, "n.cred");
}

}  // namespace
}  // namespace chorus::node
