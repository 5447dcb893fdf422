// The message the members of an outer sync's group swap (outer_exchange.cc),
// and its reader and writer: n f32 (the sender's parameters of the fragment,
// or with a codec its outer parameters), then with a codec the codec's
// encoding of its pseudo-gradient (gossip/codecs/codec.h reads that).
// Little-endian, as the hosts that run Chorus are.
//
// Must not: decode the pseudo-gradient or know the group; the exchange does.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "common/status.h"

namespace chorus::node {

// `params`, then `pseudo_gradient` (empty without a codec).
std::vector<std::byte> EncodeOuterSyncMessage(std::span<const float> params,
                                              std::span<const std::byte> pseudo_gradient);

// Copies the message's first params.size() floats into `params` and returns
// the bytes after them (the pseudo-gradient's encoding; empty without a
// codec); DataLoss for a message shorter than those floats. What it accepts
// encodes back to the same bytes.
[[nodiscard]] Result<std::span<const std::byte>> ReadOuterSyncMessage(std::span<const std::byte> message,
                                                                     std::span<float> params);

}  // namespace chorus::node
