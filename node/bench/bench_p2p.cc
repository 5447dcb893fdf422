// `chorus bench p2p`: fi_pingpong-style ping-pong between this process and a
// fork()ed peer over gossip::MakeFabricTransport (see bench_p2p.h).
//
// Per provider: socketpair, fork; both sides open an endpoint, swap fi_getname
// blobs over the socket, SetPeers, then for every size run `warmup + iterations`
// round trips. Like fabtests' pingpong, each side has its next receive posted
// before the message it waits for can arrive: rank 0 posts the receive, then
// sends; rank 1 waits for the ping, posts the next receive, then answers.
#include "node/bench/bench_p2p.h"

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "common/quantile.h"
#include "common/page_bytes.h"
#include "common/status.h"
#include "gossip/transport/fabric/fabric_transport.h"
#include "node/bench/bench_process.h"

namespace chorus::node {
namespace {

using gossip::PeerInfo;
using gossip::RequestPtr;

constexpr std::string_view kP2pBench = "bench p2p";  // names this bench in errors
constexpr double kWaitSeconds = 60;  // per operation: only a broken peer reaches it

struct SizeResult {
  size_t size = 0;
  int iterations = 0;
  double median_us = 0;  // half round trip
  double mean_us = 0;    // half round trip, = fi_pingpong usec/xfer
  double gbps = 0;       // 2 x size x iterations / elapsed, 1e9 bytes/s
};

std::vector<size_t> Sizes(const BenchP2pOptions& o) {
  std::vector<size_t> sizes;
  for (size_t s = std::max<size_t>(o.min_size, 1); s <= o.max_size; s *= 4) sizes.push_back(s);
  if (sizes.empty() || sizes.back() != o.max_size) sizes.push_back(o.max_size);
  return sizes;
}

int IterationsFor(const BenchP2pOptions& o, size_t size) {
  if (o.iterations > 0) return o.iterations;
  const size_t budget = size_t{1} << 30;
  return static_cast<int>(std::clamp<size_t>(budget / size, 10, 1000));
}

int WarmupFor(const BenchP2pOptions& o, int iterations) {
  return o.warmup >= 0 ? o.warmup : std::max(2, iterations / 10);
}

// Opens the endpoint and connects it to the other process through `fd`.
Result<std::unique_ptr<gossip::Transport>> Connect(const BenchP2pOptions& o, gossip::FabricProvider provider,
                                                   int rank, int fd) {
  gossip::FabricOptions options;
  options.provider = provider;
  options.busy_poll = gossip::BusyPollFor(provider, 2, o.busy_poll_us);
  o.knobs.ApplyTo(options);
  options.node_name = rank == 0 ? "bench0" : "bench1";
  CHORUS_ASSIGN_OR_RETURN(auto transport, gossip::MakeFabricTransport(options));
  const std::vector<uint8_t> mine = transport->LocalAddress();
  CHORUS_RETURN_IF_ERROR(WriteBlob(fd, mine, kP2pBench));
  CHORUS_ASSIGN_OR_RETURN(std::vector<uint8_t> theirs, ReadBlob(fd, kP2pBench));
  std::vector<PeerInfo> peers(2);
  peers[rank] = PeerInfo{rank, mine, options.node_name};
  peers[1 - rank] = PeerInfo{1 - rank, theirs, rank == 0 ? "bench1" : "bench0"};
  CHORUS_RETURN_IF_ERROR(o.knobs.SealEpoch(*transport));
  CHORUS_RETURN_IF_ERROR(transport->SetPeers(rank, peers));
  // Neither sends before both have installed their peers
  // (Transport::NeedsPeersInstalledBeforeFirstSend: shm needs it).
  const char installed = 'i';
  char theirs_installed = 0;
  CHORUS_RETURN_IF_ERROR(SendBytes(fd, &installed, 1, kP2pBench));
  CHORUS_RETURN_IF_ERROR(ReadBytes(fd, &theirs_installed, 1, kP2pBench));
  return transport;
}


// Rank 1: answer every message with one of the same size, `rounds` times per size.
Status Echo(gossip::Transport& t, const BenchP2pOptions& o) {
  // As fi_pingpong's server: the receive of the next ping is posted (into the
  // one receive buffer) before the pong goes out, so a ping never arrives
  // unexpected, and the pong goes out of a buffer of its own. Sending the bytes
  // just received instead makes the peer's copy read lines still dirty in this
  // core's L2, which cost shm about a quarter of its 1 MiB bandwidth (6.9
  // against 8.8 GB/s, medians of 5) -- a cache effect, not the transport's.
  // Message buffers start on a page, as fi_pingpong's do (common/page_bytes.h).
  const PageBytes ping = AllocateZeroedPageBytes(o.max_size);
  const PageBytes pong = AllocateZeroedPageBytes(o.max_size);
  const auto sizes = Sizes(o);
  for (size_t k = 0; k < sizes.size(); ++k) {
    const size_t size = sizes[k];
    const int iters = IterationsFor(o, size);
    const int rounds = iters + WarmupFor(o, iters);
    const std::span<std::byte> request(ping.get(), size);
    const std::span<const std::byte> answer(pong.get(), size);
    CHORUS_ASSIGN_OR_RETURN(RequestPtr recv, t.Irecv(0, k, request));
    for (int i = 0; i < rounds; ++i) {
      auto got = recv->Wait(Deadline::AfterSeconds(kWaitSeconds));
      if (!got) return got.error();
      if (i + 1 < rounds) {
        CHORUS_ASSIGN_OR_RETURN(recv, t.Irecv(0, k, request));
      }
      CHORUS_RETURN_IF_ERROR(t.Send(0, k, answer, Deadline::AfterSeconds(kWaitSeconds)));
    }
  }
  return Status::Ok();
}

// Rank 0: time the round trips.
Result<std::vector<SizeResult>> Ping(gossip::Transport& t, const BenchP2pOptions& o) {
  const PageBytes out = AllocatePageBytes(o.max_size);
  const PageBytes in = AllocateZeroedPageBytes(o.max_size);
  std::fill(out.get(), out.get() + o.max_size, std::byte{0x5a});
  std::vector<SizeResult> results;
  const auto sizes = Sizes(o);
  for (size_t k = 0; k < sizes.size(); ++k) {
    const size_t size = sizes[k];
    const int iters = IterationsFor(o, size);
    const int warmup = WarmupFor(o, iters);
    std::vector<double> half_rtt_us;
    half_rtt_us.reserve(iters);
    Clock::time_point timed_start;
    for (int i = 0; i < warmup + iters; ++i) {
      if (i == warmup) timed_start = Clock::now();
      const auto start = Clock::now();
      CHORUS_ASSIGN_OR_RETURN(RequestPtr recv, t.Irecv(1, k, std::span<std::byte>(in.get(), size)));
      CHORUS_ASSIGN_OR_RETURN(RequestPtr send,
                              t.Isend(1, k, std::span<const std::byte>(out.get(), size)));
      auto sent = send->Wait(Deadline::AfterSeconds(kWaitSeconds));
      if (!sent) return Err(sent.error());
      auto got = recv->Wait(Deadline::AfterSeconds(kWaitSeconds));
      if (!got) return Err(got.error());
      if (got->bytes != size) {
        return Err(DataLoss("bench p2p: pong of " + std::to_string(got->bytes) + " bytes, sent " +
                            std::to_string(size)));
      }
      if (i >= warmup) {
        half_rtt_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / 2);
      }
    }
    const double elapsed_s = std::chrono::duration<double>(Clock::now() - timed_start).count();
    SizeResult r;
    r.size = size;
    r.iterations = iters;
    double sum = 0;
    for (double v : half_rtt_us) sum += v;
    r.mean_us = sum / iters;
    r.median_us = Quantile(half_rtt_us, 0.5);
    r.gbps = 2.0 * static_cast<double>(size) * iters / elapsed_s / 1e9;
    results.push_back(r);
  }
  return results;
}

std::string SizeText(size_t bytes) {
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) {
    return std::to_string(bytes >> 20) + " MiB";
  }
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

// One provider: fork the echo peer, ping it, print rows.
Status RunProvider(gossip::FabricProvider provider, const BenchP2pOptions& o) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
    return ErrnoStatus(errno, "bench p2p: socketpair");
  }
  std::fflush(stdout);
  const pid_t child = fork();
  if (child < 0) return ErrnoStatus(errno, "bench p2p: fork");
  if (child == 0) {
    close(fds[0]);
    // Everything (the endpoint above all: shm unlinks its /dev/shm region on
    // close) is destroyed before _exit, which skips atexit handlers.
    const Status s = [&]() -> Status {
      CHORUS_ASSIGN_OR_RETURN(auto t, Connect(o, provider, 1, fds[1]));
      return Echo(*t, o);
    }();
    if (!s.ok()) CHORUS_LOG_ERROR(Subsys::kBench, "bench p2p peer (", ProviderText(provider), "): ", s.ToString());
    char done = s.ok() ? 'y' : 'n';
    (void)!write(fds[1], &done, 1);
    close(fds[1]);
    _exit(s.ok() ? 0 : 1);
  }
  close(fds[1]);
  auto run = [&]() -> Status {
    CHORUS_ASSIGN_OR_RETURN(auto t, Connect(o, provider, 0, fds[0]));
    const std::string version = gossip::FabricProviderVersion(provider).value_or("?");
    CHORUS_ASSIGN_OR_RETURN(auto results, Ping(*t, o));
    // Keep our endpoint open until the peer has finished its last send.
    char done = 0;
    CHORUS_RETURN_IF_ERROR(ReadBytes(fds[0], &done, 1, kP2pBench));
    for (const SizeResult& r : results) {
      std::printf("%-12s %-6s %9s %6d %12.2f %12.2f %10.3f\n", ProviderText(provider), version.c_str(),
                  SizeText(r.size).c_str(), r.iterations, r.median_us, r.mean_us, r.gbps);
    }
    std::fflush(stdout);
    return Status::Ok();
  };
  Status s = run();
  close(fds[0]);
  int status = 0;
  if (!s.ok()) kill(child, SIGKILL);
  waitpid(child, &status, 0);
  if (s.ok() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    s = Internal("bench p2p: the peer process failed (status " + std::to_string(status) + ")");
  }
  return s;
}

}  // namespace

int RunBenchP2p(const BenchP2pOptions& options) {
  if (options.min_size == 0 || options.max_size < options.min_size) {
    CHORUS_LOG_ERROR(Subsys::kBench, "bench p2p: need 0 < min-size <= max-size, got ",
                     options.min_size, " and ", options.max_size);
    return 2;
  }
  std::printf("libfabric %s; latency = round trip / 2 (median, mean); bandwidth = 2 x size x "
              "iterations / time\n",
              gossip::LibfabricVersion().c_str());
  std::printf("%-12s %-6s %9s %6s %12s %12s %10s\n", "provider", "prov", "size", "iters",
              "lat_med_us", "lat_mean_us", "bw_GB/s");
  int rc = 0;
  for (gossip::FabricProvider provider : options.providers) {
    Status s = RunProvider(provider, options);
    if (!s.ok()) {
      CHORUS_LOG_ERROR(Subsys::kBench, "bench p2p (", ProviderText(provider), "): ", s.ToString());
      rc = 1;
    }
  }
  return rc;
}

}  // namespace chorus::node
