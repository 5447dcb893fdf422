// LocalTransport and LocalHub: in-process mailboxes (see local_transport.h).
//
// One hub mutex guards every mailbox; each request has its own condition
// variable on that mutex. A receive first searches the unexpected queue of its
// slot (arrival order), else it is appended to the posted list; a send first
// searches the destination's posted list (post order), else it is queued as
// unexpected. Both searches take the first match, which gives FIFO per
// (source, destination, tag). A message that finds no posted receive and
// matches one of the slot's discard filters is dropped instead of queued.
//
// Virtual time lives in the slots too (virtual_now, virtual_nic_free, under the
// hub mutex): a send stamps its op with the NIC done time and its message with
// the arrival time; ResultLocked (a successful Wait) moves the owner's clock.
// The CPU charge of a call is asked for before the mutex is taken (the
// callback is the caller's code) and added under it.
#include "gossip/transport/local/local_transport.h"

#include "gossip/transport/local/local_hub_state.h"

#include <algorithm>
#include <cstring>

namespace chorus::gossip {

namespace {

// The Request of a LocalTransport operation.
class LocalRequest final : public Request {
 public:
  LocalRequest(std::shared_ptr<LocalHub> hub, std::mutex* mu, std::shared_ptr<LocalHub::Op> op,
               std::string peer_name)
      : hub_(std::move(hub)), mu_(mu), op_(std::move(op)), peer_name_(std::move(peer_name)) {}
  ~LocalRequest() override { Cancel(); }

  bool Done() override;
  Result<Completion> Wait(Deadline deadline) override;
  void Cancel() override;

 private:
  Result<Completion> ResultLocked() const {
    if (!op_->status.ok()) return Err(op_->status);
    hub_->ObserveCompletionLocked(*op_);
    return op_->completion;
  }
  void CancelLocked(Status status);

  std::shared_ptr<LocalHub> hub_;  // keeps the mutex alive
  std::mutex* mu_;
  std::shared_ptr<LocalHub::Op> op_;
  std::string peer_name_;
};

}  // namespace

// ---- LocalRequest ----

namespace {

// Tells the hub's cpu_resume when a call returns; declared before the call's
// lock, so it runs after the lock is released.
class CpuCall {
 public:
  CpuCall(const LocalHub& hub, int slot) : hub_(hub), slot_(slot) {}
  ~CpuCall() { hub_.CpuResume(slot_); }
  CpuCall(const CpuCall&) = delete;
  CpuCall& operator=(const CpuCall&) = delete;

