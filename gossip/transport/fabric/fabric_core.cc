// FabricCore: endpoint setup, peers, posting with a backlog, completion
// handling, waits and the progress thread (design in fabric_core.h).
#include "gossip/transport/fabric/fabric_core.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include "common/log.h"
#include "common/shm_names.h"
#include "gossip/transport/fabric/shm_region_lock.h"

namespace chorus::gossip::fabric {

// Longest a wait polls the CQ itself before sleeping (see FabricOptions::wait_spin_per_mib).
constexpr int64_t kMaxWaitSpinUs = 64000;

// ---- Setup ----

namespace {

InfoOwner MakeHints(std::string_view provider, uint64_t extra_caps, uint64_t extra_order) {
  InfoOwner hints(fi_allocinfo());
  if (!hints) return hints;
  hints->caps = FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE | extra_caps;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  hints->tx_attr->msg_order = FI_ORDER_SAS | extra_order;
  hints->rx_attr->msg_order = FI_ORDER_SAS | extra_order;
  hints->fabric_attr->prov_name = strdup(std::string(provider).c_str());
  return hints;
}

// Provider settings Chorus depends on, applied before libfabric reads its
// environment (its first fi_getinfo in the process) and never over a value the
// user set:
//  - FI_OFI_RXM_ENABLE_DYN_RBUF=0: rxm's dynamic receive buffers lose the
//    stream after a truncated receive; its bounce buffers handle truncation.
//  - FI_OFI_RXM_SAR_LIMIT=16384 (the eager limit): no segmentation-and-
//    reassembly protocol, so messages above 16 KiB go by rendezvous; SAR-sized
//    messages stalled for milliseconds on oversubscribed hosts.
//  - FI_NET_MAX_SAVED=1024: net stops reading a peer's socket beyond this many
//    unexpected messages, so a receive waiting for a later message would hang
//    (its default, 4, hangs DifferentTagsAreMatchedIndependently); Chorus's
//    exchanges keep far fewer than 1024 messages ahead of their receives.
// Why each, with the measurements: docs/libfabric.md ("Settings Chorus applies
// to libfabric").
void ApplyProviderEnvironment() {
  static const bool applied = [] {
    setenv("FI_OFI_RXM_ENABLE_DYN_RBUF", "0", /*overwrite=*/0);
    setenv("FI_OFI_RXM_SAR_LIMIT", "16384", /*overwrite=*/0);
    setenv("FI_NET_MAX_SAVED", "1024", /*overwrite=*/0);
    return true;
  }();
  (void)applied;
}

}  // namespace

Result<InfoOwner> GetInfo(std::string_view provider_name, const std::string& bind_address, uint64_t extra_caps,
                          uint64_t extra_order) {
  ApplyProviderEnvironment();
  const std::string provider(provider_name);
  InfoOwner hints = MakeHints(provider, extra_caps, extra_order);
  if (!hints) return Err(ResourceExhausted("fi_allocinfo failed"));
  const bool bind = !bind_address.empty() && provider_name != ProviderName(FabricProvider::kShm);
  fi_info* list = nullptr;
  const int ret = fi_getinfo(kApiVersion, bind ? bind_address.c_str() : nullptr, nullptr,
                             bind ? FI_SOURCE : 0, hints.get(), &list);
  if (ret == -FI_ENODATA) {
    return Err(NotFound("libfabric provider \"" + provider + "\" offers no RDM tagged endpoint" +
                        (bind ? " on " + bind_address : std::string()) + " (see fi_info -l)"));
  }
  CHORUS_FI_RETURN_IF_ERROR(ret, "fi_getinfo(" + provider + ")");
  InfoOwner all(list);
  for (fi_info* i = list; i != nullptr; i = i->next) {
    if (i->fabric_attr->prov_name != nullptr && provider == i->fabric_attr->prov_name) {
      return InfoOwner(fi_dupinfo(i));
    }
  }
  return Err(NotFound("libfabric provider \"" + provider + "\" not found (see fi_info -l)"));
}

Status FabricCore::Open() {
  CHORUS_ASSIGN_OR_RETURN(info_, GetInfo(options_.provider, options_.bind_address));
  const uint64_t tag_format = info_->ep_attr->mem_tag_format;
  if (tag_format != 0 && std::bit_width(tag_format) < std::bit_width(kMaxTag)) {
    return FailedPrecondition("libfabric provider \"" + std::string(ProviderName(options_.provider)) + "\" matches " +
                              std::to_string(std::bit_width(tag_format)) +
                              " tag bits; Chorus needs " + std::to_string(std::bit_width(kMaxTag)));
  }
  const bool shm = options_.provider == FabricProvider::kShm;
  if (!options_.endpoint_name.empty() && !shm) {
    return InvalidArgument("fabric endpoint name \"" + options_.endpoint_name + "\": only shm endpoints are named");
  }
  if (shm) {
    // shm accepts FI_PEEK but never completes it, and a receive shorter than a
    // large message wedges it, so there is no safe way to take a message of
    // unknown size (docs/libfabric.md, "`shm`").
    discard_unsupported_ =
        "shm has no working FI_PEEK; a large one keeps its sender's later sends to this node from completing "
        "(Transport::BeginEpoch leaves them behind with the endpoint instead)";
    // The regions of endpoints whose process was killed (SIGKILL leaves them,
    // 16 MiB of RAM each once touched): survivors opening their next epoch's
    // endpoint, or the next run, remove them.
    const int removed = UnlinkShmNamesOfDeadProcesses("", ':');
    if (removed > 0) {
      CHORUS_LOG_INFO(Subsys::kFabric, "removed ", removed, " shm region(s) of processes that no longer run");
    }
  }
  order_first_contact_ = options_.provider == FabricProvider::kNet;
  watches_peer_processes_ = shm;
  peers_installed_before_first_send_ = shm;
  renews_endpoint_per_epoch_ = shm;
  registering_ = options_.force_memory_registration ||
                 (info_->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
  describe_ = "fabric(" + std::string(ProviderName(options_.provider)) + " " +
              fabric::VersionString(info_->fabric_attr->prov_version) + ")";
  if (!options_.node_name.empty()) describe_ += "@" + options_.node_name;

  CHORUS_FI_RETURN_IF_ERROR(fi_fabric(info_->fabric_attr, fabric_.out(), nullptr), "fi_fabric");
  CHORUS_FI_RETURN_IF_ERROR(fi_domain(fabric_.get(), info_.get(), domain_.out(), nullptr),
                            "fi_domain");
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  cq_attr.wait_obj = FI_WAIT_NONE;
  cq_attr.size = options_.cq_size;
  CHORUS_FI_RETURN_IF_ERROR(fi_cq_open(domain_.get(), &cq_attr, cq_.out(), nullptr), "fi_cq_open");
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  CHORUS_FI_RETURN_IF_ERROR(fi_av_open(domain_.get(), &av_attr, av_.out(), nullptr), "fi_av_open");
  if (registering_) {
    mr_cache_ = std::make_unique<MrCache>(
        options_.mr_cache_capacity,
        [this](const void* address, size_t length) { return Register(address, length); });
  }
  CHORUS_FI_RETURN_IF_ERROR(fi_endpoint(domain_.get(), info_.get(), ep_.out(), nullptr),
                            "fi_endpoint");
  CHORUS_FI_RETURN_IF_ERROR(fi_ep_bind(ep_.get(), &av_.get()->fid, 0), "fi_ep_bind(av)");
  CHORUS_FI_RETURN_IF_ERROR(fi_ep_bind(ep_.get(), &cq_.get()->fid, FI_TRANSMIT | FI_RECV),
                            "fi_ep_bind(cq)");
  if (!options_.endpoint_name.empty()) {
    std::string name = options_.endpoint_name;
    CHORUS_FI_RETURN_IF_ERROR(fi_setname(&ep_.get()->fid, name.data(), name.size() + 1),
                              "fi_setname(" + name + ")");
  }
  CHORUS_FI_RETURN_IF_ERROR(fi_enable(ep_.get()), "fi_enable");

  size_t len = 64;
  local_address_.resize(len);
  int ret = fi_getname(&ep_.get()->fid, local_address_.data(), &len);
  if (ret == -FI_ETOOSMALL) {
    local_address_.resize(len);
    ret = fi_getname(&ep_.get()->fid, local_address_.data(), &len);
  }
  CHORUS_FI_RETURN_IF_ERROR(ret, "fi_getname");
  local_address_.resize(len);

  progress_thread_ = std::thread([this] { ProgressLoop(); });
  if (watches_peer_processes_) watchdog_thread_ = std::thread([this] { WatchdogLoop(); });
  CHORUS_LOG_DEBUG(Subsys::kFabric, "opened ", describe_, " mr_mode=0x", std::hex,
                   info_->domain_attr->mr_mode, std::dec, " registering=", registering_);
  return Status::Ok();
}

Result<MrRegistration> FabricCore::Register(const void* address, size_t length) {
  auto owner = std::make_shared<MrOwner>();
  CHORUS_FI_RETURN_IF_ERROR(fi_mr_reg(domain_.get(), address, length, FI_SEND | FI_RECV, 0,
                                      next_mr_key_.fetch_add(1), 0, owner->out(), nullptr),
                            "fi_mr_reg(" + std::to_string(length) + " bytes)");
  MrRegistration reg;
  reg.desc = fi_mr_desc(owner->get());
  reg.owner = std::move(owner);
  return reg;
}

void FabricCore::Shutdown(StatusCode code, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(progress_mu_);
    progress_stop_ = true;
  }
  progress_cv_.notify_all();
  watchdog_cv_.notify_all();
  if (progress_thread_.joinable()) progress_thread_.join();
  if (watchdog_thread_.joinable()) watchdog_thread_.join();
  {
    std::lock_guard<std::mutex> lock(cq_mu_);
    if (closed_) return;
    closed_ = true;
    ep_.Reset();  // no completion can arrive after this
  }
  std::unordered_map<FabricOp*, std::shared_ptr<FabricOp>> ops;
  {
    std::lock_guard<std::mutex> lock(inflight_mu_);
    ops.swap(inflight_);
  }
  for (auto& [ptr, op] : ops) {
    std::lock_guard<std::mutex> lock(op->mu);
    op->reaped = true;
    FailLocked(*op, Status(code, op->Describe() + ": " + why));
  }
  {
    std::lock_guard<std::mutex> lock(contact_mu_);
    gates_.clear();
    gates_count_.store(0);
  }
  {
    std::lock_guard<std::mutex> lock(backlog_mu_);
    for (auto& queue : backlog_) queue.clear();
    backlog_size_.store(0);
  }
  if (mr_cache_) mr_cache_->Clear();
}

// ---- Peers ----

Status FabricCore::SetPeers(Rank self, std::span<const PeerInfo> peers) {
  const int n = static_cast<int>(peers.size());
  PeerTable table;
  table.self = self;
  table.addr.assign(n, FI_ADDR_NOTAVAIL);
  table.names.resize(n);
  table.dead.assign(n, false);
  std::vector<std::pair<fi_addr_t, PeerProcess>> watches;
  std::unique_lock lock(peers_mu_);
  for (const PeerInfo& p : peers) {
    if (p.rank < 0 || p.rank >= n || table.addr[p.rank] != FI_ADDR_NOTAVAIL) {
      return InvalidArgument("fabric SetPeers: rank " + std::to_string(p.rank) +
                             " is out of range or repeated (" + std::to_string(n) + " peers)");
    }
    if (p.address.empty()) {
      return InvalidArgument("fabric SetPeers: rank " + std::to_string(p.rank) + " (" + p.name +
                             ") has an empty address");
    }
    const std::string key(p.address.begin(), p.address.end());
    auto it = av_entries_.find(key);
    if (it == av_entries_.end()) {
      std::vector<uint8_t> blob = p.address;
      if (info_->addr_format == FI_ADDR_STR && blob.back() != 0) blob.push_back(0);
      fi_addr_t fi_addr = FI_ADDR_NOTAVAIL;
      const int ret = fi_av_insert(av_.get(), blob.data(), 1, &fi_addr, 0, nullptr);
      if (ret != 1 || fi_addr == FI_ADDR_NOTAVAIL) {
        return FabricStatus(ret < 0 ? ret : -FI_EADDRNOTAVAIL,
                            "fi_av_insert for rank " + std::to_string(p.rank) + " (" + p.name + ")");
      }
      it = av_entries_.emplace(key, fi_addr).first;
      if (watches_peer_processes_ && p.address != local_address_) {
        if (std::optional<PeerProcess> process = WatchProcessOf(p)) watches.emplace_back(fi_addr, std::move(*process));
      }
    }
    table.addr[p.rank] = it->second;
    table.names[p.rank] = p.name;
    table.rank_of[it->second] = p.rank;
  }
  if (self < 0 || self >= n || peers.empty()) {
    return InvalidArgument("fabric SetPeers: self rank " + std::to_string(self) +
                           " not among the " + std::to_string(n) + " peers");
  }
  for (const PeerInfo& p : peers) {
    if (p.rank == self && p.address != local_address_) {
      return InvalidArgument("fabric SetPeers: self rank " + std::to_string(self) + " (" +
                             p.name + ") has another endpoint's address");
    }
  }
  // First contact with peers never named before, decided by address order
  // so both ends agree whatever their ranks; gates of peers that left go.
  std::vector<std::pair<fi_addr_t, std::string>> send_to, await_from;
  std::vector<fi_addr_t> left_gates;
  if (order_first_contact_) {
    const std::string own(local_address_.begin(), local_address_.end());
    std::lock_guard<std::mutex> contact_lock(contact_mu_);
    for (const PeerInfo& p : peers) {
      const std::string key(p.address.begin(), p.address.end());
      if (p.rank == self || !contacted_.insert(key).second) continue;
      const fi_addr_t addr = table.addr[p.rank];
      if (own < key) {
        send_to.emplace_back(addr, table.Name(p.rank));
      } else {
        gates_[addr] = Gate{{}, Clock::now() + kFirstContactWait, table.Name(p.rank)};
        await_from.emplace_back(addr, table.Name(p.rank));
      }
    }
    for (const auto& [addr, gate] : gates_) {
      if (!table.rank_of.contains(addr)) left_gates.push_back(addr);
    }
    gates_count_.store(static_cast<int>(gates_.size()));
  }
  peers_ = std::move(table);
  // Pending operations follow their peer to its new rank, or fail if it left.
  std::vector<std::shared_ptr<FabricOp>> gone;
  {
    std::lock_guard<std::mutex> inflight_lock(inflight_mu_);
    for (auto& [ptr, op] : inflight_) {
      if (op->addr == FI_ADDR_UNSPEC) continue;
      auto r = peers_.rank_of.find(op->addr);
      std::lock_guard<std::mutex> op_lock(op->mu);
      if (r == peers_.rank_of.end()) {
        FailLocked(*op, Unavailable(op->Describe() + ": peer left the membership"));
        gone.push_back(op);
      } else {
        op->peer = r->second;
      }
    }
  }
  lock.unlock();  // Poll takes cq_mu_ before peers_mu_: never hold both the other way
  if (!watches.empty()) {
    std::lock_guard<std::mutex> watch_lock(watch_mu_);
    for (auto& [addr, process] : watches) peer_processes_.insert_or_assign(addr, std::move(process));
  }
  CancelInProvider(gone);
  for (fi_addr_t addr : left_gates) DropGate(addr, "peer left the membership");
  PostFirstContacts(send_to, await_from);
  return Status::Ok();
}

std::optional<FabricCore::PeerProcess> FabricCore::WatchProcessOf(const PeerInfo& peer) {
  const std::optional<pid_t> pid = ShmAddressPid(peer.address);
  if (!pid) return std::nullopt;
  Result<ProcessWatch> watch = ProcessWatch::Open(*pid);
  if (watch) return PeerProcess{std::move(*watch), peer.name, ShmRegionName(peer.address)};
  std::lock_guard<std::mutex> lock(watch_mu_);
  if (!std::exchange(watch_unsupported_warned_, true)) {
    CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": cannot watch the process of ", peer.name, ": ",
                    watch.error().ToString(), "; a send to a peer killed mid-operation may hang");
  }
  return std::nullopt;
}

