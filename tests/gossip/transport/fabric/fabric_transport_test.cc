// FabricTransport beyond the conformance suite: two real processes (fork, the
// addresses exchanged through pipes), dead and departed peers, and the
// MrCache LRU on its own (the transport's options: fabric_options_test.cc).
#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "common/shm_names.h"
#include "gossip/transport/fabric/fabric_core.h"
#include "gossip/transport/fabric/mr_cache.h"
#include "gossip/transport/fabric/shm_region_lock.h"
#include "tests/gossip/transport/transport_test_util.h"

namespace chorus::gossip {
namespace {

using testing::FirstMismatch;
using testing::MakeWorld;
using testing::Pattern;
using testing::TransportKind;

bool WriteAll(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t n) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool SendBlob(int fd, const std::vector<uint8_t>& blob) {
  const auto n = static_cast<uint32_t>(blob.size());
  return WriteAll(fd, &n, sizeof(n)) && WriteAll(fd, blob.data(), blob.size());
}

bool ReceiveBlob(int fd, std::vector<uint8_t>* blob) {
  uint32_t n = 0;
  if (!ReadAll(fd, &n, sizeof(n)) || n > 4096) return false;
  blob->resize(n);
  return ReadAll(fd, blob->data(), n);
}

// One side of the two-process exchange, in membership epochs 0, 1 and 2
// (BeginEpoch, SetPeers with the published addresses, each followed by a
// handshake over the pipe as the node's control-plane barriers): returns an
// empty string on success, else what went wrong.
std::string ExchangeAsRank(FabricProvider provider, int rank, int read_fd, int write_fd) {
  constexpr size_t kBytes = size_t{1} << 20;
  FabricOptions options;
  options.provider = provider;
  options.node_name = testing::PeerName(rank);
  auto transport = MakeFabricTransport(options);
  if (!transport) return transport.error().ToString();
  std::vector<uint8_t> peer_address;
  if (!SendBlob(write_fd, (*transport)->LocalAddress()) || !ReceiveBlob(read_fd, &peer_address)) {
    return "address exchange over the pipe failed";
  }
  const int peer = 1 - rank;
  std::vector<PeerInfo> peers(2);
  peers[rank] = PeerInfo{rank, (*transport)->LocalAddress(), testing::PeerName(rank)};
  peers[peer] = PeerInfo{peer, peer_address, testing::PeerName(peer)};
  auto handshake = [&] {
    char token = 'x';
    return WriteAll(write_fd, &token, 1) && ReadAll(read_fd, &token, 1);
  };
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    const std::string in_epoch = " (epoch " + std::to_string(epoch) + ")";
    Status begun = (*transport)->BeginEpoch(epoch);
    if (!begun.ok()) return begun.ToString() + in_epoch;
    if (!handshake()) return "opened handshake" + in_epoch;
    Status set = (*transport)->SetPeers(rank, peers);
    if (!set.ok()) return set.ToString() + in_epoch;
    if (!handshake()) return "installed handshake" + in_epoch;
    const uint64_t seed = 10 * epoch;
    const auto out = Pattern(seed + static_cast<uint64_t>(rank), kBytes);
    std::vector<std::byte> in(kBytes);
    std::vector<RequestPtr> reqs;
    auto recv = (*transport)->Irecv(peer, 77, in);
    if (!recv) return recv.error().ToString() + in_epoch;
    reqs.push_back(std::move(*recv));
    auto send = (*transport)->Isend(peer, 77, out);
    if (!send) return send.error().ToString() + in_epoch;
    reqs.push_back(std::move(*send));
    Status done = WaitAll(reqs, Deadline::AfterSeconds(30));
    if (!done.ok()) return done.ToString() + in_epoch;
    const size_t bad = FirstMismatch(in, seed + static_cast<uint64_t>(peer), kBytes);
    if (bad != kBytes) return "byte " + std::to_string(bad) + " differs" + in_epoch;
    // Both sides hold their endpoint until the other is done too: a send may
    // complete locally before the peer has read it.
    if (!handshake()) return "final handshake" + in_epoch;
  }
  if ((*transport)->LocalAddress() != peers[rank].address) return "the published address changed";
  return "";
}

class FabricTwoProcesses : public ::testing::TestWithParam<TransportKind> {};

TEST_P(FabricTwoProcesses, ExchangeOneMebibyteBothWaysInThreeEpochs) {
  const FabricProvider provider = testing::ProviderOf(GetParam());
  auto version = FabricProviderVersion(provider);
  if (!version) GTEST_SKIP() << "provider unavailable here: " << version.error().ToString();
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0) << std::strerror(errno);
  if (child == 0) {
    close(to_child[1]);
    close(to_parent[0]);
    const std::string error = ExchangeAsRank(provider, 1, to_child[0], to_parent[1]);
    if (!error.empty()) {
      fprintf(stderr, "child (rank 1): %s\n", error.c_str());
      _exit(1);
    }
    _exit(0);
  }
  close(to_child[0]);
  close(to_parent[1]);
  const std::string error = ExchangeAsRank(provider, 0, to_parent[0], to_child[1]);
  close(to_parent[0]);
  close(to_child[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(error.empty()) << "parent (rank 0): " << error;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

INSTANTIATE_TEST_SUITE_P(Providers, FabricTwoProcesses,
                         ::testing::Values(TransportKind::kTcp, TransportKind::kNet, TransportKind::kShm),
                         [](const auto& info) { return testing::KindName(info.param); });

// A child process with an shm endpoint ("node1"), killed by the test. It
// publishes its address, then reads the parent's. With `hold` it then takes
// the spin lock inside a region, the parent's or its own, as a process killed
// inside one of shm's critical sections would (shm_region_lock.h), and keeps
// it until it is killed. Start returns once the child is ready (holding it).
class ShmPeerProcess {
 public:
  enum class Hold { kNothing, kParentsLock, kOwnLock };

  Status Start(const std::vector<uint8_t>& parent_address, Hold hold) {
    int to_child[2], to_parent[2];
    if (pipe(to_child) != 0 || pipe(to_parent) != 0) return Internal("pipe failed");
    pid_ = fork();
    if (pid_ < 0) return Internal("fork failed");
    if (pid_ == 0) {
      close(to_child[1]);
      close(to_parent[0]);
      FabricOptions options;
      options.provider = FabricProvider::kShm;
      options.node_name = testing::PeerName(1);
      auto transport = MakeFabricTransport(options);
      std::vector<uint8_t> parent;
      if (!transport || !SendBlob(to_parent[1], (*transport)->LocalAddress()) || !ReceiveBlob(to_child[0], &parent)) {
        _exit(1);
      }
      if (hold != Hold::kNothing &&
          !TakeRegionLock(ShmRegionName(hold == Hold::kParentsLock ? parent : (*transport)->LocalAddress()))) {
        _exit(2);
      }
      const char ready = 'r';
      if (!WriteAll(to_parent[1], &ready, 1)) _exit(3);
      pause();  // until killed, its endpoint open and its progress thread polling
      _exit(0);
    }
    close(to_child[0]);
    close(to_parent[1]);
    char ready = 0;
    const bool ok = ReceiveBlob(to_parent[0], &address_) && SendBlob(to_child[1], parent_address) &&
                    ReadAll(to_parent[0], &ready, 1);
    close(to_child[1]);
    close(to_parent[0]);
    return ok ? Status::Ok() : Internal("the shm peer process did not start");
  }
  // SIGKILL, leaving a zombie (kill(pid, 0) still succeeds; the pidfd says exited).
  bool Kill() {
    siginfo_t info{};
    return kill(pid_, SIGKILL) == 0 && waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT) == 0;
  }
  ~ShmPeerProcess() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }
  const std::vector<uint8_t>& address() const { return address_; }

 private:
  static bool TakeRegionLock(const std::string& region) {
    const int fd = shm_open(("/" + region).c_str(), O_RDWR, 0);
    if (fd < 0) return false;
    void* mapped = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (mapped == MAP_FAILED) return false;
    auto* lock = reinterpret_cast<pthread_spinlock_t*>(static_cast<uint8_t*>(mapped) + fabric::kShmRegionLockOffset);
    return pthread_spin_lock(lock) == 0;
  }

  pid_t pid_ = -1;
  std::vector<uint8_t> address_;
};

// shm options for a transport whose wedge reports are collected.
struct WedgeWatch {
  std::mutex mu;
  std::vector<std::string> reports;
  FabricOptions Options(const std::string& name) {
    FabricOptions options;
    options.provider = FabricProvider::kShm;
    options.node_name = name;
    options.wedged_after = std::chrono::milliseconds(1000);
    options.on_wedged = [this](const Status& why) {
      std::lock_guard<std::mutex> lock(mu);
      reports.push_back(why.ToString());
    };
    return options;
  }
  std::string Reports() {
    std::lock_guard<std::mutex> lock(mu);
    std::string out;
    for (const auto& r : reports) out += r + "\n";
    return out;
  }
};

// shm 1.17 sends by taking a spin lock inside the receiver's region: a send
// to a process killed while it held its own lock would spin for ever. So a
// send to an shm peer whose process has exited (here a zombie: its parent has
// not reaped it, and kill(pid, 0) would still say it runs) fails at once,
// naming the peer and its pid, and is never given to the provider.
TEST(FabricTransport, ASendToAnShmPeerWhoseProcessExitedIsNotPosted) {
  if (!FabricProviderVersion(FabricProvider::kShm)) GTEST_SKIP() << "shm unavailable";
  FabricOptions options;
  options.provider = FabricProvider::kShm;
  options.node_name = testing::PeerName(0);
  auto transport = MakeFabricTransport(options);
  ASSERT_TRUE(transport) << transport.error().ToString();
  ShmPeerProcess child;
  const bool received = child.Start((*transport)->LocalAddress(), ShmPeerProcess::Hold::kNothing).ok();
  const std::vector<PeerInfo> peers = {{0, (*transport)->LocalAddress(), "node0"}, {1, child.address(), "node1"}};
  const Status set = received ? (*transport)->SetPeers(0, peers) : Status::Ok();
  ASSERT_TRUE(child.Kill());  // a zombie now
  ASSERT_TRUE(received) << "no address from the child";
  ASSERT_TRUE(set.ok()) << set.ToString();
  std::vector<std::byte> data(4096);
  auto send = (*transport)->Isend(1, 3, data);
  ASSERT_FALSE(send) << "posted a send to a process that exited";
  EXPECT_EQ(send.error().code(), StatusCode::kUnavailable) << send.error().ToString();
  EXPECT_NE(send.error().message().find("node1"), std::string::npos) << send.error().ToString();
  EXPECT_NE(send.error().message().find("(pid " + std::to_string(child.pid()) + ") has exited"), std::string::npos)
      << send.error().ToString();
}

// Runs `body` on a thread of its own and waits `limit` for it. A body still
// inside the provider then never returns: it is left running, detached, and
// `transports` are leaked (their destructors would wait for it), so the test
// fails rather than hangs.
bool ReturnsWithin(std::chrono::seconds limit, std::vector<std::unique_ptr<Transport>*> transports,
                   const std::function<void()>& body) {
  auto returned = std::make_shared<std::atomic<bool>>(false);
  std::thread thread([body, returned] {
    body();
    *returned = true;
  });
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!*returned && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!*returned) {
    thread.detach();
    for (auto* t : transports) (void)t->release();
    return false;
  }
  thread.join();
  return true;
}

