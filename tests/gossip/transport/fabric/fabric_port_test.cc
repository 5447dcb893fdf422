// FabricOptions::port: a tcp endpoint listens on the port it is given (read
// back from /proc/net/tcp), two endpoints on set ports exchange a message, a
// port in use fails with an error naming it, and shm refuses a port.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gossip/transport/fabric/fabric_transport.h"
#include "tests/gossip/transport/transport_test_util.h"
#include "tests/util/listening_ports.h"

namespace chorus::gossip {
namespace {

using testing::FirstMismatch;
using testing::Pattern;
using chorus::testing::ListensOn;

// A TCP socket on 127.0.0.1; listening when `listen_on` is set. Closed on
// destruction.
struct LoopbackSocket {
  int fd = -1;
  uint16_t port = 0;
  explicit LoopbackSocket(bool listen_on) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return;
    if (listen_on && listen(fd, 1) != 0) return;
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  ~LoopbackSocket() {
    if (fd >= 0) close(fd);
  }
};

// A port nothing holds right now (the kernel's pick, released again).
uint16_t FreePort() { return LoopbackSocket(/*listen_on=*/false).port; }

FabricOptions TcpAt(uint16_t port, const std::string& name) {
  FabricOptions options;
  options.provider = FabricProvider::kTcpRxm;
  options.node_name = name;
  options.port = port;
  return options;
}

TEST(FabricPortTest, TcpEndpointsListenOnTheirSetPortsAndExchange) {
  const uint16_t port0 = FreePort(), port1 = FreePort();
  ASSERT_NE(port0, 0);
  ASSERT_NE(port1, 0);
  ASSERT_FALSE(ListensOn(port0));
  auto t0 = MakeFabricTransport(TcpAt(port0, "node0"));
  ASSERT_TRUE(t0.has_value()) << t0.error().message();
  auto t1 = MakeFabricTransport(TcpAt(port1, "node1"));
  ASSERT_TRUE(t1.has_value()) << t1.error().message();
  EXPECT_TRUE(ListensOn(port0));
  EXPECT_TRUE(ListensOn(port1));

  const PeerInfo peers[] = {{0, (*t0)->LocalAddress(), "node0"}, {1, (*t1)->LocalAddress(), "node1"}};
  ASSERT_TRUE((*t0)->SetPeers(0, peers).ok());
  ASSERT_TRUE((*t1)->SetPeers(1, peers).ok());
  const std::vector<std::byte> sent = Pattern(7, 4096);
  std::vector<std::byte> received(sent.size());
  auto recv = (*t1)->Irecv(0, 3, received);
  ASSERT_TRUE(recv.has_value()) << recv.error().message();
  auto send = (*t0)->Isend(1, 3, sent);
  ASSERT_TRUE(send.has_value()) << send.error().message();
  ASSERT_TRUE((*send)->Wait(Deadline::AfterSeconds(10)).has_value());
  ASSERT_TRUE((*recv)->Wait(Deadline::AfterSeconds(10)).has_value());
  EXPECT_EQ(FirstMismatch(received, 7, sent.size()), sent.size());
}

// tcp;ofi_rxm binds in fi_endpoint and net in fi_enable: both name the port.
TEST(FabricPortTest, PortInUseFailsNamingThePort) {
  LoopbackSocket holder(/*listen_on=*/true);
  ASSERT_NE(holder.port, 0);
  for (const FabricProvider provider : {FabricProvider::kTcpRxm, FabricProvider::kNet}) {
    SCOPED_TRACE(ProviderName(provider));
    if (!FabricProviderVersion(provider).has_value()) continue;
    FabricOptions options = TcpAt(holder.port, "node0");
    options.provider = provider;
    auto t = MakeFabricTransport(options);
    ASSERT_FALSE(t.has_value());
    EXPECT_EQ(t.error().code(), StatusCode::kUnavailable) << t.error().message();
    EXPECT_NE(t.error().message().find("port " + std::to_string(holder.port) + " is in use"), std::string::npos)
        << t.error().message();
  }
}

TEST(FabricPortTest, ShmRefusesAPort) {
  FabricOptions options = TcpAt(FreePort(), "node0");
  options.provider = FabricProvider::kShm;
  auto t = MakeFabricTransport(options);
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.error().message().find("shm"), std::string::npos) << t.error().message();
}

}  // namespace
}  // namespace chorus::gossip
