// `chorus bench allreduce`: all-reduce timings over the fabric transport between
// N fork()ed processes (see bench_allreduce.h for the definitions).
//
// Per (provider, N): the parent forks N children (rank i = child i), each with
// its own socketpair. Every child opens an endpoint and sends its LocalAddress()
// blob; the parent sends the whole list back to every child ('p' + N blobs), and
// each child calls SetPeers(rank, peers). The children then run the same rows in
// the same order (algorithm x type x size) and stream one frame per row to the
// parent, which prints the row once every rank's frame is in. At the end the
// parent sends 'r' (release: every rank is past its last send, endpoints may
// close); on any failure it sends 'a' (abort) instead, and each child's watcher
// thread marks every peer dead so that a rank blocked in a collective fails at
// once and unwinds. Children always destroy their endpoint before _exit (shm
// unlinks its /dev/shm region on close); the parent reaps them, and only a child
// still alive 10 s after the end is killed (its /dev/shm regions then removed).
//
// Before the first row, every rank runs the first row's all-reduce untimed for
// `warmup_seconds` (rank 0 decides when to stop). Per row, on every rank: one
// all-reduce of rank+1 checked against n(n+1)/2, five untimed warm-up calls
// whose mean time on rank 0 sets the iteration count (broadcast from rank 0 so
// every rank agrees), a barrier, then the timed calls, all of zeros (which
// stay zero, so nothing is refilled between calls). Each rank sends its
// per-call times; the parent takes the slowest rank per call, then the median
// and the 99th percentile over calls.
#include "node/bench/bench_allreduce.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <system_error>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "common/clock.h"
#include "common/page_bytes.h"
#include "common/fp16.h"
#include "common/log.h"
#include "common/posix_io.h"
#include "common/quantile.h"
#include "common/status.h"
#include "gossip/collectives/allreduce_auto.h"
#include "gossip/collectives/collective.h"
#include "gossip/transport/fabric/fabric_transport.h"
#include "node/exchange/allreduce_exchange.h"
#include "node/bench/bench_process.h"

namespace chorus::node {
namespace {

using gossip::AllreduceAlgorithm;
using gossip::PeerInfo;
using gossip::Tag;

constexpr double kCallSeconds = 30;        // deadline of one collective: only a broken rank reaches it
constexpr int kRowTimeoutMs = 180 * 1000;  // parent: no frame for this long = hung run
constexpr double kReapSeconds = 10;        // parent: children still alive after this are killed
constexpr uint64_t kTagWindow = uint64_t{1} << 16;  // tag bases cycle through this many ranges
constexpr int kWarmupCalls = 5;  // per row, before the iteration count is set

constexpr std::string_view kAllreduceBench = "bench allreduce";  // names this bench in errors

constexpr char kFramePeers = 'p';
constexpr char kFrameInstalled = 'i';  // a rank's SetPeers is done
constexpr char kFrameGo = 'g';         // every rank's is: messages may flow
constexpr char kFrameRelease = 'r';
constexpr char kFrameAbort = 'a';
constexpr char kFrameRow = 'k';
constexpr char kFrameFailed = 'f';

enum class DType { kFloat32, kFloat16 };

const char* DTypeName(DType t) { return t == DType::kFloat32 ? "float" : "half"; }
size_t DTypeBytes(DType t) { return t == DType::kFloat32 ? 4 : 2; }

struct RowSpec {
  AllreduceAlgorithm algorithm;
  DType dtype;
  size_t bytes;
  int round = 1;
};

// One rank's result for one row (sent as raw bytes over the socketpair: same
// binary on both ends), followed by `iterations` doubles: its per-call times.
struct RowResult {
  int32_t iterations = 0;
  int32_t check_ok = 0;
  std::vector<double> times_us;  // not part of the fixed frame
};

// With the shm provider the ranks also attach a host segment, as nodes on one
// host do: `auto` may then pick shared-memory. Over tcp they do not (the tcp
// rows measure the network path), and shared-memory rows are left out.
bool AttachesHostSegment(gossip::FabricProvider provider) { return provider == gossip::FabricProvider::kShm; }

// One round: algorithm by algorithm; with several (BenchAllreduceOptions::
// rounds), size by size with the algorithms alternated, every round again.
std::vector<RowSpec> Rows(const BenchAllreduceOptions& o, gossip::FabricProvider provider) {
  std::vector<RowSpec> rows;
  auto measured = [&](AllreduceAlgorithm a) {
    return a != AllreduceAlgorithm::kSharedMemory || AttachesHostSegment(provider);
  };
  if (o.rounds <= 1) {
    for (AllreduceAlgorithm a : o.algorithms) {
      for (DType t : {DType::kFloat32, DType::kFloat16}) {
        for (size_t s : o.sizes) {
          if (measured(a) && s >= DTypeBytes(t)) rows.push_back({a, t, s - s % DTypeBytes(t)});
        }
      }
    }
    return rows;
  }
  for (int round = 1; round <= o.rounds; ++round) {
    for (DType t : {DType::kFloat32, DType::kFloat16}) {
      for (size_t s : o.sizes) {
        for (AllreduceAlgorithm a : o.algorithms) {
          if (measured(a) && s >= DTypeBytes(t)) rows.push_back({a, t, s - s % DTypeBytes(t), round});
        }
      }
    }
  }
  return rows;
}

// ---- child (one rank) ----

class RankRunner {
 private:
  // Calls f with the row's slice of the buffer as floats or as half bits
  // (defined first: Run and WarmUp use its deduced return type).
  template <typename F>
  auto WithData(const RowSpec& row, F&& f) {
    if (row.dtype == DType::kFloat32) {
      return f(std::span<float>(reinterpret_cast<float*>(buf_.data()), row.bytes / 4));
    }
    return f(std::span<uint16_t>(reinterpret_cast<uint16_t*>(buf_.data()), row.bytes / 2));
  }

