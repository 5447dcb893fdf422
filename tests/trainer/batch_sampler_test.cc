// Tests for BatchSampler, EpochPermutation and MakeBatch: determinism across
// instances, different orders per epoch and seed, disjoint equal shards that
// cover the data set for world sizes 1, 2, 3, 5, 8 with sizes not divisible by
// them, batch contents, drop_last, and argument checks.
#include "trainer/batch_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <vector>

namespace chorus::trainer {
namespace {

// A data set of `n` 1x2x2 images whose pixels encode the sample index, so a
// batch tells which samples it holds.
Dataset IndexedDataset(int n) {
  Dataset ds;
  ds.count = n;
  ds.channels = 1;
  ds.height = 2;
  ds.width = 2;
  for (int i = 0; i < n; ++i) {
    for (int p = 0; p < 4; ++p) ds.images.push_back(static_cast<float>(i) + 0.25f * p);
    ds.labels.push_back(i % 10);
  }
  ds.description = "indexed test set";
  return ds;
}

// Runs one epoch and returns the sample indices in batch order, checking that
// every batch is consistent with the data set.
std::vector<std::vector<int32_t>> EpochBatches(BatchSampler& sampler, const Dataset& ds, int epoch) {
  sampler.StartEpoch(epoch);
  std::vector<std::vector<int32_t>> batches;
  Batch batch;
  while (sampler.Next(ds, &batch)) {
    std::vector<int32_t> ids;
    EXPECT_EQ(batch.channels, 1);
    EXPECT_EQ(batch.height, 2);
    EXPECT_EQ(batch.width, 2);
    EXPECT_EQ(batch.images.size(), static_cast<size_t>(batch.size) * 4);
    EXPECT_EQ(batch.labels.size(), static_cast<size_t>(batch.size));
    for (int k = 0; k < batch.size; ++k) {
      const int32_t id = static_cast<int32_t>(batch.images[k * 4]);
      for (int p = 0; p < 4; ++p) EXPECT_EQ(batch.images[k * 4 + p], ds.images[id * 4 + p]);
      EXPECT_EQ(batch.labels[k], ds.labels[id]);
      ids.push_back(id);
    }
    batches.push_back(ids);
  }
  return batches;
}

TEST(EpochPermutationTest, IsAPermutation) {
  for (int n : {0, 1, 2, 7, 1000}) {
    std::vector<int32_t> p = EpochPermutation(n, 42, 3);
    ASSERT_EQ(p.size(), static_cast<size_t>(n));
    std::sort(p.begin(), p.end());
    for (int i = 0; i < n; ++i) EXPECT_EQ(p[i], i);
  }
}

TEST(EpochPermutationTest, AllOrdersOfThreeAreEquallyLikely) {
  // 6000 epochs of a 3-element shuffle: each of the 6 orders is expected 1000
  // times with sd sqrt(6000 * 1/6 * 5/6) ~ 29. +-150 is over 5 sd, and catches
  // the classic bugs (Sattolo's variant never yields the identity; the naive
  // swap-with-any shuffle gives 4/27 vs 5/27, i.e. ~889 vs ~1111).
  std::map<std::vector<int32_t>, int> counts;
  for (int epoch = 0; epoch < 6000; ++epoch) ++counts[EpochPermutation(3, 99, epoch)];
  ASSERT_EQ(counts.size(), 6u);
  for (const auto& [perm, count] : counts) {
    EXPECT_NEAR(count, 1000, 150) << perm[0] << perm[1] << perm[2];
  }
}

TEST(EpochPermutationTest, DependsOnSeedAndEpoch) {
  const std::vector<int32_t> a = EpochPermutation(100, 1, 0);
  EXPECT_EQ(a, EpochPermutation(100, 1, 0));
  EXPECT_NE(a, EpochPermutation(100, 1, 1));
  EXPECT_NE(a, EpochPermutation(100, 2, 0));
  EXPECT_NE(a, EpochPermutation(100, 1, -1));
}

TEST(BatchSamplerTest, SameSeedGivesSameBatches) {
  const Dataset ds = IndexedDataset(57);
  BatchSampler a(57, 8, 1234, 1, 3);
  BatchSampler b(57, 8, 1234, 1, 3);
  for (int epoch : {0, 1, 5}) {
    const auto batches_a = EpochBatches(a, ds, epoch);
    EXPECT_EQ(batches_a, EpochBatches(b, ds, epoch)) << "epoch " << epoch;
    EXPECT_EQ(batches_a.size(), static_cast<size_t>(a.BatchesPerEpoch()));
  }
  // Restarting an epoch replays it exactly.
  EXPECT_EQ(EpochBatches(a, ds, 1), EpochBatches(b, ds, 1));
}

TEST(BatchSamplerTest, DifferentEpochsAndSeedsGiveDifferentOrders) {
  const Dataset ds = IndexedDataset(64);
  BatchSampler a(64, 16, 7, 0, 1);
  BatchSampler other_seed(64, 16, 8, 0, 1);
  const auto epoch0 = EpochBatches(a, ds, 0);
  const auto epoch1 = EpochBatches(a, ds, 1);
  EXPECT_NE(epoch0, epoch1);
  EXPECT_NE(epoch0, EpochBatches(other_seed, ds, 0));
  // The order is actually shuffled, not the identity.
  std::vector<int32_t> flat;
  for (const auto& b : epoch0) flat.insert(flat.end(), b.begin(), b.end());
  std::vector<int32_t> identity(64);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(flat, identity);
}

TEST(BatchSamplerTest, ShardsAreDisjointEqualAndCoverTheDataset) {
  const int n = 103;  // not divisible by 2, 3, 5 or 8
  const Dataset ds = IndexedDataset(n);
  for (int world : {1, 2, 3, 5, 8}) {
    for (int epoch : {0, 1}) {
      std::vector<int> seen(n, 0);
      int batches_per_epoch = -1;
      for (int rank = 0; rank < world; ++rank) {
        BatchSampler sampler(n, 4, 2024, rank, world);
        EXPECT_EQ(sampler.ShardSize(), n / world);
        if (batches_per_epoch < 0) batches_per_epoch = sampler.BatchesPerEpoch();
        EXPECT_EQ(sampler.BatchesPerEpoch(), batches_per_epoch) << "every rank runs the same steps";
        EXPECT_EQ(sampler.BatchesPerEpoch(), (n / world) / 4);
        const auto batches = EpochBatches(sampler, ds, epoch);
        EXPECT_EQ(batches.size(), static_cast<size_t>(batches_per_epoch));
        // Batches are consecutive runs of the shard.
        std::vector<int32_t> flat;
        for (const auto& b : batches) flat.insert(flat.end(), b.begin(), b.end());
        const std::span<const int32_t> shard = sampler.ShardIndices();
        ASSERT_EQ(shard.size(), static_cast<size_t>(n / world));
        EXPECT_TRUE(std::equal(flat.begin(), flat.end(), shard.begin()));
        for (int32_t i : shard) ++seen[i];
      }
      const int used = static_cast<int>(std::count(seen.begin(), seen.end(), 1));
      const int unused = static_cast<int>(std::count(seen.begin(), seen.end(), 0));
      EXPECT_EQ(used, world * (n / world)) << "world " << world << " epoch " << epoch;
      EXPECT_EQ(unused, n % world) << "world " << world << " epoch " << epoch;
      EXPECT_EQ(used + unused, n) << "an index was in two shards; world " << world;
    }
  }
}

TEST(BatchSamplerTest, DroppedRemainderChangesSoEpochsCoverEverything) {
  // 103 samples over 8 ranks leave 7 out per epoch; the chance that a given
  // sample is left out of all 12 epochs is (7/103)^12 ~ 1e-14, and the seed is
  // fixed, so this is deterministic.
  const int n = 103, world = 8;
  std::set<int32_t> seen;
  for (int epoch = 0; epoch < 12; ++epoch) {
    for (int rank = 0; rank < world; ++rank) {
      BatchSampler sampler(n, 4, 5, rank, world);
      sampler.StartEpoch(epoch);
      for (int32_t i : sampler.ShardIndices()) seen.insert(i);
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(n));
}

TEST(BatchSamplerTest, DropLastControlsTheShortBatch) {
  const Dataset ds = IndexedDataset(10);
  BatchSampler keep(10, 4, 1, 0, 1, /*drop_last=*/false);
  BatchSampler drop(10, 4, 1, 0, 1, /*drop_last=*/true);
  EXPECT_EQ(keep.BatchesPerEpoch(), 3);
  EXPECT_EQ(drop.BatchesPerEpoch(), 2);
  const auto kept = EpochBatches(keep, ds, 0);
  const auto dropped = EpochBatches(drop, ds, 0);
  ASSERT_EQ(kept.size(), 3u);
  ASSERT_EQ(dropped.size(), 2u);
  EXPECT_EQ(kept[0].size(), 4u);
  EXPECT_EQ(kept[1].size(), 4u);
  EXPECT_EQ(kept[2].size(), 2u);
  EXPECT_EQ(kept[0], dropped[0]);
  EXPECT_EQ(kept[1], dropped[1]);
}

TEST(BatchSamplerTest, NextEndsTheEpochAndLeavesTheBatchAlone) {
  const Dataset ds = IndexedDataset(8);
  BatchSampler sampler(8, 8, 3, 0, 1);
  Batch batch;
  ASSERT_TRUE(sampler.Next(ds, &batch));
  const Batch copy = batch;
  EXPECT_FALSE(sampler.Next(ds, &batch));
  EXPECT_EQ(batch.images, copy.images);
  EXPECT_EQ(batch.labels, copy.labels);
  sampler.StartEpoch(1);
  EXPECT_TRUE(sampler.Next(ds, &batch));
}

TEST(BatchSamplerTest, MoreRanksThanSamplesGiveEmptyShards) {
  const Dataset ds = IndexedDataset(3);
  BatchSampler sampler(3, 1, 3, 4, 5);
  EXPECT_EQ(sampler.ShardSize(), 0);
  EXPECT_EQ(sampler.BatchesPerEpoch(), 0);
  Batch batch;
  EXPECT_FALSE(sampler.Next(ds, &batch));
}

TEST(BatchSamplerTest, WrongDatasetSizeEndsTheEpoch) {
  const Dataset ds = IndexedDataset(9);
  BatchSampler sampler(10, 2, 3, 0, 1);
  Batch batch;
  EXPECT_FALSE(sampler.Next(ds, &batch));
}

TEST(BatchSamplerTest, CreateChecksArguments) {
  EXPECT_TRUE(BatchSampler::Create(10, 2, 0, 1, 2));
  struct Bad {
    int size, batch, rank, world;
    const char* word;
  };
  for (const Bad& bad : {Bad{-1, 2, 0, 1, "dataset_size"}, Bad{10, 0, 0, 1, "batch_size"},
                         Bad{10, 2, 0, 0, "world_size"}, Bad{10, 2, 2, 2, "rank"},
                         Bad{10, 2, -1, 2, "rank"}}) {
    Result<BatchSampler> s = BatchSampler::Create(bad.size, bad.batch, 0, bad.rank, bad.world);
    ASSERT_FALSE(s) << bad.word;
    EXPECT_EQ(s.error().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.error().message().find(bad.word), std::string::npos) << s.error().message();
  }
}

TEST(MakeBatchTest, CopiesTheNamedSamplesInOrder) {
  const Dataset ds = IndexedDataset(6);
  Batch batch;
  const std::vector<int32_t> ids = {5, 0, 5, 2};
  ASSERT_TRUE(MakeBatch(ds, ids, &batch).ok());
  EXPECT_EQ(batch.size, 4);
  ASSERT_EQ(batch.images.size(), 16u);
  for (size_t k = 0; k < ids.size(); ++k) {
    EXPECT_EQ(batch.images[k * 4], static_cast<float>(ids[k]));
    EXPECT_EQ(batch.images[k * 4 + 3], static_cast<float>(ids[k]) + 0.75f);
    EXPECT_EQ(batch.labels[k], ids[k] % 10);
  }
  // Reuse with a smaller batch shrinks it.
  ASSERT_TRUE(MakeBatch(ds, std::vector<int32_t>{1}, &batch).ok());
  EXPECT_EQ(batch.size, 1);
  EXPECT_EQ(batch.images.size(), 4u);
}

TEST(MakeBatchTest, RejectsIndicesOutsideTheDataset) {
  const Dataset ds = IndexedDataset(6);
  Batch batch;
  for (int32_t bad : {6, -1}) {
    const Status s = MakeBatch(ds, std::vector<int32_t>{0, bad}, &batch);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
    EXPECT_NE(s.message().find("index " + std::to_string(bad)), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace chorus::trainer

namespace chorus::trainer {
namespace {

// Batches [from, to) of `sampler`'s current epoch as sample ids.
std::vector<int32_t> TakeBatches(BatchSampler& sampler, const Dataset& ds, int count) {
  std::vector<int32_t> ids;
  Batch batch;
  for (int b = 0; b < count && sampler.Next(ds, &batch); ++b) {
    for (int k = 0; k < batch.size; ++k) ids.push_back(static_cast<int32_t>(batch.images[k * 4]));
  }
  return ids;
}

// Three members train 4 batches each, a fourth joins: the rest of the epoch is
// re-cut over four, so no sample is trained twice, the three's untrained ones
// are all trained, and the pieces left over are fewer than one batch per member.
TEST(BatchSamplerTest, RepartitionTrainsTheRestOfTheEpochOnceOverTheNewMembers) {
  const Dataset ds = IndexedDataset(1000);
  const int batch = 8;
  std::multiset<int32_t> trained;
  std::vector<BatchSampler> old;
  for (int r = 0; r < 3; ++r) {
    old.emplace_back(1000, batch, 7, r, 3);
    old.back().StartEpoch(2);
    for (int32_t id : TakeBatches(old.back(), ds, 4)) trained.insert(id);
  }
  std::vector<BatchSampler> now;
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(old[r].Repartition(r, 4, 1).ok());
    now.push_back(old[r]);
  }
  // The joiner rebuilds the epoch from node 0's history and position.
  BatchSampler joiner(1000, batch, 7, 0, 4);
  EXPECT_EQ(old[0].History(), "3x8@0;4:4x8@1");
  ASSERT_TRUE(joiner.Restore(2, "3@0", 0, 4).ok());
  ASSERT_TRUE(joiner.Repartition(3, 4, 1).ok());
  now.push_back(joiner);
  for (BatchSampler& s : now) {
    EXPECT_EQ(s.BatchesTaken(), 4);
    EXPECT_EQ(s.BatchesPerEpoch(), now[0].BatchesPerEpoch());
  }
  EXPECT_EQ(now[0].BatchesPerEpoch(), 4 + (1000 / 3 - 32) * 3 / 4 / batch);
  for (BatchSampler& s : now) {
    for (int32_t id : TakeBatches(s, ds, 1000)) trained.insert(id);
  }
  std::set<int32_t> unique(trained.begin(), trained.end());
  EXPECT_EQ(unique.size(), trained.size()) << "a sample was trained twice";
  // 999 samples in three shards of 333 (the permutation's last one unused);
  // the 903 left pool into 4 shards of 225 (3 unused), each 28 batches of 8
  // (1 unused per member).
  EXPECT_EQ(trained.size(), 1000u - 1 - 3 - 4 * (225 - 28 * 8));
}

// History and Restore reproduce another node's position exactly, across
// several re-partitions; malformed histories are named.
TEST(BatchSamplerTest, RestoreReplaysTheHistoryOfRepartitions) {
  const Dataset ds = IndexedDataset(600);
  BatchSampler a(600, 5, 3, 1, 4);
  a.StartEpoch(1);
  TakeBatches(a, ds, 3);
  ASSERT_TRUE(a.Repartition(0, 3, 5).ok());
  TakeBatches(a, ds, 2);
  ASSERT_TRUE(a.Repartition(2, 5, 6).ok());
  TakeBatches(a, ds, 1);
  EXPECT_EQ(a.History(), "4x5@0;3:3x5@5;2:5x5@6");
  BatchSampler b(600, 5, 3, 0, 1);
  ASSERT_TRUE(b.Restore(1, a.History(), 2, a.BatchesTakenInPartition()).ok());
  EXPECT_EQ(b.BatchesTaken(), a.BatchesTaken());
  EXPECT_EQ(b.BatchesPerEpoch(), a.BatchesPerEpoch());
  EXPECT_EQ(TakeBatches(b, ds, 100), TakeBatches(a, ds, 100));
  for (const char* bad : {"", "x", "4@0;3@5", "4@0;3:3", "0@1", "4@0;999:3@5", "4@z"}) {
    Status s = b.Restore(1, bad, 0, 0);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << bad;
    EXPECT_NE(s.message().find("data order"), std::string::npos) << s.message();
  }
  EXPECT_FALSE(b.Restore(1, "4@0", 4, 0).ok()) << "rank outside the partition";
  EXPECT_FALSE(a.Repartition(3, 3, 9).ok());
}

// Unequal batches (32/64/64/128 scaled down): every rank runs the same steps
// per epoch, floor(n / B); shards are disjoint and proportional to the batches.
TEST(BatchSamplerTest, UnequalSharesRunEqualStepsOnDisjointShards) {
  const Dataset ds = IndexedDataset(1000);
  const std::vector<int> shares = {4, 8, 8, 16};
  std::multiset<int32_t> trained;
  for (int r = 0; r < 4; ++r) {
    Result<BatchSampler> s = BatchSampler::Create(1000, shares, 11, r);
    ASSERT_TRUE(s.has_value()) << s.error().ToString();
    s->StartEpoch(3);
    EXPECT_EQ(s->BatchesPerEpoch(), 1000 / 36) << "rank " << r;
    EXPECT_EQ(s->batch_size(), shares[r]);
    EXPECT_EQ(s->ShardSize(), 1000 * shares[r] / 36);
    const std::vector<int32_t> ids = TakeBatches(*s, ds, 1000);
    EXPECT_EQ(ids.size(), static_cast<size_t>(1000 / 36 * shares[r]));
    trained.insert(ids.begin(), ids.end());
  }
  EXPECT_EQ(std::set<int32_t>(trained.begin(), trained.end()).size(), trained.size());
  EXPECT_FALSE(BatchSampler::Create(1000, {4, 0}, 1, 0).has_value()) << "a zero share";
  EXPECT_FALSE(BatchSampler::Create(1000, {4, 8}, 1, 0, /*drop_last=*/false).has_value());
}

// A new split of the same global batch (load balancing) after some steps, and
// a rank that leaves: the rest of the epoch is trained once, in equal steps,
// and History() / Restore() rebuild any rank's position.
TEST(BatchSamplerTest, RepartitionByNewSharesTrainsTheRestOnce) {
  const Dataset ds = IndexedDataset(2000);
  std::vector<BatchSampler> nodes;
  std::multiset<int32_t> trained;
  for (int r = 0; r < 3; ++r) {
    nodes.push_back(*BatchSampler::Create(2000, {16, 16, 16}, 5, r));
    for (int32_t id : TakeBatches(nodes.back(), ds, 5)) trained.insert(id);
  }
  const std::vector<int> split = {30, 12, 6};  // the same global batch, by speed
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(nodes[r].Repartition(r, split, 0).ok());
    for (int32_t id : TakeBatches(nodes[r], ds, 7)) trained.insert(id);
  }
  EXPECT_EQ(nodes[0].History(), "3x16@0;5:30,12,6@0");
  nodes.pop_back();  // rank 2 dies; the two survivors re-cut by their batches
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(nodes[r].Repartition(r, {16, 16}, 1).ok());
  BatchSampler copy = *BatchSampler::Create(2000, {16}, 5, 0);
  ASSERT_TRUE(copy.Restore(0, nodes[1].History(), 1, 0).ok());
  EXPECT_EQ(copy.BatchesPerEpoch(), nodes[1].BatchesPerEpoch());
  std::vector<int32_t> rest1 = TakeBatches(nodes[1], ds, 1000);
  EXPECT_EQ(TakeBatches(copy, ds, 1000), rest1);
  EXPECT_EQ(nodes[0].BatchesPerEpoch(), nodes[1].BatchesPerEpoch());
  trained.insert(rest1.begin(), rest1.end());
  for (int32_t id : TakeBatches(nodes[0], ds, 1000)) trained.insert(id);
  EXPECT_EQ(std::set<int32_t>(trained.begin(), trained.end()).size(), trained.size()) << "trained twice";
  // 2000 - 5*48 - 7*48 = 1424 left; rank 2's 7 batches of 6 were trained, so
  // the survivors' pool lacks only what no one took.
  EXPECT_GT(trained.size(), 2000u - 2 * 32 - 48);
  EXPECT_EQ(copy.Restore(0, "3x16@0;5:30,0,6@0", 0, 0).code(), StatusCode::kDataLoss);
}

// A batch put back (its step applied nowhere) is handed out again, also when
// the membership changes before the next batch: the re-cut pools it.
TEST(BatchSamplerTest, APutBackBatchIsHandedOutAgainAndPooledByARepartition) {
  const Dataset ds = IndexedDataset(120);
  BatchSampler sampler(120, 5, 7, 0, 3);
  sampler.StartEpoch(0);
  EXPECT_FALSE(sampler.PutBack()) << "nothing handed out yet";
  Batch batch;
  ASSERT_TRUE(sampler.Next(ds, &batch));
  const std::vector<int32_t> first(sampler.LastBatch().begin(), sampler.LastBatch().end());
  ASSERT_EQ(first.size(), 5u);
  EXPECT_TRUE(sampler.PutBack());
  EXPECT_FALSE(sampler.PutBack()) << "one batch at most";
  EXPECT_TRUE(sampler.LastBatch().empty());
  EXPECT_EQ(sampler.BatchesTaken(), 0);
  ASSERT_TRUE(sampler.Next(ds, &batch));
  EXPECT_EQ(std::vector<int32_t>(sampler.LastBatch().begin(), sampler.LastBatch().end()), first);

  // Every rank takes one batch, puts it back, and the three re-partition over
  // two: the epoch over both holds every index the three shards held, once.
  std::set<int32_t> three;
  std::vector<int32_t> two;
  for (int r = 0; r < 3; ++r) {
    BatchSampler s(120, 5, 7, r, 3);
    s.StartEpoch(0);
    three.insert(s.ShardIndices().begin(), s.ShardIndices().end());
    ASSERT_TRUE(s.Next(ds, &batch));
    ASSERT_TRUE(s.PutBack());
    if (r == 2) continue;  // it died
    ASSERT_TRUE(s.Repartition(r, 2, 1).ok());
    while (s.Next(ds, &batch)) two.insert(two.end(), s.LastBatch().begin(), s.LastBatch().end());
  }
  EXPECT_EQ(std::set<int32_t>(two.begin(), two.end()), three);
  EXPECT_EQ(two.size(), three.size()) << "no index twice";
}

}  // namespace
}  // namespace chorus::trainer
