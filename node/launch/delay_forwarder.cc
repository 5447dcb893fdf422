// DelayForwarder (see delay_forwarder.h).
#include "node/launch/delay_forwarder.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <algorithm>
#include <deque>
#include <future>
#include <vector>

#include "common/posix_io.h"

namespace chorus::node {
namespace {

using Clock = std::chrono::steady_clock;

// The largest frame a veth hands a packet socket: a GSO segment of up to
// 64 KiB plus headers, after the virtio-net header.
constexpr size_t kMaxFrame = 128 * 1024;

// struct virtio_net_hdr of <linux/virtio_net.h> (which C++ cannot include:
// a member there is named `class`), and its flag for a checksum checked on
// the way in.
struct VnetHeader {
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len, gso_size, csum_start, csum_offset;
};
constexpr uint8_t kVnetDataValid = 2;

struct HeldFrame {
  Clock::time_point due;
  std::vector<char> bytes;  // virtio-net header, then the frame
};

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// A packet socket on interface `name` of the calling thread's namespace,
// with virtio-net headers, not seeing what it sends itself.
Result<int> OpenInterface(const std::string& name) {
  const unsigned index = if_nametoindex(name.c_str());
  if (index == 0) return Err(Unavailable(Errno("delay forwarder: interface " + name)));
  const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (fd < 0) return Err(Unavailable(Errno("delay forwarder: packet socket on " + name)));
  int one = 1;
  sockaddr_ll address{};
  address.sll_family = AF_PACKET;
  address.sll_protocol = htons(ETH_P_ALL);
  address.sll_ifindex = static_cast<int>(index);
  if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)) != 0 ||
      setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) != 0 ||
      bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const Status s = Unavailable(Errno("delay forwarder: setting up the packet socket on " + name));
    close(fd);
    return Err(s);
  }
  return fd;
}

}  // namespace

Result<std::unique_ptr<DelayForwarder>> DelayForwarder::Start(const std::string& netns, const std::string& a,
                                                              const std::string& b, double a_to_b_s,
                                                              double b_to_a_s) {
  std::unique_ptr<DelayForwarder> forwarder(new DelayForwarder());
  std::promise<Status> opened;
  std::future<Status> ready = opened.get_future();
  DelayForwarder* self = forwarder.get();
  forwarder->thread_ = std::thread([self, netns, a, b, a_to_b_s, b_to_a_s, &opened] {
    // This thread alone moves into the namespace; the sockets stay there.
    const std::string path = "/run/netns/" + netns;
    const int ns = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) {
      opened.set_value(Unavailable(Errno("delay forwarder: entering " + path)));
      if (ns >= 0) close(ns);
      return;
    }
    close(ns);
    Result<int> fd_a = OpenInterface(a);
    Result<int> fd_b = fd_a ? OpenInterface(b) : Result<int>(Err(fd_a.error()));
    if (!fd_a || !fd_b) {
      if (fd_a) close(*fd_a);
      opened.set_value(fd_a ? fd_b.error() : fd_a.error());
      return;
    }
    opened.set_value(Status::Ok());
    self->Run(*fd_a, *fd_b, a_to_b_s, b_to_a_s);
    close(*fd_a);
    close(*fd_b);
  });
  Status s = ready.get();
  if (!s.ok()) {
    forwarder->thread_.join();
    return Err(s);
  }
  return forwarder;
}

DelayForwarder::~DelayForwarder() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void DelayForwarder::Run(int fd_a, int fd_b, double a_to_b_s, double b_to_a_s) {
  const int fds[2] = {fd_a, fd_b};
  const Clock::duration delay[2] = {std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a_to_b_s)),
                                    std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(b_to_a_s))};
  std::deque<HeldFrame> held[2];  // [0]: from a, to leave on b; [1]: from b, to leave on a
  std::vector<char> buffer(kMaxFrame);
  while (!stop_.load(std::memory_order_relaxed)) {
    // Sleep until a frame arrives or the next held one is due (at most 50 ms,
    // to see stop_).
    Clock::time_point wake = Clock::now() + std::chrono::milliseconds(50);
    for (const auto& q : held) {
      if (!q.empty() && q.front().due < wake) wake = q.front().due;
    }
    const auto wait = std::max<Clock::duration>(Clock::duration::zero(), wake - Clock::now());
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
    timespec timeout{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    pollfd p[2] = {{fd_a, POLLIN, 0}, {fd_b, POLLIN, 0}};
    if (RetryOnEintr([&] { return ppoll(p, 2, &timeout, nullptr); }) < 0) break;
    for (int side = 0; side < 2; ++side) {
      if (!(p[side].revents & POLLIN)) continue;
      for (;;) {
        const ssize_t n = recv(fds[side], buffer.data(), buffer.size(), MSG_DONTWAIT | MSG_TRUNC);
        if (n <= 0) break;
        if (static_cast<size_t>(n) > buffer.size()) {  // larger than any frame a veth gives: dropped
          dropped_.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        held[side].push_back({Clock::now() + delay[side], std::vector<char>(buffer.begin(), buffer.begin() + n)});
      }
    }
    const Clock::time_point now = Clock::now();
    for (int side = 0; side < 2; ++side) {
      while (!held[side].empty() && held[side].front().due <= now) {
        std::vector<char>& frame = held[side].front().bytes;
        if (frame.size() >= sizeof(VnetHeader)) {
          // Received checksums were checked on the way in; a send takes only
          // the offload flags that describe work still to do.
          auto* header = reinterpret_cast<VnetHeader*>(frame.data());
          header->flags &= static_cast<uint8_t>(~kVnetDataValid);
        }
        const ssize_t sent = send(fds[1 - side], frame.data(), frame.size(), MSG_DONTWAIT);
        (sent == static_cast<ssize_t>(frame.size()) ? forwarded_ : dropped_).fetch_add(1, std::memory_order_relaxed);
        held[side].pop_front();
      }
    }
  }
}

}  // namespace chorus::node