 public:
  RankRunner(const gossip::Collective& c, const BenchAllreduceOptions& o, std::span<std::byte> buf,
             gossip::FabricProvider provider)
      : c_(c), o_(o), buf_(buf), crossovers_(CrossoversFromConfig(provider, o.crossovers)) {}

  Result<RowResult> Run(const RowSpec& row) {
    return WithData(row, [&](auto data) { return RunTyped(data, row.algorithm); });
  }

  // Untimed calls of `row` until rank 0 has spent `seconds` on them (it tells
  // the others to go on or stop after every call).
  Status WarmUp(const RowSpec& row, double seconds) {
    const Deadline until = Deadline::AfterSeconds(seconds);
    for (int32_t more = 1; more != 0;) {
      const Status called = WithData(row, [&](auto data) -> Status {
        auto us = TimedCall(data, row.algorithm);
        return StatusOf(us);
      });
      CHORUS_RETURN_IF_ERROR(called);
      more = c_.rank() != 0 || !until.Expired() ? 1 : 0;
      CHORUS_RETURN_IF_ERROR(BroadcastFromRankZero(&more));
    }
    return Status::Ok();
  }

 private:
  Status BroadcastFromRankZero(int32_t* value) {
    return c_.Broadcast(std::as_writable_bytes(std::span<int32_t>(value, 1)), 0, CollectiveOpts());
  }

  Tag NextTagBase() { return (calls_++ % kTagWindow) * gossip::kTagsPerCollective; }

  gossip::AllreduceOptions AllreduceOpts(AllreduceAlgorithm a) {
    gossip::AllreduceOptions opts;
    opts.algorithm = a;
    opts.crossovers = crossovers_;  // auto picks as a node on this provider would
    opts.tag_base = NextTagBase();
    opts.deadline = Deadline::AfterSeconds(kCallSeconds);
    opts.identify_missing_peers = false;
    opts.segment_bytes = o_.segment_bytes;
    return opts;
  }

  gossip::CollectiveOptions CollectiveOpts() {
    gossip::CollectiveOptions opts;
    opts.tag_base = NextTagBase();
    opts.deadline = Deadline::AfterSeconds(kCallSeconds);
    opts.identify_missing_peers = false;
    return opts;
  }

  template <typename T>
  static T Value(float v) {
    if constexpr (std::is_same_v<T, float>) {
      return v;
    } else {
      return FloatToHalfBits(v);
    }
  }

  // Times one all-reduce of `data`, in us.
  template <typename T>
  Result<double> TimedCall(std::span<T> data, AllreduceAlgorithm a) {
    const gossip::AllreduceOptions opts = AllreduceOpts(a);
    const auto start = Clock::now();
    CHORUS_RETURN_IF_ERROR(c_.Allreduce(data, opts));
    return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  }

