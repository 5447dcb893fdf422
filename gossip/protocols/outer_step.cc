// Outer optimizer arithmetic (see outer_step.h).
#include "gossip/protocols/outer_step.h"

#include <algorithm>
#include <numeric>

#include "common/split_mix64.h"

namespace chorus::gossip {

void OuterUpdate(const OuterStepOptions& options, std::span<const float> base, std::span<float> anchor,
                 std::span<float> velocity) {
  const size_t n = anchor.size();
  const float lr = options.lr, mu = options.momentum, keep = 1.0f - options.lr;
  switch (options.kind) {
    case OuterKind::kAverage:
      std::copy(base.begin(), base.end(), anchor.begin());
      return;
    case OuterKind::kSgd:
      for (size_t i = 0; i < n; ++i) {
        const float g = anchor[i] - base[i];
        const float v_old = velocity[i];
        velocity[i] = mu * v_old + g;
        anchor[i] = base[i] + keep * g - lr * mu * v_old;  // = a - lr v'
      }
      return;
    case OuterKind::kNesterov:
      for (size_t i = 0; i < n; ++i) {
        const float g = anchor[i] - base[i];
        const float v = mu * velocity[i] + g;
        velocity[i] = v;
        anchor[i] = base[i] + keep * g - lr * mu * v;  // = a - lr (g + mu v')
      }
      return;
  }
}

void LandOuterUpdate(float mix, std::span<const float> anchor, std::span<float> params) {
  if (mix == 0.0f) {
    std::copy(anchor.begin(), anchor.end(), params.begin());
    return;
  }
  const float other = 1.0f - mix;
  for (size_t i = 0; i < params.size(); ++i) params[i] = mix * params[i] + other * anchor[i];
}

std::vector<FragmentRange> SplitFragments(size_t n, int fragments) {
  const size_t f = static_cast<size_t>(std::max(1, fragments));
  std::vector<FragmentRange> out(f);
  size_t begin = 0;
  for (size_t i = 0; i < f; ++i) {
    out[i] = {begin, n / f + (i < n % f ? 1 : 0)};
    begin += out[i].count;
  }
  return out;
}

int SyncOffset(int fragment, int fragments, int period) {
  return static_cast<int>((static_cast<int64_t>(fragment + 1) * period / fragments) % period);
}

int FragmentDue(int64_t steps_done, int fragments, int period) {
  if (steps_done < 1 || period < 1) return -1;
  const int r = static_cast<int>(steps_done % period);
  for (int f = 0; f < fragments; ++f) {
    if (SyncOffset(f, fragments, period) == r) return f;
  }
  return -1;
}

Status EncodeWithFeedback(const Codec& codec, std::span<const float> delta, uint64_t seed,
                          std::span<float> residual, std::span<float> decoded, std::vector<std::byte>* wire) {
  for (size_t i = 0; i < delta.size(); ++i) residual[i] += delta[i];  // e = delta + residual
  CHORUS_RETURN_IF_ERROR(codec.Encode(residual, seed, wire));
  CHORUS_RETURN_IF_ERROR(codec.Decode(*wire, decoded));
  for (size_t i = 0; i < delta.size(); ++i) residual[i] -= decoded[i];  // what did not travel
  return Status::Ok();
}

std::vector<int> RandomGroup(int world, int rank, uint64_t seed, int64_t round) {
  if (world < 2) return {rank};
  std::vector<int> order(static_cast<size_t>(world));
  std::iota(order.begin(), order.end(), 0);
  SplitMix64 rng(seed ^ (static_cast<uint64_t>(round) * 0x9e3779b97f4a7c15ULL) ^ 0x6e6f6c6f636fULL);
  for (size_t i = order.size() - 1; i > 0; --i) {  // Fisher-Yates
    std::swap(order[i], order[static_cast<size_t>(rng.Below(i + 1))]);
  }
  const size_t pos = static_cast<size_t>(std::find(order.begin(), order.end(), rank) - order.begin());
  size_t first = (pos / 2) * 2;
  size_t size = 2;
  if (order.size() % 2 == 1 && pos + 3 >= order.size()) {  // the last three
    first = order.size() - 3;
    size = 3;
  }
  std::vector<int> group(order.begin() + static_cast<std::ptrdiff_t>(first),
                         order.begin() + static_cast<std::ptrdiff_t>(first + size));
  std::sort(group.begin(), group.end());
  return group;
}

}  // namespace chorus::gossip
