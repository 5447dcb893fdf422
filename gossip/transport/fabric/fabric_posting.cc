// FabricCore posting (design in fabric_core.h): making and tracking ops, their
// buffers and memory registrations, Post of a user send or receive, Submit to
// the provider or to the FIFO backlog when its queue is full, draining that
// backlog, fi_cancel of posted ops (now or deferred to the next Poll), and the
// shm check that keeps sends away from a peer whose process has exited. Must
// not: read the CQ or finish an op the provider still holds (only its
// completion, reaped in fabric_progress.cc, releases it), call into the
// provider without cq_mu_, or block on cq_mu_ in CancelInProvider.
#include "gossip/transport/fabric/fabric_core.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace chorus::gossip::fabric {

namespace {

// TryPost's answer for a send to a peer whose process has exited: no provider returns it.
constexpr ssize_t kPeerProcessExited = std::numeric_limits<ssize_t>::min();

// Erases `op` from a queue of ops; true if it was there.
bool EraseOp(std::deque<std::shared_ptr<FabricOp>>& queue, const FabricOp& op) {
  auto it = std::find_if(queue.begin(), queue.end(),
                         [&](const std::shared_ptr<FabricOp>& p) { return p.get() == &op; });
  if (it == queue.end()) return false;
  queue.erase(it);
  return true;
}

}  // namespace

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

Status FabricCore::AttachSeal(FabricOp& op, std::shared_ptr<DataSeal> seal) {
  if (op.kind == FabricOp::Kind::kSend) {
    const std::span<const std::byte> payload(static_cast<const std::byte*>(op.data), op.length);
    if (seal->mode() == SealMode::kEncrypt) {
      op.owned.resize(op.length);
      CHORUS_ASSIGN_OR_RETURN(op.trailer, seal->Seal(op.self, op.peer, op.tag, payload, op.owned));
      op.mr.reset();
      op.desc = nullptr;
      CHORUS_RETURN_IF_ERROR(AttachBuffer(op, op.owned.data(), op.owned.size()));
    } else {
      CHORUS_ASSIGN_OR_RETURN(op.trailer, seal->Seal(op.self, op.peer, op.tag, payload, {}));
    }
  }
  if (registering_) {
    auto reg = mr_cache_->Get(op.trailer.data(), op.trailer.size());
    if (!reg) return reg.error().WithContext(op.Describe() + "'s seal");
    op.trailer_desc = reg->desc;
    op.trailer_mr = std::move(reg->owner);
  }
  op.seal = std::move(seal);
  if (options_.replay_fault && op.kind == FabricOp::Kind::kSend) return ReplayFault(op);
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
  std::shared_ptr<DataSeal> seal;
  {
    std::shared_lock lock(peers_mu_);
    seal = seal_;
    op->self = peers_.self;
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
      op->other_site = kind == FabricOp::Kind::kSend && peers_.other_site[peer];
      if (peers_.dead[peer]) {
        return Err(Unavailable(std::string(verb) + op->peer_name + ": peer is dead"));
      }
    }
  }
  CHORUS_RETURN_IF_ERROR(AttachBuffer(*op, data, length));
  if (seal) CHORUS_RETURN_IF_ERROR(AttachSeal(*op, std::move(seal)));
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

ssize_t FabricCore::TryPost(FabricOp& op) {
  const bool send = FabricOp::IsSend(op.kind);
  if (send && watches_peer_processes_ && PeerProcessExited(op.addr)) return kPeerProcessExited;
  // The payload, then the trailer of a sealed message: one message on the
  // wire. A receive scatters the first op.length bytes into the caller's
  // buffer and the rest into the trailer, so a message shorter than the
  // buffer leaves part of its trailer in the buffer (Unseal puts it
  // together); under rxm's eager mode the overflow sink comes last.
  iovec iov[3];
  void* desc[3];
  size_t count = 0;
  if (op.length > 0 || !op.seal) {
    iov[count] = {op.data, op.length};
    desc[count++] = op.desc;
  }
  if (op.seal) {
    iov[count] = {op.trailer.data(), op.trailer.size()};
    desc[count++] = op.trailer_desc;
  }
  if (op.kind == FabricOp::Kind::kRecv && !overflow_sink_.empty()) {
    iov[count] = {overflow_sink_.data(), overflow_sink_.size()};
    desc[count++] = nullptr;
  }
  if (send) {
    if (count == 1) {
      return InProvider(op.addr, [&] { return fi_tsend(ep_.get(), iov[0].iov_base, iov[0].iov_len, desc[0],
                                                       op.addr, op.tag, &op.ctx.context); });
    }
    return InProvider(op.addr, [&] { return fi_tsendv(ep_.get(), iov, desc, count, op.addr, op.tag, &op.ctx.context); });
  }
  // Receives from an exited process stay posted: its last messages may wait
  // here, whole (shm copies small ones into the receiver's region).
  if (count == 1) {
    return InProvider(op.addr, [&] { return fi_trecv(ep_.get(), iov[0].iov_base, iov[0].iov_len, desc[0], op.addr,
                                                     op.tag, /*ignore=*/0, &op.ctx.context); });
  }
  return InProvider(op.addr, [&] {
    return fi_trecvv(ep_.get(), iov, desc, count, op.addr, op.tag, /*ignore=*/0, &op.ctx.context);
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

}  // namespace chorus::gossip::fabric
