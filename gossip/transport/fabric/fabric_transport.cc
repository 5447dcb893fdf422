// FabricTransport: the Transport interface over a FabricCore (fabric_core.h has
// the design), the factory and the version queries of fabric_transport.h.
//
// Must not: give a request anything but its own FabricCore (requests may
// outlive the transport, or its endpoint of an ended epoch, and keep their
// core alive).
#include "gossip/transport/fabric/fabric_transport.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "gossip/transport/fabric/fabric_core.h"

namespace chorus::gossip {
namespace {

using fabric::FabricCore;
using fabric::FabricOp;
using fabric::InfoOwner;

// The address of the endpoint that the endpoint published as `published`
// opens for membership epoch `epoch` (the same at epoch 0): the name with
// ".e<epoch>" appended, its trailing NUL kept where it had one.
std::vector<uint8_t> EpochAddress(std::span<const uint8_t> published, uint64_t epoch) {
  std::vector<uint8_t> out(published.begin(), published.end());
  if (epoch == 0) return out;
  const bool terminated = !out.empty() && out.back() == 0;
  while (!out.empty() && out.back() == 0) out.pop_back();
  const std::string suffix = ".e" + std::to_string(epoch);
  out.insert(out.end(), suffix.begin(), suffix.end());
  if (terminated) out.push_back(0);
  return out;
}

// ---- Request and Transport ----

class FabricRequest final : public Request {
 public:
  FabricRequest(std::shared_ptr<FabricCore> core, std::shared_ptr<FabricOp> op)
      : core_(std::move(core)), op_(std::move(op)) {}
  ~FabricRequest() override { core_->Abandon(*op_); }

  bool Done() override {
    if (!op_->finished.load()) core_->Poll(/*block=*/false);
    return op_->finished.load() && Settle();
  }
  Result<Completion> Wait(Deadline deadline) override {
    for (;;) {
      Result<Completion> completion = core_->Wait(*op_, deadline);
      if (!Settle()) continue;  // a message that failed authentication: waiting for the real one
      if (!error_.ok()) return Err(error_);
      return completion;
    }
  }
  void Cancel() override {
    if (op_->finished.load()) return;
    core_->CancelAndReap(*op_, Cancelled(op_->Describe() + ": cancelled"));
  }
  bool Release() override {
    core_->Abandon(*op_);
    std::lock_guard<std::mutex> lock(op_->mu);
    return op_->reaped;
  }

 private:
  // A finished sealed receive: true once its message verified (or the
  // receive failed); false when the message was dropped and op_ is now a
  // fresh receive in its place (FabricCore::Unseal).
  bool Settle() {
    if (!op_->seal || op_->kind != FabricOp::Kind::kRecv || op_->settled) return true;
    Result<std::shared_ptr<FabricOp>> next = core_->Unseal(op_);
    if (!next) {
      error_ = next.error();
      return true;
    }
    const bool same = next->get() == op_.get();
    op_ = std::move(*next);
    return same;
  }

  std::shared_ptr<FabricCore> core_;
  std::shared_ptr<FabricOp> op_;
  Status error_;  // a re-post after a dropped message failed
};

class FabricTransport final : public Transport {
 public:
  FabricTransport(FabricOptions options, std::shared_ptr<FabricCore> core)
      : options_(std::move(options)), published_(core->local_address()), core_(core.get()) {
    cores_.push_back(std::move(core));
  }
  ~FabricTransport() override { Core().Shutdown(); }

  std::vector<uint8_t> LocalAddress() const override { return published_; }

  // shm: a fresh core whose endpoint is named EpochAddress(published_, epoch);
  // the old one closes, failing what it still holds (fabric_core.h, Epochs).
  Status BeginEpoch(uint64_t epoch) override {
    std::lock_guard<std::mutex> lock(mu_);
    FabricCore& old = Core();
    if (!old.renews_endpoint_per_epoch() || epoch == epoch_) return Status::Ok();
    FabricOptions options = options_;
    const std::vector<uint8_t> name = EpochAddress(published_, epoch);
    options.endpoint_name.assign(name.begin(), std::find(name.begin(), name.end(), uint8_t{0}));
    auto fresh = std::make_shared<FabricCore>(options);
    Status opened = fresh->Open();
    if (opened.ok() && seal_) fresh->SetSeal(seal_);
    if (!opened.ok()) {
      return opened.WithContext("opening the " + std::string(ProviderName(options.provider)) +
                                " endpoint of membership epoch " +
                                std::to_string(epoch));
    }
    core_.store(fresh.get(), std::memory_order_release);
    cores_.push_back(std::move(fresh));
    old.Shutdown(StatusCode::kUnavailable, "the endpoint of membership epoch " + std::to_string(epoch_) +
                                               " closed as epoch " + std::to_string(epoch) + " began");
    epoch_ = epoch;
    return Status::Ok();
  }

  // Over shm nothing outside this host's user can reach the endpoint
  // (docs/design.md, "Authenticated data plane"): no seal.
  Status SetEpochKey(uint64_t epoch, const DataKey& key) override {
    if (!options_.authenticate || options_.provider == FabricProvider::kShm) return Status::Ok();
    std::lock_guard<std::mutex> lock(mu_);
    if (seal_ && seal_->Matches(epoch, key)) return Status::Ok();
    CHORUS_ASSIGN_OR_RETURN(seal_, DataSeal::Make(epoch, key, options_.encrypt ? SealMode::kEncrypt
                                                                               : SealMode::kAuthenticate));
    Core().SetSeal(seal_);
    sealed_.store(options_.encrypt ? 2 : 1, std::memory_order_relaxed);
    return Status::Ok();
  }