bool FabricCore::PeerMarkedDead(Rank peer) const {
  std::shared_lock lock(peers_mu_);
  return peer >= 0 && peer < static_cast<Rank>(peers_.dead.size()) && peers_.dead[peer];
}

void FabricCore::MarkPeerDead(Rank peer) {
  fi_addr_t addr = FI_ADDR_NOTAVAIL;
  std::string name;
  {
    std::unique_lock lock(peers_mu_);
    if (peer < 0 || peer >= static_cast<Rank>(peers_.addr.size())) return;
    peers_.dead[peer] = true;
    addr = peers_.addr[peer];
    name = peers_.Name(peer);
  }
  std::vector<std::shared_ptr<FabricOp>> failed = CancelledWith(addr, Clock::now(), /*fail=*/true);
  // Receives are cancelled (their FI_ECANCELED completions are reaped by the
  // progress thread); a send the provider already started completes or fails
  // on its own, and its context stays owned by inflight_ until then.
  CancelInProvider(failed);
  DropGate(addr, "peer marked dead");
  CHORUS_LOG_INFO(Subsys::kFabric, describe_, ": ", name, " marked dead, ", failed.size(),
                  " pending operations failed");
}

void FabricCore::PeerGone(Rank peer) {
  fi_addr_t addr = FI_ADDR_NOTAVAIL;
  {
    std::shared_lock lock(peers_mu_);
    if (peer < 0 || peer >= static_cast<Rank>(peers_.addr.size()) || !peers_.dead[peer]) return;
    addr = peers_.addr[peer];
  }
  CancelledWith(addr, Clock::now() - options_.cancel_timeout, /*fail=*/false);
}