// A process killed while it sent to node0 leaves the lock inside node0's own
// region held: node0's progress (which takes it to read its queue) and every
// send to node0 would spin in shm for ever. node0's watchdog gives it back and
// node2's message arrives, with no wedge reported.
TEST(FabricTransport, ALockAKilledPeerHeldInThisEndpointsRegionIsReleased) {
  if (!FabricProviderVersion(FabricProvider::kShm)) GTEST_SKIP() << "shm unavailable";
  WedgeWatch wedges;
  auto node0 = MakeFabricTransport(wedges.Options("node0"));
  auto node2 = MakeFabricTransport(wedges.Options("node2"));
  ASSERT_TRUE(node0 && node2);
  ShmPeerProcess holder;
  ASSERT_TRUE(holder.Start((*node0)->LocalAddress(), ShmPeerProcess::Hold::kParentsLock).ok());
  const std::vector<PeerInfo> peers = {
      {0, (*node0)->LocalAddress(), "node0"}, {1, holder.address(), "node1"}, {2, (*node2)->LocalAddress(), "node2"}};
  ASSERT_TRUE((*node0)->SetPeers(0, peers).ok());
  ASSERT_TRUE((*node2)->SetPeers(2, peers).ok());
  ASSERT_TRUE(holder.Kill());
  const auto out = Pattern(7, 4096);
  std::vector<std::byte> in(out.size());
  Status done;
  const bool returned = ReturnsWithin(std::chrono::seconds(20), {&*node0, &*node2}, [&] {
    std::vector<RequestPtr> requests;
    auto recv = (*node0)->Irecv(2, 9, in);
    auto send = (*node2)->Isend(0, 9, out);  // spins on node0's lock until it is released
    if (!recv || !send) {
      done = recv ? send.error() : recv.error();
      return;
    }
    requests.push_back(std::move(*recv));
    requests.push_back(std::move(*send));
    done = WaitAll(requests, Deadline::AfterSeconds(15));
  });
  ASSERT_TRUE(returned) << "the exchange still spins on node0's lock; wedge reports: " << wedges.Reports();
  ASSERT_TRUE(done.ok()) << done.ToString();
  EXPECT_EQ(FirstMismatch(in, 7, in.size()), in.size());
  EXPECT_EQ(wedges.Reports(), "");
}