  template <typename T>
  Result<RowResult> RunTyped(std::span<T> data, AllreduceAlgorithm a) {
    RowResult r;
    const int n = c_.size();
    // Correctness: every rank contributes rank+1, so every element is n(n+1)/2
    // (an integer <= 2048 for n <= 63: exact in float16 too).
    std::fill(data.begin(), data.end(), Value<T>(static_cast<float>(c_.rank() + 1)));
    if (auto first = TimedCall(data, a); !first) return Err(first.error());
    const T expected = Value<T>(static_cast<float>(n * (n + 1) / 2));
    r.check_ok = std::all_of(data.begin(), data.end(), [&](T v) { return v == expected; }) ? 1 : 0;
    // The other calls reduce zeros, which stay zero: no refill between calls
    // (on an oversubscribed host one rank's refill takes the core from the
    // others inside their timed calls; mpi_allreduce.c does not refill either).
    std::fill(data.begin(), data.end(), T{0});

    // Warm-up; rank 0's mean time sets the iteration count.
    double warm_us = 0;
    for (int i = 0; i < kWarmupCalls; ++i) {
      CHORUS_ASSIGN_OR_RETURN(double us, TimedCall(data, a));
      warm_us += us / kWarmupCalls;
    }
    int32_t iterations = 0;
    if (c_.rank() == 0) {
      const double want = o_.seconds_per_size / std::max(warm_us * 1e-6, 1e-9);
      iterations = static_cast<int32_t>(std::clamp<double>(want, o_.min_iterations, o_.max_iterations));
    }
    CHORUS_RETURN_IF_ERROR(BroadcastFromRankZero(&iterations));
    CHORUS_RETURN_IF_ERROR(c_.Barrier(CollectiveOpts()));

    r.times_us.reserve(iterations);
    for (int i = 0; i < iterations; ++i) {
      CHORUS_ASSIGN_OR_RETURN(double us, TimedCall(data, a));
      r.times_us.push_back(us);
    }
    r.iterations = iterations;
    return r;
  }

  const gossip::Collective& c_;
  const BenchAllreduceOptions& o_;
  std::span<std::byte> buf_;
  const gossip::AllreduceCrossovers crossovers_;
  uint64_t calls_ = 0;
};

// Reads the parent's end-of-run frame; on abort (or a vanished parent) marks
// every peer dead so that this rank's pending collective fails at once.
class Watcher {
 public:
  Watcher(gossip::Transport& t, int fd) : thread_([this, &t, fd] {
    char frame = 0;
    const bool got = ReadBytes(fd, &frame, 1, kAllreduceBench).ok();
    if (!got || frame != kFrameRelease) {
      aborted_ = true;
      for (int r = 0; r < t.size(); ++r) {
        if (r != t.rank()) t.MarkPeerDead(r);
      }
    }
  }) {}
  ~Watcher() { thread_.join(); }
  bool aborted() const { return aborted_; }