std::vector<std::shared_ptr<FabricOp>> FabricCore::CancelledWith(fi_addr_t addr, Clock::time_point at, bool fail) {
  std::vector<std::shared_ptr<FabricOp>> ops;
  std::lock_guard<std::mutex> lock(inflight_mu_);
  for (auto& [ptr, op] : inflight_) {
    if (op->addr != addr) continue;
    std::lock_guard<std::mutex> op_lock(op->mu);
    if (fail) FailLocked(*op, Unavailable(op->Describe() + ": peer marked dead"));
    if (op->cancelled_at == Clock::time_point{} || op->cancelled_at > at) op->cancelled_at = at;
    ops.push_back(op);
  }
  return ops;
}

// ---- Posting ----

std::shared_ptr<FabricOp> FabricCore::NewOp(FabricOp::Kind kind, Tag tag) {
  auto op = std::make_shared<FabricOp>();
  op->ctx.op = op.get();
  op->kind = kind;
  op->tag = tag;
  return op;
}

Result<std::shared_ptr<FabricOp>> FabricCore::NewOwnedOp(FabricOp::Kind kind, Tag tag, fi_addr_t addr,
                                                         std::string peer_name, size_t bytes) {
  auto op = NewOp(kind, tag);
  op->addr = addr;
  op->peer_name = std::move(peer_name);
  op->owned.resize(bytes);
  CHORUS_RETURN_IF_ERROR(AttachBuffer(*op, op->owned.data(), op->owned.size()));
  Track(op);
  return op;
}