// A peer killed while it read its own queue leaves the lock inside its region
// held, and a send to it that had already started spins on it (a later one is
// never posted). The watchdog gives the dead region's lock back: the send
// returns, with no wedge reported.
TEST(FabricTransport, ASendSpinningOnAKilledPeersRegionLockReturns) {
  if (!FabricProviderVersion(FabricProvider::kShm)) GTEST_SKIP() << "shm unavailable";
  WedgeWatch wedges;
  auto node0 = MakeFabricTransport(wedges.Options("node0"));
  ASSERT_TRUE(node0);
  ShmPeerProcess holder;
  ASSERT_TRUE(holder.Start((*node0)->LocalAddress(), ShmPeerProcess::Hold::kOwnLock).ok());
  const std::vector<PeerInfo> peers = {{0, (*node0)->LocalAddress(), "node0"}, {1, holder.address(), "node1"}};
  ASSERT_TRUE((*node0)->SetPeers(0, peers).ok());
  const auto out = Pattern(3, 4096);
  std::atomic<bool> posted{false};
  const bool returned = ReturnsWithin(std::chrono::seconds(20), {&*node0}, [&] {
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      EXPECT_FALSE(posted.load()) << "the send did not wait for the held lock: the test no longer holds it";
      EXPECT_TRUE(holder.Kill());
    });
    auto send = (*node0)->Isend(1, 4, out);
    posted = true;
    killer.join();
    if (send) (void)(*send)->Wait(Deadline::AfterSeconds(5));  // done, or failed with its peer
  });
  ASSERT_TRUE(returned) << "the send still spins on the killed peer's lock; wedge reports: " << wedges.Reports();
  EXPECT_EQ(wedges.Reports(), "");
}

