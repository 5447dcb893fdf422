// Tests of host:port parsing (cluster.listen, cluster.bootstrap, advertise):
// the forms accepted and an error naming what is wrong with each malformed one.
#include "node/config/host_port.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

namespace chorus::node {
namespace {

using ::testing::HasSubstr;

TEST(HostPortTest, AcceptsHostNamesIpv4AndBracketedIpv6) {
  struct Case {
    const char* text;
    const char* host;
    uint16_t port;
  };
  for (const Case& c : {Case{"127.0.0.1:0", "127.0.0.1", 0}, Case{"localhost:7100", "localhost", 7100},
                        Case{"node-01.cluster.example:65535", "node-01.cluster.example", 65535},
                        Case{"[::1]:80", "::1", 80}, Case{"[fe80::1:2]:1", "fe80::1:2", 1}}) {
    SCOPED_TRACE(c.text);
    Result<HostPort> parsed = ParseHostPort(c.text);
    ASSERT_TRUE(parsed) << parsed.error().message();
    EXPECT_EQ(parsed->host, c.host);
    EXPECT_EQ(parsed->port, c.port);
  }
}

TEST(HostPortTest, RejectsMalformedAddresses) {
  const std::map<std::string, std::string> cases = {
      {"localhost", "missing ':port'"},
      {":80", "missing host"},
      {"host:", "missing port"},
      {"host:http", "is not a number"},
      {"host:65536", "out of range"},
      {"host:-1", "is not a number"},
      {"256.1.1.1:80", "is not an IPv4 address"},
      {"::1:80", "IPv6 addresses go in brackets"},
      {"[::1:80", "missing ']'"},
      {"[::1]80", "missing ':port'"},
      {"[zz::1]:80", "is not an IPv6 address"},
      {"-bad.example:80", "is not a valid host name"},
      {"under_score:80", "is not a valid host name"},
      {"a..b:80", "is not a valid host name"},
  };
  for (const auto& [text, expected] : cases) {
    SCOPED_TRACE(text);
    Result<HostPort> parsed = ParseHostPort(text);
    ASSERT_FALSE(parsed);
    EXPECT_THAT(parsed.error().message(), HasSubstr(expected));
  }
}

}  // namespace
}  // namespace chorus::node