Status FabricCore::AttachBuffer(FabricOp& op, void* data, size_t length) {
  op.data = data;
  op.length = length;
  if (registering_ && length > 0) {
    auto reg = mr_cache_->Get(data, length);
    if (!reg) return reg.error().WithContext(op.Describe());
    op.desc = reg->desc;
    op.mr = std::move(reg->owner);
  }
  return Status::Ok();
}

void FabricCore::Track(std::shared_ptr<FabricOp> op) {
  std::lock_guard<std::mutex> lock(inflight_mu_);
  FabricOp* key = op.get();
  inflight_.emplace(key, std::move(op));
}

void FabricCore::Untrack(const FabricOp& op) {
  std::lock_guard<std::mutex> lock(inflight_mu_);
  inflight_.erase(const_cast<FabricOp*>(&op));
}

Result<RequestPtr> FabricCore::Post(FabricOp::Kind kind, Rank peer, Tag tag, void* data,
                                    size_t length) {
  CHORUS_RETURN_IF_ERROR(CheckTag(tag));
  auto op = NewOp(kind, tag);
  op->peer = peer;
  op->length = length;
  {
    std::shared_lock lock(peers_mu_);
    const char* verb = kind == FabricOp::Kind::kSend ? "send to " : "receive from ";
    if (peers_.self < 0) {
      return Err(FailedPrecondition(std::string(verb) + "rank " + std::to_string(peer) +
                                    ": SetPeers was not called"));
    }
    if (peer == kAnySource && kind == FabricOp::Kind::kRecv) {
      op->addr = FI_ADDR_UNSPEC;
      op->peer_name = "any source";
    } else if (peer < 0 || peer >= static_cast<Rank>(peers_.addr.size())) {
      return Err(InvalidArgument(std::string(verb) + "rank " + std::to_string(peer) +
                                 ": not a member (size " + std::to_string(peers_.addr.size()) +
                                 ")"));
    } else {
      op->addr = peers_.addr[peer];
      op->peer_name = peers_.Name(peer);
      if (peers_.dead[peer]) {
        return Err(Unavailable(std::string(verb) + op->peer_name + ": peer is dead"));
      }
    }
  }
  CHORUS_RETURN_IF_ERROR(AttachBuffer(*op, data, length));
  Track(op);
  if (kind == FabricOp::Kind::kSend && gates_count_.load() > 0) {
    // A gate opens under contact_mu_ and posts what it held before it goes,
    // so a send that finds none here is posted after those.
    std::lock_guard<std::mutex> lock(contact_mu_);
    auto gate = gates_.find(op->addr);
    if (gate != gates_.end()) {
      op->gated = true;
      gate->second.held.push_back(op);
      return MakeFabricRequest(shared_from_this(), std::move(op));
    }
  }
  CHORUS_RETURN_IF_ERROR(Submit(op));
  return MakeFabricRequest(shared_from_this(), std::move(op));
}

Status FabricCore::Submit(const std::shared_ptr<FabricOp>& op) {
  bool backlogged = false;
  {
    std::lock_guard<std::mutex> lock(backlog_mu_);
    auto& queue = BacklogOf(*op);
    ssize_t ret = -FI_EAGAIN;
    if (queue.empty()) {
      std::lock_guard<std::mutex> provider_lock(cq_mu_);
      ret = closed_ ? -FI_ECANCELED : TryPost(*op);
    }
    if (ret == -FI_EAGAIN || ret == -FI_ENOMEM) {
      op->in_backlog = true;
      queue.push_back(op);
      backlog_size_.fetch_add(1);
      backlogged = true;
    } else if (ret < 0) {
      Untrack(*op);
      return PostFailure(*op, ret);
    }
  }
  if (backlogged) WakeProgress();
  return Status::Ok();
}

void FabricCore::PostFirstContacts(const std::vector<std::pair<fi_addr_t, std::string>>& send_to,
                                   const std::vector<std::pair<fi_addr_t, std::string>>& await_from) {
  auto post = [this](FabricOp::Kind kind, fi_addr_t addr, const std::string& name) {
    auto op = NewOwnedOp(kind, kReservedTag, addr, name, sizeof(uint64_t));
    const Status status = op ? Submit(*op) : op.error();
    if (!status.ok()) {
      // Its gate then opens when its wait runs out: sends go unordered.
      CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": ", status.ToString());
    }
  };
  for (const auto& [addr, name] : send_to) post(FabricOp::Kind::kContactSend, addr, name);
  for (const auto& [addr, name] : await_from) post(FabricOp::Kind::kContactRecv, addr, name);
}

void FabricCore::DropGate(fi_addr_t addr, const std::string& why) {
  if (gates_count_.load() == 0) return;
  std::deque<std::shared_ptr<FabricOp>> held;
  {
    std::lock_guard<std::mutex> lock(contact_mu_);
    auto gate = gates_.find(addr);
    if (gate == gates_.end()) return;
    held.swap(gate->second.held);
    gates_.erase(gate);
    gates_count_.store(static_cast<int>(gates_.size()));
    for (auto& op : held) op->gated = false;
  }
  for (auto& op : held) Finish(*op, Unavailable(op->Describe() + ": " + why), {}, /*reaped=*/true);
}

void FabricCore::OpenGates() {
  std::vector<fi_addr_t> arrived;
  {
    std::lock_guard<std::mutex> lock(opened_mu_);
    arrived.swap(opened_);
  }
  std::unique_lock<std::mutex> lock(contact_mu_, std::try_to_lock);
  if (!lock.owns_lock()) {  // the next Poll looks again
    std::lock_guard<std::mutex> opened_lock(opened_mu_);
    opened_.insert(opened_.end(), arrived.begin(), arrived.end());
    return;
  }
  const auto now = Clock::now();
  std::vector<std::pair<std::shared_ptr<FabricOp>, Status>> failed;
  for (auto gate = gates_.begin(); gate != gates_.end();) {
    const bool came = std::find(arrived.begin(), arrived.end(), gate->first) != arrived.end();
    if (!came && now < gate->second.expires) {
      ++gate;
      continue;
    }
    if (!came) {
      CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": no first-contact message from ",
                      gate->second.peer_name, " in ", kFirstContactWait.count(),
                      " s; sending to it anyway");
    }
    for (auto& op : gate->second.held) {
      op->gated = false;
      if (op->finished.load()) {
        failed.emplace_back(op, Cancelled(op->Describe() + ": finished before it was posted"));
        continue;
      }
      Status status = Submit(op);
      if (!status.ok()) failed.emplace_back(op, std::move(status));
    }
    gate = gates_.erase(gate);
  }
  gates_count_.store(static_cast<int>(gates_.size()));
  lock.unlock();
  for (auto& [op, status] : failed) Finish(*op, std::move(status), {}, /*reaped=*/true);
}

