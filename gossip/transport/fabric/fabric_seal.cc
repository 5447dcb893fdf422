// FabricCore's sealed receives (design in fabric_core.h and data_seal.h):
// installing an epoch's seal, and checking what a sealed receive took: a
// message that does not verify (a message longer than the receive included)
// is dropped and counted, and the receive is posted again for the real one,
// whoever sent it. Must not: run under cq_mu_
// (a MAC over a large message would stall every other operation's
// progress), or deliver a message that did not verify.
#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "gossip/transport/fabric/fabric_core.h"

namespace chorus::gossip::fabric {

void FabricCore::SetSeal(std::shared_ptr<DataSeal> seal) {
  std::unique_lock lock(peers_mu_);
  seal_ = std::move(seal);
}

Result<std::shared_ptr<FabricOp>> FabricCore::Unseal(std::shared_ptr<FabricOp> op) {
  op->settled = true;
  Completion completion;
  {
    std::lock_guard<std::mutex> lock(op->mu);
    if (!op->status.ok()) return op;  // failed: the waiter gets the error
    completion = op->completion;
  }
  std::string why = op->rejected;
  if (why.empty()) {
    // The message's last kSealTrailerBytes are its trailer; when it was
    // shorter than the buffer, their first part landed in the buffer.
    auto* data = static_cast<std::byte*>(op->data);
    const size_t n = completion.bytes;
    if (n < op->length) {
      SealTrailer trailer;
      const size_t in_buffer = std::min(op->length - n, kSealTrailerBytes);
      std::memcpy(trailer.data(), data + n, in_buffer);
      std::memcpy(trailer.data() + in_buffer, op->trailer.data(), kSealTrailerBytes - in_buffer);
      op->trailer = trailer;
    }
    Status opened = op->seal->Open(completion.source, op->self, completion.tag, std::span<std::byte>(data, n),
                                   op->trailer);
    if (opened.ok()) {
      bytes_received_ += n + kSealTrailerBytes;
      messages_received_ += 1;
      return op;
    }
    why = opened.message();
  }
  messages_rejected_ += 1;
  const int64_t now = Clock::now().time_since_epoch().count();
  int64_t due = next_reject_log_ns_.load();
  if (now >= due && next_reject_log_ns_.compare_exchange_strong(due, now + int64_t{1'000'000'000})) {
    CHORUS_LOG_WARN(Subsys::kFabric, describe_, ": dropped a message that failed authentication on ", op->Describe(),
                    ": ", why, " (", messages_rejected_.load(), " dropped so far; at most one line a second)");
  }
  // The real message may still come, to the same receive posted again: from
  // an endpoint that is not a member, and from a member's own connection as
  // well, where a message that fails its seal is a forgery or a replay (of
  // another epoch, or of a sequence number already taken) that a member sent
  // ahead of its real one. A real message changed after it was sealed (seen
  // once: a provider's late write into a buffer the sender then sent) has no
  // other behind it: the receive then runs to its deadline
  // (fabric.op_timeout_s) as with a silent member. Failing the receive at
  // once instead let one replayed message end the epoch's collective on
  // every member, with no member dead to re-form without. A message longer
  // than the receive goes the same way: unsealed it fails the receive
  // (kDataLoss), but sealed it cannot be authenticated, so it is one more
  // that a member may send ahead of its real one.
  auto again = NewOp(FabricOp::Kind::kRecv, op->tag);
  again->peer = op->peer;
  again->addr = op->addr;
  again->peer_name = op->peer_name;
  again->self = op->self;
  {
    std::shared_lock lock(peers_mu_);
    if (op->peer >= 0 && op->peer < static_cast<Rank>(peers_.dead.size()) && peers_.dead[op->peer] &&
        peers_.addr[op->peer] == op->addr) {
      return Err(Unavailable(op->Describe() + ": peer is dead"));
    }
  }
  CHORUS_RETURN_IF_ERROR(AttachBuffer(*again, op->data, op->length));
  CHORUS_RETURN_IF_ERROR(AttachSeal(*again, op->seal));
  Track(again);
  CHORUS_RETURN_IF_ERROR(Submit(again));
  return again;
}

Status FabricCore::ReplayFault(const FabricOp& op) {
  std::lock_guard<std::mutex> lock(replay_mu_);
  if (replayed_) return Status::Ok();
  const auto* wire = static_cast<const std::byte*>(op.data);  // the ciphertext when encrypting
  if (!replay_) {
    replay_ = NewOp(FabricOp::Kind::kSend, op.tag);
    replay_->owned.assign(wire, wire + op.length);
    CHORUS_RETURN_IF_ERROR(AttachBuffer(*replay_, replay_->owned.data(), replay_->owned.size()));
    replay_->trailer = op.trailer;
    replay_->seal = op.seal;
    replay_->peer = op.peer;
    replay_->self = op.self;
    return Status::Ok();
  }
  if (op.seal->epoch() == replay_->seal->epoch()) return Status::Ok();
  replayed_ = true;
  replay_->tag = op.tag;
  replay_->addr = op.addr;
  replay_->peer = op.peer;
  replay_->peer_name = op.peer_name;
  if (registering_) {
    auto reg = mr_cache_->Get(replay_->trailer.data(), replay_->trailer.size());
    if (!reg) return reg.error().WithContext(replay_->Describe() + "'s seal");
    replay_->trailer_desc = reg->desc;
    replay_->trailer_mr = std::move(reg->owner);
  }
  CHORUS_LOG_WARN(Subsys::kFabric, "fault injection: ", describe_, " replays its first message of epoch ",
                  replay_->seal->epoch(), " (", replay_->length, " bytes) to ", op.peer_name, " in epoch ",
                  op.seal->epoch(), " under the tag of its send there");
  Track(replay_);
  return Submit(replay_);
}

}  // namespace chorus::gossip::fabric
