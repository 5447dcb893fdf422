// GradientBucketer: tensor fusion of gradients into all-reduce buckets.
//
// Built from the parameter table: one {offset, count} slice of the flat FP32
// gradient buffer per parameter, listed in the order backward produces the
// gradients (the reverse of the forward order). Consecutive parameters are packed
// greedily into buckets of at most `bucket_bytes` (the first bucket: at most
// `first_bucket_bytes`); a parameter larger than that gets a bucket of its own.
// Parameters of one ready group (a layer: final at the same moment) are never
// split over buckets: that would only add an all-reduce, never overlap. A bucket whose slices tile one range of the flat
// buffer is "contiguous": its all-reduce runs in place on that range. Otherwise it
// is packed into a staging buffer and unpacked after the all-reduce.
//
// During backward, MarkReady(param) reports the bucket that the parameter just
// completed, so that its all-reduce can start while backward goes on (see
// fusion_engine.h).
//
// Must not: communicate, own the gradient buffer, or lock (callers serialise
// MarkReady / Reset; FusionEngine does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"

namespace chorus::gossip {

// A parameter's gradient: elements [offset, offset + count) of the flat buffer.
struct ParamSlice {
  size_t offset = 0;
  size_t count = 0;
  // Slices with one group >= 0, listed together, become final together; -1:
  // a group of its own.
  int64_t group = -1;
};

struct BucketSizes {
  size_t bucket_bytes = 0;
  // Cap of the first bucket (0: bucket_bytes). Small, so that the layers whose
  // backward ends first are on the wire while the rest of backward runs, even
  // when the whole gradient would fit one bucket.
  size_t first_bucket_bytes = 0;
};

struct GradientBucket {
  size_t first_param = 0;   // index into the parameter table (backward order)
  size_t num_params = 0;    // parameters first_param .. first_param + num_params - 1
  size_t elems = 0;         // total elements
  bool contiguous = false;  // the slices tile [flat_offset, flat_offset + elems)
  size_t flat_offset = 0;   // meaningful when contiguous
};

class GradientBucketer {
 public:
  // Fails (InvalidArgument) on bucket_bytes == 0 or overlapping slices (named by
  // parameter index).
  static Result<GradientBucketer> Create(std::vector<ParamSlice> params, size_t bucket_bytes);
  static Result<GradientBucketer> Create(std::vector<ParamSlice> params, BucketSizes sizes);

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  const std::vector<ParamSlice>& params() const { return params_; }
  size_t bucket_bytes() const { return bucket_bytes_; }
  size_t BucketOf(size_t param) const { return bucket_of_[param]; }
  // One past the last element any slice covers: the smallest valid buffer size.
  size_t RequiredElems() const { return required_elems_; }

  // Marks `param`'s gradient as final for this step. Returns the index of the
  // bucket it completed (every parameter of it ready), or nullopt. Fails on an
  // index out of range or a parameter marked twice since Reset().
  Result<std::optional<size_t>> MarkReady(size_t param);
  bool BucketReady(size_t bucket) const { return missing_[bucket] == 0; }
  bool AllReady() const { return ready_buckets_ == buckets_.size(); }
  // The first parameter of `bucket` not yet marked, or nullopt.
  std::optional<size_t> FirstUnready(size_t bucket) const;
  // Forgets every mark: the start of a new step.
  void Reset();

  // The range of `grads` a contiguous bucket covers.
  std::span<float> InPlace(size_t bucket, std::span<float> grads) const;
  // Copies a bucket's slices, in parameter order, from `grads` into `staging`
  // (bucket.elems elements) / from `staging` back into `grads`.
  void Pack(size_t bucket, std::span<const float> grads, std::span<float> staging) const;
  void Unpack(size_t bucket, std::span<const float> staging, std::span<float> grads) const;

 private:
  GradientBucketer() = default;

  std::vector<ParamSlice> params_;
  size_t bucket_bytes_ = 0;
  size_t required_elems_ = 0;
  std::vector<GradientBucket> buckets_;
  std::vector<size_t> bucket_of_;   // by parameter
  std::vector<bool> ready_;         // by parameter
  std::vector<size_t> missing_;     // by bucket: parameters not yet ready
  size_t ready_buckets_ = 0;
};

}  // namespace chorus::gossip