 private:
  std::atomic<bool> aborted_{false};
  std::thread thread_;
};

Status RankMain(gossip::FabricProvider provider, int rank, int n, int fd, const BenchAllreduceOptions& o) {
  gossip::FabricOptions fo;
  fo.provider = provider;
  fo.node_name = "bench" + std::to_string(rank);
  fo.bind_address = "127.0.0.1";
  fo.busy_poll = gossip::BusyPollFor(provider, n, o.busy_poll_us);
  if (provider == gossip::FabricProvider::kTcpRxm) fo.rxm_eager_limit = o.rxm_eager_limit;
  o.knobs.ApplyTo(fo);
  CHORUS_ASSIGN_OR_RETURN(auto transport, gossip::MakeFabricTransport(fo));
  CHORUS_RETURN_IF_ERROR(WriteBlob(fd, transport->LocalAddress(), kAllreduceBench));
  char frame = 0;
  CHORUS_RETURN_IF_ERROR(ReadBytes(fd, &frame, 1, kAllreduceBench));
  if (frame != kFramePeers) return Aborted("bench allreduce: the parent aborted the run");
  std::vector<PeerInfo> peers(n);
  for (int r = 0; r < n; ++r) {
    CHORUS_ASSIGN_OR_RETURN(std::vector<uint8_t> blob, ReadBlob(fd, kAllreduceBench));
    peers[r] = PeerInfo{r, std::move(blob), "bench" + std::to_string(r)};
  }
  CHORUS_RETURN_IF_ERROR(o.knobs.SealEpoch(*transport));
  CHORUS_RETURN_IF_ERROR(transport->SetPeers(rank, peers));
  // No rank sends before every rank has installed its peers
  // (Transport::NeedsPeersInstalledBeforeFirstSend: shm needs it; one frame
  // each way costs nothing next to a run, so every provider does it).
  CHORUS_RETURN_IF_ERROR(SendBytes(fd, &kFrameInstalled, 1, kAllreduceBench));
  CHORUS_RETURN_IF_ERROR(ReadBytes(fd, &frame, 1, kAllreduceBench));
  if (frame != kFrameGo) return Aborted("bench allreduce: the parent aborted the run");
  std::optional<gossip::HostSegmentOptions> segment;
  if (AttachesHostSegment(provider)) segment = gossip::HostSegmentOptions{};
  CHORUS_ASSIGN_OR_RETURN(gossip::Collective collective,
                          gossip::Collective::Create(*transport, std::vector<std::string>(n, "localhost"), segment));

  size_t max_bytes = 0;
  for (size_t s : o.sizes) max_bytes = std::max(max_bytes, s);
  // On a page, as a model's parameters and gradients are (common/page_bytes.h).
  const PageBytes page_buf = AllocateZeroedPageBytes(max_bytes);  // the warm-up reduces zeros
  std::span<std::byte> buf(page_buf.get(), max_bytes);
  RankRunner runner(collective, o, buf, provider);
  Status status = Status::Ok();
  {
    Watcher watcher(*transport, fd);  // joined (after the parent's last frame) before the endpoint closes
    const std::vector<RowSpec> rows = Rows(o, provider);
    auto run_row = [&](size_t i) -> Result<RowResult> {
      if (i == 0 && o.warmup_seconds > 0) CHORUS_RETURN_IF_ERROR(runner.WarmUp(rows[0], o.warmup_seconds));
      return runner.Run(rows[i]);
    };
    for (size_t i = 0; i < rows.size(); ++i) {
      Result<RowResult> r = run_row(i);
      if (!r) {
        status = watcher.aborted() ? Aborted("bench allreduce: aborted by the parent") : r.error();
        const char failed = kFrameFailed;
        (void)SendBytes(fd, &failed, 1, kAllreduceBench);
        break;
      }
      const char ok = kFrameRow;
      status = SendBytes(fd, &ok, 1, kAllreduceBench);
      if (status.ok()) status = SendBytes(fd, &r->iterations, sizeof(int32_t), kAllreduceBench);
      if (status.ok()) status = SendBytes(fd, &r->check_ok, sizeof(int32_t), kAllreduceBench);
      if (status.ok()) {
        status = SendBytes(fd, r->times_us.data(), r->times_us.size() * sizeof(double), kAllreduceBench);
      }
    }
    if (!status.ok()) shutdown(fd, SHUT_WR);  // the parent sees EOF if it missed the frame
  }
  return status;
}

[[noreturn]] void ChildMain(gossip::FabricProvider provider, int rank, int n, int fd,
                            const BenchAllreduceOptions& o) {
  // Everything (the endpoint above all) is destroyed inside RankMain, before
  // _exit, which skips atexit handlers.
  const Status s = RankMain(provider, rank, n, fd, o);
  if (!s.ok() && s.code() != StatusCode::kAborted) {
    CHORUS_LOG_ERROR(Subsys::kBench, "bench allreduce rank ", rank, " (", ProviderText(provider), "): ", s.ToString());
  }
  close(fd);
  _exit(s.ok() ? 0 : 1);
}

// ---- parent ----

// For every call the slowest rank's time.
std::vector<double> SlowestPerCall(const std::vector<RowResult>& results) {
  std::vector<double> slowest(results.front().times_us.size(), 0.0);
  for (const RowResult& r : results) {
    for (size_t i = 0; i < slowest.size(); ++i) slowest[i] = std::max(slowest[i], r.times_us[i]);
  }
  return slowest;
}

std::string AlgorithmText(AllreduceAlgorithm a) { return std::string(gossip::AllreduceAlgorithmName(a)); }

// " 4096 B recursive-doubling; 1048576 B halving-doubling; ...": what `auto`
// runs at each size over `n` ranks of this host.
std::string PicksText(const std::vector<size_t>& sizes, int n, const gossip::AllreduceCrossovers& crossovers,
                      bool host_memory) {
  std::string picks;
  for (size_t bytes : sizes) {
    const AllreduceAlgorithm a =
        gossip::ChooseAllreduceAlgorithm(bytes, n, 1, crossovers, host_memory, gossip::HostCores());
    picks += (picks.empty() ? " " : "; ") + std::to_string(bytes) + " B " +
             std::string(gossip::AllreduceAlgorithmName(a));
  }
  return picks;
}

// Gathers every rank's address and sends the list to all; once every rank has
// installed its peers, tells them to go.
Status ConnectRanks(int n, const std::vector<int>& fds) {
  std::vector<std::vector<uint8_t>> addresses(n);
  for (int r = 0; r < n; ++r) {
    auto blob = ReadBlob(fds[r], kAllreduceBench);
    if (!blob) return Unavailable("rank " + std::to_string(r) + " did not open its endpoint: " + blob.error().ToString());
    addresses[r] = std::move(*blob);
  }
  for (int r = 0; r < n; ++r) {
    CHORUS_RETURN_IF_ERROR(SendBytes(fds[r], &kFramePeers, 1, kAllreduceBench));
    for (const auto& a : addresses) CHORUS_RETURN_IF_ERROR(WriteBlob(fds[r], a, kAllreduceBench));
  }
  for (int r = 0; r < n; ++r) {
    char frame = 0;
    Status read = ReadBytes(fds[r], &frame, 1, kAllreduceBench);
    if (!read.ok() || frame != kFrameInstalled) {
      return Unavailable("rank " + std::to_string(r) + " did not install its peers" +
                         (read.ok() ? std::string() : ": " + read.ToString()));
    }
  }
  for (int r = 0; r < n; ++r) CHORUS_RETURN_IF_ERROR(SendBytes(fds[r], &kFrameGo, 1, kAllreduceBench));
  return Status::Ok();
}

// The lines above one (provider, world size) table.
void PrintTableHeader(gossip::FabricProvider provider, int n, const BenchAllreduceOptions& o) {
  std::printf("# provider %s (version %s), %d ranks; time = median over calls of the slowest rank's time, "
              "p99 = its 99th percentile (stalls show there)\n",
              ProviderText(provider), gossip::FabricProviderVersion(provider).value_or("?").c_str(), n);
  if (std::find(o.algorithms.begin(), o.algorithms.end(), AllreduceAlgorithm::kAuto) != o.algorithms.end()) {
    // What the auto rows run (one host; the shared segment with shm only).
    std::printf("# auto picks:%s\n",
                PicksText(o.sizes, n, CrossoversFromConfig(provider, o.crossovers), AttachesHostSegment(provider))
                    .c_str());
  }
  std::printf("#%11s %13s %6s %17s %6s %12s %12s %12s %12s\n", "size(B)", "count(elems)", "type",
              "algorithm", "iters", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "p99(us)");
  std::fflush(stdout);
}

// Reads one rank's frame of a row into `result`.
Status ReadRowFrame(int fd, const BenchAllreduceOptions& o, RowResult* result) {
  char frame = 0;
  Status s = ReadBytes(fd, &frame, 1, kAllreduceBench);
  if (s.ok() && frame != kFrameRow) s = Internal("rank failed (its log line says why)");
  if (s.ok()) s = ReadBytes(fd, &result->iterations, sizeof(int32_t), kAllreduceBench);
  if (s.ok()) s = ReadBytes(fd, &result->check_ok, sizeof(int32_t), kAllreduceBench);
  if (s.ok() && (result->iterations < 0 || result->iterations > o.max_iterations)) {
    s = Internal("bad iteration count " + std::to_string(result->iterations));
  }
  if (s.ok()) {
    result->times_us.resize(result->iterations);
    s = ReadBytes(fd, result->times_us.data(), result->times_us.size() * sizeof(double), kAllreduceBench);
  }
  return s;
}

// Every rank's frame of `row`, read as they arrive.
Result<std::vector<RowResult>> GatherRow(const RowSpec& row, int n, const std::vector<int>& fds,
                                         const BenchAllreduceOptions& o) {
  std::vector<RowResult> results(n);
  std::vector<bool> have(n, false);
  int missing = n;
  while (missing > 0) {
    std::vector<pollfd> pfds;
    std::vector<int> who;
    for (int r = 0; r < n; ++r) {
      if (!have[r]) {
        pfds.push_back(pollfd{fds[r], POLLIN, 0});
        who.push_back(r);
      }
    }
    const int ready = RetryOnEintr([&] { return poll(pfds.data(), pfds.size(), kRowTimeoutMs); });
    if (ready < 0) return Err(ErrnoStatus(errno, "bench allreduce: poll"));
    if (ready == 0) {
      return Err(DeadlineExceeded("bench allreduce: no rank reported for " +
                                  std::to_string(kRowTimeoutMs / 1000) + " s (" +
                                  AlgorithmText(row.algorithm) + ", " + std::to_string(row.bytes) + " B)"));
    }
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (pfds[i].revents == 0) continue;
      const int r = who[i];
      Status s = ReadRowFrame(fds[r], o, &results[r]);
      if (!s.ok()) {
        return Err(Internal("bench allreduce: rank " + std::to_string(r) + " at " +
                            AlgorithmText(row.algorithm) + " " + DTypeName(row.dtype) + " " +
                            std::to_string(row.bytes) + " B: " + s.ToString()));
      }
      have[r] = true;
      --missing;
    }
  }
  return results;
}

// Prints the row of every rank's `results` (and CHECK FAILED if a rank's
// result was wrong); its float32 time, when right, joins `timings`.
Status PrintRow(gossip::FabricProvider provider, const RowSpec& row, int n, const std::vector<RowResult>& results,
                bool& check_failed, std::vector<gossip::AllreduceTiming>& timings) {
  bool ok = true;
  for (const RowResult& r : results) {
    ok = ok && r.check_ok != 0;
    if (r.iterations != results[0].iterations) {
      return Internal("bench allreduce: ranks disagree on the iteration count of " +
                      AlgorithmText(row.algorithm) + " " + std::to_string(row.bytes) + " B");
    }
  }
  std::vector<double> slowest = SlowestPerCall(results);
  const double time_us = Quantile(slowest, 0.5);
  if (row.dtype == DType::kFloat32 && ok) timings.push_back({row.bytes, n, row.algorithm, time_us});
  const double p99_us = Quantile(slowest, 0.99);
  const double algbw = static_cast<double>(row.bytes) / (time_us * 1e-6) / 1e9;
  const double busbw = algbw * 2.0 * (n - 1) / n;
  std::printf("%12zu %13zu %6s %17s %6d %12.1f %12.3f %12.3f %12.1f\n", row.bytes,
              row.bytes / DTypeBytes(row.dtype), DTypeName(row.dtype),
              AlgorithmText(row.algorithm).c_str(), results[0].iterations, time_us, algbw, busbw,
              p99_us);
  if (!ok) {
    check_failed = true;
    std::printf("CHECK FAILED: %s %s %zu B on %s with %d ranks: result != n(n+1)/2 = %d\n",
                AlgorithmText(row.algorithm).c_str(), DTypeName(row.dtype), row.bytes,
                ProviderText(provider), n, n * (n + 1) / 2);
  }
  std::fflush(stdout);
  return Status::Ok();
}

// Gathers and distributes addresses, then prints rows as every rank's frame
// arrives. Returns the failure, if any (the caller aborts the children).
Status Coordinate(gossip::FabricProvider provider, int n, const std::vector<int>& fds,
                  const BenchAllreduceOptions& o, bool& check_failed,
                  std::vector<gossip::AllreduceTiming>& timings) {
  CHORUS_RETURN_IF_ERROR(ConnectRanks(n, fds));
  PrintTableHeader(provider, n, o);
  int round = 1;
  for (const RowSpec& row : Rows(o, provider)) {
    if (row.round != round) std::printf("# round %d of %d\n", round = row.round, o.rounds);
    CHORUS_ASSIGN_OR_RETURN(std::vector<RowResult> results, GatherRow(row, n, fds, o));
    CHORUS_RETURN_IF_ERROR(PrintRow(provider, row, n, results, check_failed, timings));
  }
  return Status::Ok();
}

// libfabric's shm provider names a process's regions /dev/shm/<pid>:<...>; a
// process that did not close its endpoint (killed, crashed) leaves them behind.
void RemoveShmRegions(pid_t pid) {
  std::error_code ec;
  const std::string prefix = std::to_string(pid) + ":";
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) std::filesystem::remove(entry.path(), ec);
  }
}

