// FabricTransport: the Transport interface over a FabricCore (fabric_core.h has
// the design), the factory and the version queries of fabric_transport.h.
//
// Must not: hold state of its own beyond the shared FabricCore (requests may
// outlive the transport and keep the core alive).
#include "gossip/transport/fabric/fabric_transport.h"

#include <sched.h>

#include <thread>

#include "gossip/transport/fabric/fabric_core.h"

namespace chorus::gossip {
namespace {

using fabric::FabricCore;
using fabric::FabricOp;
using fabric::InfoOwner;

// ---- Request and Transport ----

class FabricRequest final : public Request {
 public:
  FabricRequest(std::shared_ptr<FabricCore> core, std::shared_ptr<FabricOp> op)
      : core_(std::move(core)), op_(std::move(op)) {}
  ~FabricRequest() override { core_->Abandon(*op_); }

  bool Done() override {
    if (!op_->finished.load()) core_->Poll(/*block=*/false);
    return op_->finished.load();
  }
  Result<Completion> Wait(Deadline deadline) override { return core_->Wait(*op_, deadline); }
  void Cancel() override {
    if (op_->finished.load()) return;
    core_->CancelAndReap(*op_, Cancelled(op_->Describe() + ": cancelled"));
  }

 private:
  std::shared_ptr<FabricCore> core_;
  std::shared_ptr<FabricOp> op_;
};

class FabricTransport final : public Transport {
 public:
  explicit FabricTransport(std::shared_ptr<FabricCore> core) : core_(std::move(core)) {}
  ~FabricTransport() override { core_->Shutdown(); }

  std::vector<uint8_t> LocalAddress() const override { return core_->local_address(); }
  Status SetPeers(Rank self, std::span<const PeerInfo> peers) override {
    return core_->SetPeers(self, peers);
  }
  Rank rank() const override { return core_->rank(); }
  int size() const override { return core_->size(); }
  Result<RequestPtr> Isend(Rank dest, Tag tag, std::span<const std::byte> data) override {
    return core_->Post(FabricOp::Kind::kSend, dest, tag,
                       const_cast<std::byte*>(data.data()), data.size());
  }
  Result<RequestPtr> Irecv(Rank source, Tag tag, std::span<std::byte> data) override {
    return core_->Post(FabricOp::Kind::kRecv, source, tag, data.data(), data.size());
  }
  void MarkPeerDead(Rank peer) override { core_->MarkPeerDead(peer); }
  void Discard(TagFilter filter) override { core_->Discard(filter); }
  bool NeedsPeersInstalledBeforeFirstSend() const override {
    return core_->needs_peers_installed_before_first_send();
  }
  TransportStats Stats() const override { return core_->Stats(); }
  std::string Describe() const override { return core_->Describe(); }

  FabricMrStats MrStats() const { return core_->MrStats(); }

 private:
  std::shared_ptr<FabricCore> core_;
};

}  // namespace

namespace fabric {

Result<RequestPtr> MakeFabricRequest(std::shared_ptr<FabricCore> core,
                                     std::shared_ptr<FabricOp> op) {
  return std::make_unique<FabricRequest>(std::move(core), std::move(op));
}

}  // namespace fabric

std::chrono::microseconds BusyPollFor(const std::string& provider, int busy_processes,
                                      int override_us) {
  if (override_us >= 0) return std::chrono::microseconds(override_us);
  if (provider != "shm") return std::chrono::microseconds(0);
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
    return Err(opened.WithContext("opening libfabric endpoint (provider \"" + options.provider +
                                  "\")"));
  }
  return std::unique_ptr<Transport>(std::make_unique<FabricTransport>(std::move(core)));
}

Result<std::string> FabricProviderVersion(const std::string& provider) {
  CHORUS_ASSIGN_OR_RETURN(InfoOwner info, fabric::GetInfo(provider, ""));
  return fabric::VersionString(info->fabric_attr->prov_version);
}

std::string LibfabricVersion() { return fabric::VersionString(fi_version()); }

Result<FabricMrStats> GetFabricMrStats(const Transport& transport) {
  const auto* fabric_transport = dynamic_cast<const FabricTransport*>(&transport);
  if (fabric_transport == nullptr) {
    return Err(InvalidArgument("GetFabricMrStats: " + transport.Describe() +
                               " is not a fabric transport"));
  }
  return fabric_transport->MrStats();
}

}  // namespace chorus::gossip
