// BatchSampler: which samples a node trains on, epoch by epoch. Every node
// shuffles all indices with the same seeded permutation, takes its own shard of
// it, and cuts the shard into mini-batches. Also MakeBatch, which copies samples
// out of a Dataset into a Batch.
//
// Shuffling is reproducible across machines and standard libraries: the
// permutation comes from std::mt19937_64 (whose output the C++ standard fixes)
// through our own Fisher-Yates with rejection sampling, never std::shuffle or
// std::uniform_int_distribution (implementation-defined). This file must not
// read files or talk to other nodes: rank and world size are just numbers.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/batch.h"
#include "trainer/dataset.h"

namespace chorus::trainer {

// Copies the samples `indices` of `dataset` into `out` (reusing its storage), in
// that order: their labels and indices, and with kImages their images.
// Errors name the first index outside 0..dataset.count-1.
[[nodiscard]] Status MakeBatch(const Dataset& dataset, std::span<const int32_t> indices, Batch* out,
                               BatchContents contents = BatchContents::kImages);

// The permutation of 0..n-1 for (seed, epoch), identical on every platform.
std::vector<int32_t> EpochPermutation(int n, uint64_t seed, int epoch);

// Sharding rule. Each epoch the permutation P of all dataset_size indices is
// cut into contiguous shards, one per rank in rank order, in proportion to the
// ranks' shares (their batch sizes b_r, summing to B): rank r's shard holds
// floor(dataset_size * b_r / B) indices. With equal shares that is
// dataset_size / world_size each, the remainder dropped; since P changes every
// epoch, a different few samples are left out each time.
//
// Within a shard, batches are consecutive runs of b_r indices; with drop_last
// the final short batch is skipped, otherwise it is returned short (equal
// shares only). Every rank then runs the same number of steps per epoch,
// floor(dataset_size / B) (floor(floor(n b / B) / b) = floor(n / B)), which
// synchronous exchanges need, and each step trains B samples in all.
//
// When the membership (or the split of the global batch) changes during an
// epoch, Repartition pools what no shard has taken yet (every shard is taken
// to the same number of batches: the members train in step) in rank order and
// cuts the pool by the new shares, so a departed member's rest of the epoch is
// still trained and a joiner gets its share. An epoch is then a sequence of
// partitions; History() names them, so that a node that joins mid-epoch (or
// resumes) rebuilds the same pool from the permutation alone.
class BatchSampler {
 public:
  // Checks the arguments: dataset_size >= 0, batch_size >= 1, world_size >= 1,
  // 0 <= rank < world_size. Errors say which argument is wrong. `partition`
  // names the membership the shards are cut for (see Repartition).
  [[nodiscard]] static Result<BatchSampler> Create(int dataset_size, int batch_size, uint64_t seed,
                                                   int rank, int world_size, bool drop_last = true,
                                                   uint64_t partition = 0);
  // Shares of any sizes (`shares[r]`: rank r's batch, each >= 1; this node is
  // `rank`). drop_last must hold unless the shares are equal.
  [[nodiscard]] static Result<BatchSampler> Create(int dataset_size, std::vector<int> shares, uint64_t seed,
                                                   int rank, bool drop_last = true, uint64_t partition = 0);

  // Arguments must satisfy Create's checks (asserted in debug builds); prefer
  // Create where they come from user input. Starts at epoch 0.
  BatchSampler(int dataset_size, int batch_size, uint64_t seed, int rank, int world_size,
               bool drop_last = true, uint64_t partition = 0);

  // Shuffles for `epoch` (any integer; same epoch -> same order) and rewinds to
  // the first batch of this rank's shard, partitioned over the current
  // membership (the last Repartition's, else the constructor's).
  void StartEpoch(int epoch);

  // What is left of this epoch, re-cut over `world_size` members (this one is
  // `rank`): see the sharding rule above. `partition` names the membership
  // (the caller's membership epoch) and is kept in History(). Every member
  // calls it after the same number of batches of the current partition. Errors
  // (rank outside the new world) change nothing.
  [[nodiscard]] Status Repartition(int rank, int world_size, uint64_t partition);
  // The same with shares of any sizes (see Create): a new membership whose
  // batches differ, or a new split of the same global batch.
  [[nodiscard]] Status Repartition(int rank, std::vector<int> shares, uint64_t partition);

