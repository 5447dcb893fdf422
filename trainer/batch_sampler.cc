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
                                          int world_size, bool drop_last, uint64_t partition) {
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
  return BatchSampler(dataset_size, batch_size, seed, rank, world_size, drop_last, partition);
}

BatchSampler::BatchSampler(int dataset_size, int batch_size, uint64_t seed, int rank, int world_size,
                           bool drop_last, uint64_t partition)
    : dataset_size_(dataset_size),
      batch_size_(batch_size),
      seed_(seed),
      rank_(rank),
      world_size_(world_size),
      drop_last_(drop_last),
      partition_(partition) {
  assert(dataset_size >= 0 && batch_size >= 1 && world_size >= 1 && rank >= 0 && rank < world_size);
  StartEpoch(0);
}

void BatchSampler::TakeShard() {
  shard_size_ = world_size_ > 0 ? static_cast<int>(pool_.size()) / world_size_ : 0;
  const size_t begin = static_cast<size_t>(rank_) * static_cast<size_t>(shard_size_);
  shard_.assign(pool_.begin() + static_cast<ptrdiff_t>(begin),
                pool_.begin() + static_cast<ptrdiff_t>(begin + static_cast<size_t>(shard_size_)));
  cursor_ = 0;
}

void BatchSampler::PoolWhatIsLeft() {
  const size_t shard = static_cast<size_t>(shard_size_);
  const size_t taken = std::min(cursor_, shard);
  std::vector<int32_t> left;
  left.reserve(static_cast<size_t>(world_size_) * (shard - taken));
  for (size_t r = 0; r < static_cast<size_t>(world_size_); ++r) {
    left.insert(left.end(), pool_.begin() + static_cast<ptrdiff_t>(r * shard + taken),
                pool_.begin() + static_cast<ptrdiff_t>((r + 1) * shard));
  }
  pool_ = std::move(left);
}

void BatchSampler::StartEpoch(int epoch) {
  epoch_ = epoch;
  pool_ = EpochPermutation(dataset_size_, seed_, epoch);
  batches_before_ = 0;
  cuts_.assign(1, Cut{0, world_size_, partition_});
  TakeShard();
}

Status BatchSampler::Repartition(int rank, int world_size, uint64_t partition) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return InvalidArgument("BatchSampler: rank " + std::to_string(rank) + " is outside a world of " +
                           std::to_string(world_size));
  }
  const int taken = BatchesTakenInPartition();
  PoolWhatIsLeft();
  batches_before_ += taken;
  rank_ = rank;
  world_size_ = world_size;
  partition_ = partition;
  cuts_.push_back(Cut{taken, world_size, partition});
  TakeShard();
  return Status::Ok();
}

std::string BatchSampler::History() const {
  std::string out;
  for (size_t i = 0; i < cuts_.size(); ++i) {
    if (i > 0) out += ";" + std::to_string(cuts_[i].batches_before) + ":";
    out += std::to_string(cuts_[i].world_size) + "@" + std::to_string(cuts_[i].partition);
  }
  return out;
}

Status BatchSampler::Restore(int epoch, const std::string& history, int rank, int batches_taken) {
  auto bad = [&](const std::string& why) {
    return DataLoss("data order '" + history + "' of epoch " + std::to_string(epoch) + ": " + why);
  };
  std::vector<Cut> cuts;
  size_t pos = 0;
  while (pos <= history.size()) {
    const size_t end = std::min(history.find(';', pos), history.size());
    const std::string item = history.substr(pos, end - pos);
    Cut cut;
    size_t at = item.find('@');
    size_t colon = item.find(':');
    if (at == std::string::npos || (cuts.empty() != (colon == std::string::npos)) ||
        (colon != std::string::npos && colon > at)) {
      return bad("'" + item + "' is not " + (cuts.empty() ? "W@P" : "B:W@P"));
    }
    try {
      size_t used = 0;
      if (colon != std::string::npos) {
        cut.batches_before = std::stoi(item.substr(0, colon), &used);
        if (used != colon) return bad("'" + item + "': bad batch count");
      }
      const size_t w_begin = colon == std::string::npos ? 0 : colon + 1;
      cut.world_size = std::stoi(item.substr(w_begin, at - w_begin), &used);
      if (used != at - w_begin) return bad("'" + item + "': bad member count");
      cut.partition = std::stoull(item.substr(at + 1), &used);
      if (used != item.size() - at - 1) return bad("'" + item + "': bad partition id");
    } catch (const std::exception&) {
      return bad("'" + item + "' holds no number where one belongs");
    }
    if (cut.world_size < 1 || cut.batches_before < 0) return bad("'" + item + "': out of range");
    cuts.push_back(cut);
    pos = end + 1;
  }
  if (rank < 0 || rank >= cuts.back().world_size) {
    return bad("rank " + std::to_string(rank) + " is outside its last partition of " +
               std::to_string(cuts.back().world_size));
  }
  // Replay: the permutation, then each cut at its depth.
  epoch_ = epoch;
  pool_ = EpochPermutation(dataset_size_, seed_, epoch);
  batches_before_ = 0;
  for (size_t i = 0; i < cuts.size(); ++i) {
    if (i > 0) {
      cursor_ = static_cast<size_t>(cuts[i].batches_before) * static_cast<size_t>(batch_size_);
      if (cuts[i].batches_before > BatchesIn(shard_size_)) return bad("a cut lies past its partition's end");
      PoolWhatIsLeft();
      batches_before_ += cuts[i].batches_before;
    }
    world_size_ = cuts[i].world_size;
    partition_ = cuts[i].partition;
    rank_ = i + 1 == cuts.size() ? rank : 0;
    TakeShard();
  }
  if (batches_taken < 0 || batches_taken > BatchesIn(shard_size_)) {
    return bad(std::to_string(batches_taken) + " batches taken, its last partition has " +
               std::to_string(BatchesIn(shard_size_)));
  }
  cuts_ = std::move(cuts);
  cursor_ = std::min(static_cast<size_t>(batches_taken) * static_cast<size_t>(batch_size_), shard_.size());
  return Status::Ok();
}

int BatchSampler::BatchesIn(int indices) const {
  if (batch_size_ < 1) return 0;
  return drop_last_ ? indices / batch_size_ : (indices + batch_size_ - 1) / batch_size_;
}

int BatchSampler::BatchesPerEpoch() const { return batches_before_ + BatchesIn(shard_size_); }

int BatchSampler::BatchesTakenInPartition() const {
  return static_cast<int>((cursor_ + static_cast<size_t>(batch_size_) - 1) / static_cast<size_t>(batch_size_));
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
