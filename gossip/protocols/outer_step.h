// The arithmetic of low-communication training (DiLoCo and its descendants),
// apart from any communication: the outer optimizer step, the streaming
// fragment schedule, error feedback for compressed pseudo-gradients, and the
// random groups of NoLoCo.
//
// Each node keeps outer parameters a (the anchor: the model after the last
// outer step) and trains its own parameters x with its inner optimizer. At an
// outer step of a group G of nodes (every member under all-reduce, one random
// peer, or the graph neighbours), node i takes the base b = mean_G x_j and
// the outer gradient g_i = a_i - b: the mean pseudo-gradient mean_G (a_j -
// x_j) plus, where the anchors differ (gossip groups), the pull a_i - mean_G
// a_j toward the group's anchors, which is NoLoCo's extra momentum term with
// its weight equal to the outer learning rate (as in the authors' code).
// Then, with velocity v (PyTorch's SGD conventions):
//   average    a <- b                                    (local SGD)
//   sgd        v <- mu v + g;  a <- a - lr v              (heavy ball)
//   nesterov   v <- mu v + g;  a <- a - lr (g + mu v)     (DiLoCo)
// computed as a <- b + (1 - lr) g - lr mu v', so that lr = 1, mu = 0 gives
// exactly the base: averaging bit for bit. The node's parameters then become
// x <- mix x + (1 - mix) a (mix = exchange.outer.local_mix; 0 replaces them).
//
// Must not: communicate, or know the trainer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "gossip/codecs/codec.h"

namespace chorus::gossip {

enum class OuterKind { kAverage, kSgd, kNesterov };

struct OuterStepOptions {
  OuterKind kind = OuterKind::kNesterov;
  float lr = 0.7f;
  float momentum = 0.9f;
};

// One outer step of one fragment (every span the same length): `anchor` and
// `velocity` move as the file comment says, from `base` (the group's mean of
// the nodes' parameters). Velocity is untouched by kAverage.
void OuterUpdate(const OuterStepOptions& options, std::span<const float> base, std::span<float> anchor,
                 std::span<float> velocity);

// x <- mix x + (1 - mix) anchor: the outer update lands on the node's parameters.
void LandOuterUpdate(float mix, std::span<const float> anchor, std::span<float> params);

// The streaming schedule: `fragments` (F) contiguous ranges of `n` elements,
// as equal as can be (the first n % F one longer), fragment f synced after
// the inner steps s with s % period == SyncOffset(f) (its first sync after
// SyncOffset(f) steps, or a whole period for the last). F = 1 syncs the whole
// model every period.
struct FragmentRange {
  size_t begin = 0;
  size_t count = 0;
};
std::vector<FragmentRange> SplitFragments(size_t n, int fragments);
int SyncOffset(int fragment, int fragments, int period);
// The fragment synced after `steps_done` inner steps (>= 1), or -1.
int FragmentDue(int64_t steps_done, int fragments, int period);

// Error feedback: e = delta + residual travels through `codec` as *wire;
// `decoded` gets what the receivers decode, and the residual keeps e -
// decoded for the next round, so nothing the codec drops is lost for good.
[[nodiscard]] Status EncodeWithFeedback(const Codec& codec, std::span<const float> delta, uint64_t seed,
                                        std::span<float> residual, std::span<float> decoded,
                                        std::vector<std::byte>* wire);

// NoLoCo's groups for outer round `round`: a permutation of the `world` ranks
// drawn from (seed, round), the same on every node, cut into pairs (an odd
// world's last three form one group). Returns the group of `rank`, sorted.
std::vector<int> RandomGroup(int world, int rank, uint64_t seed, int64_t round);

}  // namespace chorus::gossip