// Two net endpoints in this process, named by the order of their addresses
// (rank 0 "small", rank 1 "large"); only `large` has its peers set.
class NetFirstContact : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!FabricProviderVersion(FabricProvider::kNet)) GTEST_SKIP() << "net unavailable";
    FabricOptions options;
    options.provider = FabricProvider::kNet;
    auto a = MakeFabricTransport(options);
    auto b = MakeFabricTransport(options);
    ASSERT_TRUE(a && b);
    small_ = std::move(*a);
    large_ = std::move(*b);
    if (large_->LocalAddress() < small_->LocalAddress()) std::swap(small_, large_);
    peers_ = {{0, small_->LocalAddress(), "small"}, {1, large_->LocalAddress(), "large"}};
    ASSERT_TRUE(large_->SetPeers(1, peers_).ok());
  }
  Transport& small() { return *small_; }
  Transport& large() { return *large_; }

  std::unique_ptr<Transport> small_, large_;
  std::vector<PeerInfo> peers_;
};

// net's first contact goes one way (fabric_core.h): the endpoint with the
// larger address holds its first send to a new peer until that peer, on its
// own SetPeers, sends its first-contact message; receives are never held, the
// peer's sends are not held, and the first-contact messages are not counted.
TEST_F(NetFirstContact, ComesFromTheSmallerAddress) {
  Transport& small = this->small();
  Transport& large = this->large();
  uint64_t to_small = 0x5eed;
  auto held = large.Isend(0, 7, testing::AsBytes(to_small));
  ASSERT_TRUE(held) << held.error().ToString();
  uint64_t from_small = 0;
  auto early = large.Irecv(0, 8, testing::AsWritableBytes(from_small));  // receives are not held
  ASSERT_TRUE(early) << early.error().ToString();
  // Nothing can complete the send before `small` makes contact.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE((*held)->Done()) << "a send from the larger address went out before first contact";

  ASSERT_TRUE(small.SetPeers(0, peers_).ok());  // sends the first-contact message
  uint64_t got = 0;
  auto received = small.Recv(1, 7, testing::AsWritableBytes(got), Deadline::AfterSeconds(30));
  ASSERT_TRUE(received) << received.error().ToString();
  EXPECT_EQ(got, to_small);
  auto sent = (*held)->Wait(Deadline::AfterSeconds(30));
  ASSERT_TRUE(sent) << sent.error().ToString();
  uint64_t reply = 0xbeef;
  ASSERT_TRUE(small.Send(1, 8, testing::AsBytes(reply), Deadline::AfterSeconds(30)).ok());
  auto replied = (*early)->Wait(Deadline::AfterSeconds(30));
  ASSERT_TRUE(replied) << replied.error().ToString();
  EXPECT_EQ(from_small, reply);
  EXPECT_EQ(small.Stats().messages_sent, 1u);
  EXPECT_EQ(small.Stats().messages_received, 1u);
  EXPECT_EQ(large.Stats().messages_sent, 1u);
  EXPECT_EQ(large.Stats().messages_received, 1u);
}