  // This epoch's partitions as text: "S@P" for the one it started with
  // (partition id P; shares S: "WxN" for W shares of N, else "b0,b1,...";
  // Restore also reads "W" as W shares of the batch this sampler was created
  // with, as histories before unequal batches said), then
  // ";B:S@P" for each Repartition after B batches of the partition before it.
  std::string History() const;
  // Rebuilds epoch `epoch` as `history` describes it (another node's, or a
  // checkpoint's History()), positioned `batches_taken` batches into its last
  // partition, as rank `rank` of that partition (any valid rank: a node that
  // rebuilds another's position re-partitions for itself next). DataLoss
  // naming the text when it is malformed or does not fit the data set.
  [[nodiscard]] Status Restore(int epoch, const std::string& history, int rank, int batches_taken);

  // Fills `out` with the next batch of this epoch; false when the epoch is done
  // (and `out` is left unchanged). `dataset.count` must equal dataset_size:
  // otherwise it logs an error and returns false.
  bool Next(const Dataset& dataset, Batch* out, BatchContents contents = BatchContents::kImages);
  // The indices of the batch Next handed out last (empty after StartEpoch,
  // Repartition, Restore or PutBack).
  std::span<const int32_t> LastBatch() const;
  // Puts the batch Next handed out last back: the next Next hands it out
  // again (a step that no member applied). False, changing nothing, when
  // LastBatch() is empty.
  bool PutBack();

  // Batches of this epoch: taken in earlier partitions plus the current shard's.
  int BatchesPerEpoch() const;
  // Samples of this epoch over all ranks: taken so far (every rank's batches
  // of every partition), and in all (taken plus what the current partition
  // holds). Equal on every rank.
  int64_t SamplesTaken() const;
  int64_t SamplesPerEpoch() const;
  // Batches of this epoch taken so far (all partitions), and in the current one.
  int BatchesTaken() const { return batches_before_ + BatchesTakenInPartition(); }
  int BatchesTakenInPartition() const;
  int ShardSize() const { return shard_size_; }
  int epoch() const { return epoch_; }
  int world_size() const { return static_cast<int>(shares_.size()); }
  // This rank's batch in the current partition, and every rank's.
  int batch_size() const { return shares_[static_cast<size_t>(rank_)]; }
  std::span<const int> shares() const { return shares_; }
  // The sum of the shares: the samples one step trains over all ranks.
  int64_t GlobalBatch() const;
  // True once this epoch was re-partitioned (History() holds a ';').
  bool Repartitioned() const { return cuts_.size() > 1; }
  uint64_t partition() const { return partition_; }
  // This rank's indices for the current partition, in batch order: [ShardSize()].
  std::span<const int32_t> ShardIndices() const { return shard_; }

 private:
  struct Cut {
    int batches_before = 0;  // batches of the previous partition taken (0 for the first)
    std::vector<int> shares;
    uint64_t partition = 0;
  };
  // Cuts pool_ into shards by shares_ and takes shard rank_.
  void TakeShard();
  // Where rank r's shard of pool_ begins (r = world size: the end of the last).
  size_t ShardBegin(int r) const;
  // pool_ without what each of the current shards has taken: `batches` each.
  void PoolWhatIsLeft(int batches);
  int BatchesIn(int indices) const;
  std::string SharesText(const std::vector<int>& shares) const;

  int dataset_size_;
  int batch_size_;               // the batch of a share in "W@P" (the constructor's)
  uint64_t seed_;
  int rank_;
  std::vector<int> shares_;      // the current partition's batch per rank
  bool drop_last_;
  int shard_size_ = 0;
  int epoch_ = 0;
  uint64_t partition_ = 0;
  int batches_before_ = 0;       // batches taken in this epoch's earlier partitions
  std::vector<Cut> cuts_;        // this epoch's partitions, the first one's batches_before 0
  std::vector<int32_t> pool_;    // the current partition's indices, all shards
  size_t cursor_ = 0;            // next position in shard_
  size_t last_take_ = 0;         // the size of the batch Next handed out last (0: none to put back)
  std::vector<int32_t> shard_;   // [shard_size_]
};

}  // namespace chorus::trainer
