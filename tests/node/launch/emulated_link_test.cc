// Tests of node/launch/emulated_link: namespaces joined by veth links. Needs
// root and iproute2; skipped with the reason otherwise.
#include "node/launch/emulated_link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace chorus::node {
namespace {

// Runs `fn` on a thread that has entered network namespace `ns`.
template <typename Fn>
auto InNamespace(const std::string& ns, Fn fn) {
  return std::async(std::launch::async, [ns, fn]() {
    const int fd = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
      if (fd >= 0) close(fd);
      return decltype(fn())(-1);
    }
    close(fd);
    return fn();
  });
}

sockaddr_in Ipv4(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  return addr;
}

// A TCP socket listening on `host`, any port (set in *port), for a thread in
// the host's namespace; -1 on failure.
int ListenOn(const std::string& host, int backlog, int* port) {
  const int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = Ipv4(host, 0);
  socklen_t len = sizeof(addr);
  if (ls < 0 || bind(ls, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(ls, backlog) != 0 ||
      getsockname(ls, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (ls >= 0) close(ls);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return ls;
}

TEST(EmulatedLinkTest, UnavailableWithoutRootSaysWhy) {
  Status s = EmulatedLink::Available();
  if (geteuid() != 0) {
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("root"), std::string::npos) << s.message();
  } else if (!s.ok()) {
    EXPECT_FALSE(s.message().empty());
  }
}

TEST(EmulatedLinkTest, ShapesBandwidthBetweenNamespacesAndCleansUp) {
  Status available = EmulatedLink::Available();
  if (!available.ok()) GTEST_SKIP() << "link emulation unavailable here: " << available.message();
  const double rate = 100e6 / 8;  // 100 Mbit/s
  std::string ns0, ns1;
  {
    Result<std::unique_ptr<EmulatedLink>> link = EmulatedLink::Create(2, LinkShape{rate, 0.0});
    ASSERT_TRUE(link) << link.error().message();
    ns0 = (*link)->ns(0);
    ns1 = (*link)->ns(1);
    const std::string host0 = (*link)->host(0);
    EXPECT_NE(host0, (*link)->host(1));

    std::promise<int> port_promise;
    std::future<int> port_future = port_promise.get_future();
    constexpr size_t kBytes = 3'000'000;
    auto server = InNamespace(ns0, [&]() -> long {
      int port = -1;
      const int ls = ListenOn(host0, 1, &port);
      port_promise.set_value(port);
      if (ls < 0) return -1;
      const int c = accept(ls, nullptr, nullptr);
      long total = 0;
      std::vector<char> buf(1 << 16);
      for (ssize_t n; (n = read(c, buf.data(), buf.size())) > 0;) total += n;
      close(c);
      close(ls);
      return total;
    });
    const int port = port_future.get();
    ASSERT_GT(port, 0);
    auto client = InNamespace(ns1, [&]() -> double {
      const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr = Ipv4(host0, port);
      if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return -1.0;
      std::vector<char> buf(kBytes, 'x');
      const auto t0 = std::chrono::steady_clock::now();
      size_t sent = 0;
      while (sent < buf.size()) {
        const ssize_t n = write(s, buf.data() + sent, buf.size() - sent);
        if (n <= 0) return -1.0;
        sent += static_cast<size_t>(n);
      }
      shutdown(s, SHUT_WR);
      char c;
      (void)read(s, &c, 1);  // returns 0 once the server has read everything and closed
      close(s);
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    const double seconds = client.get();
    EXPECT_EQ(server.get(), static_cast<long>(kBytes));
    ASSERT_GT(seconds, 0.0);
    // Shaping can only slow the transfer: at 100 Mbit/s 3 MB need 0.24 s, minus
    // one tbf bucket (128 KiB) and the socket buffers the sender fills before
    // bytes leave (up to ~1 MB), hence the 0.5 factor. Unshaped veth moves 3 MB
    // in a few milliseconds.
    EXPECT_GT(seconds, 0.5 * kBytes / rate) << "the link does not look shaped";
  }
  // The destructor removed every namespace.
  EXPECT_NE(access(("/var/run/netns/" + ns0).c_str(), F_OK), 0);
  EXPECT_NE(access(("/var/run/netns/" + ns1).c_str(), F_OK), 0);
}

// Whether a TCP connect from namespace `ns` to host:port completes within
// `timeout_ms` (the listener is in another namespace).
bool ConnectsFrom(const std::string& ns, const std::string& host, int port, int timeout_ms) {
  return InNamespace(ns, [&]() -> int {
           const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
           sockaddr_in addr = Ipv4(host, port);
           int ok = 0;
           if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
             ok = 1;
           } else if (errno == EINPROGRESS) {
             pollfd p{s, POLLOUT, 0};
             int err = 0;
             socklen_t len = sizeof(err);
             ok = poll(&p, 1, timeout_ms) == 1 && getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
           }
           close(s);
           return ok;
         }).get() == 1;
}

// A TCP listener on `host` inside namespace `ns`, on which the kernel
// completes handshakes (nothing is accepted) until Close() or destruction.
class HeldListener {
 public:
  HeldListener(const std::string& ns, const std::string& host) {
    auto port = std::make_shared<std::promise<int>>();
    std::future<int> port_future = port->get_future();
    std::shared_future<void> finished = done_.get_future().share();
    server_ = InNamespace(ns, [host, port, finished]() -> int {
      int p = -1;
      const int ls = ListenOn(host, 16, &p);
      port->set_value(p);
      if (ls < 0) return -1;
      finished.wait();
      close(ls);
      return 0;
    });
    port_ = port_future.get();
  }
  ~HeldListener() {
    if (!closed_) Close();
  }
  int port() const { return port_; }
  // Stops listening: 0 when the listener ran, -1 when it could not listen.
  int Close() {
    closed_ = true;
    done_.set_value();
    return server_.get();
  }

 private:
  std::promise<void> done_;
  std::future<int> server_;
  int port_ = -1;
  bool closed_ = false;
};

TEST(EmulatedLinkTest, UnshapedLinksCutAndHealOneNode) {
  Status available = EmulatedLink::Available();
  if (!available.ok()) GTEST_SKIP() << "link emulation unavailable here: " << available.message();
  EXPECT_FALSE(EmulatedLink::Create(2, LinkShape{0.0, 0.001})) << "latency needs a bandwidth";
  Result<std::unique_ptr<EmulatedLink>> made = EmulatedLink::Create(3, LinkShape{});
  ASSERT_TRUE(made) << made.error().message();
  EmulatedLink& link = **made;
  EXPECT_NE(link.Describe().find("unshaped"), std::string::npos) << link.Describe();
  const std::string host0 = link.host(0);
  HeldListener listener(link.ns(0), host0);
  const int port = listener.port();
  ASSERT_GT(port, 0);
  EXPECT_TRUE(ConnectsFrom(link.ns(1), host0, port, 2000));
  ASSERT_TRUE(link.Cut(1).ok());
  EXPECT_FALSE(ConnectsFrom(link.ns(1), host0, port, 500)) << "node1 is cut off";
  EXPECT_TRUE(ConnectsFrom(link.ns(2), host0, port, 2000)) << "the others still reach each other";
  ASSERT_TRUE(link.Cut(1).ok()) << "cutting twice is a no-op";
  ASSERT_TRUE(link.Heal(1).ok());
  EXPECT_TRUE(ConnectsFrom(link.ns(1), host0, port, 3000)) << "healed";
  EXPECT_FALSE(link.Cut(7).ok());
  EXPECT_EQ(listener.Close(), 0);
}

// Seconds a TCP connect from namespace `ns` to host:port takes (one round
// trip), or -1.
double ConnectSeconds(const std::string& ns, const std::string& host, int port) {
  return InNamespace(ns, [&]() -> double {
           const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
           sockaddr_in addr = Ipv4(host, port);
           const auto t0 = std::chrono::steady_clock::now();
           const bool ok = connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
           const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
           close(s);
           return ok ? seconds : -1.0;
         }).get();
}

TEST(EmulatedLinkTest, SitesPutTheSiteLinkBetweenSitesOnly) {
  Status available = EmulatedLink::Available();
  if (!available.ok()) GTEST_SKIP() << "link emulation unavailable here: " << available.message();
  SiteLinks bad{{0, 2, 2}, LinkShape{1e6, 0.0}};
  Result<std::unique_ptr<EmulatedLink>> refused = EmulatedLink::Create(3, LinkShape{}, &bad);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("site 1 has no node"), std::string::npos) << refused.error().message();

  const double latency = 0.04;  // one way, site to site
  SiteLinks sites{{0, 0, 1, 1}, LinkShape{1e9 / 8, latency}};
  Result<std::unique_ptr<EmulatedLink>> made = EmulatedLink::Create(4, LinkShape{10e9 / 8, 0.0}, &sites);
  ASSERT_TRUE(made) << made.error().message();
  EmulatedLink& link = **made;
  EXPECT_NE(link.Describe().find("2 sites joined by 1e+03 Mbit/s, 40 ms one-way"), std::string::npos)
      << link.Describe();
  const std::string host0 = link.host(0);
  HeldListener listener(link.ns(0), host0);
  const int port = listener.port();
  ASSERT_GT(port, 0);
  const double inside = ConnectSeconds(link.ns(1), host0, port);
  const double across = ConnectSeconds(link.ns(2), host0, port);
  const double across_too = ConnectSeconds(link.ns(3), host0, port);
  EXPECT_EQ(listener.Close(), 0);
  ASSERT_GE(inside, 0.0);
  ASSERT_GE(across, 0.0);
  ASSERT_GE(across_too, 0.0);
  ASSERT_TRUE(link.site_latency_emulated()) << link.Describe();
  std::printf("connect: %.2f ms inside a site, %.2f and %.2f ms across (%s)\n", inside * 1e3, across * 1e3,
              across_too * 1e3, link.Describe().c_str());
  // A connect takes one round trip: across sites it cannot beat twice the
  // one-way latency (netem, or the delay in user space without it); inside
  // a site nothing delays it.
  EXPECT_GE(across, 2 * latency * 0.95);
  EXPECT_GE(across_too, 2 * latency * 0.95);
  EXPECT_LT(inside, across);
}

}  // namespace
}  // namespace chorus::node