  Status SetPeers(Rank self, std::span<const PeerInfo> peers) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (epoch_ == 0) return Core().SetPeers(self, peers);
    std::vector<PeerInfo> renamed(peers.begin(), peers.end());
    for (PeerInfo& p : renamed) p.address = EpochAddress(p.address, epoch_);
    return Core().SetPeers(self, renamed);
  }
  Rank rank() const override { return Core().rank(); }
  int size() const override { return Core().size(); }
  Result<RequestPtr> Isend(Rank dest, Tag tag, std::span<const std::byte> data) override {
    return Core().Post(FabricOp::Kind::kSend, dest, tag, const_cast<std::byte*>(data.data()), data.size());
  }
  Result<RequestPtr> Irecv(Rank source, Tag tag, std::span<std::byte> data) override {
    return Core().Post(FabricOp::Kind::kRecv, source, tag, data.data(), data.size());
  }
  void MarkPeerDead(Rank peer) override { Core().MarkPeerDead(peer); }
  void PeerSilent(Rank peer) override { Core().PeerSilent(peer); }
  bool PeerMarkedDead(Rank peer) const override { return Core().PeerMarkedDead(peer); }
  void PeerGone(Rank peer) override { Core().PeerGone(peer); }
  void Discard(TagFilter filter) override { Core().Discard(filter); }
  bool NeedsPeersInstalledBeforeFirstSend() const override {
    return Core().needs_peers_installed_before_first_send();
  }
  size_t EagerLimit() const override { return Core().eager_limit(); }
  void SetOtherSites(const std::vector<bool>& other_site) override { Core().SetOtherSites(other_site); }
  TransportStats Stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    TransportStats s;
    for (const auto& core : cores_) s += core->Stats();
    return s;
  }
  // The endpoint, and how its messages are sealed once SetEpochKey gave a key.
  std::string Describe() const override {
    const int sealed = sealed_.load(std::memory_order_relaxed);
    return Core().Describe() + (sealed == 2 ? ", encrypted" : sealed == 1 ? ", authenticated" : "");
  }
  void EndForExit() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (options_.provider != FabricProvider::kTcpRxm) return;  // closed at destruction as usual
    for (const auto& core : cores_) core->ShutdownLeavingOpen(StatusCode::kCancelled, "the process exits");
    (void)new std::vector<std::shared_ptr<FabricCore>>(cores_);  // never destroyed, never closed
  }
  int UnreleasedBuffers() const override {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const auto& core : cores_) n += core->UnreleasedBuffers();
    return n;
  }

  FabricMrStats MrStats() const { return Core().MrStats(); }

 private:
  // The endpoint of this epoch. A plain load: posts need no lock or
  // reference count, and every core lives as long as the transport (cores_).
  FabricCore& Core() const { return *core_.load(std::memory_order_acquire); }

  const FabricOptions options_;
  const std::vector<uint8_t> published_;  // the first endpoint's address (LocalAddress)
  mutable std::mutex mu_;                 // BeginEpoch, SetPeers and Stats one at a time
  std::atomic<FabricCore*> core_;         // cores_.back()
  // Every endpoint opened, the closed ones kept (for their Stats, and so that
  // a post racing BeginEpoch still finds its core; one per re-form).
  std::vector<std::shared_ptr<FabricCore>> cores_;  // under mu_
  uint64_t epoch_ = 0;                              // the epoch core_ was opened for; under mu_
  std::shared_ptr<DataSeal> seal_;                  // SetEpochKey's latest; under mu_
  std::atomic<int> sealed_{0};                      // 0: no seal yet, 1: MACs, 2: encrypted too
};

}  // namespace

namespace fabric {

Result<RequestPtr> MakeFabricRequest(std::shared_ptr<FabricCore> core,
                                     std::shared_ptr<FabricOp> op) {
  return std::make_unique<FabricRequest>(std::move(core), std::move(op));
}

}  // namespace fabric

std::chrono::microseconds BusyPollFor(FabricProvider provider, int busy_processes,
                                      int override_us) {
  if (override_us >= 0) return std::chrono::microseconds(override_us);
  if (provider != FabricProvider::kShm) return std::chrono::microseconds(0);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const int cores = sched_getaffinity(0, sizeof(cpus), &cpus) == 0
                        ? CPU_COUNT(&cpus)
                        : static_cast<int>(std::thread::hardware_concurrency());
  return busy_processes <= cores ? std::chrono::microseconds(200) : std::chrono::microseconds(0);
}

Result<std::unique_ptr<Transport>> MakeFabricTransport(const FabricOptions& options) {
  auto core = std::make_shared<FabricCore>(options);
  Status opened = core->Open();
  if (!opened.ok()) {
    return Err(opened.WithContext("opening libfabric endpoint (provider \"" +
                                  std::string(ProviderName(options.provider)) + "\")"));
  }
  return std::unique_ptr<Transport>(std::make_unique<FabricTransport>(options, std::move(core)));
}

Result<std::string> FabricProviderVersion(FabricProvider provider) {
  CHORUS_ASSIGN_OR_RETURN(InfoOwner info, fabric::GetInfo(provider, ""));
  return fabric::VersionString(info->fabric_attr->prov_version);
}

std::string LibfabricVersion() {
  Result<const fabric::FabricApi*> fi = fabric::Libfabric();
  return fi ? fabric::VersionString((*fi)->version()) : "unavailable (" + fi.error().message() + ")";
}

Result<FabricMrStats> GetFabricMrStats(const Transport& transport) {
  const auto* fabric_transport = dynamic_cast<const FabricTransport*>(&transport);
  if (fabric_transport == nullptr) {
    return Err(InvalidArgument("GetFabricMrStats: " + transport.Describe() +
                               " is not a fabric transport"));
  }
  return fabric_transport->MrStats();
}

}  // namespace chorus::gossip