 private:
  const LocalHub& hub_;
  const int slot_;
};

bool LocalRequest::Done() {
  std::lock_guard<std::mutex> lock(*mu_);
  if (hub_->Ordered() && op_->kind == LocalHub::Op::Kind::kRecv) return hub_->OrderedDoneLocked(*op_);
  return op_->done && Clock::now() >= op_->visible_at;
}

void LocalRequest::CancelLocked(Status status) { hub_->CancelLocked(*op_, std::move(status)); }

Result<Completion> LocalRequest::Wait(Deadline deadline) {
  const double cpu = hub_->CpuCharge(op_->owner);
  const CpuCall call(*hub_, op_->owner);
  std::unique_lock<std::mutex> lock(*mu_);
  hub_->ChargeLocked(op_->owner, cpu);
  if (hub_->Ordered() && op_->kind == LocalHub::Op::Kind::kRecv) {
    return hub_->OrderedWaitLocked(lock, *op_, deadline, peer_name_);
  }
  while (true) {
    const auto now = Clock::now();
    if (op_->done && now >= op_->visible_at) return ResultLocked();
    if (now >= deadline.when()) break;
    if (op_->done) {
      op_->cv.wait_until(lock, std::min(op_->visible_at, deadline.when()));
    } else if (deadline.IsNever()) {
      op_->cv.wait(lock);
    } else {
      op_->cv.wait_until(lock, deadline.when());
    }
  }
  const char* what = op_->kind == LocalHub::Op::Kind::kSend ? "send to " : "receive from ";
  Status timeout = DeadlineExceeded(std::string(what) + peer_name_ + " (tag " +
                                    std::to_string(op_->tag) + ") ran past its deadline");
  if (!op_->done) CancelLocked(timeout);
  return Err(timeout);
}

void LocalRequest::Cancel() {
  std::lock_guard<std::mutex> lock(*mu_);
  CancelLocked(Cancelled("request to " + peer_name_ + " cancelled"));
}

}  // namespace

// ---- LocalHub ----

LocalHub::LocalHub(const LocalHubOptions& options) : options_(options) {
  const int n = std::max(options.world_size, 0);
  for (int s = 0; s < n; ++s) {
    auto slot = std::make_unique<Slot>();
    slot->name = options.name_prefix + std::to_string(s);
    slot->link_free_at.assign(n, Clock::time_point::min());
    slot->self = s;
    slot->rank_to_slot.resize(n);
    slot->rank_names.resize(n);
    slot->peer_dead.assign(n, false);
    slot->peer_other_site.assign(n, false);
    for (int r = 0; r < n; ++r) {
      slot->rank_to_slot[r] = r;
      slot->rank_names[r] = options.name_prefix + std::to_string(r);
    }
    // Ordered: a node not started yet holds the others back at time 0.
    if (Ordered()) slot->lanes[kOwnerLane].state = Lane::State::kRunning;
    slots_.push_back(std::move(slot));
  }
}

std::shared_ptr<LocalHub> LocalHub::Create(const LocalHubOptions& options) {
  return std::make_shared<LocalHub>(options);
}

Result<std::unique_ptr<LocalTransport>> LocalHub::MakeTransport(int slot) {
  if (slot < 0 || slot >= world_size()) {
    return Err(InvalidArgument("local hub: slot " + std::to_string(slot) + " out of range [0, " +
                               std::to_string(world_size()) + ")"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Ordered()) SetLanesLocked(slot, true);
  }
  return std::make_unique<LocalTransport>(shared_from_this(), slot);
}

std::vector<std::unique_ptr<Transport>> LocalHub::MakeAll() {
  std::vector<std::unique_ptr<Transport>> out;
  for (int s = 0; s < world_size(); ++s) {
    out.push_back(std::make_unique<LocalTransport>(shared_from_this(), s));
  }
  return out;
}

std::string LocalHub::SlotName(int slot) const {
  if (slot < 0 || slot >= world_size()) return "?";
  return slots_[slot]->name;
}

std::vector<uint8_t> LocalHub::EncodeAddress(int slot) {
  std::vector<uint8_t> out(4);
  const auto v = static_cast<uint32_t>(slot);
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
  return out;
}

Result<int> LocalHub::DecodeAddress(std::span<const uint8_t> address) {
  if (address.size() != 4) {
    return Err(InvalidArgument("local address must be 4 bytes, got " +
                               std::to_string(address.size())));
  }
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(address[i]) << (8 * i);
  return static_cast<int>(v);
}

bool LocalHub::IsDead(int slot) const {
  std::lock_guard<std::mutex> lock(mu_);
  return slot >= 0 && slot < world_size() && slots_[slot]->dead;
}

std::string LocalHub::PeerNameLocked(int at, Rank peer) const {
  const Slot& s = *slots_[at];
  std::string name = "rank " + std::to_string(peer);
  if (peer >= 0 && peer < static_cast<Rank>(s.rank_names.size())) {
    name += " (" + s.rank_names[peer] + ")";
  }
  return name;
}

Rank LocalHub::RankOfSlotLocked(int at, int from_slot) const {
  const auto& view = slots_[at]->rank_to_slot;
  for (size_t r = 0; r < view.size(); ++r) {
    if (view[r] == from_slot) return static_cast<Rank>(r);
  }
  return -1;
}

void LocalHub::CancelLocked(Op& op, Status status) {
  if (op.done) return;
  if (op.posted) {
    slots_[op.owner]->posted.erase(op.pos);
    op.posted = false;
  }
  op.done = true;
  op.status = std::move(status);
  op.visible_at = Clock::time_point::min();
  op.cv.notify_all();
}

void LocalHub::FailOpLocked(Op& op, Status status) {
  if (op.done) return;
  op.done = true;
  op.posted = false;
  op.status = std::move(status);
  op.visible_at = Clock::time_point::min();
  op.cv.notify_all();
}

Clock::time_point LocalHub::DeliveryTimeLocked(int from, int to, size_t bytes) {
  const auto now = Clock::now();
  const LocalLinkModel& link = options_.link;
  if (options_.virtual_time.enabled) return now;
  if (link.latency.count() == 0 && link.bytes_per_second <= 0) return now;
  auto& free_at = slots_[from]->link_free_at[to];
  auto start = std::max(now, free_at);
  if (link.bytes_per_second > 0) {
    start += std::chrono::duration_cast<Duration>(
        std::chrono::duration<double>(static_cast<double>(bytes) / link.bytes_per_second));
  }
  free_at = start;
  return start + std::chrono::duration_cast<Duration>(link.latency);
}

std::pair<double, double> LocalHub::VirtualSendLocked(int from, int to, size_t bytes) {
  const LocalVirtualTime& v = options_.virtual_time;
  if (!v.enabled) return {0.0, 0.0};
  Slot& src = *slots_[from];
  const double sent_at = Ordered() ? LaneClockLocked(from, LaneOfCallerLocked(from)) : src.virtual_now;
  const double start = std::max(sent_at, src.virtual_nic_free);
  const double done =
      start + (v.bytes_per_second > 0 ? static_cast<double>(bytes) / v.bytes_per_second : 0.0);
  src.virtual_nic_free = done;
  double arrival = done + std::max(0.0, v.latency_s);
  const size_t sites = v.site_of_slot.size();
  if (sites > static_cast<size_t>(std::max(from, to)) && v.site_of_slot[from] != v.site_of_slot[to]) {
    const size_t site = static_cast<size_t>(v.site_of_slot[from]);
    if (site_uplink_free_.size() <= site) site_uplink_free_.resize(site + 1, 0.0);
    double& uplink_free = site_uplink_free_[site];
    const double crossed = std::max(done, uplink_free) + (v.site_bytes_per_second > 0
                                                               ? static_cast<double>(bytes) / v.site_bytes_per_second
                                                               : 0.0);
    uplink_free = crossed;
    arrival = crossed + std::max(0.0, v.latency_s) + std::max(0.0, v.site_latency_s);
  }
  return {done, arrival};
}

void LocalHub::ObserveCompletionLocked(const Op& op) {
  if (!options_.virtual_time.enabled || op.owner < 0) return;
  if (Ordered()) {
    // A receive moved its lane's clock when its turn came; a server's sends
    // do not hold it (nor the owner, who may reap them).
    if (op.kind == Op::Kind::kRecv || op.lane != kOwnerLane || LaneOfCallerLocked(op.owner) != kOwnerLane) return;
  }
  double& now = slots_[op.owner]->virtual_now;
  now = std::max(now, op.virtual_done);
  if (Ordered()) ScheduleLocked();
}

double LocalHub::CpuCharge(int slot) const {
  const LocalVirtualTime& v = options_.virtual_time;
  return v.enabled && v.cpu_charge && slot >= 0 ? v.cpu_charge(slot) : 0.0;
}

void LocalHub::ChargeLocked(int slot, double seconds) {
  if (!(seconds > 0) || slot < 0 || slot >= world_size()) return;
  if (!Ordered()) {
    slots_[slot]->virtual_now += seconds;
    return;
  }
  LaneClockLocked(slot, LaneOfCallerLocked(slot)) += seconds;
  ScheduleLocked();
}

void LocalHub::CpuResume(int slot) const {
  const LocalVirtualTime& v = options_.virtual_time;
  if (v.enabled && v.cpu_resume && slot >= 0) v.cpu_resume(slot);
}

double LocalHub::VirtualNow(int slot) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (slot < 0 || slot >= world_size()) return 0.0;
  return slots_[slot]->virtual_now;
}

void LocalHub::AdvanceVirtual(int slot, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!options_.virtual_time.enabled || slot < 0 || slot >= world_size() || !(seconds > 0)) return;
  slots_[slot]->virtual_now += seconds;
  if (Ordered()) ScheduleLocked();
}

