// SwapExactly: one round of point-to-point messages outside a protocol object
// (the outer step's group averages, the sparse ring's steps): `payload` to
// each of `to` and one message from each of `from`, each of a size both sides
// know. Receives are posted before the sends; the wait backs off (several
// nodes share cores). A message of another size is DataLoss naming the peer
// and `what`. On any failure the requests are released, and the buffers kept
// for good when the provider kept one (transport.h, ReleaseOrKeep).
//
// Must not: hold state between calls.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "gossip/transport/transport.h"

namespace chorus::gossip {

// (*inboxes)[k] receives from from[k] and must already have the expected size.
[[nodiscard]] Status SwapExactly(Transport& transport, std::span<const int> to, std::vector<std::byte>& payload,
                                 std::span<const int> from, Tag tag, Deadline deadline,
                                 std::vector<std::vector<std::byte>>* inboxes, std::string_view what);

}  // namespace chorus::gossip
