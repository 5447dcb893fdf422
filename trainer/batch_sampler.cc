// Seeded per-epoch shuffling, equal-shard splitting by rank, and batching. See
// batch_sampler.h for the sharding rule. Pure computation: no I/O, no network.
#include "trainer/batch_sampler.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <numeric>
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

Status MakeBatch(const Dataset& dataset, std::span<const int32_t> indices, Batch* out, BatchContents contents) {
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
  out->rows.assign(indices.begin(), indices.end());
  out->source = &dataset;
  out->labels.resize(indices.size());
  for (size_t k = 0; k < indices.size(); ++k) out->labels[k] = dataset.labels[static_cast<size_t>(indices[k])];
  if (contents == BatchContents::kRows) {
    out->images.clear();
    return Status::Ok();
  }
  out->images.resize(indices.size() * static_cast<size_t>(image_size));
  for (size_t k = 0; k < indices.size(); ++k) {
    std::memcpy(out->images.data() + k * image_size,
                dataset.images.data() + static_cast<size_t>(indices[k]) * image_size,
                static_cast<size_t>(image_size) * sizeof(float));
  }
  return Status::Ok();
}

Result<BatchSampler> BatchSampler::Create(int dataset_size, int batch_size, uint64_t seed, int rank,
                                          int world_size, bool drop_last, uint64_t partition) {
  if (batch_size < 1) {
    return Err(InvalidArgument("BatchSampler: batch_size must be >= 1, got " + std::to_string(batch_size)));
  }
  if (world_size < 1) {
    return Err(InvalidArgument("BatchSampler: world_size must be >= 1, got " + std::to_string(world_size)));
  }
  return Create(dataset_size, std::vector<int>(static_cast<size_t>(world_size), batch_size), seed, rank, drop_last,
                partition);
}

namespace {

Status CheckShares(const std::vector<int>& shares, int rank, bool drop_last) {
  if (shares.empty()) return InvalidArgument("BatchSampler: world_size must be >= 1, got 0");
  for (size_t r = 0; r < shares.size(); ++r) {
    if (shares[r] < 1) {
      return InvalidArgument("BatchSampler: batch_size must be >= 1, got " + std::to_string(shares[r]) +
                             (shares.size() > 1 ? " for rank " + std::to_string(r) : std::string()));
    }
  }
  if (rank < 0 || rank >= static_cast<int>(shares.size())) {
    return InvalidArgument("BatchSampler: rank " + std::to_string(rank) + " is outside 0.." +
                           std::to_string(shares.size() - 1));
  }
  if (!drop_last && std::ranges::count(shares, shares[0]) != static_cast<ptrdiff_t>(shares.size())) {
    return InvalidArgument("BatchSampler: unequal batches need drop_last (ranks would run different steps)");
  }
  return Status::Ok();
}

}  // namespace

Result<BatchSampler> BatchSampler::Create(int dataset_size, std::vector<int> shares, uint64_t seed, int rank,
                                          bool drop_last, uint64_t partition) {
  if (dataset_size < 0) {
    return Err(InvalidArgument("BatchSampler: dataset_size must be >= 0, got " +
                               std::to_string(dataset_size)));
  }
  CHORUS_RETURN_IF_ERROR(CheckShares(shares, rank, drop_last));
  BatchSampler sampler(dataset_size, shares[static_cast<size_t>(rank)], seed, 0, 1, drop_last, partition);
  sampler.rank_ = rank;
  sampler.shares_ = std::move(shares);
  sampler.StartEpoch(0);
  return sampler;
}

BatchSampler::BatchSampler(int dataset_size, int batch_size, uint64_t seed, int rank, int world_size,
                           bool drop_last, uint64_t partition)
    : dataset_size_(dataset_size),
      batch_size_(batch_size),
      seed_(seed),
      rank_(rank),
      shares_(static_cast<size_t>(std::max(world_size, 1)), batch_size),
      drop_last_(drop_last),
      partition_(partition) {
  assert(dataset_size >= 0 && batch_size >= 1 && world_size >= 1 && rank >= 0 && rank < world_size);
  StartEpoch(0);
}

size_t BatchSampler::ShardBegin(int r) const {
  const int64_t total = std::accumulate(shares_.begin(), shares_.end(), int64_t{0});
  // Cumulative floors: with equal shares, r * (pool / W).
  const int64_t pool = static_cast<int64_t>(pool_.size());
  int64_t begin = 0;
  for (size_t q = 0; q < static_cast<size_t>(r) && q < shares_.size(); ++q) begin += pool * shares_[q] / total;
  return static_cast<size_t>(begin);
}

