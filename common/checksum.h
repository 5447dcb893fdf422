// A 64-bit checksum of a float array's bytes: equal on every node for equal
// weights, so nodes compare it to tell whether they hold one model (the
// training summary's parameter_checksum, the consensus phase's report).
// Not for cryptography. Std only.
#pragma once

#include <cstdint>
#include <span>

namespace chorus {

// FNV-1a over 64-bit words in four interleaved lanes (one multiply chain
// each, so four run at once: about 40x a byte-wise FNV-1a), each lane mixed
// with MurmurHash3's finaliser, then the lanes and the tail bytes folded in
// FNV-1a. Each step is a bijection of a lane, so arrays that differ in one
// word always differ here.
uint64_t WeightsChecksum(std::span<const float> x);

}  // namespace chorus
