// What plain sockets do with a ring all-reduce's traffic on this host, without
// libfabric or Chorus: the tcp class's reference. n processes joined in a ring
// of plain TCP sockets on 127.0.0.1, each streaming 2(n-1)/n of the buffer per
// call to its right neighbour while it receives as much from its left, in
// segments, with nonblocking sockets and poll(2) (no busy polling). The first
// half of a call's bytes goes through a segment of scratch and is added into the
// buffer, as a reduce-scatter does (the same AddInto as the all-reduces); the
// second half lands in the buffer, as an all-gather's. Nothing orders one step
// after another, so what it costs is the kernel's loopback copies, its TCP
// stack, the sum and the poll(2) wake-ups. Not a strict bound: with a core per
// process, a waiter that spins instead of sleeping beats it (2 ranks), and
// halving-doubling moves the same bytes in another pattern.
//
// Prints, per size, the time of one call-equivalent (median over repetitions of
// the slowest rank's mean) and busbw = size / time * 2(n-1)/n, as the
// all-reduce table does, with the reduction ("add") and without it ("none":
// the reduce-scatter half dropped in scratch).
//
// Usage: bench_loopback_ring [ranks=4] [repetitions=5] [segment_bytes=262144]
// A benchmark, not a test: asserts nothing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/posix_io.h"
#include "common/quantile.h"
#include "gossip/collectives/collective_internal.h"
#include "node/bench/bench_process.h"
#include "node/control/listen_socket.h"

namespace {

[[noreturn]] void Die(const char* what) {
  std::perror(what);
  std::exit(1);
}

// A listening socket on 127.0.0.1 and an ephemeral port.
int Listen(uint16_t* port) {
  auto listener = chorus::node::ListenOnFreePort("127.0.0.1");
  if (!listener) {
    std::fprintf(stderr, "bench_loopback_ring: %s\n", listener.error().ToString().c_str());
    std::exit(1);
  }
  *port = listener->second;
  return listener->first;
}

int Connect(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) Die("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Die("connect");
  return fd;
}

void Prepare(int fd) {
  const int one = 1;  // as libfabric's tcp providers set it
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) Die("TCP_NODELAY");
}

// Whole-buffer I/O on a process's control socket (node/bench/bench_process.h);
// exits on failure.
void Control(const chorus::Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "bench_loopback_ring: %s\n", status.ToString().c_str());
  std::exit(1);
}
constexpr const char* kWho = "bench_loopback_ring";

// Streams `calls` calls' worth of bytes (`per_call` each way) to `right` while
// receiving as much from `left`. The first half of each call's bytes (a ring's
// reduce-scatter) lands in the segment `scratch` and is added into `acc` when
// `reduce` (else dropped there); the second half (its all-gather) lands straight
// in `acc`, as the all-reduces receive it. `acc` is used cyclically.
void Stream(int left, int right, size_t per_call, int calls, const std::vector<float>& send_buf,
            std::vector<float>& scratch, std::vector<float>& acc, bool reduce) {
  const size_t total = per_call * static_cast<size_t>(calls);
  const size_t half = per_call / 2;
  const size_t buf_bytes = send_buf.size() * sizeof(float);
  const size_t acc_bytes = acc.size() * sizeof(float);
  const size_t seg_bytes = scratch.size() * sizeof(float);
  auto* acc_base = reinterpret_cast<char*>(acc.data());
  size_t sent = 0, received = 0, filled = 0, acc_off = 0;  // acc_off in bytes
  while (sent < total || received < total) {
    pollfd fds[2] = {{right, static_cast<short>(sent < total ? POLLOUT : 0), 0},
                     {left, static_cast<short>(received < total ? POLLIN : 0), 0}};
    if (chorus::RetryOnEintr([&] { return poll(fds, 2, -1); }) < 0) Die("poll");
    if (fds[0].revents & (POLLOUT | POLLERR)) {
      const size_t off = sent % buf_bytes;
      const size_t len = std::min({total - sent, buf_bytes - off, seg_bytes});
      const ssize_t r = send(right, reinterpret_cast<const char*>(send_buf.data()) + off, len, MSG_DONTWAIT);
      if (r < 0 && errno != EAGAIN) Die("send");
      if (r > 0) sent += static_cast<size_t>(r);
    }
    if (!(fds[1].revents & (POLLIN | POLLERR | POLLHUP))) continue;
    const size_t pos = received % per_call;
    if (acc_off == acc_bytes) acc_off = 0;
    const bool into_scratch = pos < half;
    const size_t want = into_scratch ? std::min(half - pos, seg_bytes - filled)
                                     : std::min({per_call - pos, acc_bytes - acc_off, seg_bytes});
    char* into = into_scratch ? reinterpret_cast<char*>(scratch.data()) + filled : acc_base + acc_off;
    const ssize_t r = recv(left, into, want, MSG_DONTWAIT);
    if (r == 0) Die("recv: peer closed");
    if (r < 0 && errno != EAGAIN) Die("recv");
    if (r <= 0) continue;
    received += static_cast<size_t>(r);
    if (!into_scratch) {
      acc_off += static_cast<size_t>(r);
      continue;
    }
    filled += static_cast<size_t>(r);
    if (filled == seg_bytes || received % per_call == half) {
      const size_t elems = std::min(filled, acc_bytes - acc_off) / sizeof(float);
      if (reduce) chorus::gossip::detail::AddInto(reinterpret_cast<float*>(acc_base + acc_off), scratch.data(), elems);
      acc_off += elems * sizeof(float);
      filled = 0;
    }
  }
}