void BatchSampler::TakeShard() {
  const size_t begin = ShardBegin(rank_);
  const size_t end = ShardBegin(rank_ + 1);
  shard_size_ = static_cast<int>(end - begin);
  shard_.assign(pool_.begin() + static_cast<ptrdiff_t>(begin), pool_.begin() + static_cast<ptrdiff_t>(end));
  cursor_ = 0;
  last_take_ = 0;
}

void BatchSampler::PoolWhatIsLeft(int batches) {
  std::vector<int32_t> left;
  left.reserve(pool_.size());
  for (int r = 0; r < static_cast<int>(shares_.size()); ++r) {
    const size_t begin = ShardBegin(r);
    const size_t end = ShardBegin(r + 1);
    const size_t taken =
        std::min(end - begin, static_cast<size_t>(batches) * static_cast<size_t>(shares_[static_cast<size_t>(r)]));
    left.insert(left.end(), pool_.begin() + static_cast<ptrdiff_t>(begin + taken),
                pool_.begin() + static_cast<ptrdiff_t>(end));
  }
  pool_ = std::move(left);
}

void BatchSampler::StartEpoch(int epoch) {
  epoch_ = epoch;
  pool_ = EpochPermutation(dataset_size_, seed_, epoch);
  batches_before_ = 0;
  cuts_.assign(1, Cut{0, shares_, partition_});
  TakeShard();
}

Status BatchSampler::Repartition(int rank, int world_size, uint64_t partition) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return InvalidArgument("BatchSampler: rank " + std::to_string(rank) + " is outside a world of " +
                           std::to_string(world_size));
  }
  return Repartition(rank, std::vector<int>(static_cast<size_t>(world_size), batch_size_), partition);
}

Status BatchSampler::Repartition(int rank, std::vector<int> shares, uint64_t partition) {
  CHORUS_RETURN_IF_ERROR(CheckShares(shares, rank, drop_last_));
  const int taken = BatchesTakenInPartition();
  PoolWhatIsLeft(taken);
  batches_before_ += taken;
  rank_ = rank;
  shares_ = std::move(shares);
  partition_ = partition;
  cuts_.push_back(Cut{taken, shares_, partition});
  TakeShard();
  return Status::Ok();
}

std::string BatchSampler::SharesText(const std::vector<int>& shares) const {
  const bool equal = std::ranges::count(shares, shares[0]) == static_cast<ptrdiff_t>(shares.size());
  if (equal) return std::to_string(shares.size()) + "x" + std::to_string(shares[0]);
  std::string out;
  for (size_t r = 0; r < shares.size(); ++r) out += (r > 0 ? "," : "") + std::to_string(shares[r]);
  return out;
}

std::string BatchSampler::History() const {
  std::string out;
  for (size_t i = 0; i < cuts_.size(); ++i) {
    if (i > 0) out += ";" + std::to_string(cuts_[i].batches_before) + ":";
    out += SharesText(cuts_[i].shares) + "@" + std::to_string(cuts_[i].partition);
  }
  return out;
}