void LocalHub::AdvanceVirtualTo(int slot, double time) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!options_.virtual_time.enabled || slot < 0 || slot >= world_size()) return;
  double& now = slots_[slot]->virtual_now;
  now = std::max(now, time);
  if (Ordered()) ScheduleLocked();
}

double LocalHub::VirtualNicFree(int slot) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (slot < 0 || slot >= world_size()) return 0.0;
  return slots_[slot]->virtual_nic_free;
}

namespace {

// Removes ops that are no longer posted (done by cancel or failure).
void RemoveUnposted(std::list<std::shared_ptr<LocalHub::Op>>& posted) {
  posted.remove_if([](const std::shared_ptr<LocalHub::Op>& op) { return !op->posted; });
}

}  // namespace

Result<RequestPtr> LocalHub::Send(int from, Rank dest, Tag tag, std::span<const std::byte> data) {
  const double cpu = CpuCharge(from);
  const CpuCall call(*this, from);
  std::unique_lock<std::mutex> lock(mu_);
  ChargeLocked(from, cpu);
  Slot& src = *slots_[from];
  if (src.dead) return Err(Unavailable("send from killed endpoint " + src.name));
  if (dest < 0 || dest >= static_cast<Rank>(src.rank_to_slot.size())) {
    return Err(InvalidArgument("send: rank " + std::to_string(dest) + " is not a member (size " +
                               std::to_string(src.rank_to_slot.size()) + ")"));
  }
  const int to = src.rank_to_slot[dest];
  if (src.peer_dead[dest] || slots_[to]->dead) {
    return Err(Unavailable("send to " + PeerNameLocked(from, dest) + ": peer is dead"));
  }
  auto op = std::make_shared<Op>();
  op->kind = Op::Kind::kSend;
  op->owner = from;
  if (Ordered()) op->lane = LaneOfCallerLocked(from);
  op->peer = dest;
  op->peer_slot = to;
  op->tag = tag;
  op->completion = Completion{dest, tag, data.size()};
  const auto ready_at = DeliveryTimeLocked(from, to, data.size());
  const auto [virtual_done, virtual_arrival] = VirtualSendLocked(from, to, data.size());
  op->virtual_done = virtual_done;
  src.stats.bytes_sent += data.size();
  if (src.peer_other_site[dest]) src.stats.bytes_sent_across_sites += data.size();
  src.stats.messages_sent += 1;

  Slot& dst = *slots_[to];
  const Rank source_in_dst = RankOfSlotLocked(to, from);
  auto match = std::find_if(dst.posted.begin(), dst.posted.end(), [&](const auto& r) {
    return r->tag == tag && (r->peer_slot == from || (r->peer_slot == -1 && source_in_dst >= 0));
  });
  if (match != dst.posted.end()) {
    Op& recv = **match;
    recv.posted = false;
    recv.done = true;
    recv.visible_at = ready_at;
    recv.virtual_done = virtual_arrival;
    if (data.size() > recv.recv_buffer.size()) {
      recv.status = DataLoss("receive from " + PeerNameLocked(to, source_in_dst) + " (tag " +
                             std::to_string(tag) + "): message of " +
                             std::to_string(data.size()) + " bytes exceeds the " +
                             std::to_string(recv.recv_buffer.size()) + "-byte buffer");
    } else {
      if (!data.empty()) std::memcpy(recv.recv_buffer.data(), data.data(), data.size());
      recv.completion = Completion{source_in_dst, tag, data.size()};
      dst.stats.bytes_received += data.size();
      dst.stats.messages_received += 1;
    }
    recv.cv.notify_all();
    dst.posted.erase(match);
  } else if (std::any_of(dst.discard.begin(), dst.discard.end(),
                         [&](const TagFilter& f) { return f.Matches(tag); })) {
    dst.stats.messages_discarded += 1;
  } else {
    Message msg;
    msg.from = from;
    msg.tag = tag;
    msg.data.assign(data.begin(), data.end());
    msg.ready_at = ready_at;
    msg.virtual_arrival = virtual_arrival;
    msg.send_op = op;
    dst.unexpected.push_back(std::move(msg));
  }
  op->done = true;
  op->visible_at = ready_at;
  if (Ordered()) ScheduleLocked();
  std::string peer_name = PeerNameLocked(from, dest);
  lock.unlock();
  return std::make_unique<LocalRequest>(shared_from_this(), &mu_, std::move(op),
                                        std::move(peer_name));
}