// Waits for every child; kills (and then reaps) those still alive after kReapSeconds.
void Reap(const std::vector<pid_t>& pids, bool& child_failed) {
  const Deadline deadline = Deadline::AfterSeconds(kReapSeconds);
  for (pid_t pid : pids) {
    int status = 0;
    pid_t got = 0;
    while ((got = waitpid(pid, &status, WNOHANG)) == 0 && !deadline.Expired()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (got == 0) {
      CHORUS_LOG_ERROR(Subsys::kBench, "bench allreduce: rank process ", pid,
                       " did not exit; killing it");
      kill(pid, SIGKILL);
      got = RetryOnEintr([&] { return waitpid(pid, &status, 0); });
    }
    if (got != pid || !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) RemoveShmRegions(pid);
    if (got != pid || !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) child_failed = true;
  }
}

Status RunProviderAndWorldSize(gossip::FabricProvider provider, int n, const BenchAllreduceOptions& o,
                               bool& check_failed, std::vector<gossip::AllreduceTiming>& timings) {
  std::vector<int> fds;
  std::vector<pid_t> pids;
  Status status = Status::Ok();
  for (int r = 0; r < n && status.ok(); ++r) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
      status = ErrnoStatus(errno, "bench allreduce: socketpair");
      break;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) {
      status = ErrnoStatus(errno, "bench allreduce: fork");
      close(pair[0]);
      close(pair[1]);
      break;
    }
    if (pid == 0) {
      for (int fd : fds) close(fd);  // earlier ranks' sockets: their EOF must reach only the parent
      close(pair[0]);
      ChildMain(provider, r, n, pair[1], o);
    }
    close(pair[1]);
    fds.push_back(pair[0]);
    pids.push_back(pid);
  }
  if (status.ok()) status = Coordinate(provider, n, fds, o, check_failed, timings);
  const char end = status.ok() ? kFrameRelease : kFrameAbort;
  for (int fd : fds) {
    (void)SendBytes(fd, &end, 1, kAllreduceBench);
    close(fd);
  }
  bool child_failed = false;
  Reap(pids, child_failed);
  if (status.ok() && child_failed) status = Internal("bench allreduce: a rank process exited with an error");
  return status;
}