void FabricCore::CancelInProvider(const std::vector<std::shared_ptr<FabricOp>>& ops) {
  if (ops.empty()) return;
  std::unique_lock<std::mutex> lock(cq_mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    {
      std::lock_guard<std::mutex> deferred_lock(deferred_mu_);
      deferred_cancels_.insert(deferred_cancels_.end(), ops.begin(), ops.end());
      has_deferred_cancels_.store(true);
    }
    WakeProgress();
    return;
  }
  if (!closed_) CancelLocked(ops);
}

void FabricCore::RunDeferredCancels() {
  std::vector<std::shared_ptr<FabricOp>> ops;
  {
    std::lock_guard<std::mutex> lock(deferred_mu_);
    ops.swap(deferred_cancels_);
    has_deferred_cancels_.store(false);
  }
  CancelLocked(ops);
}

void FabricCore::CancelLocked(std::span<const std::shared_ptr<FabricOp>> ops) {
  InProvider(ProviderCallClock::kNoPeer, [&] {
    for (const auto& op : ops) fi_cancel(&ep_.get()->fid, &op->ctx.context);
    return 0;
  });
}

namespace {
// TryPost's answer for a send to a peer whose process has exited: no provider returns it.
constexpr ssize_t kPeerProcessExited = std::numeric_limits<ssize_t>::min();
}  // namespace

ssize_t FabricCore::TryPost(FabricOp& op) {
  if (FabricOp::IsSend(op.kind)) {
    if (watches_peer_processes_ && PeerProcessExited(op.addr)) return kPeerProcessExited;
    return InProvider(op.addr, [&] {
      return fi_tsend(ep_.get(), op.data, op.length, op.desc, op.addr, op.tag, &op.ctx.context);
    });
  }
  // Receives from an exited process stay posted: its last messages may wait
  // here, whole (shm copies small ones into the receiver's region).
  return InProvider(op.addr, [&] {
    return fi_trecv(ep_.get(), op.data, op.length, op.desc, op.addr, op.tag, /*ignore=*/0, &op.ctx.context);
  });
}

Status FabricCore::PostFailure(const FabricOp& op, ssize_t ret) const {
  if (ret == kPeerProcessExited) {
    std::lock_guard<std::mutex> lock(watch_mu_);
    auto it = peer_processes_.find(op.addr);
    const std::string pid = it == peer_processes_.end() ? "" : " (pid " + std::to_string(it->second.watch.pid()) + ")";
    return Unavailable(op.Describe() + ": its process" + pid + " has exited; not posted");
  }
  return FabricStatus(static_cast<int>(ret), op.PostCall()).WithContext(op.Describe());
}

bool FabricCore::PeerProcessExited(fi_addr_t addr) {
  std::lock_guard<std::mutex> lock(watch_mu_);
  auto it = peer_processes_.find(addr);
  if (it == peer_processes_.end()) return false;
  PeerProcess& process = it->second;
  if (process.exited) return true;
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  if (now < process.next_check_ns) return false;
  process.next_check_ns = now + std::chrono::nanoseconds(kProcessCheckInterval).count();
  return process.Exited();
}

std::vector<FabricCore::ExitedPeer> FabricCore::ExitedPeers() {
  std::vector<ExitedPeer> out;
  std::lock_guard<std::mutex> lock(watch_mu_);
  for (auto& [addr, process] : peer_processes_) {
    if (process.Exited()) out.push_back({process.name, process.watch.pid(), process.region});
  }
  return out;
}

std::optional<Status> FabricCore::WedgedBy(const ProviderCallClock::Running& running) {
  std::string exited;
  for (const ExitedPeer& peer : ExitedPeers()) {
    exited += (exited.empty() ? "" : ", ") + peer.name + " (pid " + std::to_string(peer.pid) + ")";
  }
  if (exited.empty()) return std::nullopt;
  std::string peer_name = "a peer";
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    if (auto it = peer_processes_.find(running.peer); it != peer_processes_.end()) peer_name = it->second.name;
  }
  const std::string call = running.peer == ProviderCallClock::kNoPeer ? "a completion-queue read or cancel"
                                                                       : "a post to or from " + peer_name;
  return Unavailable(describe_ + ": " + call + " has been inside the provider for " + SecondsText(running.elapsed) +
                     " s and the process of " + exited +
                     " has exited: libfabric 1.17's shm spins for ever on a lock that a killed process held (one "
                     "this process cannot release, or not for good), so neither this endpoint nor the thread in "
                     "that call can go on");
}

int FabricCore::ReleaseLocksOfKilledHolders() {
  std::vector<std::pair<std::string, pid_t>> regions;
  for (ExitedPeer& peer : ExitedPeers()) regions.emplace_back(std::move(peer.region), peer.pid);
  if (regions.empty()) return 0;
  regions.emplace_back(ShmRegionName(local_address_), getpid());
  int released = 0;
  for (const auto& [region, creator] : regions) {
    const ShmLockRelease result = ReleaseIfHeldThroughout(region, creator, kLockHeldProof);
    if (result != ShmLockRelease::kReleased && result != ShmLockRelease::kUnknownLayout) continue;
    const std::string whose = creator == getpid() ? "this endpoint's region" : "the region of exited process " +
                                                                                   std::to_string(creator);
    if (result == ShmLockRelease::kReleased) {
      ++released;
      CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": released the shm lock of ", whose, " (/dev/shm/", region,
                      "): a peer's process has exited and the lock stayed held at every try for ",
                      SecondsText(kLockHeldProof), " s, so the killed process held it");
    } else if (!std::exchange(layout_unknown_warned_, true)) {
      CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": cannot release the shm lock of ", whose, " (/dev/shm/", region,
                      ") that a killed process may hold: ", ToString(result));
    }
  }
  return released;
}