Result<RequestPtr> LocalHub::Recv(int at, Rank source, Tag tag, std::span<std::byte> data) {
  const double cpu = CpuCharge(at);
  const CpuCall call(*this, at);
  std::unique_lock<std::mutex> lock(mu_);
  ChargeLocked(at, cpu);
  Slot& self = *slots_[at];
  if (self.dead) return Err(Unavailable("receive on killed endpoint " + self.name));
  int from = -1;
  if (source != kAnySource) {
    if (source < 0 || source >= static_cast<Rank>(self.rank_to_slot.size())) {
      return Err(InvalidArgument("receive: rank " + std::to_string(source) +
                                 " is not a member (size " +
                                 std::to_string(self.rank_to_slot.size()) + ")"));
    }
    from = self.rank_to_slot[source];
  }
  auto op = std::make_shared<Op>();
  op->kind = Op::Kind::kRecv;
  op->owner = at;
  if (Ordered()) op->lane = LaneOfCallerLocked(at);
  op->peer = source;
  op->peer_slot = from;
  op->tag = tag;
  op->recv_buffer = data;
  const std::string peer_name =
      source == kAnySource ? std::string("any source") : PeerNameLocked(at, source);

  auto match = std::find_if(self.unexpected.begin(), self.unexpected.end(), [&](const Message& m) {
    return m.tag == tag && (m.from == from || (from == -1 && RankOfSlotLocked(at, m.from) >= 0));
  });
  if (match != self.unexpected.end()) {
    const Rank actual = RankOfSlotLocked(at, match->from);
    op->done = true;
    op->visible_at = match->ready_at;
    op->virtual_done = match->virtual_arrival;
    if (match->data.size() > data.size()) {
      op->status = DataLoss("receive from " + PeerNameLocked(at, actual) + " (tag " +
                            std::to_string(tag) + "): message of " +
                            std::to_string(match->data.size()) + " bytes exceeds the " +
                            std::to_string(data.size()) + "-byte buffer");
    } else {
      if (!match->data.empty()) std::memcpy(data.data(), match->data.data(), match->data.size());
      op->completion = Completion{actual, tag, match->data.size()};
      self.stats.bytes_received += match->data.size();
      self.stats.messages_received += 1;
    }
    self.unexpected.erase(match);
    if (Ordered()) ScheduleLocked();
  } else {
    if (from != -1 && (self.peer_dead[source] || slots_[from]->dead)) {
      return Err(Unavailable("receive from " + peer_name + ": peer is dead"));
    }
    op->posted = true;
    op->pos = self.posted.insert(self.posted.end(), op);
  }
  lock.unlock();
  return std::make_unique<LocalRequest>(shared_from_this(), &mu_, std::move(op), peer_name);
}