// Per (bytes, world size, algorithm): the median of the rounds' times.
std::vector<gossip::AllreduceTiming> MedianOverRounds(const std::vector<gossip::AllreduceTiming>& timings) {
  std::map<std::tuple<int, size_t, AllreduceAlgorithm>, std::vector<double>> by_cell;
  for (const gossip::AllreduceTiming& t : timings) by_cell[{t.world_size, t.bytes, t.algorithm}].push_back(t.time_us);
  std::vector<gossip::AllreduceTiming> medians;
  for (auto& [key, times] : by_cell) {
    medians.push_back({std::get<1>(key), std::get<0>(key), std::get<2>(key), Quantile(times, 0.5)});
  }
  return medians;
}

// The medians over rounds (float32), one line per world size and buffer size,
// and auto's time against the fastest measured algorithm where auto ran.
void PrintRoundMedians(gossip::FabricProvider provider, const BenchAllreduceOptions& o,
                       const std::vector<gossip::AllreduceTiming>& medians) {
  std::printf("# %s, float32: median time (us) over %d rounds per algorithm%s\n", ProviderText(provider), o.rounds,
              std::count(o.algorithms.begin(), o.algorithms.end(), AllreduceAlgorithm::kAuto) > 0
                  ? "; auto/best: auto's median against the fastest other algorithm's"
                  : "");
  std::printf("#%5s %12s", "ranks", "size(B)");
  for (AllreduceAlgorithm a : o.algorithms) std::printf(" %18s", AlgorithmText(a).c_str());
  std::printf("\n");
  std::map<std::pair<int, size_t>, std::map<AllreduceAlgorithm, double>> cells;
  for (const gossip::AllreduceTiming& t : medians) cells[{t.world_size, t.bytes}][t.algorithm] = t.time_us;
  for (const auto& [key, times] : cells) {
    std::printf("%6d %12zu", key.first, key.second);
    double best = std::numeric_limits<double>::infinity();
    for (AllreduceAlgorithm a : o.algorithms) {
      const auto it = times.find(a);
      if (it == times.end()) {
        std::printf(" %18s", "-");
        continue;
      }
      std::printf(" %18.1f", it->second);
      if (a != AllreduceAlgorithm::kAuto) best = std::min(best, it->second);
    }
    const auto autos = times.find(AllreduceAlgorithm::kAuto);
    if (autos != times.end() && std::isfinite(best)) std::printf("   auto/best %.2f", autos->second / best);
    std::printf("\n");
  }
  std::printf("\n");
}

