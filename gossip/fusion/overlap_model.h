// Overlap model: whether a small first fusion bucket pays, and how large.
//
// A first bucket made of the layers whose gradients are final first (the
// last layers) can be all-reduced while the rest of backward runs. It pays
// only where (1) the host has a core for the communication thread, else the
// all-reduce's work competes with backward's and nothing overlaps, and (2)
// the backward still to run after those layers outlasts the extra call's
// fixed cost. With the all-reduce of s bytes costing alpha + s * per_byte,
// and the default layout's first bucket ready `rest_default` before the end
// of backward (0 when it is the whole gradient), a first bucket of the first
// k layers (s_k bytes, ready rest_k before the end) saves per step
//   gain_k = min(s_k * per_byte, rest_k - rest_default - alpha)
// on a rank: the part of its transfer hidden behind backward, or, when it
// outlasts that backward, the backward it hid less the extra call's cost.
// The cluster steps at its slowest rank's pace, so a split's gain is its
// smallest over the ranks, and any rank without a spare core rules it out.
//
// Must not: measure or communicate (the caller gathers the ranks' figures).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace chorus::gossip {

// One rank's figures over its calibration steps (medians).
struct OverlapFigures {
  // CPU cores the host left idle while the rank trained (its own idle
  // communication thread's included): below 1, no core to overlap on.
  double spare_cores = 0;
  // Fixed cost of one more bucket's all-reduce (a small call's time plus the
  // wake-up of the communication thread), microseconds.
  double alpha_us = 0;
  // Microseconds per byte of the bucket all-reduces beyond alpha.
  double per_byte_us = 0;
  // By candidate k (1-based: the first k ready groups; k = 1 .. groups - 1):
  // microseconds from the moment the first k groups' gradients were final to
  // the end of backward. rest_us[k - 1].
  std::vector<double> rest_us;
  // The same for the default layout's first bucket (0 when it holds the
  // whole gradient).
  double rest_default_us = 0;
};

struct FirstBucketChoice {
  size_t bytes = 0;      // the first bucket's cap; 0: keep the default layout
  size_t groups = 0;     // the ready groups it holds
  double gain_us = 0;    // the best split's saving per step (the slowest rank's), chosen or not
  int limiting_rank = -1;  // the rank whose figures set the outcome (-1: none)
  std::string reason;    // one line for the log: what was chosen and why
};

// The first bucket to use, from every rank's figures (same order on every
// rank, so every rank chooses the same). `prefix_bytes[k - 1]`: the bytes of
// the first k ready groups (k = 1 .. groups - 1), increasing; only those below
// `default_first_bytes` (the default first bucket) are candidates. A split is
// chosen when its gain is at least `min_gain_us` and at least `min_gain_fraction`
// of the default first bucket's all-reduce time, on the slowest rank.
FirstBucketChoice ChooseFirstBucket(std::span<const size_t> prefix_bytes, size_t default_first_bytes,
                                    std::span<const OverlapFigures> ranks, double min_gain_us = 20.0,
                                    double min_gain_fraction = 0.05);

// OverlapFigures to and from the flat vector the ranks gather (`groups` - 1
// candidates): [spare_cores, alpha_us, per_byte_us, rest_default_us, rest_us...].
std::vector<float> FlattenOverlapFigures(const OverlapFigures& figures);
OverlapFigures UnflattenOverlapFigures(std::span<const float> flat);

}  // namespace chorus::gossip