void FabricCore::WatchdogLoop() {
  std::unique_lock<std::mutex> lock(progress_mu_);
  while (!progress_stop_) {
    watchdog_cv_.wait_for(lock, kWatchdogInterval, [this] { return progress_stop_; });
    if (progress_stop_) return;
    lock.unlock();
    const int released = ReleaseLocksOfKilledHolders();
    lock.lock();
    if (progress_stop_ || released > 0) continue;  // a stuck call may go on now
    const std::optional<ProviderCallClock::Running> running = call_clock_.Check(Clock::now());
    if (!running || running->elapsed < options_.wedged_after) continue;
    std::optional<Status> wedged = WedgedBy(*running);
    if (!wedged) continue;
    lock.unlock();
    if (options_.on_wedged) {
      options_.on_wedged(*wedged);
    } else {
      CHORUS_LOG_ERROR(Subsys::kFabric, wedged->ToString());
    }
    return;  // once
  }
}

void FabricCore::DrainBacklog() {
  std::vector<std::pair<std::shared_ptr<FabricOp>, Status>> failed;
  {
    std::unique_lock<std::mutex> lock(backlog_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    for (auto& queue : backlog_) {
      while (!queue.empty()) {
        auto& op = queue.front();
        Status error;
        if (op->finished.load()) {
          error = Cancelled(op->Describe() + ": finished before it was posted");
        } else {
          const ssize_t ret = TryPost(*op);
          if (ret == -FI_EAGAIN || ret == -FI_ENOMEM) break;  // still full
          if (ret < 0) error = PostFailure(*op, ret);
        }
        op->in_backlog = false;
        if (!error.ok()) failed.emplace_back(op, std::move(error));
        queue.pop_front();
        backlog_size_.fetch_sub(1);
      }
    }
  }
  for (auto& [op, error] : failed) Finish(*op, std::move(error), {}, /*reaped=*/true);
}

namespace {
// Erases `op` from a queue of ops; true if it was there.
bool EraseOp(std::deque<std::shared_ptr<FabricOp>>& queue, const FabricOp& op) {
  auto it = std::find_if(queue.begin(), queue.end(),
                         [&](const std::shared_ptr<FabricOp>& p) { return p.get() == &op; });
  if (it == queue.end()) return false;
  queue.erase(it);
  return true;
}
}  // namespace

bool FabricCore::RemoveFromBacklog(FabricOp& op) {
  if (gates_count_.load() > 0) {
    std::lock_guard<std::mutex> lock(contact_mu_);
    auto gate = op.gated ? gates_.find(op.addr) : gates_.end();
    if (gate != gates_.end() && EraseOp(gate->second.held, op)) {
      op.gated = false;
      return true;
    }
  }
  std::lock_guard<std::mutex> lock(backlog_mu_);
  if (!op.in_backlog || !EraseOp(BacklogOf(op), op)) return false;
  op.in_backlog = false;
  backlog_size_.fetch_sub(1);
  return true;
}

void FabricCore::NoteContactArrived(fi_addr_t addr) {
  std::lock_guard<std::mutex> lock(opened_mu_);
  opened_.push_back(addr);
}

// ---- Completions ----

int FabricCore::Poll(bool block) {
  std::unique_lock<std::mutex> lock(cq_mu_, std::defer_lock);
  if (block) {
    lock.lock();
  } else if (!lock.try_lock()) {
    return 0;
  }
  if (closed_) return 0;
  if (has_deferred_cancels_.load(std::memory_order_relaxed)) RunDeferredCancels();
  int handled = 0;
  fi_cq_tagged_entry entries[kCqBatch];
  fi_addr_t sources[kCqBatch];
  while (true) {
    const ssize_t n = InProvider(ProviderCallClock::kNoPeer,
                                 [&] { return fi_cq_readfrom(cq_.get(), entries, kCqBatch, sources); });
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) handled += HandleCompletion(entries[i], sources[i]);
      if (n < static_cast<ssize_t>(kCqBatch)) break;
      continue;
    }
    if (n == -FI_EAVAIL) {
      handled += HandleCqError();
      continue;
    }
    if (n != -FI_EAGAIN) {
      CHORUS_LOG_ERROR(Subsys::kFabric, describe_, ": ",
                       FabricStatus(static_cast<int>(n), "fi_cq_readfrom").ToString());
    }
    break;
  }
  if (backlog_size_.load() > 0) DrainBacklog();  // completions freed queue space
  if (discarding_.load(std::memory_order_relaxed)) {
    const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
    if (now >= next_sweep_ns_.load(std::memory_order_relaxed)) {
      // Sweeps that find nothing back off (x2 up to kDiscardSweepMax): the
      // filters stay on for late arrivals at a cost of a few peeks a second.
      const int64_t interval = sweep_interval_ns_.load(std::memory_order_relaxed);
      next_sweep_ns_.store(now + interval);
      sweep_interval_ns_.store(std::min<int64_t>(2 * interval, Nanos(kDiscardSweepMax)));
      SweepDiscards();
    }
  }
  lock.unlock();
  if (gates_count_.load() > 0) OpenGates();
  return handled;
}

void FabricCore::SweepSoon() {
  sweep_interval_ns_.store(Nanos(kDiscardSweep));
  next_sweep_ns_.store(0);
}

void FabricCore::Discard(TagFilter filter) {
  if (!options_.endpoint_name.empty()) return;  // opened for an epoch: nothing of earlier ones reaches it
  std::lock_guard<std::mutex> lock(discard_mu_);
  if (!discard_unsupported_.empty()) {
    if (!discard_warned_) {
      discard_warned_ = true;
      CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": cannot drop the messages a failed epoch left behind: ",
                      discard_unsupported_);
    }
    return;
  }
  discard_filters_.push_back(DiscardFilter{filter, nullptr});
  // A dropped filter's peek in flight stays owned by inflight_ until reaped.
  if (discard_filters_.size() > kMaxDiscardFilters) discard_filters_.pop_front();
  SweepSoon();
  discarding_.store(true);
  WakeProgress();
}