Status LocalHub::SetPeersLocked(int at, Rank self, std::span<const PeerInfo> peers) {
  const int n = static_cast<int>(peers.size());
  std::vector<int> rank_to_slot(n, -1);
  std::vector<std::string> names(n);
  std::vector<bool> other_site(n, false);
  for (const PeerInfo& p : peers) {
    if (p.rank < 0 || p.rank >= n || rank_to_slot[p.rank] != -1) {
      return InvalidArgument("local SetPeers: rank " + std::to_string(p.rank) +
                             " is out of range or repeated (" + std::to_string(n) + " peers)");
    }
    auto slot = DecodeAddress(p.address);
    if (!slot) return slot.error().WithContext("local SetPeers: rank " + std::to_string(p.rank));
    if (*slot < 0 || *slot >= world_size()) {
      return InvalidArgument("local SetPeers: rank " + std::to_string(p.rank) +
                             " names slot " + std::to_string(*slot) + " outside the hub");
    }
    rank_to_slot[p.rank] = *slot;
    names[p.rank] = p.name.empty() ? SlotName(*slot) : p.name;
    other_site[p.rank] = p.other_site;
  }
  if (self < 0 || self >= n || rank_to_slot[self] != at) {
    return InvalidArgument("local SetPeers: self rank " + std::to_string(self) +
                           " does not name this endpoint (" + SlotName(at) + ")");
  }
  Slot& s = *slots_[at];
  s.self = self;
  s.rank_to_slot = std::move(rank_to_slot);
  s.rank_names = std::move(names);
  s.peer_dead.assign(n, false);
  s.peer_other_site = std::move(other_site);
  // Pending receives from slots that left the membership fail.
  for (auto& op : s.posted) {
    if (op->peer_slot == -1) continue;
    const Rank r = RankOfSlotLocked(at, op->peer_slot);
    if (r < 0) {
      FailOpLocked(*op, Unavailable("receive from " + SlotName(op->peer_slot) +
                                    ": peer left the membership"));
    } else {
      op->peer = r;
    }
  }
  RemoveUnposted(s.posted);
  return Status::Ok();
}

