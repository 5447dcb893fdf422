// FabricCore setup and teardown (design in fabric_core.h): the provider
// environment, fi_getinfo with the transport's hints, Open as fabtests' named
// steps (fabric, domain, CQ, AV, endpoint, bind, enable, getname) with the
// per-provider choices (first-contact ordering on net, process watches and a
// fresh endpoint per epoch on shm), memory registration for the MR cache, and
// Shutdown. Must not: post, poll or cancel operations (fabric_posting.cc and
// fabric_progress.cc do), or start the progress thread before the endpoint is
// enabled and its address read.
#include "gossip/transport/fabric/fabric_core.h"

#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/log.h"
#include "common/shm_names.h"

namespace chorus::gossip::fabric {

namespace {

InfoOwner MakeHints(const FabricApi& fi, std::string_view provider, uint64_t extra_caps, uint64_t extra_order) {
  InfoOwner hints(fi.dupinfo(nullptr));  // fi_allocinfo
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

// rxm's dynamic-receive-buffer variables as the user set them before Chorus
// touched them (read once, before ApplyProviderEnvironment sets its default).
struct UserRxmEnvironment {
  std::optional<std::string> dyn_rbuf;
  std::optional<std::string> eager_limit;
};
const UserRxmEnvironment& UserRxm() {
  static const UserRxmEnvironment user = [] {
    UserRxmEnvironment read;
    if (const char* v = std::getenv("FI_OFI_RXM_ENABLE_DYN_RBUF")) read.dyn_rbuf = v;
    if (const char* v = std::getenv("FI_OFI_RXM_EAGER_LIMIT")) read.eager_limit = v;
    return read;
  }();
  return user;
}

// Provider settings Chorus depends on, applied before libfabric reads its
// environment (its first fi_getinfo in the process) and never over a value the
// user set (rxm's eager mode is set per endpoint: RxmEagerScope):
//  - FI_OFI_RXM_SAR_LIMIT=16384 (the eager limit): no segmentation-and-
//    reassembly protocol, so messages above 16 KiB go by rendezvous; SAR-sized
//    messages stalled for milliseconds on oversubscribed hosts.
//  - FI_NET_MAX_SAVED=1024: net stops reading a peer's socket beyond this many
//    unexpected messages, so a receive waiting for a later message would hang
//    (its default, 4, hangs DifferentTagsAreMatchedIndependently); Chorus's
//    exchanges keep far fewer than 1024 messages ahead of their receives.
//  - FI_OFI_RXM_MSG_RX_SIZE=256: the receive buffers rxm posts to its shared
//    receive queue at endpoint open (4096 by default, each a bounce buffer,
//    touched and so zeroed by the kernel at once: the largest part of a
//    node's start-up page faults). A buffer taken by an unexpected message is
//    replaced from rxm's pool, so fewer posted only slows a burst of more
//    than 256 messages read before the next progress call.
// Why each, with the measurements: docs/libfabric.md ("Settings Chorus applies
// to libfabric").
void ApplyProviderEnvironment() {
  static const bool applied = [] {
    (void)UserRxm();
    setenv("FI_OFI_RXM_SAR_LIMIT", "16384", /*overwrite=*/0);
    setenv("FI_NET_MAX_SAVED", "1024", /*overwrite=*/0);
    setenv("FI_OFI_RXM_MSG_RX_SIZE", "256", /*overwrite=*/0);
    return true;
  }();
  (void)applied;
}

// Holds rxm's eager settings in the environment while one tcp;ofi_rxm
// endpoint opens (rxm reads FI_OFI_RXM_ENABLE_DYN_RBUF when its domain opens
// and FI_OFI_RXM_EAGER_LIMIT when its endpoint does, each time from the
// environment), then removes them, so that one transport's
// FabricOptions::rxm_eager_limit never leaks into another's, nor into the
// environment of a process this one starts (which would take them for the
// user's and open its endpoints in another mode: rxm then refuses the
// connections between the two). Every rxm Open holds it, so no other endpoint
// opens in between. Variables the user set are left alone.
class RxmEagerScope {
 public:
  // `eager_limit`: PlanRxmEager's.
  explicit RxmEagerScope(size_t eager_limit) : lock_(Mutex()) {
    const UserRxmEnvironment& user = UserRxm();
    if (!user.dyn_rbuf) setenv("FI_OFI_RXM_ENABLE_DYN_RBUF", eager_limit > 0 ? "1" : "0", /*overwrite=*/1);
    if (!user.eager_limit && eager_limit > 0) {
      setenv("FI_OFI_RXM_EAGER_LIMIT", std::to_string(eager_limit).c_str(), /*overwrite=*/1);
    }
  }
  ~RxmEagerScope() {
    const UserRxmEnvironment& user = UserRxm();
    if (!user.dyn_rbuf) unsetenv("FI_OFI_RXM_ENABLE_DYN_RBUF");
    if (!user.eager_limit) unsetenv("FI_OFI_RXM_EAGER_LIMIT");
  }
  RxmEagerScope(const RxmEagerScope&) = delete;
  RxmEagerScope& operator=(const RxmEagerScope&) = delete;

 private:
  static std::mutex& Mutex() {
    static std::mutex mu;
    return mu;
  }
  std::lock_guard<std::mutex> lock_;
};

void WarnOnce(const std::string& note) {
  static std::once_flag once;
  std::call_once(once, [&] { CHORUS_LOG_WARN(Subsys::kFabric, note); });
}

bool SaysOff(std::string_view value) {
  std::string lower(value);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "0" || lower == "false" || lower == "no" || lower == "off";
}

}  // namespace

RxmEagerPlan PlanRxmEager(size_t configured, const char* user_dyn_rbuf, const char* user_eager_limit) {
  const std::string configured_text = "fabric.rxm_eager_kib = " + std::to_string(configured >> 10);
  if (user_eager_limit != nullptr) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long parsed = std::strtoull(user_eager_limit, &end, 10);
    const bool readable = *user_eager_limit != '\0' && *end == '\0' && errno == 0 && user_eager_limit[0] != '-';
    const size_t limit = readable && parsed > kRxmDefaultEagerLimit ? static_cast<size_t>(parsed) : 0;
    if (limit == configured) return {limit, {}};
    return {limit, "FI_OFI_RXM_EAGER_LIMIT=" + std::string(user_eager_limit) + " in the environment wins over " +
                       configured_text + (readable ? "" : " (not a byte count: rxm's default, 16 KiB)") +
                       (limit > 0 ? ": messages up to " + std::to_string(limit) + " bytes go eagerly"
                                  : ": messages above 16 KiB go by rendezvous")};
  }
  if (user_dyn_rbuf != nullptr && SaysOff(user_dyn_rbuf) && configured > 0) {
    return {0, "FI_OFI_RXM_ENABLE_DYN_RBUF=" + std::string(user_dyn_rbuf) + " in the environment: " +
                   configured_text + " is ignored (rxm would copy every eager message through bounce buffers of " +
                   "that size) and messages above 16 KiB go by rendezvous"};
  }
  return {configured, {}};
}

Result<InfoOwner> GetInfo(std::string_view provider_name, const std::string& bind_address, uint16_t port,
                          uint64_t extra_caps, uint64_t extra_order) {
  ApplyProviderEnvironment();
  CHORUS_ASSIGN_OR_RETURN(const FabricApi* fi, Libfabric());
  const std::string provider(provider_name);
  InfoOwner hints = MakeHints(*fi, provider, extra_caps, extra_order);
  if (!hints) return Err(ResourceExhausted("fi_allocinfo failed"));
  const bool shm = provider_name == ProviderName(FabricProvider::kShm);
  const bool bind = !bind_address.empty() && !shm;
  // A service without a node is the port on every interface (fi_getinfo(3)).
  const std::string service = port != 0 && !shm ? std::to_string(port) : std::string();
  const std::string where = (bind ? " on " + bind_address : std::string()) +
                            (service.empty() ? std::string() : " port " + service);
  fi_info* list = nullptr;
  const int ret = fi->getinfo(kApiVersion, bind ? bind_address.c_str() : nullptr,
                             service.empty() ? nullptr : service.c_str(),
                             bind || !service.empty() ? FI_SOURCE : 0, hints.get(), &list);
  if (ret == -FI_ENODATA) {
    return Err(NotFound("libfabric provider \"" + provider + "\" offers no RDM tagged endpoint" + where +
                        " (see fi_info -l)"));
  }
  CHORUS_FI_RETURN_IF_ERROR(ret, "fi_getinfo(" + provider + ")");
  InfoOwner all(list);
  for (fi_info* i = list; i != nullptr; i = i->next) {
    if (i->fabric_attr->prov_name != nullptr && provider == i->fabric_attr->prov_name) {
      return InfoOwner(fi->dupinfo(i));
    }
  }
  return Err(NotFound("libfabric provider \"" + provider + "\" not found (see fi_info -l)"));
}

Status FabricCore::Open() {
  if (options_.port != 0 && options_.provider == FabricProvider::kShm) {
    return InvalidArgument("fabric port " + std::to_string(options_.port) +
                           ": shm endpoints have no port (only tcp;ofi_rxm and net listen on one)");
  }
  CHORUS_ASSIGN_OR_RETURN(info_, GetInfo(options_.provider, options_.bind_address, options_.port));
  CHORUS_RETURN_IF_ERROR(CheckProviderFits());
  ConfigureForProvider();
  {
    std::optional<RxmEagerScope> rxm_eager;
    if (options_.provider == FabricProvider::kTcpRxm) {
      const UserRxmEnvironment& user = UserRxm();
      const RxmEagerPlan plan = PlanRxmEager(options_.rxm_eager_limit, user.dyn_rbuf ? user.dyn_rbuf->c_str() : nullptr,
                                             user.eager_limit ? user.eager_limit->c_str() : nullptr);
      if (!plan.note.empty()) WarnOnce(plan.note);
      rxm_eager.emplace(plan.eager_limit);
      if (plan.eager_limit > 0) overflow_sink_.assign(plan.eager_limit, std::byte{0});
    }
    CHORUS_RETURN_IF_ERROR(OpenFabricAndDomain());
    CHORUS_RETURN_IF_ERROR(OpenCqAndAv());
    if (registering_) {
      mr_cache_ = std::make_unique<MrCache>(
          options_.mr_cache_capacity,
          [this](const void* address, size_t length) { return Register(address, length); });
    }
    CHORUS_RETURN_IF_ERROR(OpenEndpoint());
  }
  CHORUS_RETURN_IF_ERROR(ReadLocalAddress());
  progress_thread_ = std::thread([this] { ProgressLoop(); });
  if (watches_peer_processes_) watchdog_thread_ = std::thread([this] { WatchdogLoop(); });
  CHORUS_LOG_DEBUG(Subsys::kFabric, "opened ", describe_, " mr_mode=0x", std::hex,
                   info_->domain_attr->mr_mode, std::dec, " registering=", registering_);
  return Status::Ok();
}

Status FabricCore::CheckProviderFits() const {
  const uint64_t tag_format = info_->ep_attr->mem_tag_format;
  if (tag_format != 0 && std::bit_width(tag_format) < std::bit_width(kMaxTag)) {
    return FailedPrecondition("libfabric provider \"" + std::string(ProviderName(options_.provider)) + "\" matches " +
                              std::to_string(std::bit_width(tag_format)) +
                              " tag bits; Chorus needs " + std::to_string(std::bit_width(kMaxTag)));
  }
  if (!options_.endpoint_name.empty() && options_.provider != FabricProvider::kShm) {
    return InvalidArgument("fabric endpoint name \"" + options_.endpoint_name + "\": only shm endpoints are named");
  }
  return Status::Ok();
}

void FabricCore::ConfigureForProvider() {
  const bool shm = options_.provider == FabricProvider::kShm;
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
}

Status FabricCore::OpenFabricAndDomain() {
  CHORUS_ASSIGN_OR_RETURN(const FabricApi* fi, Libfabric());
  CHORUS_FI_RETURN_IF_ERROR(fi->fabric(info_->fabric_attr, fabric_.out(), nullptr), "fi_fabric");
  CHORUS_FI_RETURN_IF_ERROR(fi_domain(fabric_.get(), info_.get(), domain_.out(), nullptr),
                            "fi_domain");
  return Status::Ok();
}

Status FabricCore::OpenCqAndAv() {
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  cq_attr.wait_obj = FI_WAIT_NONE;
  cq_attr.size = options_.cq_size;
  CHORUS_FI_RETURN_IF_ERROR(fi_cq_open(domain_.get(), &cq_attr, cq_.out(), nullptr), "fi_cq_open");
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  CHORUS_FI_RETURN_IF_ERROR(fi_av_open(domain_.get(), &av_attr, av_.out(), nullptr), "fi_av_open");
  return Status::Ok();
}

Status FabricCore::OpenEndpoint() {
  // tcp;ofi_rxm binds its listening socket in fi_endpoint, net in fi_enable:
  // a set port that is taken is named at either.
  const auto port_taken = [this](int ret) { return ret == -FI_EADDRINUSE && options_.port != 0; };
  const int opened = fi_endpoint(domain_.get(), info_.get(), ep_.out(), nullptr);
  if (port_taken(opened)) return PortInUse();
  CHORUS_FI_RETURN_IF_ERROR(opened, "fi_endpoint");
  CHORUS_FI_RETURN_IF_ERROR(fi_ep_bind(ep_.get(), &av_.get()->fid, 0), "fi_ep_bind(av)");
  CHORUS_FI_RETURN_IF_ERROR(fi_ep_bind(ep_.get(), &cq_.get()->fid, FI_TRANSMIT | FI_RECV),
                            "fi_ep_bind(cq)");
  if (!options_.endpoint_name.empty()) {
    std::string name = options_.endpoint_name;
    CHORUS_FI_RETURN_IF_ERROR(fi_setname(&ep_.get()->fid, name.data(), name.size() + 1),
                              "fi_setname(" + name + ")");
  }
  const int enabled = fi_enable(ep_.get());
  if (port_taken(enabled)) return PortInUse();
  CHORUS_FI_RETURN_IF_ERROR(enabled, "fi_enable");
  return Status::Ok();
}

Status FabricCore::PortInUse() const {
  return Unavailable("port " + std::to_string(options_.port) + " is in use" +
                     (options_.bind_address.empty() ? std::string() : " on " + options_.bind_address) +
                     ": another process listens on it (" + FabricErrorText(FI_EADDRINUSE) + ")");
}

Status FabricCore::ReadLocalAddress() {
  size_t len = 64;
  local_address_.resize(len);
  int ret = fi_getname(&ep_.get()->fid, local_address_.data(), &len);
  if (ret == -FI_ETOOSMALL) {
    local_address_.resize(len);
    ret = fi_getname(&ep_.get()->fid, local_address_.data(), &len);
  }
  CHORUS_FI_RETURN_IF_ERROR(ret, "fi_getname");
  local_address_.resize(len);
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

void FabricCore::Shutdown(StatusCode code, const std::string& why) { End(code, why, /*close=*/true); }

void FabricCore::ShutdownLeavingOpen(StatusCode code, const std::string& why) { End(code, why, /*close=*/false); }

void FabricCore::End(StatusCode code, const std::string& why, bool close) {
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
    if (close) ep_.Reset();  // no completion can arrive after this
  }
  std::unordered_map<FabricOp*, std::shared_ptr<FabricOp>> ops;
  {
    std::lock_guard<std::mutex> lock(inflight_mu_);
    ops.swap(inflight_);
  }
  for (auto& [ptr, op] : ops) {
    std::lock_guard<std::mutex> lock(op->mu);
    // Closed, the endpoint can no longer touch the buffer; left open (the
    // process exits next), it still may, and the buffer's owner must keep it.
    if (close && !op->reaped && op->unreleased) unreleased_buffers_.fetch_sub(1);
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
  if (close && mr_cache_) mr_cache_->Clear();
}

}  // namespace chorus::gossip::fabric
