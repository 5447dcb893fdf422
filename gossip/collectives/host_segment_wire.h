// The name of a host's shared-memory segment as its leader sends it to the
// other ranks of the host (host_segment.cc's handshake), with its reader and
// writer: kSegmentNameBytes bytes, the name NUL-padded; all NUL when the
// leader could not create the segment. A name is "/" kSegmentNamePrefix, the
// leader's pid, "-", and a random number.
//
// Must not: open or map anything (host_segment.cc does).
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string>

#include "common/status.h"

namespace chorus::gossip {

inline constexpr size_t kSegmentNameBytes = 64;
inline constexpr char kSegmentNamePrefix[] = "chorus-seg-";

// `name` (at most kSegmentNameBytes - 1 bytes are kept), "" for none.
std::array<std::byte, kSegmentNameBytes> EncodeSegmentName(const std::string& name);

// The name in `message` ("" when the leader had none); DataLoss naming the
// byte for another size than kSegmentNameBytes, no NUL at the end, a byte
// after the name that is not NUL, or a name that is not "/"
// kSegmentNamePrefix followed by digits and dashes. A name it accepts
// encodes back to the same bytes.
[[nodiscard]] Result<std::string> DecodeSegmentName(std::span<const std::byte> message);

}  // namespace chorus::gossip