void LocalHub::MarkPeerDeadLocked(int at, Rank peer) {
  Slot& s = *slots_[at];
  if (peer < 0 || peer >= static_cast<Rank>(s.peer_dead.size())) return;
  s.peer_dead[peer] = true;
  const int peer_slot = s.rank_to_slot[peer];
  const std::string name = PeerNameLocked(at, peer);
  for (auto& op : s.posted) {
    if (op->peer_slot == peer_slot) {
      FailOpLocked(*op, Unavailable("receive from " + name + ": peer marked dead"));
    }
  }
  RemoveUnposted(s.posted);
  // Sends still in flight on the link model (not yet visible) fail too.
  const auto now = Clock::now();
  for (auto& msg : slots_[peer_slot]->unexpected) {
    if (msg.from == at && msg.ready_at > now && msg.send_op) {
      msg.send_op->done = false;  // re-open, then fail with the reason
      FailOpLocked(*msg.send_op, Unavailable("send to " + name + ": peer marked dead"));
    }
  }
  if (Ordered()) ScheduleLocked();
}

void LocalHub::Kill(int slot) {
  std::lock_guard<std::mutex> lock(mu_);
  if (slot < 0 || slot >= world_size()) return;
  Slot& dead = *slots_[slot];
  dead.dead = true;
  for (auto& op : dead.posted) {
    FailOpLocked(*op, Unavailable("endpoint " + dead.name + " was killed"));
  }
  RemoveUnposted(dead.posted);
  const auto now = Clock::now();
  for (auto& msg : dead.unexpected) {
    if (msg.ready_at > now && msg.send_op) {
      msg.send_op->done = false;
      FailOpLocked(*msg.send_op, Unavailable("send to " + dead.name + ": peer was killed"));
    }
  }
  for (int s = 0; s < world_size(); ++s) {
    if (s == slot) continue;
    Slot& other = *slots_[s];
    for (auto& op : other.posted) {
      if (op->peer_slot == slot) {
        FailOpLocked(*op, Unavailable("receive from " + PeerNameLocked(s, op->peer) +
                                      ": peer was killed"));
      }
    }
    RemoveUnposted(other.posted);
  }
  if (Ordered()) {
    SetLanesLocked(slot, false);
    ScheduleLocked();
  }
}

