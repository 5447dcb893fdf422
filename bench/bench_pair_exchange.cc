// Where a 2-rank all-reduce's time goes in the provider's large-message
// protocol, without Chorus's transport: two processes run
// gossip::PairExchange (exchange halves, add, exchange the sums) with its two
// protocols, alternated round by round: tagged messages (over tcp;ofi_rxm a
// rendezvous per message) and fi_write into the peer's scratch with an
// ordered notice (no handshake; gossip/transport/fabric/bench/pair_exchange.h).
// A call's time is the slower rank's mean over `calls` calls; each protocol's
// figure is the median over rounds, and `tagged/write` the median of the
// per-round ratios (above 1: the writes are faster). The first call of each
// protocol checks the sum.
//
// Made for tcp;ofi_rxm; over net its figures are no reference (this tagged
// loop ran slower than Chorus's own halving-doubling there). Measured:
// docs/performance.md ("2026-11-24: paired, after the small tree and the
// larger segments").
//
// Usage: bench_pair_exchange [provider=tcp;ofi_rxm] [bytes=1048576] [rounds=15] [calls=200]
// A benchmark, not a test: asserts nothing beyond the sum.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "common/quantile.h"
#include "gossip/transport/fabric/bench/pair_exchange.h"
#include "node/bench/bench_process.h"

namespace {

using chorus::gossip::PairProtocol;

constexpr const char* kWho = "bench_pair_exchange";

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", kWho, what.c_str());
  std::exit(1);
}

void Control(const chorus::Status& status) {
  if (!status.ok()) Fail(status.ToString());
}

// The parent's side of one blob swap: each child's blob goes to the other.
void RelaySwap(const int child[2]) {
  std::vector<uint8_t> blob[2];
  for (int i = 0; i < 2; ++i) {
    auto b = chorus::node::ReadBlob(child[i], kWho);
    if (!b) Control(b.error());
    blob[i] = std::move(*b);
  }
  for (int i = 0; i < 2; ++i) Control(chorus::node::WriteBlob(child[i], blob[1 - i], kWho));
}

// The slower rank's mean of one timed block.
double TimedBlock(const int child[2]) {
  auto worst = chorus::node::RunTimedRound(std::span<const int>(child, 2), kWho);
  if (!worst) Control(worst.error());
  return *worst;
}

// Protocol order in round r: alternating, so neither always goes first.
PairProtocol Nth(int round, int k) { return (round + k) % 2 == 0 ? PairProtocol::kTagged : PairProtocol::kWrite; }

// One process: the exchange, warm-up, then `rounds` timed blocks per protocol
// in Nth's order.
void RunRank(int self, int control, chorus::gossip::FabricProvider provider, size_t bytes, int rounds, int calls) {
  auto swap = [control](std::span<const uint8_t> mine) -> chorus::Result<std::vector<uint8_t>> {
    CHORUS_RETURN_IF_ERROR(chorus::node::WriteBlob(control, mine, kWho));
    return chorus::node::ReadBlob(control, kWho);
  };
  auto exchange = chorus::gossip::PairExchange::Open(provider, bytes, self, swap);
  if (!exchange) Fail(exchange.error().ToString());
  for (PairProtocol p : {PairProtocol::kTagged, PairProtocol::kWrite}) {
    Control((*exchange)->Call(p, true));
    for (int c = 0; c < 20; ++c) Control((*exchange)->Call(p, false));  // warm-up
  }
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      Control(chorus::node::AwaitGo(control, kWho));
      const auto start = std::chrono::steady_clock::now();
      for (int c = 0; c < calls; ++c) Control((*exchange)->Call(Nth(r, k), false));
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / calls;
      Control(chorus::node::SendBytes(control, &us, sizeof(us), kWho));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string provider_name = argc > 1 ? argv[1] : "tcp;ofi_rxm";
  const auto provider = chorus::FromName(chorus::gossip::kFabricProviderNames, provider_name);
  const size_t bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : size_t{1} << 20;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 15;
  const int calls = argc > 4 ? std::atoi(argv[4]) : 200;
  if (!provider) {
    std::fprintf(stderr, "%s: unknown provider \"%s\" (expected %s)\n", kWho, provider_name.c_str(),
                 chorus::JoinNames(chorus::NamesOf(chorus::gossip::kFabricProviderNames), ", ", true).c_str());
    return 2;
  }
  if (bytes < 8 || bytes % 8 != 0 || rounds < 1 || calls < 1) {
    std::fprintf(stderr, "usage: %s [provider=tcp;ofi_rxm] [bytes=1048576 (a multiple of 8)] [rounds=15] [calls=200]\n",
                 argv[0]);
    return 2;
  }
  int child[2];
  pid_t pids[2];
  for (int i = 0; i < 2; ++i) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) Fail(std::string("socketpair: ") + strerror(errno));
    pids[i] = fork();
    if (pids[i] < 0) Fail(std::string("fork: ") + strerror(errno));
    if (pids[i] == 0) {
      close(pair[0]);
      RunRank(i, pair[1], *provider, bytes, rounds, calls);
      std::_Exit(0);
    }
    close(pair[1]);
    child[i] = pair[0];
  }
  RelaySwap(child);  // endpoint names
  RelaySwap(child);  // regions

  std::vector<double> tagged, write, ratio;
  for (int r = 0; r < rounds; ++r) {
    double us[2];
    for (int k = 0; k < 2; ++k) us[Nth(r, k) == PairProtocol::kTagged ? 0 : 1] = TimedBlock(child);
    tagged.push_back(us[0]);
    write.push_back(us[1]);
    ratio.push_back(us[0] / us[1]);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  std::printf("# %s: 2 processes over %s, %zu-byte all-reduce (exchange halves, add, exchange sums); "
              "medians over %d rounds of %d calls, the slower rank's mean per call\n",
              kWho, provider_name.c_str(), bytes, rounds, calls);
  std::printf("%12s %12s %12s %14s\n", "size(B)", "tagged(us)", "write(us)", "tagged/write");
  std::printf("%12zu %12.1f %12.1f %14.2f\n", bytes, chorus::Quantile(tagged, 0.5), chorus::Quantile(write, 0.5),
              chorus::Quantile(ratio, 0.5));
  return failed;
}
