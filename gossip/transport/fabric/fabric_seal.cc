// FabricCore's sealed receives (design in fabric_core.h and data_seal.h):
// installing an epoch's seal, and checking what a sealed receive took: a
// message that does not verify is dropped and counted; the receive fails
// (kDataLoss) when it came from a member, and is posted again when it came
// from an endpoint that is not one. Must not: run under cq_mu_ (a MAC over a
// large message would stall every other operation's progress), or deliver a
// message that did not verify.
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
  // From a member's own connection, a message that fails its seal was
  // changed after it was sealed (seen: a provider writing a late receive
  // into a buffer the sender then sent) or is not that member's at all;
  // either way no real message follows it, and the receive fails (as a
  // truncation does) rather than wait for one: the exchange re-forms.
  if (completion.source >= 0) return Err(DataLoss(op->Describe() + ": dropped, it failed authentication: " + why));
  // From an endpoint that is not a member: the real message may still come,
  // to the same receive posted again.
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

}  // namespace chorus::gossip::fabric