void FabricCore::SweepDiscards() {
  std::lock_guard<std::mutex> lock(discard_mu_);
  for (DiscardFilter& filter : discard_filters_) {
    const auto& peek = filter.peek;
    if (peek && (!peek->finished.load() || (peek->drain && !peek->drain->finished.load()))) continue;
    auto op = NewOp(FabricOp::Kind::kPeek, filter.filter.tag);
    op->peer_name = "any source";
    op->ignore = filter.filter.ignore;
    Track(op);
    fi_msg_tagged msg{};
    msg.addr = FI_ADDR_UNSPEC;
    msg.tag = filter.filter.tag;
    msg.ignore = filter.filter.ignore;
    msg.context = &op->ctx.context;
    const ssize_t ret =
        InProvider(ProviderCallClock::kNoPeer, [&] { return fi_trecvmsg(ep_.get(), &msg, FI_PEEK | FI_COMPLETION); });
    if (ret == 0) {
      filter.peek = std::move(op);
      continue;
    }
    Untrack(*op);
    if (ret == -FI_EAGAIN) return;  // queue full: next sweep
    discard_unsupported_ = FabricStatus(static_cast<int>(ret), "fi_trecvmsg(FI_PEEK)")
                               .WithContext(op->Describe())
                               .ToString();
    CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": ", discard_unsupported_, "; unreceived messages stay queued");
    discard_warned_ = true;
    discard_filters_.clear();
    discarding_.store(false);
    return;
  }
}

void FabricCore::StartDrain(FabricOp& peek, const fi_cq_tagged_entry& entry) {
  // From any source, with the peeked message's exact tag: no message before it
  // in the provider's unexpected queue matched the filter, so this receive
  // takes the one the peek found. Not from the peek's source: tcp;ofi_rxm
  // reports a wrong source for peeked messages (docs/libfabric.md,
  // "`tcp;ofi_rxm`": "Peek source").
  auto op = NewOwnedOp(FabricOp::Kind::kDrain, entry.tag, FI_ADDR_UNSPEC, "any source",
                       std::max<size_t>(entry.len, 1));
  if (!op) {
    CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": ", op.error().ToString());
    return;
  }
  if (TryPost(**op) != 0) {  // the next sweep peeks again
    Untrack(**op);
    return;
  }
  peek.drain = std::move(*op);
}

int FabricCore::HandleCompletion(const fi_cq_tagged_entry& entry, fi_addr_t source) {
  FabricOp& op = *OpOf(entry.op_context);
  if (op.kind == FabricOp::Kind::kPeek) {
    // A first-contact message waits for its receive (posted by SetPeers).
    if (entry.tag != kReservedTag) StartDrain(op, entry);
    Finish(op, Status::Ok(), {}, /*reaped=*/true);
    return 0;
  }
  if (op.kind == FabricOp::Kind::kDrain) {
    messages_discarded_ += 1;
    CHORUS_LOG_DEBUG(Subsys::kFabric, describe_, ": dropped an unreceived message of tag ", entry.tag, " (",
                     entry.len, " bytes)");
    SweepSoon();  // more may wait behind it
    Finish(op, Status::Ok(), {}, /*reaped=*/true);
    return 0;
  }
  if (op.kind == FabricOp::Kind::kContactSend) {
    Finish(op, Status::Ok(), {}, /*reaped=*/true);
    return 0;
  }
  if (op.kind == FabricOp::Kind::kContactRecv) {
    NoteContactArrived(op.addr);
    Finish(op, Status::Ok(), {}, /*reaped=*/true);
    return 1;  // held sends go out in this Poll
  }
  if (op.kind == FabricOp::Kind::kSend) {
    bytes_sent_ += op.length;
    messages_sent_ += 1;
    Finish(op, Status::Ok(), Completion{op.peer, op.tag, op.length}, /*reaped=*/true);
    return 1;
  }
  Rank from = op.peer;
  if (op.addr == FI_ADDR_UNSPEC) {
    std::shared_lock lock(peers_mu_);
    auto it = peers_.rank_of.find(source);
    from = it == peers_.rank_of.end() ? -1 : it->second;
  }
  if (from < 0) {
    Finish(op,
           Internal(op.Describe() + ": message from fi_addr " + std::to_string(source) +
                    ", which is not a member"),
           {}, /*reaped=*/true);
    return 1;
  }
  bytes_received_ += entry.len;
  messages_received_ += 1;
  Finish(op, Status::Ok(), Completion{from, entry.tag, entry.len}, /*reaped=*/true);
  return 1;
}

int FabricCore::HandleCqError() {
  fi_cq_err_entry err{};
  const ssize_t ret = InProvider(ProviderCallClock::kNoPeer, [&] { return fi_cq_readerr(cq_.get(), &err, 0); });
  if (ret < 0) return 0;  // -FI_EAGAIN: another reader took it
  FabricOp& op = *OpOf(err.op_context);
  if (op.Internal()) {
    // FI_ENOMSG: a peek found nothing to drop. FI_ECANCELED: the peer died
    // or left, or the transport closed. Anything else is worth a line; a
    // failed first contact leaves the pair unordered (its gate opens now).
    if (err.err != FI_ENOMSG && err.err != FI_ECANCELED) {
      CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": ", FabricStatus(-err.err, op.Describe()).ToString(),
                      op.IsContact() ? "; later messages go unordered" : "");
      if (op.kind == FabricOp::Kind::kContactRecv) NoteContactArrived(op.addr);
    }
    Finish(op, Status::Ok(), {}, /*reaped=*/true);
    return 0;
  }
  Status status;
  if (err.err == FI_ECANCELED) {
    std::lock_guard<std::mutex> lock(op.mu);
    status = op.cancel_reason.ok() ? Cancelled(op.Describe() + ": cancelled") : op.cancel_reason;
  } else if (err.err == FI_ETRUNC) {
    status = DataLoss(op.Describe() + ": message of " + std::to_string(op.length + err.olen) +
                      " bytes exceeds the " + std::to_string(op.length) + "-byte buffer");
  } else {
    char buf[256] = {0};
    const char* detail = fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, buf, sizeof(buf));
    status = FabricStatus(-err.err, op.Describe());
    status = Status(status.code(), status.message() + " [provider: " +
                                       (detail != nullptr ? detail : "?") + "]");
  }
  Finish(op, std::move(status), {}, /*reaped=*/true);
  return 1;
}

void FabricCore::FailLocked(FabricOp& op, Status status) {
  if (op.finished.load()) return;
  op.status = std::move(status);
  op.finished.store(true);
  op.cv.notify_all();
}