// A send held for first contact fails when its peer is marked dead (not at
// its deadline), and one whose deadline comes first says so.
TEST_F(NetFirstContact, HeldSendEndsWithItsPeer) {
  Transport& large = this->large();
  uint64_t v = 1;
  auto timed = large.Send(0, 7, testing::AsBytes(v), Deadline::After(std::chrono::milliseconds(200)));
  ASSERT_FALSE(timed.ok());
  EXPECT_EQ(timed.code(), StatusCode::kDeadlineExceeded) << timed.ToString();
  EXPECT_NE(timed.message().find("small"), std::string::npos) << timed.ToString();
  auto held = large.Isend(0, 7, testing::AsBytes(v));
  ASSERT_TRUE(held) << held.error().ToString();
  large.MarkPeerDead(0);
  auto failed = (*held)->Wait(Deadline::AfterSeconds(5));
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code(), StatusCode::kUnavailable) << failed.error().ToString();
}


TEST(FabricTransport, NewMembershipFailsReceivesFromPeersThatLeft) {
  if (!FabricProviderVersion(FabricProvider::kTcpRxm)) GTEST_SKIP() << "tcp;ofi_rxm unavailable";
  auto world = MakeWorld(TransportKind::kTcp, 3);
  ASSERT_TRUE(world) << world.error().ToString();
  Transport& t0 = (*world)[0];
  uint64_t v = 0;
  auto from_leaver = t0.Irecv(2, 5, testing::AsWritableBytes(v));
  ASSERT_TRUE(from_leaver);
  auto any = t0.Irecv(kAnySource, 6, testing::AsWritableBytes(v));
  ASSERT_TRUE(any);
  // Next epoch: rank 2 is gone.
  std::vector<PeerInfo> peers = {{0, t0.LocalAddress(), "node0"},
                                 {1, (*world)[1].LocalAddress(), "node1"}};
  ASSERT_TRUE(t0.SetPeers(0, peers).ok());
  EXPECT_EQ(t0.size(), 2);
  auto failed = (*from_leaver)->Wait(Deadline::AfterSeconds(10));
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code(), StatusCode::kUnavailable) << failed.error().ToString();
  EXPECT_NE(failed.error().message().find("node2"), std::string::npos) << failed.error().ToString();
  // The any-source receive survives and still names its source.
  uint64_t x = 12;
  ASSERT_TRUE((*world)[1].Send(0, 6, testing::AsBytes(x), Deadline::AfterSeconds(10)).ok());
  auto got = (*any)->Wait(Deadline::AfterSeconds(10));
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_EQ(got->source, 1);
  EXPECT_EQ(v, 12u);
  // Rank 2 no longer exists for t0.
  auto gone = t0.Isend(2, 5, testing::AsBytes(x));
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code(), StatusCode::kInvalidArgument);
}

// Above rxm's eager limit, so sent by rendezvous.
constexpr size_t kRendezvousBytes = 2 * kDefaultRxmEagerLimit;

// Rank 0 starts a send of `data` (kRendezvousBytes: rxm's rendezvous) to rank
// 1, which posts no receive; returned once the rendezvous is under way.
RequestPtr StartUnreceivedSend(Transport& t0, std::span<const std::byte> data) {
  auto send = t0.Isend(1, 9, data);
  EXPECT_TRUE(send) << send.error().ToString();
  if (!send) return nullptr;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE((*send)->Done()) << "rank 1 posted no receive";
  return std::move(*send);
}