// ---- LocalTransport ----

LocalTransport::LocalTransport(std::shared_ptr<LocalHub> hub, int slot)
    : hub_(std::move(hub)), slot_(slot) {}

LocalTransport::~LocalTransport() {
  std::lock_guard<std::mutex> lock(hub_->mu_);
  if (hub_->Ordered()) hub_->SetLanesLocked(slot_, false);
}

std::vector<uint8_t> LocalTransport::LocalAddress() const { return LocalHub::EncodeAddress(slot_); }

Status LocalTransport::SetPeers(Rank self, std::span<const PeerInfo> peers) {
  std::lock_guard<std::mutex> lock(hub_->mu_);
  return hub_->SetPeersLocked(slot_, self, peers);
}

Rank LocalTransport::rank() const {
  std::lock_guard<std::mutex> lock(hub_->mu_);
  return hub_->slots_[slot_]->self;
}

int LocalTransport::size() const {
  std::lock_guard<std::mutex> lock(hub_->mu_);
  return static_cast<int>(hub_->slots_[slot_]->rank_to_slot.size());
}

Result<RequestPtr> LocalTransport::Isend(Rank dest, Tag tag, std::span<const std::byte> data) {
  CHORUS_RETURN_IF_ERROR(CheckTag(tag));
  return hub_->Send(slot_, dest, tag, data);
}

Result<RequestPtr> LocalTransport::Irecv(Rank source, Tag tag, std::span<std::byte> data) {
  CHORUS_RETURN_IF_ERROR(CheckTag(tag));
  return hub_->Recv(slot_, source, tag, data);
}

void LocalTransport::MarkPeerDead(Rank peer) {
  std::lock_guard<std::mutex> lock(hub_->mu_);
  hub_->MarkPeerDeadLocked(slot_, peer);
}

bool LocalTransport::PeerMarkedDead(Rank peer) const {
  std::lock_guard<std::mutex> lock(hub_->mu_);
  const LocalHub::Slot& s = *hub_->slots_[slot_];
  return peer >= 0 && peer < static_cast<Rank>(s.peer_dead.size()) && s.peer_dead[peer];
}

void LocalTransport::Discard(TagFilter filter) {
  std::lock_guard<std::mutex> lock(hub_->mu_);
  LocalHub::Slot& self = *hub_->slots_[slot_];
  self.discard.push_back(filter);
  if (self.discard.size() > kMaxDiscardFilters) self.discard.pop_front();
  const size_t before = self.unexpected.size();
  std::erase_if(self.unexpected, [&](const LocalHub::Message& m) { return filter.Matches(m.tag); });
  self.stats.messages_discarded += before - self.unexpected.size();
}

void LocalTransport::SetOtherSites(const std::vector<bool>& other_site) {
  std::lock_guard<std::mutex> lock(hub_->mu_);
  std::vector<bool>& mine = hub_->slots_[slot_]->peer_other_site;
  if (other_site.size() == mine.size()) mine = other_site;
}

TransportStats LocalTransport::Stats() const {
  std::lock_guard<std::mutex> lock(hub_->mu_);
  return hub_->slots_[slot_]->stats;
}

std::string LocalTransport::Describe() const { return "local(" + hub_->SlotName(slot_) + ")"; }

EventOrder* LocalTransport::Order() { return hub_->Ordered() ? this : nullptr; }

}  // namespace chorus::gossip
