// Blocking helpers shared by every Transport implementation.
#include "gossip/transport/transport.h"

namespace chorus::gossip {

Status CheckTag(Tag tag) {
  if (tag == kReservedTag) {
    return InvalidArgument("tag " + std::to_string(tag) + " is reserved for the transport itself");
  }
  if (tag <= kMaxTag) return Status::Ok();
  return InvalidArgument("tag " + std::to_string(tag) + " is above the transport's 63 bits (" +
                         std::to_string(kMaxTag) + ")");
}

Status Transport::Send(Rank dest, Tag tag, std::span<const std::byte> data, Deadline deadline) {
  CHORUS_ASSIGN_OR_RETURN(RequestPtr req, Isend(dest, tag, data));
  auto done = req->Wait(deadline);
  if (!done) return done.error();
  return Status::Ok();
}

Result<Completion> Transport::Recv(Rank source, Tag tag, std::span<std::byte> data,
                                   Deadline deadline) {
  CHORUS_ASSIGN_OR_RETURN(RequestPtr req, Irecv(source, tag, data));
  return req->Wait(deadline);
}

bool ReleaseAll(std::vector<RequestPtr>& requests) {
  bool released = true;
  for (RequestPtr& r : requests) {
    if (r != nullptr && !r->Release()) released = false;
  }
  requests.clear();
  return released;
}

Status WaitAll(std::span<RequestPtr> requests, Deadline deadline) {
  Status first;
  for (auto& req : requests) {
    if (!req) continue;
    if (!first.ok()) {
      req->Cancel();
      continue;
    }
    auto done = req->Wait(deadline);
    if (!done) first = done.error();
  }
  return first;
}

}  // namespace chorus::gossip