// rxm 1.17 does not release a send by rendezvous that its peer never
// receives, even after fi_cancel: destroying the request waits the cancel
// timeout for the release. Once the peer is gone (Transport::PeerGone: it can
// no longer read the buffer) the request is given up at once, its context
// kept by the transport; also when PeerGone comes while the destruction waits
// (a node learns that a peer whose connection closed is gone after its step
// failed). The timeouts here (60 s) are far above the limit.
TEST(FabricTransport, ASendToAGonePeerIsGivenUpWithoutTheCancelTimeout) {
  if (!FabricProviderVersion(FabricProvider::kTcpRxm)) GTEST_SKIP() << "tcp;ofi_rxm unavailable";
  for (const bool gone_while_waiting : {false, true}) {
    SCOPED_TRACE(gone_while_waiting ? "gone while waiting" : "gone before");
    FabricOptions options;
    options.cancel_timeout = std::chrono::seconds(60);
    options.dead_peer_release_wait = std::chrono::seconds(60);
    auto world = MakeWorld(TransportKind::kTcp, 2, options);
    ASSERT_TRUE(world) << world.error().ToString();
    Transport& t0 = (*world)[0];
    std::vector<std::byte> big(kRendezvousBytes);
    RequestPtr send = StartUnreceivedSend(t0, big);
    ASSERT_TRUE(send && !send->Done());
    t0.MarkPeerDead(1);
    if (!gone_while_waiting) t0.PeerGone(1);
    auto failed = send->Wait(Deadline::AfterSeconds(5));
    ASSERT_FALSE(failed);
    EXPECT_EQ(failed.error().code(), StatusCode::kUnavailable) << failed.error().ToString();
    const auto start = std::chrono::steady_clock::now();
    std::thread destroy([&] { send.reset(); });  // cancels and waits for the provider's release, or not
    if (gone_while_waiting) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      t0.PeerGone(1);
    }
    destroy.join();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  }
}

// A peer declared dead for its silence (maybe only frozen or cut off) is not
// gone, but what the provider still holds for it is awaited only
// dead_peer_release_wait (Transport::PeerSilent): the same unreleased
// send is given up in about that time, not after cancel_timeout (60 s
// here), and counts as unreleased.
TEST(FabricTransport, ASendToAPeerMarkedDeadIsGivenUpAfterTheShortWait) {
  if (!FabricProviderVersion(FabricProvider::kTcpRxm)) GTEST_SKIP() << "tcp;ofi_rxm unavailable";
  FabricOptions options;
  options.cancel_timeout = std::chrono::seconds(60);
  options.dead_peer_release_wait = std::chrono::milliseconds(300);
  auto world = MakeWorld(TransportKind::kTcp, 2, options);
  ASSERT_TRUE(world) << world.error().ToString();
  Transport& t0 = (*world)[0];
  std::vector<std::byte> big(kRendezvousBytes);
  RequestPtr send = StartUnreceivedSend(t0, big);
  ASSERT_TRUE(send && !send->Done());
  t0.MarkPeerDead(1);
  t0.PeerSilent(1);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(send->Release());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_EQ(t0.UnreleasedBuffers(), 1);
  send.reset();
  KeepForGood(big);  // the provider may still read it
}

