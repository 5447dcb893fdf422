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
// that order. Errors name the first index outside 0..dataset.count-1.
[[nodiscard]] Status MakeBatch(const Dataset& dataset, std::span<const int32_t> indices, Batch* out);

// The permutation of 0..n-1 for (seed, epoch), identical on every platform.
std::vector<int32_t> EpochPermutation(int n, uint64_t seed, int epoch);

// Sharding rule (equal shards, remainder dropped): each epoch the permutation P
// of all dataset_size indices is cut into world_size contiguous shards of
// ShardSize() = dataset_size / world_size indices; rank r takes
// P[r * ShardSize(), (r + 1) * ShardSize()). The last dataset_size % world_size
// entries of P are not used that epoch; since P changes every epoch, a different
// few samples are left out each time. Equal shards mean every rank runs the same
// number of steps per epoch, which synchronous all-reduce needs.
//
// Within a shard, batches are consecutive runs of batch_size indices; with
// drop_last the final short batch is skipped, otherwise it is returned short.
//
// When the membership changes during an epoch, Repartition pools what no shard
// has taken yet (every shard is taken to the same depth: the members train in
// step) in rank order and cuts the pool into equal shards over the new
// membership, so a departed member's rest of the epoch is still trained and a
// joiner gets its share. An epoch is then a sequence of partitions; History()
// names them, so that a node that joins mid-epoch (or resumes) rebuilds the
// same pool from the permutation alone.
class BatchSampler {
 public:
  // Checks the arguments: dataset_size >= 0, batch_size >= 1, world_size >= 1,
  // 0 <= rank < world_size. Errors say which argument is wrong. `partition`
  // names the membership the shards are cut for (see Repartition).
  [[nodiscard]] static Result<BatchSampler> Create(int dataset_size, int batch_size, uint64_t seed,
                                                   int rank, int world_size, bool drop_last = true,
                                                   uint64_t partition = 0);

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

  // This epoch's partitions as text: "W@P" for the one it started with (W
  // members, partition id P), then ";B:W@P" for each Repartition after B batches
  // of the partition before it.
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
  bool Next(const Dataset& dataset, Batch* out);

  // Batches of this epoch: taken in earlier partitions plus the current shard's.
  int BatchesPerEpoch() const;
  // Batches of this epoch taken so far (all partitions), and in the current one.
  int BatchesTaken() const { return batches_before_ + BatchesTakenInPartition(); }
  int BatchesTakenInPartition() const;
  int ShardSize() const { return shard_size_; }
  int epoch() const { return epoch_; }
  int world_size() const { return world_size_; }
  uint64_t partition() const { return partition_; }
  // This rank's indices for the current partition, in batch order: [ShardSize()].
  std::span<const int32_t> ShardIndices() const { return shard_; }

 private:
  struct Cut {
    int batches_before = 0;  // batches of the previous partition taken (0 for the first)
    int world_size = 1;
    uint64_t partition = 0;
  };
  // Cuts pool_ into world_size_ shards and takes shard rank_.
  void TakeShard();
  // pool_ without what each of the current shards has taken.
  void PoolWhatIsLeft();
  int BatchesIn(int indices) const;

  int dataset_size_;
  int batch_size_;
  uint64_t seed_;
  int rank_;
  int world_size_;
  bool drop_last_;
  int shard_size_ = 0;
  int epoch_ = 0;
  uint64_t partition_ = 0;
  int batches_before_ = 0;       // batches taken in this epoch's earlier partitions
  std::vector<Cut> cuts_;        // this epoch's partitions, the first one's batches_before 0
  std::vector<int32_t> pool_;    // the current partition's indices, all shards
  size_t cursor_ = 0;            // next position in shard_
  std::vector<int32_t> shard_;   // [shard_size_]
};

}  // namespace chorus::trainer