void FabricCore::Finish(FabricOp& op, Status status, Completion completion, bool reaped) {
  {
    std::lock_guard<std::mutex> lock(op.mu);
    if (reaped) op.reaped = true;
    if (!op.finished.load()) {
      op.status = std::move(status);
      op.completion = completion;
      op.finished.store(true);
    }
    op.cv.notify_all();
  }
  if (reaped) {
    std::shared_ptr<FabricOp> keep;  // released after the map lock
    std::lock_guard<std::mutex> lock(inflight_mu_);
    auto it = inflight_.find(&op);
    if (it != inflight_.end()) {
      keep = std::move(it->second);
      inflight_.erase(it);
    }
  }
}

// ---- Waiting ----

Result<Completion> FabricCore::Wait(FabricOp& op, Deadline deadline) {
  if (!op.finished.load()) {
    // Phase 1: drive the CQ ourselves, first for `busy_poll` without yielding
    // (the clock read every 16 polls), then for the spin budget yielding
    // between polls.
    const auto spin = std::min<std::chrono::microseconds>(
        options_.wait_spin + options_.wait_spin_per_mib * static_cast<int64_t>(op.length) / (int64_t{1} << 20),
        std::chrono::microseconds(kMaxWaitSpinUs));
    const auto start = Clock::now();
    const auto busy_until = std::min(start + options_.busy_poll, deadline.when());
    const auto spin_until = std::min(start + options_.busy_poll + spin, deadline.when());
    bool busy = options_.busy_poll.count() > 0;
    spinning_waiters_.fetch_add(1);
    for (int polls = 1; !op.finished.load(); ++polls) {
      const int handled = Poll(/*block=*/false);
      if (busy) {
        busy = polls % 16 != 0 || Clock::now() < busy_until;
        continue;
      }
      if (Clock::now() >= spin_until) break;
      if (handled == 0 && !op.finished.load()) std::this_thread::yield();
    }
    spinning_waiters_.fetch_sub(1);
  }
  if (!op.finished.load() && !deadline.Expired()) {
    // Phase 2: sleep; the progress thread polls and notifies.
    blocked_waiters_.fetch_add(1);
    WakeProgress();
    std::unique_lock<std::mutex> lock(op.mu);
    while (!op.finished.load()) {
      if (deadline.IsNever()) {
        op.cv.wait(lock);
      } else if (op.cv.wait_until(lock, deadline.when()) == std::cv_status::timeout) {
        break;
      }
    }
    blocked_waiters_.fetch_sub(1);
  }
  if (!op.finished.load()) {
    CancelAndReap(op, DeadlineExceeded(op.Describe() + " ran past its deadline"));
  }
  std::lock_guard<std::mutex> lock(op.mu);
  if (!op.status.ok()) return Err(op.status);
  return op.completion;
}

void FabricCore::CancelAndReap(FabricOp& op, Status reason) {
  if (RemoveFromBacklog(op)) {  // never reached the provider: nothing to reap
    Finish(op, std::move(reason), {}, /*reaped=*/true);
    return;
  }
  const Clock::time_point started = Clock::now();
  {
    std::lock_guard<std::mutex> lock(op.mu);
    if (op.reaped) {
      FailLocked(op, reason);  // no-op when a real completion is already there
      return;
    }
    if (op.cancel_reason.ok()) op.cancel_reason = reason;
  }
  {
    std::lock_guard<std::mutex> lock(cq_mu_);
    if (!closed_) InProvider(ProviderCallClock::kNoPeer, [&] { return fi_cancel(&ep_.get()->fid, &op.ctx.context); });
  }
  Backoff backoff(std::chrono::microseconds(200));
  while (true) {
    bool expired;
    {
      std::lock_guard<std::mutex> lock(op.mu);
      if (op.reaped) break;
      // From the peer's death when it was marked (PeerGone may move that back
      // while we wait), else from this cancel.
      const Clock::time_point from = op.cancelled_at == Clock::time_point{} ? started : op.cancelled_at;
      expired = Clock::now() - from >= options_.cancel_timeout;
    }
    if (expired) {
      CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": ", op.Describe(),
                      " not released by the provider after cancel; its context stays owned "
                      "by the transport until it completes");
      break;
    }
    if (Poll(/*block=*/false) == 0) backoff.Pause();
  }
  std::lock_guard<std::mutex> lock(op.mu);
  FailLocked(op, reason);
}

void FabricCore::Abandon(FabricOp& op) {
  bool reaped;
  {
    std::lock_guard<std::mutex> lock(op.mu);
    reaped = op.reaped;
  }
  if (!reaped) CancelAndReap(op, Cancelled(op.Describe() + ": request destroyed while pending"));
}

// ---- Progress thread ----

void FabricCore::WakeProgress() {
  {
    std::lock_guard<std::mutex> lock(progress_mu_);
    progress_wake_ = true;
  }
  progress_cv_.notify_one();
}

void FabricCore::ProgressLoop() {
  // Short timed sleeps should be short: the default 50 us timer slack would
  // dominate the 1-100 us back-off steps.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  int idle = 0;
  std::unique_lock<std::mutex> lock(progress_mu_);
  while (!progress_stop_) {
    if (spinning_waiters_.load() > 0) {
      // A waiter is driving the CQ itself: stand aside rather than take turns
      // with it for the lock and the cores (on 2 cores, two processes' waiters
      // and progress threads would be four threads polling). It wakes us when
      // it stops spinning to sleep; a waiter that got its completion does not,
      // so look again after a short while.
      progress_cv_.wait_for(lock, options_.progress_max_sleep,
                            [this] { return progress_stop_ || progress_wake_; });
      if (progress_wake_) progress_wake_ = false;
      idle = 0;
      continue;
    }
    lock.unlock();
    const int handled = Poll(/*block=*/false);
    lock.lock();
    if (handled > 0) {
      idle = 0;
      continue;
    }
    ++idle;
    if (idle <= 8) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
      continue;
    }
    const auto cap = blocked_waiters_.load() > 0 || backlog_size_.load() > 0
                         ? std::min(options_.progress_max_sleep, std::chrono::microseconds(100))
                         : options_.progress_max_sleep;
    const auto sleep = std::min(cap, std::chrono::microseconds(int64_t{1} << std::min(idle - 8, 20)));
    progress_cv_.wait_for(lock, sleep, [this] { return progress_stop_ || progress_wake_; });
    if (progress_wake_) {
      progress_wake_ = false;
      idle = 0;
    }
  }
}

}  // namespace chorus::gossip::fabric
