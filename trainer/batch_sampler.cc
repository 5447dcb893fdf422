// Seeded per-epoch shuffling, equal-shard splitting by rank, and batching. See
// batch_sampler.h for the sharding rule. Pure computation: no I/O, no network.
#include "trainer/batch_sampler.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <random>
#include <string>

#include "common/log.h"

namespace chorus::trainer {
namespace {

// SplitMix64's output function: a bijective mixer, so nearby (seed, epoch)
// pairs give unrelated generator seeds.
uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform integer in [0, bound), bound >= 1, without modulo bias: draws below
// 2^64 mod bound are rejected so that the accepted range is a whole number of
// copies of [0, bound).
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t reject_below = (0 - bound) % bound;  // == 2^64 mod bound
  for (;;) {
    const uint64_t r = rng();
    if (r >= reject_below) return r % bound;
  }
}

}  // namespace

std::vector<int32_t> EpochPermutation(int n, uint64_t seed, int epoch) {
  std::vector<int32_t> perm(static_cast<size_t>(std::max(n, 0)));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int32_t>(i);
  std::mt19937_64 rng(Mix64(seed ^ Mix64(static_cast<uint64_t>(static_cast<int64_t>(epoch)))));
  // Fisher-Yates (Durstenfeld): position i swaps with a uniform j in [0, i].
  for (size_t i = perm.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(UniformBelow(rng, i));
    std::swap(perm[i - 1], perm[j]);
  }
  return perm;
}

Status MakeBatch(const Dataset& dataset, std::span<const int32_t> indices, Batch* out) {
  for (size_t k = 0; k < indices.size(); ++k) {
    if (indices[k] < 0 || indices[k] >= dataset.count) {
      return OutOfRange("MakeBatch: index " + std::to_string(indices[k]) + " (position " +
                        std::to_string(k) + ") is outside 0.." + std::to_string(dataset.count - 1) +
                        " of " + dataset.description);
    }
  }
  const int64_t image_size = dataset.ImageSize();
  if (dataset.images.size() != static_cast<size_t>(dataset.count * image_size) ||
      dataset.labels.size() != static_cast<size_t>(dataset.count)) {
    return FailedPrecondition("MakeBatch: " + dataset.description + " has " +
                              std::to_string(dataset.images.size()) + " pixels and " +
                              std::to_string(dataset.labels.size()) + " labels for " +
                              std::to_string(dataset.count) + " images");
  }
  out->size = static_cast<int>(indices.size());
  out->channels = dataset.channels;
  out->height = dataset.height;
  out->width = dataset.width;
  out->images.resize(indices.size() * static_cast<size_t>(image_size));
  out->labels.resize(indices.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    const size_t i = static_cast<size_t>(indices[k]);
    std::memcpy(out->images.data() + k * image_size, dataset.images.data() + i * image_size,
                static_cast<size_t>(image_size) * sizeof(float));
    out->labels[k] = dataset.labels[i];
  }
  return Status::Ok();
}

Result<BatchSampler> BatchSampler::Create(int dataset_size, int batch_size, uint64_t seed, int rank,
                                          int world_size, bool drop_last) {
  if (dataset_size < 0) {
    return Err(InvalidArgument("BatchSampler: dataset_size must be >= 0, got " +
                               std::to_string(dataset_size)));
  }
  if (batch_size < 1) {
    return Err(InvalidArgument("BatchSampler: batch_size must be >= 1, got " + std::to_string(batch_size)));
  }
  if (world_size < 1) {
    return Err(InvalidArgument("BatchSampler: world_size must be >= 1, got " + std::to_string(world_size)));
  }
  if (rank < 0 || rank >= world_size) {
    return Err(InvalidArgument("BatchSampler: rank " + std::to_string(rank) + " is outside 0.." +
                               std::to_string(world_size - 1)));
  }
  return BatchSampler(dataset_size, batch_size, seed, rank, world_size, drop_last);
}

BatchSampler::BatchSampler(int dataset_size, int batch_size, uint64_t seed, int rank, int world_size,
                           bool drop_last)
    : dataset_size_(dataset_size),
      batch_size_(batch_size),
      seed_(seed),
      rank_(rank),
      world_size_(world_size),
      drop_last_(drop_last),
      shard_size_(world_size > 0 && dataset_size > 0 ? dataset_size / world_size : 0) {
  assert(dataset_size >= 0 && batch_size >= 1 && world_size >= 1 && rank >= 0 && rank < world_size);
  StartEpoch(0);
}

void BatchSampler::StartEpoch(int epoch) {
  epoch_ = epoch;
  cursor_ = 0;
  const std::vector<int32_t> perm = EpochPermutation(dataset_size_, seed_, epoch);
  const size_t begin = static_cast<size_t>(rank_) * static_cast<size_t>(shard_size_);
  shard_.assign(perm.begin() + static_cast<ptrdiff_t>(begin),
                perm.begin() + static_cast<ptrdiff_t>(begin + static_cast<size_t>(shard_size_)));
}

int BatchSampler::BatchesPerEpoch() const {
  if (batch_size_ < 1) return 0;
  return drop_last_ ? shard_size_ / batch_size_ : (shard_size_ + batch_size_ - 1) / batch_size_;
}

bool BatchSampler::Next(const Dataset& dataset, Batch* out) {
  if (dataset.count != dataset_size_) {
    CHORUS_LOG_ERROR(Subsys::kData, "BatchSampler built for ", dataset_size_, " samples was given ",
                     dataset.description, " with ", dataset.count, " samples; ending the epoch");
    return false;
  }
  const size_t left = shard_.size() - cursor_;
  if (left == 0 || (drop_last_ && left < static_cast<size_t>(batch_size_))) return false;
  const size_t take = std::min(left, static_cast<size_t>(batch_size_));
  const Status status = MakeBatch(dataset, std::span<const int32_t>(shard_).subspan(cursor_, take), out);
  if (!status.ok()) {
    CHORUS_LOG_ERROR(Subsys::kData, "BatchSampler: ", status.ToString());
    return false;
  }
  cursor_ += take;
  return true;
}

}  // namespace chorus::trainer
