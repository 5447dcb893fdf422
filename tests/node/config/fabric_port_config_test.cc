// fabric.port as the config reads it: a TCP port, none for shm, and never the
// control plane's port.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "node/config/config_parse.h"

namespace chorus::node {
namespace {

using ::testing::HasSubstr;

TEST(ConfigParseTest, FabricPortIsAPortOfTcpOtherThanTheControlPort) {
  const std::map<std::string, std::string> cases = {
      {"[fabric]\nport = 65536", "fabric.port: expected an integer in [0, 65535], got 65536"},
      {"[fabric]\nport = -1", "fabric.port: expected an integer in [0, 65535], got -1"},
      {"[fabric]\nport = 7200\nprovider = \"shm\"",
       "fabric.port: expected 0 with fabric.provider = \"shm\" (shm endpoints have no port), got 7200"},
      {"[fabric]\nport = 7100\n[cluster]\nlisten = \"127.0.0.1:7100\"",
       "fabric.port: expected a port other than cluster.listen's (the control plane listens on 7100), got 7100"},
  };
  for (const auto& [text, expected] : cases) {
    SCOPED_TRACE(text);
    Result<Config> config = ParseConfigString(text, "x.toml");
    ASSERT_FALSE(config);
    EXPECT_THAT(config.error().message(), HasSubstr("x.toml:2:1: " + expected));
  }
  EXPECT_TRUE(ParseConfigString("[fabric]\nport = 7200\n[cluster]\nlisten = \"127.0.0.1:7100\"", "x.toml"));
}

}  // namespace
}  // namespace chorus::node