// Prints the crossovers fitted to one provider's float32 rows, as TOML.
void PrintFittedCrossovers(gossip::FabricProvider provider, const BenchAllreduceOptions& o,
                           const std::vector<gossip::AllreduceTiming>& timings) {
  const gossip::AllreduceCrossovers base = CrossoversFromConfig(provider, o.crossovers);
  auto fit = gossip::FitAllreduceCrossovers(timings, base, gossip::HostCores());
  if (!fit) {
    std::printf("# no crossovers fitted for %s: %s\n\n", ProviderText(provider), fit.error().ToString().c_str());
    return;
  }
  std::string ranks;
  for (int n : o.ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(n);
  std::printf("# [exchange.crossovers] fitted to the float32 rows of %s (%s ranks): auto would run %.3fx the "
              "fastest measured time (geometric mean over sizes), %.3fx with the current crossovers\n",
              ProviderText(provider), ranks.c_str(), fit->slowdown, fit->base_slowdown);
  for (int n : o.ranks) {  // they differ by world size where ranks outnumber cores (the small tree)
    std::printf("# at %d ranks it picks:%s\n", n, PicksText(o.sizes, n, fit->crossovers, false).c_str());
  }
  if (AttachesHostSegment(provider)) {
    std::printf("# (a node with [exchange] shared_memory = true sums through host memory on one host instead)\n");
  }
  std::printf("%s\n", CrossoversToml(fit->crossovers).c_str());
}

}  // namespace

