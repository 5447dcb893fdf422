// GradientBucketer (see fusion.h).
#include "gossip/fusion/fusion.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

namespace chorus::gossip {

Result<GradientBucketer> GradientBucketer::Create(std::vector<ParamSlice> params,
                                                  size_t bucket_bytes) {
  return Create(std::move(params), BucketSizes{bucket_bytes, bucket_bytes});
}

Result<GradientBucketer> GradientBucketer::Create(std::vector<ParamSlice> params,
                                                  BucketSizes sizes) {
  const size_t bucket_bytes = sizes.bucket_bytes;
  const size_t first_bucket_bytes = sizes.first_bucket_bytes > 0 ? sizes.first_bucket_bytes : bucket_bytes;
  if (bucket_bytes == 0) return Err(InvalidArgument("gradient bucketer: bucket_bytes must be > 0"));
  // Overlap check over the slices sorted by offset (empty slices overlap nothing).
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return params[a].offset < params[b].offset; });
  size_t prev = params.size();
  for (size_t idx : order) {
    if (params[idx].count == 0) continue;
    if (prev != params.size() && params[prev].offset + params[prev].count > params[idx].offset) {
      return Err(InvalidArgument("gradient bucketer: parameter " + std::to_string(idx) +
                                 " [" + std::to_string(params[idx].offset) + ", +" +
                                 std::to_string(params[idx].count) + ") overlaps parameter " +
                                 std::to_string(prev)));
    }
    prev = idx;
  }

  GradientBucketer b;
  b.bucket_bytes_ = bucket_bytes;
  b.bucket_of_.resize(params.size());
  // Greedy over ready groups: a group joins the open bucket if it fits whole.
  size_t bytes = 0;
  for (size_t p = 0; p < params.size();) {
    size_t end = p + 1;
    while (end < params.size() && params[p].group >= 0 && params[end].group == params[p].group) ++end;
    size_t group_bytes = 0;
    for (size_t q = p; q < end; ++q) group_bytes += params[q].count * sizeof(float);
    const size_t cap = b.buckets_.size() <= 1 ? first_bucket_bytes : bucket_bytes;
    if (b.buckets_.empty() || (b.buckets_.back().num_params > 0 && bytes + group_bytes > cap)) {
      b.buckets_.push_back(GradientBucket{p, 0, 0, false, 0});
      bytes = 0;
    }
    GradientBucket& bucket = b.buckets_.back();
    for (size_t q = p; q < end; ++q) {
      b.required_elems_ = std::max(b.required_elems_, params[q].offset + params[q].count);
      bucket.num_params += 1;
      bucket.elems += params[q].count;
      b.bucket_of_[q] = b.buckets_.size() - 1;
    }
    bytes += group_bytes;
    p = end;
  }
  for (GradientBucket& bucket : b.buckets_) {
    // Contiguous when the non-empty slices, sorted by offset, follow each other.
    std::vector<ParamSlice> slices;
    for (size_t p = bucket.first_param; p < bucket.first_param + bucket.num_params; ++p) {
      if (params[p].count > 0) slices.push_back(params[p]);
    }
    std::sort(slices.begin(), slices.end(),
              [](const ParamSlice& a, const ParamSlice& c) { return a.offset < c.offset; });
    bucket.contiguous = true;
    bucket.flat_offset = slices.empty() ? 0 : slices.front().offset;
    for (size_t k = 1; k < slices.size(); ++k) {
      if (slices[k].offset != slices[k - 1].offset + slices[k - 1].count) bucket.contiguous = false;
    }
  }
  b.params_ = std::move(params);
  b.ready_.assign(b.params_.size(), false);
  b.missing_.resize(b.buckets_.size());
  b.Reset();
  return b;
}

Result<std::optional<size_t>> GradientBucketer::MarkReady(size_t param) {
  if (param >= params_.size()) {
    return Err(InvalidArgument("gradient bucketer: parameter " + std::to_string(param) +
                               " out of range (" + std::to_string(params_.size()) +
                               " parameters)"));
  }
  if (ready_[param]) {
    return Err(FailedPrecondition("gradient bucketer: parameter " + std::to_string(param) +
                                  " marked ready twice in one step"));
  }
  ready_[param] = true;
  const size_t bucket = bucket_of_[param];
  if (--missing_[bucket] > 0) return std::optional<size_t>();
  ++ready_buckets_;
  return std::optional<size_t>(bucket);
}

std::optional<size_t> GradientBucketer::FirstUnready(size_t bucket) const {
  const GradientBucket& b = buckets_[bucket];
  for (size_t p = b.first_param; p < b.first_param + b.num_params; ++p) {
    if (!ready_[p]) return p;
  }
  return std::nullopt;
}

void GradientBucketer::Reset() {
  std::fill(ready_.begin(), ready_.end(), false);
  for (size_t k = 0; k < buckets_.size(); ++k) missing_[k] = buckets_[k].num_params;
  ready_buckets_ = 0;
}

std::span<float> GradientBucketer::InPlace(size_t bucket, std::span<float> grads) const {
  const GradientBucket& b = buckets_[bucket];
  return grads.subspan(b.flat_offset, b.elems);
}

void GradientBucketer::Pack(size_t bucket, std::span<const float> grads,
                            std::span<float> staging) const {
  const GradientBucket& b = buckets_[bucket];
  size_t at = 0;
  for (size_t p = b.first_param; p < b.first_param + b.num_params; ++p) {
    const ParamSlice& s = params_[p];
    if (s.count > 0) std::memcpy(staging.data() + at, grads.data() + s.offset, s.count * sizeof(float));
    at += s.count;
  }
}

void GradientBucketer::Unpack(size_t bucket, std::span<const float> staging,
                              std::span<float> grads) const {
  const GradientBucket& b = buckets_[bucket];
  size_t at = 0;
  for (size_t p = b.first_param; p < b.first_param + b.num_params; ++p) {
    const ParamSlice& s = params_[p];
    if (s.count > 0) std::memcpy(grads.data() + s.offset, staging.data() + at, s.count * sizeof(float));
    at += s.count;
  }
}

}  // namespace chorus::gossip
