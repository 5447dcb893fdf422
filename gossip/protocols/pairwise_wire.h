// The header every pairwise gossip message starts with (pairwise_gossip.cc
// has the exchange that sends them), and its reader and writer.
//
// 24 bytes, little-endian:
//   [0] type  [1] flags (bit 0: the sender has finished)  [2..7] 0
//   [8..15] u64 seq (the initiator's request id; answers echo it; notices 0)
//   [16..23] i64 step (the sender's step counter: the last round it passed to Mix)
// then, for REQUEST's value and ACCEPT, the codec's encoding of the sender's
// public value.
//
// Must not: judge what a message means to the exchange (an answer to another
// request, a value where a header was expected); the protocol does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace chorus::gossip {

inline constexpr size_t kPairwiseHeaderBytes = 24;

enum class PairwiseType : uint8_t {
  kRequest = 1,
  kAccept = 2,
  kDeclineBusy = 3,
  kDeclineRejected = 4,
  kNotice = 5,  // header only: the sender's step, and whether it has finished
  kClear = 6,   // answer to REQUEST: the responder's receive for the value is posted
};

struct PairwiseHeader {
  PairwiseType type = PairwiseType::kRequest;
  bool finished = false;
  uint64_t seq = 0;
  int64_t step = 0;
};

// Writes `header` into the first kPairwiseHeaderBytes of `out` (which must
// hold at least that many).
void WritePairwiseHeader(const PairwiseHeader& header, std::span<std::byte> out);

// A message of the header alone.
std::vector<std::byte> PairwiseHeaderOnly(const PairwiseHeader& header);

// The header at the start of `message` (what follows it is the payload).
// DataLoss naming the defect and its byte for a message shorter than the
// header, an unknown type, a flag bit other than bit 0, or a reserved byte
// that is not 0; a header it accepts is written back to the same bytes.
[[nodiscard]] Result<PairwiseHeader> ReadPairwiseHeader(std::span<const std::byte> message);

}  // namespace chorus::gossip