// A send whose request gave up before rxm released it (a rendezvous its
// peer has not received yet; rxm 1.17 does not cancel sends) still has
// its buffer read when the peer receives: Release says so, it counts in
// UnreleasedBuffers until the provider completes it, and the peer gets
// every byte.
TEST(FabricTransport, ASendNotReleasedAfterCancelCountsUntilItCompletes) {
  if (!FabricProviderVersion(FabricProvider::kTcpRxm)) GTEST_SKIP() << "tcp;ofi_rxm unavailable";
  FabricOptions options;
  options.cancel_timeout = std::chrono::milliseconds(300);
  auto world = MakeWorld(TransportKind::kTcp, 2, options);
  ASSERT_TRUE(world) << world.error().ToString();
  Transport& t0 = (*world)[0];
  const size_t n = kRendezvousBytes;
  const std::vector<std::byte> data = Pattern(7, n);
  RequestPtr send = StartUnreceivedSend(t0, data);
  ASSERT_TRUE(send && !send->Done());
  EXPECT_EQ(t0.UnreleasedBuffers(), 0);
  EXPECT_FALSE(send->Release());  // cancels, waits the cancel timeout, gives up
  EXPECT_EQ(t0.UnreleasedBuffers(), 1);
  send.reset();
  EXPECT_EQ(t0.UnreleasedBuffers(), 1);

  std::vector<std::byte> got(n);
  auto recv = (*world)[1].Irecv(0, 9, got);
  ASSERT_TRUE(recv) << recv.error().ToString();
  auto done = (*recv)->Wait(Deadline::AfterSeconds(20));
  ASSERT_TRUE(done) << done.error().ToString();
  EXPECT_EQ(FirstMismatch(got, 7, n), n);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (t0.UnreleasedBuffers() != 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(t0.UnreleasedBuffers(), 0) << "the provider's completion of the send was not counted";
}

// A node that exits after a failure leaves rxm's endpoint open for the exit
// to reclaim (rxm 1.17's close can crash after a partition): what is pending
// fails and counts as released, nothing new is posted, and the transport is
// destroyed without waiting.
TEST(FabricTransport, EndForExitFailsWhatIsPending) {
  if (!FabricProviderVersion(FabricProvider::kTcpRxm)) GTEST_SKIP() << "tcp;ofi_rxm unavailable";
  auto world = MakeWorld(TransportKind::kTcp, 2);
  ASSERT_TRUE(world) << world.error().ToString();
  Transport& t0 = (*world)[0];
  uint64_t v = 0;
  auto recv = t0.Irecv(1, 5, testing::AsWritableBytes(v));
  ASSERT_TRUE(recv) << recv.error().ToString();
  t0.EndForExit();
  auto done = (*recv)->Wait(Deadline::AfterSeconds(5));
  ASSERT_FALSE(done);
  EXPECT_EQ(done.error().code(), StatusCode::kCancelled) << done.error().ToString();
  EXPECT_TRUE((*recv)->Release());
  EXPECT_EQ(t0.UnreleasedBuffers(), 0);
  auto after = t0.Isend(1, 6, testing::AsBytes(v));
  if (after) {
    EXPECT_FALSE((*after)->Wait(Deadline::AfterSeconds(5)));
  }
  recv->reset();
  world->transports[0].reset();
  // The peer is unaffected.
  Transport& t1 = (*world)[1];
  EXPECT_EQ(t1.size(), 2);
}

TEST(MrCache, HitsEvictsLeastRecentlyUsedAndKeepsHandedOutRegistrations) {
  int live = 0;
  int registered = 0;
  fabric::MrCache cache(2, [&](const void*, size_t) -> Result<fabric::MrRegistration> {
    ++live;
    ++registered;
    fabric::MrRegistration r;
    r.desc = reinterpret_cast<void*>(static_cast<uintptr_t>(registered));
    r.owner = std::shared_ptr<void>(nullptr, [&live](void*) { --live; });
    return r;
  });
  std::vector<char> a(100), b(100), c(100);
  auto ra = cache.Get(a.data(), a.size());
  ASSERT_TRUE(ra);
  EXPECT_TRUE(cache.Get(b.data(), b.size()));
  EXPECT_EQ(cache.Get(a.data() + 10, 50)->desc, ra->desc);  // inside a: hit, a most recent
  EXPECT_TRUE(cache.Get(c.data(), c.size()));                // evicts b (least recent)
  auto stats = cache.Stats();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 3u);
  EXPECT_EQ(stats.evictions, 1u);
  EXPECT_EQ(stats.entries, 2u);
  EXPECT_EQ(live, 2);  // b's registration was closed on eviction
  EXPECT_TRUE(cache.Get(a.data(), a.size()));
  EXPECT_EQ(cache.Stats().hits, 2u);
  cache.Clear();
  EXPECT_EQ(live, 1);  // `ra` still holds a's registration
  ra = Err(Cancelled("drop"));
  EXPECT_EQ(live, 0);
  // A registration failure is returned and nothing is cached.
  fabric::MrCache failing(2, [](const void*, size_t) -> Result<fabric::MrRegistration> {
    return Err(ResourceExhausted("no pinned memory left"));
  });
  auto bad = failing.Get(a.data(), a.size());
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(failing.Stats().entries, 0u);
}

}  // namespace
}  // namespace chorus::gossip