namespace {

// Shares as History() writes them ("W", "WxN" or "b0,b1,..."); `batch` is a
// share's size in the "W" form. Empty when the text is not one.
std::vector<int> ParseShares(const std::string& text, int batch) {
  std::vector<int> out;
  auto number = [](const std::string& t, int* v) {
    if (t.empty() || t.size() > 9 || !std::ranges::all_of(t, [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
    *v = std::stoi(t);
    return *v >= 1;
  };
  int count = 0, size = batch;
  const size_t x = text.find('x');
  if (text.find(',') == std::string::npos) {
    if (!number(text.substr(0, x), &count) || (x != std::string::npos && !number(text.substr(x + 1), &size))) {
      return {};
    }
    return std::vector<int>(static_cast<size_t>(count), size);
  }
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t end = std::min(text.find(',', pos), text.size());
    int v = 0;
    if (!number(text.substr(pos, end - pos), &v)) return {};
    out.push_back(v);
    pos = end + 1;
  }
  return out;
}

}  // namespace

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
      return bad("'" + item + "' is not " + (cuts.empty() ? "S@P" : "B:S@P"));
    }
    try {
      size_t used = 0;
      if (colon != std::string::npos) {
        cut.batches_before = std::stoi(item.substr(0, colon), &used);
        if (used != colon) return bad("'" + item + "': bad batch count");
      }
      const size_t w_begin = colon == std::string::npos ? 0 : colon + 1;
      cut.shares = ParseShares(item.substr(w_begin, at - w_begin), batch_size_);
      if (cut.shares.empty()) return bad("'" + item + "': bad shares (W, WxN or b0,b1,...)");
      cut.partition = std::stoull(item.substr(at + 1), &used);
      if (used != item.size() - at - 1) return bad("'" + item + "': bad partition id");
    } catch (const std::exception&) {
      return bad("'" + item + "' holds no number where one belongs");
    }
    if (cut.batches_before < 0) return bad("'" + item + "': out of range");
    if (!CheckShares(cut.shares, 0, drop_last_).ok()) return bad("'" + item + "': unequal shares need drop_last");
    cuts.push_back(cut);
    pos = end + 1;
  }
  if (rank < 0 || rank >= static_cast<int>(cuts.back().shares.size())) {
    return bad("rank " + std::to_string(rank) + " is outside its last partition of " +
               std::to_string(cuts.back().shares.size()));
  }
  // Replay: the permutation, then each cut at its depth.
  epoch_ = epoch;
  pool_ = EpochPermutation(dataset_size_, seed_, epoch);
  batches_before_ = 0;
  for (size_t i = 0; i < cuts.size(); ++i) {
    if (i > 0) {
      if (cuts[i].batches_before > BatchesIn(shard_size_)) return bad("a cut lies past its partition's end");
      PoolWhatIsLeft(cuts[i].batches_before);
      batches_before_ += cuts[i].batches_before;
    }
    shares_ = cuts[i].shares;
    partition_ = cuts[i].partition;
    rank_ = i + 1 == cuts.size() ? rank : 0;
    TakeShard();
  }
  if (batches_taken < 0 || batches_taken > BatchesIn(shard_size_)) {
    return bad(std::to_string(batches_taken) + " batches taken, its last partition has " +
               std::to_string(BatchesIn(shard_size_)));
  }
  cuts_ = std::move(cuts);
  cursor_ = std::min(static_cast<size_t>(batches_taken) * static_cast<size_t>(batch_size()), shard_.size());
  last_take_ = 0;
  return Status::Ok();
}

int BatchSampler::BatchesIn(int indices) const {
  const int b = batch_size();
  return drop_last_ ? indices / b : (indices + b - 1) / b;
}

int BatchSampler::BatchesPerEpoch() const { return batches_before_ + BatchesIn(shard_size_); }

namespace {
int64_t Sum(const std::vector<int>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }
}  // namespace

int64_t BatchSampler::GlobalBatch() const { return Sum(shares_); }

int64_t BatchSampler::SamplesTaken() const {
  int64_t samples = 0;
  for (size_t i = 1; i < cuts_.size(); ++i) samples += cuts_[i].batches_before * Sum(cuts_[i - 1].shares);
  return samples + BatchesTakenInPartition() * Sum(shares_);
}

int64_t BatchSampler::SamplesPerEpoch() const {
  return SamplesTaken() + (BatchesIn(shard_size_) - BatchesTakenInPartition()) * Sum(shares_);
}

int BatchSampler::BatchesTakenInPartition() const {
  const size_t b = static_cast<size_t>(batch_size());
  return static_cast<int>((cursor_ + b - 1) / b);
}

bool BatchSampler::Next(const Dataset& dataset, Batch* out, BatchContents contents) {
  if (dataset.count != dataset_size_) {
    CHORUS_LOG_ERROR(Subsys::kData, "BatchSampler built for ", dataset_size_, " samples was given ",
                     dataset.description, " with ", dataset.count, " samples; ending the epoch");
    return false;
  }
  const size_t left = shard_.size() - cursor_;
  const size_t b = static_cast<size_t>(batch_size());
  if (left == 0 || (drop_last_ && left < b)) return false;
  const size_t take = std::min(left, b);
  const Status status = MakeBatch(dataset, std::span<const int32_t>(shard_).subspan(cursor_, take), out, contents);
  if (!status.ok()) {
    CHORUS_LOG_ERROR(Subsys::kData, "BatchSampler: ", status.ToString());
    return false;
  }
  cursor_ += take;
  last_take_ = take;
  return true;
}

std::span<const int32_t> BatchSampler::LastBatch() const {
  return std::span<const int32_t>(shard_).subspan(cursor_ - last_take_, last_take_);
}

bool BatchSampler::PutBack() {
  if (last_take_ == 0) return false;
  cursor_ -= last_take_;
  last_take_ = 0;
  return true;
}

}  // namespace chorus::trainer