struct Row {
  size_t bytes;
  bool reduce;
};

// Bytes one rank sends per call of a ring all-reduce of `bytes` over n ranks
// (chunks rounded down to whole floats).
size_t PerCall(size_t bytes, int n) { return bytes / n / sizeof(float) * sizeof(float) * 2 * (n - 1); }

int Calls(size_t bytes, int n) {
  // About 0.3 s per repetition at 3 GB/s of aggregate loopback throughput.
  const double want = 0.3 * 3e9 / (static_cast<double>(PerCall(bytes, n)) * n);
  return static_cast<int>(std::clamp(want, 4.0, 2000.0));
}

void Rank(int self, int n, int listen_fd, uint16_t right_port, int control,
          const std::vector<Row>& rows, int repetitions, size_t segment_bytes) {
  // Connect right first, then accept from the left: the backlog holds the
  // left neighbour's connect meanwhile.
  const int right = Connect(right_port);
  const int left = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (left < 0) Die("accept");
  Prepare(left);
  Prepare(right);
  std::vector<float> scratch(segment_bytes / sizeof(float));
  for (const Row& row : rows) {
    std::vector<float> send_buf(row.bytes / sizeof(float), 1.0f + static_cast<float>(self));
    std::vector<float> acc(row.bytes / sizeof(float), 0.0f);
    const size_t per_call = PerCall(row.bytes, n);
    const int calls = Calls(row.bytes, n);
    Stream(left, right, per_call, 1, send_buf, scratch, acc, row.reduce);  // warm-up
    for (int rep = 0; rep < repetitions; ++rep) {
      Control(chorus::node::AwaitGo(control, kWho));
      const auto start = std::chrono::steady_clock::now();
      Stream(left, right, per_call, calls, send_buf, scratch, acc, row.reduce);
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / calls;
      Control(chorus::node::SendBytes(control, &us, sizeof(us), kWho));
    }
  }
  close(left);
  close(right);
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 4;
  const int repetitions = argc > 2 ? std::atoi(argv[2]) : 5;
  const size_t segment_bytes = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 262144;
  if (n < 2 || n > 64 || repetitions < 1 || segment_bytes < 4 || segment_bytes % 4 != 0) {
    std::fprintf(stderr, "usage: %s [ranks=4 (2..64)] [repetitions=5] [segment_bytes=262144 (a multiple of 4)]\n",
                 argv[0]);
    return 2;
  }
  std::vector<Row> rows;
  for (size_t bytes : {size_t{1} << 20, size_t{16} << 20, size_t{64} << 20}) {
    rows.push_back({bytes, true});
    rows.push_back({bytes, false});
  }

  std::vector<int> listen_fds(n);
  std::vector<uint16_t> ports(n);
  for (int i = 0; i < n; ++i) listen_fds[i] = Listen(&ports[i]);
  std::vector<int> child(n);  // the parent's end of each process's control socket
  std::vector<pid_t> pids(n);
  for (int i = 0; i < n; ++i) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) Die("socketpair");
    pids[i] = fork();
    if (pids[i] < 0) Die("fork");
    if (pids[i] == 0) {
      close(pair[0]);
      Rank(i, n, listen_fds[i], ports[(i + 1) % n], pair[1], rows, repetitions, segment_bytes);
      std::_Exit(0);
    }
    close(pair[1]);
    child[i] = pair[0];
  }
  for (int fd : listen_fds) close(fd);

  std::printf("# bench_loopback_ring: %d processes in a ring of TCP sockets on 127.0.0.1, %zu-byte segments, "
              "poll(2); time = median over %d repetitions of the slowest rank's mean per call; "
              "busbw = size / time * 2(n-1)/n\n",
              n, segment_bytes, repetitions);
  std::printf("%12s %8s %12s %12s\n", "size(B)", "reduce", "time(us)", "busbw(GB/s)");
  for (const Row& row : rows) {
    std::vector<double> slowest;
    for (int rep = 0; rep < repetitions; ++rep) {
      auto worst = chorus::node::RunTimedRound(child, kWho);
      if (!worst) Control(worst.error());
      slowest.push_back(*worst);
    }
    const double us = chorus::Quantile(slowest, 0.5);
    const double busbw = static_cast<double>(row.bytes) / (us * 1e-6) / 1e9 * 2.0 * (n - 1) / n;
    std::printf("%12zu %8s %12.1f %12.3f\n", row.bytes, row.reduce ? "add" : "none", us, busbw);
    std::fflush(stdout);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  return failed;
}
