// SwapExactly (see message_round.h).
#include "gossip/protocols/message_round.h"

#include <chrono>
#include <string>

namespace chorus::gossip {

Status SwapExactly(Transport& transport, std::span<const int> to, std::vector<std::byte>& payload,
                   std::span<const int> from, Tag tag, Deadline deadline,
                   std::vector<std::vector<std::byte>>* inboxes, std::string_view what) {
  std::vector<RequestPtr> requests;
  auto fail = [&](Status why) {
    ReleaseOrKeep(requests, *inboxes, payload);
    return why;
  };
  for (size_t k = 0; k < from.size(); ++k) {
    Result<RequestPtr> r = transport.Irecv(from[k], tag, (*inboxes)[k]);
    if (!r) return fail(r.error());
    requests.push_back(std::move(*r));
  }
  for (int peer : to) {
    Result<RequestPtr> r = transport.Isend(peer, tag, payload);
    if (!r) return fail(r.error());
    requests.push_back(std::move(*r));
  }
  Backoff backoff(std::chrono::microseconds(200));
  for (size_t i = 0; i < requests.size(); ++i) {
    // In virtual time a receive's wait is an event in order (event_order.h).
    while (transport.Order() == nullptr && !requests[i]->Done() && !deadline.Expired()) backoff.Pause();
    Result<Completion> done = requests[i]->Wait(deadline);
    if (!done) return fail(done.error());
    if (i < from.size() && done->bytes != (*inboxes)[i].size()) {
      return fail(DataLoss(std::string(what) + ": " + std::to_string(done->bytes) + " bytes from rank " +
                           std::to_string(from[i]) + ", expected " + std::to_string((*inboxes)[i].size())));
    }
  }
  return Status::Ok();
}

}  // namespace chorus::gossip
