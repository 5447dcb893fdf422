// Where a 2-rank all-reduce's time goes in the provider's large-message
// protocol, without Chorus's transport: two processes on one libfabric
// endpoint pair run the all-reduce's data pattern (exchange halves, add the
// peer's half into the kept one, exchange the sums: halving-doubling at 2
// ranks) with two protocols, alternated round by round:
//   tagged  fi_tsend / fi_trecv, receives posted first, as the all-reduces
//           post them. Over tcp;ofi_rxm a message above the eager limit goes
//           by rendezvous (RTS, the receiver's fi_read, then an ack).
//   write   fi_write straight into the peer's registered scratch (one half
//           for the halves, the other for the sums, which the peer then
//           copies into its buffer: no key to swap per call), then an 8-byte
//           tagged notice that the provider orders after the write
//           (FI_ORDER_SAW): the data moves with no handshake first, as a
//           receiver-advertised protocol would move it. Chorus's transport
//           does not do this (see the README's rxm paragraph for why).
// Both spin on the CQ (a core per rank); buffers start on a page, as
// Chorus's do. A call's time is the slower rank's
// mean over `calls` calls; each protocol's figure is the median over rounds,
// and `tagged/write` the median of the per-round ratios (above 1: the writes
// are faster). The first call of each protocol checks the sum.
//
// Made for tcp;ofi_rxm. Over net this tagged loop mostly ran slower than
// Chorus's own halving-doubling (177-460 against about 185 us at 1 MiB,
// 2026-11-24; cause not found), so its net figures are no reference.
//
// Usage: bench_pair_exchange [provider=tcp;ofi_rxm] [bytes=1048576] [rounds=15] [calls=200]
// A benchmark, not a test: asserts nothing beyond the sum.
#include <rdma/fi_rma.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/page_bytes.h"
#include "common/quantile.h"
#include "gossip/collective_internal.h"
#include "gossip/transport/fabric/fabric_objects.h"
#include "node/bench_process.h"

namespace {

constexpr const char* kWho = "bench_pair_exchange";
constexpr uint64_t kHalfTag = 1, kSumTag = 2, kContactTag = 3;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", kWho, what.c_str());
  std::exit(1);
}

void Check(long ret, std::string_view call) {
  if (ret < 0) Fail(chorus::gossip::fabric::FabricStatus(static_cast<int>(ret), call).ToString());
}

void Control(const chorus::Status& status) {
  if (!status.ok()) Fail(status.ToString());
}

enum class Protocol { kTagged, kWrite };