std::string CrossoversToml(const gossip::AllreduceCrossovers& c) {
  constexpr size_t kKiB = 1024;
  auto upper = [](size_t bytes) { return std::to_string(std::min<size_t>((bytes + kKiB - 1) / kKiB, INT32_MAX)); };
  auto lower = [](size_t bytes) {
    return bytes / kKiB >= static_cast<size_t>(INT32_MAX) ? std::to_string(INT32_MAX) + "  # never"
                                                           : std::to_string(bytes / kKiB);
  };
  std::string out = "[exchange.crossovers]\n";
  for (const CrossoverKey& k : kCrossoverKeys) {
    if (k.bytes == &gossip::AllreduceCrossovers::hierarchical_min_bytes) continue;  // not the fit's
    out += std::string(k.key) + " = " + (k.upper_bound ? upper(c.*k.bytes) : lower(c.*k.bytes)) + "\n";
  }
  return out;
}

std::vector<size_t> BenchAllreduceSizes(size_t min_size, size_t max_size) {
  std::vector<size_t> sizes;
  for (size_t s = std::max<size_t>(min_size, 1); s <= max_size; s *= 4) sizes.push_back(s);
  if (sizes.empty() || sizes.back() != max_size) sizes.push_back(max_size);
  return sizes;
}

int RunBenchAllreduce(const BenchAllreduceOptions& options) {
  for (int n : options.ranks) {
    if (n < 2 || n > 63) {
      CHORUS_LOG_ERROR(Subsys::kBench, "bench allreduce: --ranks values must be in [2, 63], got ", n);
      return 2;
    }
  }
  if (options.sizes.empty() || options.algorithms.empty() || options.providers.empty()) {
    CHORUS_LOG_ERROR(Subsys::kBench, "bench allreduce: nothing to measure (sizes, algorithms or providers empty)");
    return 2;
  }
  std::printf("# chorus bench allreduce, libfabric %s; algbw = size / time, busbw = algbw * 2(n-1)/n "
              "(GB = 1e9 B); inputs rank+1 checked against n(n+1)/2\n",
              gossip::LibfabricVersion().c_str());
  int rc = 0;
  for (gossip::FabricProvider provider : options.providers) {
    std::vector<gossip::AllreduceTiming> timings;
    for (int n : options.ranks) {
      bool check_failed = false;
      const Status s = RunProviderAndWorldSize(provider, n, options, check_failed, timings);
      if (!s.ok()) {
        CHORUS_LOG_ERROR(Subsys::kBench, "bench allreduce (", ProviderText(provider), ", ", n, " ranks): ", s.ToString());
        rc = 1;
      }
      if (check_failed) rc = 1;
      std::printf("\n");
    }
    if (options.rounds > 1) {
      timings = MedianOverRounds(timings);
      PrintRoundMedians(provider, options, timings);
    }
    if (options.fit_crossovers) PrintFittedCrossovers(provider, options, timings);
  }
  std::fflush(stdout);
  return rc;
}

}  // namespace chorus::node