// One rank's endpoint, buffers and the peer's registered regions.
class Rank {
 public:
  Rank(int self, int control, const std::string& provider, size_t bytes)
      : self_(self), control_(control), elems_(bytes / sizeof(float)), half_(elems_ / 2) {
    chorus::gossip::fabric::InfoOwner hints(fi_allocinfo());
    if (!hints) Fail("fi_allocinfo");
    hints->caps = FI_TAGGED | FI_RMA | FI_DIRECTED_RECV;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->tx_attr->msg_order = FI_ORDER_SAS | FI_ORDER_SAW;
    hints->rx_attr->msg_order = FI_ORDER_SAS | FI_ORDER_SAW;
    hints->fabric_attr->prov_name = strdup(provider.c_str());
    fi_info* info = nullptr;
    Check(fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), provider == "shm" ? nullptr : "127.0.0.1",
                     nullptr, provider == "shm" ? 0 : FI_SOURCE, hints.get(), &info),
          "fi_getinfo for " + provider + " with FI_RMA and FI_ORDER_SAW");
    info_.reset(info);
    Check(fi_fabric(info_->fabric_attr, fabric_.out(), nullptr), "fi_fabric");
    Check(fi_domain(fabric_.get(), info_.get(), domain_.out(), nullptr), "fi_domain");
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    Check(fi_cq_open(domain_.get(), &cq_attr, cq_.out(), nullptr), "fi_cq_open");
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    Check(fi_av_open(domain_.get(), &av_attr, av_.out(), nullptr), "fi_av_open");
    Check(fi_endpoint(domain_.get(), info_.get(), ep_.out(), nullptr), "fi_endpoint");
    Check(fi_ep_bind(ep_.get(), &cq_.get()->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind cq");
    Check(fi_ep_bind(ep_.get(), &av_.get()->fid, 0), "fi_ep_bind av");
    Check(fi_enable(ep_.get()), "fi_enable");

    char name[256];
    size_t len = sizeof(name);
    Check(fi_getname(&ep_.get()->fid, name, &len), "fi_getname");
    const std::vector<uint8_t> peer_name = Swap(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(name), len));
    Check(fi_av_insert(av_.get(), peer_name.data(), 1, &peer_, 0, nullptr), "fi_av_insert");

    buf_.assign(elems_, 0.0f);
    scratch_.assign(2 * half_, 0.0f);  // [0, half): the peer's half; [half, 2 half): its sum
    Register(buf_.data(), buf_.size() * sizeof(float), 1, buf_mr_);
    Register(scratch_.data(), scratch_.size() * sizeof(float), 2, scratch_mr_);
    // Where the peer may write: the scratch's base (its virtual address, or 0
    // where the provider addresses by offset) and key.
    const bool virt = (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
    const uint64_t mine[2] = {virt ? reinterpret_cast<uint64_t>(scratch_.data()) : 0, fi_mr_key(scratch_mr_.get())};
    const std::vector<uint8_t> theirs = Swap(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(mine), sizeof(mine)));
    if (theirs.size() != sizeof(peer_scratch_)) Fail("the peer's scratch region is " + std::to_string(theirs.size()) + " bytes, not 16");
    std::memcpy(peer_scratch_, theirs.data(), sizeof(peer_scratch_));
    FirstContact();
  }

  // One all-reduce of the buffer with `protocol`; with `check`, the buffer
  // starts at self + 1 everywhere and must end at 3.
  void Call(Protocol protocol, bool check) {
    if (check) std::fill(buf_.begin(), buf_.end(), static_cast<float>(self_ + 1));
    const size_t keep = self_ == 0 ? 0 : half_, give = half_ - keep;  // element offsets
    Exchange(protocol, kHalfTag, give, scratch_.data(), scratch_mr_.get(), 0);
    chorus::gossip::detail::AddInto(buf_.data() + keep, scratch_.data(), half_);
    Exchange(protocol, kSumTag, keep, buf_.data() + give, buf_mr_.get(), half_);
    if (protocol == Protocol::kWrite) std::memcpy(buf_.data() + give, scratch_.data() + half_, half_ * sizeof(float));
    if (check) {
      for (size_t i = 0; i < elems_; ++i) {
        if (buf_[i] != 3.0f) Fail("element " + std::to_string(i) + " is " + std::to_string(buf_[i]) + ", not 3");
      }
      std::fill(buf_.begin(), buf_.end(), 0.0f);  // zeros stay zeros: timed calls cost the same throughout
    }
  }

  // Runs `calls` calls after the parent's go and sends it this rank's mean.
  void Timed(Protocol protocol, int calls) {
    Control(chorus::node::AwaitGo(control_, kWho));
    const auto start = std::chrono::steady_clock::now();
    for (int c = 0; c < calls; ++c) Call(protocol, false);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / calls;
    Control(chorus::node::WriteAll(control_, &us, sizeof(us), kWho));
  }

 private:
  // Sends half a buffer from element `from` of buf_ and takes the peer's half
  // of the same step: with kTagged into `into` (registered as `into_mr`),
  // with kWrite the peer writes it into this rank's scratch at element
  // `scratch_at`.
  void Exchange(Protocol protocol, uint64_t tag, size_t from, float* into, fid_mr* into_mr, size_t scratch_at) {
    const size_t bytes = half_ * sizeof(float);
    const int before = completed_;
    if (protocol == Protocol::kTagged) {
      Post([&] { return fi_trecv(ep_.get(), into, bytes, Desc(into_mr), peer_, tag, 0, &ctx_[0]); }, "fi_trecv");
      Post([&] { return fi_tsend(ep_.get(), buf_.data() + from, bytes, Desc(buf_mr_.get()), peer_, tag, &ctx_[1]); },
           "fi_tsend");
    } else {
      const uint64_t remote = peer_scratch_[0] + scratch_at * sizeof(float);
      Post([&] { return fi_trecv(ep_.get(), &notice_in_, sizeof(notice_in_), nullptr, peer_, tag, 0, &ctx_[0]); },
           "fi_trecv");
      Post([&] {
        return fi_write(ep_.get(), buf_.data() + from, bytes, Desc(buf_mr_.get()), peer_, remote, peer_scratch_[1], &ctx_[1]);
      }, "fi_write");
      Post([&] { return fi_tinject(ep_.get(), &notice_out_, sizeof(notice_out_), peer_, tag); }, "fi_tinject");
    }
    while (completed_ - before < 2) PollOnce();
  }

  // Rank 0 sends first, and rank 1 only once that has arrived: libfabric
  // 1.17's net can lose or duplicate a connection when both ends connect at
  // once (see fabric_core.h, First contact).
  void FirstContact() {
    const int before = completed_;
    if (self_ == 0) {
      Post([&] { return fi_tsend(ep_.get(), &notice_out_, sizeof(notice_out_), nullptr, peer_, kContactTag, &ctx_[0]); },
           "fi_tsend");
    } else {
      Post([&] { return fi_trecv(ep_.get(), &notice_in_, sizeof(notice_in_), nullptr, peer_, kContactTag, 0, &ctx_[0]); },
           "fi_trecv");
    }
    while (completed_ - before < 1) PollOnce();
  }

  template <typename F>
  void Post(F&& post, std::string_view call) {
    ssize_t ret;
    while ((ret = post()) == -FI_EAGAIN) PollOnce();  // connecting, or queue full
    Check(ret, call);
  }

  void PollOnce() {
    fi_cq_tagged_entry entries[8];
    const ssize_t n = fi_cq_read(cq_.get(), entries, 8);
    if (n == -FI_EAGAIN) return;
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(cq_.get(), &err, 0);
      Fail(chorus::gossip::fabric::FabricStatus(-err.err, "a completion").ToString());
    }
    Check(n, "fi_cq_read");
    completed_ += static_cast<int>(n);
  }

  // A buffer's descriptor where the provider asks for one (FI_MR_LOCAL).
  void* Desc(fid_mr* mr) const { return (info_->domain_attr->mr_mode & FI_MR_LOCAL) != 0 ? fi_mr_desc(mr) : nullptr; }

  void Register(void* data, size_t bytes, uint64_t key, chorus::gossip::fabric::MrOwner& mr) {
    Check(fi_mr_reg(domain_.get(), data, bytes,
                    FI_SEND | FI_RECV | FI_WRITE | FI_READ | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, key, 0, mr.out(),
                    nullptr),
          "fi_mr_reg");
  }

  // Sends `mine` to the peer through the parent (RelaySwap) and returns the peer's.
  std::vector<uint8_t> Swap(std::span<const uint8_t> mine) {
    Control(chorus::node::WriteBlob(control_, mine, kWho));
    auto theirs = chorus::node::ReadBlob(control_, kWho);
    if (!theirs) Control(theirs.error());
    return *theirs;
  }

  const int self_;
  const int control_;
  const size_t elems_, half_;
  // Setup order; destruction closes the endpoint first (fabric_objects.h).
  chorus::gossip::fabric::InfoOwner info_;
  chorus::gossip::fabric::FabricOwner fabric_;
  chorus::gossip::fabric::DomainOwner domain_;
  chorus::gossip::fabric::CqOwner cq_;
  chorus::gossip::fabric::AvOwner av_;
  std::vector<float, chorus::PageAllocator<float>> buf_, scratch_;  // page-aligned, as Chorus's buffers
  chorus::gossip::fabric::MrOwner buf_mr_, scratch_mr_;
  chorus::gossip::fabric::EpOwner ep_;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;
  uint64_t peer_scratch_[2] = {};  // the peer's scratch: base, key
  uint64_t notice_in_ = 0, notice_out_ = 0;
  fi_context2 ctx_[2] = {};
  int completed_ = 0;
};

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
Protocol Nth(int round, int k) { return (round + k) % 2 == 0 ? Protocol::kTagged : Protocol::kWrite; }

}  // namespace

int main(int argc, char** argv) {
  const std::string provider = argc > 1 ? argv[1] : "tcp;ofi_rxm";
  const size_t bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : size_t{1} << 20;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 15;
  const int calls = argc > 4 ? std::atoi(argv[4]) : 200;
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
      {
        Rank rank(i, pair[1], provider, bytes);
        for (Protocol p : {Protocol::kTagged, Protocol::kWrite}) {
          rank.Call(p, true);
          for (int c = 0; c < 20; ++c) rank.Call(p, false);  // warm-up
        }
        for (int r = 0; r < rounds; ++r) {
          for (int k = 0; k < 2; ++k) rank.Timed(Nth(r, k), calls);
        }
      }
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
    for (int k = 0; k < 2; ++k) us[Nth(r, k) == Protocol::kTagged ? 0 : 1] = TimedBlock(child);
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
              kWho, provider.c_str(), bytes, rounds, calls);
  std::printf("%12s %12s %12s %14s\n", "size(B)", "tagged(us)", "write(us)", "tagged/write");
  std::printf("%12zu %12.1f %12.1f %14.2f\n", bytes, chorus::Quantile(tagged, 0.5), chorus::Quantile(write, 0.5),
              chorus::Quantile(ratio, 0.5));
  return failed;
}
