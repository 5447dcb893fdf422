// Tests of tensor fusion: the bucket layout (GradientBucketer) and the async
// engine (FusionEngine) run by N threads over a LocalHub.
//
// Gradients are rank r's x_r[i] = r + 1 + i % 7, whose sum over n ranks is
// n(n+1)/2 + n (i % 7): small integers, exact in float in any summation order.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gossip/collectives/collective.h"
#include "gossip/fusion/fusion.h"
#include "gossip/fusion/fusion_engine.h"
#include "gossip/fusion/fusion_trace.h"
#include "gossip/transport/local/local_transport.h"
#include "tests/gossip/gossip_test_util.h"

namespace chorus::gossip {
namespace {

float FusionInput(int rank, size_t i) { return static_cast<float>(rank + 1 + static_cast<int>(i % 7)); }
float FusionExpectedSum(int n, size_t i) {
  return static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 7));
}

// Slices of parameters laid out back to back in forward order, listed in
// backward order (the last forward parameter first).
std::vector<ParamSlice> BackwardTable(const std::vector<size_t>& forward_sizes) {
  std::vector<ParamSlice> forward;
  size_t offset = 0;
  for (size_t count : forward_sizes) {
    forward.push_back(ParamSlice{offset, count});
    offset += count;
  }
  return std::vector<ParamSlice>(forward.rbegin(), forward.rend());
}

std::vector<size_t> BucketElems(const GradientBucketer& b) {
  std::vector<size_t> out;
  for (const auto& bucket : b.buckets()) out.push_back(bucket.elems);
  return out;
}

// Properties every layout must have: buckets cover the parameters in order,
// stay within the threshold unless they hold one parameter, and are greedy (the
// next parameter would not have fit).
void ExpectGreedyLayout(const GradientBucketer& b) {
  const auto& buckets = b.buckets();
  size_t next = 0;
  for (size_t k = 0; k < buckets.size(); ++k) {
    const GradientBucket& bucket = buckets[k];
    EXPECT_EQ(bucket.first_param, next);
    ASSERT_GE(bucket.num_params, 1u);
    size_t elems = 0;
    for (size_t p = bucket.first_param; p < bucket.first_param + bucket.num_params; ++p) {
      EXPECT_EQ(b.BucketOf(p), k);
      elems += b.params()[p].count;
    }
    EXPECT_EQ(elems, bucket.elems);
    if (bucket.num_params > 1) {
      EXPECT_LE(elems * sizeof(float), b.bucket_bytes());
    }
    if (k + 1 < buckets.size()) {
      const size_t following = b.params()[buckets[k + 1].first_param].count;
      EXPECT_GT((elems + following) * sizeof(float), b.bucket_bytes());
    }
    next += bucket.num_params;
  }
  EXPECT_EQ(next, b.params().size());
}

TEST(GradientBucketerTest, BucketBoundariesForSeveralThresholds) {
  // Forward sizes 5 3 10 1 4 2; backward order 2 4 1 10 3 5.
  const auto table = BackwardTable({5, 3, 10, 1, 4, 2});
  struct Expect {
    size_t bytes;
    std::vector<size_t> elems;
  };
  const std::vector<Expect> expects = {
      {4, {2, 4, 1, 10, 3, 5}},   // every parameter alone (each is >= 4 bytes)
      {24, {6, 1, 10, 3, 5}},     // 2+4 fill 6 floats; 10 is over the threshold alone
      {40, {7, 10, 8}},
      {1000, {25}},               // everything fits one bucket
  };
  for (const auto& e : expects) {
    SCOPED_TRACE("bucket_bytes=" + std::to_string(e.bytes));
    auto b = GradientBucketer::Create(table, e.bytes);
    ASSERT_TRUE(b.has_value()) << b.error().ToString();
    EXPECT_EQ(BucketElems(*b), e.elems);
    ExpectGreedyLayout(*b);
    EXPECT_EQ(b->RequiredElems(), 25u);
    // Adjacent in backward order means adjacent in the flat buffer: all in place.
    for (const auto& bucket : b->buckets()) {
      EXPECT_TRUE(bucket.contiguous);
      const ParamSlice& last = b->params()[bucket.first_param + bucket.num_params - 1];
      EXPECT_EQ(bucket.flat_offset, last.offset);
    }
  }
}

TEST(GradientBucketerTest, RandomTablesAreGreedy) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<size_t> sizes(1 + rng() % 20);
    for (auto& s : sizes) s = rng() % 300;  // zero-sized parameters included
    auto b = GradientBucketer::Create(BackwardTable(sizes), 4 + rng() % 2000);
    ASSERT_TRUE(b.has_value());
    ExpectGreedyLayout(*b);
  }
}

// Parameters listed out of layout order (as with a table that interleaves
// weights and biases) make buckets that must be packed; gaps stay untouched.
TEST(GradientBucketerTest, PackUnpackRoundTripPreservesEveryGradient) {
  // Layout with a gap of 3 unused elements at [20, 23).
  const std::vector<ParamSlice> table = {{0, 5}, {10, 4}, {23, 6}, {5, 5}, {14, 6}, {29, 1}};
  for (size_t bytes : {4u, 40u, 64u, 1000u}) {
    SCOPED_TRACE("bucket_bytes=" + std::to_string(bytes));
    auto b = GradientBucketer::Create(table, bytes);
    ASSERT_TRUE(b.has_value());
    ExpectGreedyLayout(*b);
    std::vector<float> grads(b->RequiredElems());
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.5f * static_cast<float>(i) + 1.0f;
    const std::vector<float> original = grads;

    std::vector<std::vector<float>> staged;
    bool any_packed = false;
    for (size_t k = 0; k < b->buckets().size(); ++k) {
      const GradientBucket& bucket = b->buckets()[k];
      any_packed |= !bucket.contiguous;
      std::vector<float> staging(bucket.elems);
      b->Pack(k, grads, staging);
      // Staging holds the slices back to back in parameter order.
      size_t at = 0;
      for (size_t p = bucket.first_param; p < bucket.first_param + bucket.num_params; ++p) {
        for (size_t e = 0; e < table[p].count; ++e) {
          ASSERT_EQ(staging[at++], original[table[p].offset + e]);
        }
      }
      staged.push_back(std::move(staging));
    }
    if (bytes == 1000) {
      EXPECT_TRUE(any_packed);
    }
    for (size_t k = 0; k < b->buckets().size(); ++k) {
      if (b->buckets()[k].contiguous) continue;
      std::fill(grads.begin(), grads.end(), -1.0f);
      b->Unpack(k, staged[k], grads);
      for (size_t p = b->buckets()[k].first_param;
           p < b->buckets()[k].first_param + b->buckets()[k].num_params; ++p) {
        for (size_t e = 0; e < table[p].count; ++e) {
          ASSERT_EQ(grads[table[p].offset + e], original[table[p].offset + e]);
        }
      }
      for (size_t gap = 20; gap < 23; ++gap) EXPECT_EQ(grads[gap], -1.0f) << "gap written";
    }
  }
}

TEST(GradientBucketerTest, MarkReadyReportsTheBucketItCompletes) {
  auto b = GradientBucketer::Create(BackwardTable({5, 3, 10, 1, 4, 2}), 24);
  ASSERT_TRUE(b.has_value());
  // Buckets (backward param indices): {0, 1}, {2}, {3}, {4}, {5}.
  std::vector<std::optional<size_t>> got;
  for (size_t p = 0; p < 6; ++p) {
    auto r = b->MarkReady(p);
    ASSERT_TRUE(r.has_value()) << r.error().ToString();
    got.push_back(*r);
  }
  const std::vector<std::optional<size_t>> want = {std::nullopt, 0, 1, 2, 3, 4};
  EXPECT_EQ(got, want);
  EXPECT_TRUE(b->AllReady());

  auto twice = b->MarkReady(3);
  ASSERT_FALSE(twice.has_value());
  EXPECT_EQ(twice.error().code(), StatusCode::kFailedPrecondition);
  auto out_of_range = b->MarkReady(6);
  ASSERT_FALSE(out_of_range.has_value());
  EXPECT_EQ(out_of_range.error().code(), StatusCode::kInvalidArgument);

  b->Reset();
  EXPECT_FALSE(b->AllReady());
  // Order within a bucket does not matter.
  EXPECT_EQ(*b->MarkReady(1), std::nullopt);
  EXPECT_EQ(b->FirstUnready(0), std::optional<size_t>(0));
  EXPECT_EQ(*b->MarkReady(0), std::optional<size_t>(0));
}

// The MLP (784-256-128-10) in backward order, each layer a ready group: its
// whole gradient (919 KiB) fits one default 1 MiB bucket, so nothing could be
// on the wire before backward ends. A first bucket capped at a quarter of the
// gradient takes the last two layers; fc1's weight and bias stay together.
TEST(GradientBucketerTest, TheFirstBucketIsSmallAndLayersStayWhole) {
  const std::vector<ParamSlice> mlp = {
      {235136, 10, 2}, {233856, 1280, 2},  // fc3 bias, weight
      {233728, 128, 1}, {200960, 32768, 1},  // fc2
      {200704, 256, 0}, {0, 200704, 0}};   // fc1
  auto b = GradientBucketer::Create(mlp, BucketSizes{1024 * 1024, 235146 * sizeof(float) / 4});
  ASSERT_TRUE(b.has_value()) << b.error().ToString();
  EXPECT_EQ(BucketElems(*b), (std::vector<size_t>{10 + 1280 + 128 + 32768, 256 + 200704}));
  EXPECT_TRUE(b->buckets()[0].contiguous);
  // Marked as backward produces them: bucket 0 completes before fc1 starts.
  EXPECT_EQ(*b->MarkReady(0), std::nullopt);
  EXPECT_EQ(*b->MarkReady(1), std::nullopt);
  EXPECT_EQ(*b->MarkReady(2), std::nullopt);
  EXPECT_EQ(*b->MarkReady(3), std::optional<size_t>(0));

  // Without groups, a 137 KiB cap would have put fc1's bias with fc2 and left
  // bucket 0 waiting for fc1's backward; ungrouped, one cap: one bucket.
  std::vector<ParamSlice> ungrouped = mlp;
  for (ParamSlice& slice : ungrouped) slice.group = -1;
  auto split = GradientBucketer::Create(ungrouped, BucketSizes{1024 * 1024, 137 * 1024});
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(BucketElems(*split), (std::vector<size_t>{10 + 1280 + 128 + 32768 + 256, 200704}));
  auto whole = GradientBucketer::Create(ungrouped, 1024 * 1024);
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->buckets().size(), 1u);
}

TEST(GradientBucketerTest, RejectsOverlapAndZeroThreshold) {
  auto overlap = GradientBucketer::Create({{0, 4}, {3, 2}}, 64);
  ASSERT_FALSE(overlap.has_value());
  EXPECT_NE(overlap.error().message().find("overlaps"), std::string::npos);
  EXPECT_FALSE(GradientBucketer::Create({{0, 4}}, 0).has_value());
}

// ---- FusionEngine ----

using testing::RunRanks;

// A small CNN's parameter sizes in forward order (conv, bias, conv, bias, fc, bias ...).
const std::vector<size_t> kModel = {150, 6, 2400, 16, 48000, 120, 10080, 84, 840, 10};

struct EngineRun {
  std::vector<std::vector<float>> grads;     // by rank, after the last step
  std::vector<std::vector<float>> reference; // by rank: one all-reduce of the whole buffer
  std::vector<std::vector<CommSpan>> spans;  // by rank
  std::vector<Status> statuses;
  size_t buckets = 0;
};

// Each rank runs `steps` steps: "backward" writes each parameter's gradient and
// marks it ready (in backward order, or shuffled per rank), then WaitAll.
EngineRun RunEngine(int n, const std::vector<ParamSlice>& table, size_t bucket_bytes, int steps,
                    bool shuffle_marks, AllreduceAlgorithm algorithm, bool fp16_wire = false,
                    float pre_scale = 1.0f) {
  EngineRun run;
  run.grads.resize(n);
  run.reference.resize(n);
  run.spans.resize(n);
  size_t required = 0;
  for (const auto& s : table) required = std::max(required, s.offset + s.count);
  run.statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
    CHORUS_ASSIGN_OR_RETURN(GradientBucketer b, GradientBucketer::Create(table, bucket_bytes));
    if (r == 0) run.buckets = b.buckets().size();
    std::vector<float> grads(required, 0.0f);
    CommSpanRecorder recorder;
    FusionOptions options;
    options.allreduce.algorithm = algorithm;
    options.allreduce.segment_elems = 1000;
    options.allreduce.tag_base = 5 * kTagsPerCollective;
    options.allreduce.pre_scale = pre_scale;
    options.fp16_wire = fp16_wire;
    options.trace = &recorder;
    {
      CHORUS_ASSIGN_OR_RETURN(auto engine, FusionEngine::Create(c, std::move(b), grads, options));
      std::vector<size_t> order(table.size());
      std::iota(order.begin(), order.end(), size_t{0});
      std::mt19937 rng(100 + r);
      for (int step = 0; step < steps; ++step) {
        if (shuffle_marks) std::shuffle(order.begin(), order.end(), rng);
        for (size_t p : order) {
          for (size_t e = 0; e < table[p].count; ++e) {
            const size_t i = table[p].offset + e;
            grads[i] = FusionInput(r, i);
          }
          CHORUS_RETURN_IF_ERROR(engine->MarkReady(p));
        }
        CHORUS_RETURN_IF_ERROR(engine->WaitAll(Deadline::AfterSeconds(30)));
      }
    }
    // The reference: one all-reduce of the whole buffer.
    std::vector<float> whole(required, 0.0f);
    for (const auto& s : table) {
      for (size_t e = 0; e < s.count; ++e) whole[s.offset + e] = FusionInput(r, s.offset + e);
    }
    AllreduceOptions whole_options;
    whole_options.algorithm = AllreduceAlgorithm::kRing;
    whole_options.deadline = Deadline::AfterSeconds(30);
    CHORUS_RETURN_IF_ERROR(c.Allreduce(std::span<float>(whole), whole_options));
    run.grads[r] = std::move(grads);
    run.reference[r] = std::move(whole);
    run.spans[r] = recorder.Spans();
    return Status::Ok();
  });
  return run;
}

void ExpectEngineMatchesWholeAllreduce(const EngineRun& run, int n, int steps,
                                       const std::vector<ParamSlice>& table) {
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(run.statuses[r].ok()) << "rank " << r << ": " << run.statuses[r].ToString();
    ASSERT_EQ(run.grads[r].size(), run.reference[r].size());
    for (const auto& s : table) {
      for (size_t e = 0; e < s.count; ++e) {
        const size_t i = s.offset + e;
        // Exact: small integers (see the file comment).
        ASSERT_EQ(run.grads[r][i], run.reference[r][i]) << "rank " << r << " element " << i;
        ASSERT_EQ(run.grads[r][i], FusionExpectedSum(n, i)) << "rank " << r << " element " << i;
      }
    }
    ASSERT_EQ(run.spans[r].size(), run.buckets * steps);
    for (const CommSpan& span : run.spans[r]) {
      EXPECT_TRUE(span.ok);
      EXPECT_LE(span.begin_us, span.end_us);
      EXPECT_NE(span.algorithm, AllreduceAlgorithm::kAuto);
    }
    // Buckets run in order within each step.
    for (size_t k = 0; k < run.spans[r].size(); ++k) {
      EXPECT_EQ(run.spans[r][k].bucket, k % run.buckets);
      EXPECT_EQ(run.spans[r][k].step, static_cast<int64_t>(k / run.buckets));
    }
  }
}

TEST(FusionEngineTest, MatchesOneAllreduceOfTheWholeBuffer) {
  const auto table = BackwardTable(kModel);
  for (int n : {1, 2, 3, 5}) {
    for (size_t bucket_bytes : {4096u, 64u * 1024u, 1u << 24}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " bucket_bytes=" + std::to_string(bucket_bytes));
      const int steps = 2;
      auto run = RunEngine(n, table, bucket_bytes, steps, /*shuffle_marks=*/false,
                           AllreduceAlgorithm::kAuto);
      ExpectEngineMatchesWholeAllreduce(run, n, steps, table);
    }
  }
}

// FP16 on the wire with pre-division by n: each contribution x/4 is a multiple
// of 1/4 below 3 and every partial sum a multiple of 1/4 below 9, all exact in
// binary16 (11 significant bits), so the result is exactly sum/4 and the wire
// carries 2 bytes per element.
TEST(FusionEngineTest, Fp16WireWithPreDivision) {
  const auto table = BackwardTable(kModel);
  const int n = 4;
  for (auto algorithm : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree}) {
    auto run = RunEngine(n, table, 64 * 1024, /*steps=*/2, /*shuffle_marks=*/false, algorithm,
                         /*fp16_wire=*/true, /*pre_scale=*/0.25f);
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(run.statuses[r].ok()) << run.statuses[r].ToString();
      for (const auto& s : table) {
        for (size_t e = 0; e < s.count; ++e) {
          const size_t i = s.offset + e;
          ASSERT_EQ(run.grads[r][i], 0.25f * FusionExpectedSum(n, i)) << "rank " << r << " element " << i;
        }
      }
      size_t elems = 0;
      for (const auto& s : table) elems += s.count;
      size_t wire = 0;
      for (size_t k = 0; k < run.buckets; ++k) wire += run.spans[r][k].bytes;
      EXPECT_EQ(wire, elems * 2);
    }
  }
}

// Gradients far below FP16's smallest normal (6.1e-5), pre-divided by N:
// cast as they are they land on FP16's subnormal grid (steps of 6e-8) and
// lose most of their digits, or flush to zero; multiplied by the wire scale
// (the loss scale) first, they keep FP16's 11 bits and the sum is within FP16
// rounding of the FP32 sum.
TEST(FusionEngineTest, Fp16WireScaledByTheLossScaleKeepsSmallGradients) {
  const int n = 4;
  const std::vector<ParamSlice> table = {{0, 256}};
  auto small = [](int r, size_t i) { return 1e-7f * static_cast<float>(1 + (i * 7 + static_cast<size_t>(r)) % 13); };
  auto run = [&](float wire_scale) {
    std::vector<std::vector<float>> out(n);
    auto statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
      CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
      CHORUS_ASSIGN_OR_RETURN(GradientBucketer b, GradientBucketer::Create(table, 64 * 1024));
      std::vector<float> grads(256);
      FusionOptions options;
      options.allreduce.algorithm = AllreduceAlgorithm::kRing;
      options.allreduce.pre_scale = 1.0f / n;
      options.fp16_wire = true;
      CHORUS_ASSIGN_OR_RETURN(auto engine, FusionEngine::Create(c, std::move(b), grads, options));
      engine->SetWireScale(wire_scale);
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = small(r, i);
      CHORUS_RETURN_IF_ERROR(engine->MarkReady(0));
      CHORUS_RETURN_IF_ERROR(engine->WaitAll(Deadline::AfterSeconds(30)));
      out[static_cast<size_t>(r)] = grads;
      return Status::Ok();
    });
    for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.ToString();
    double worst = 0.0;
    for (size_t i = 0; i < 256; ++i) {
      double expected = 0.0;
      for (int r = 0; r < n; ++r) expected += small(r, i) / n;
      worst = std::max(worst, std::abs(out[0][i] - expected) / expected);
    }
    return worst;
  };
  const double unscaled = run(1.0f);
  const double scaled = run(65536.0f);
  EXPECT_GT(unscaled, 0.05) << "without the scale the sums lose their digits";
  EXPECT_LT(scaled, 2e-3) << "with the loss scale they keep FP16's precision";
}

// Buckets that are not contiguous go through staging; ranks mark in different
// orders, and the engine still meets in bucket order.
TEST(FusionEngineTest, PackedBucketsAndShuffledMarks) {
  auto forward = BackwardTable(kModel);
  std::reverse(forward.begin(), forward.end());
  // Weights first (backward order), then biases: neighbours are no longer adjacent.
  std::vector<ParamSlice> table;
  for (size_t p = forward.size(); p-- > 0;) {
    if (p % 2 == 0) table.push_back(forward[p]);
  }
  for (size_t p = forward.size(); p-- > 0;) {
    if (p % 2 == 1) table.push_back(forward[p]);
  }
  auto probe = GradientBucketer::Create(table, 64 * 1024);
  ASSERT_TRUE(probe.has_value());
  EXPECT_TRUE(std::any_of(probe->buckets().begin(), probe->buckets().end(),
                          [](const GradientBucket& b) { return !b.contiguous; }));
  for (auto algorithm : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree}) {
    const int n = 3;
    const int steps = 3;
    auto run = RunEngine(n, table, 64 * 1024, steps, /*shuffle_marks=*/true, algorithm);
    ExpectEngineMatchesWholeAllreduce(run, n, steps, table);
  }
}

// The first bucket is all-reduced while "backward" still holds the other
// parameters back: each rank waits for bucket 0's span before marking the rest.
TEST(FusionEngineTest, BucketsRunBeforeWaitAll) {
  const int n = 3;
  const auto table = BackwardTable({1000, 10, 1000});  // 4 KiB buckets: one per parameter
  auto statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
    CHORUS_ASSIGN_OR_RETURN(GradientBucketer b, GradientBucketer::Create(table, 4000));
    if (b.buckets().size() != 3) return Internal("expected one bucket per parameter");
    std::vector<float> grads(b.RequiredElems());
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = FusionInput(r, i);
    CommSpanRecorder recorder;
    FusionOptions options;
    options.trace = &recorder;
    CHORUS_ASSIGN_OR_RETURN(auto engine, FusionEngine::Create(c, std::move(b), grads, options));
    CHORUS_RETURN_IF_ERROR(engine->MarkReady(0));
    const Deadline deadline = Deadline::AfterSeconds(10);
    while (recorder.Spans().empty()) {
      if (deadline.Expired()) return DeadlineExceeded("bucket 0 never ran before WaitAll");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // Bucket 0 (parameter 0, the last forward one) is summed already.
    const ParamSlice& first = table[0];
    for (size_t e = 0; e < first.count; ++e) {
      if (grads[first.offset + e] != FusionExpectedSum(n, first.offset + e)) {
        return Internal("bucket 0 not summed at element " + std::to_string(first.offset + e));
      }
    }
    CHORUS_RETURN_IF_ERROR(engine->MarkReady(1));
    CHORUS_RETURN_IF_ERROR(engine->MarkReady(2));
    return engine->WaitAll(Deadline::AfterSeconds(10));
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(statuses[r].ok()) << statuses[r].ToString();
}

TEST(FusionEngineTest, MissingPeerFailsWaitAllNamingIt) {
  const int n = 3;
  const auto table = BackwardTable({100, 10, 100});
  auto statuses = RunRanks(n, n - 1, [&](int r, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
    CHORUS_ASSIGN_OR_RETURN(GradientBucketer b, GradientBucketer::Create(table, 256));
    std::vector<float> grads(b.RequiredElems(), 1.0f);
    FusionOptions options;
    options.bucket_timeout = std::chrono::milliseconds(300);
    CHORUS_ASSIGN_OR_RETURN(auto engine, FusionEngine::Create(c, std::move(b), grads, options));
    for (size_t p = 0; p < table.size(); ++p) CHORUS_RETURN_IF_ERROR(engine->MarkReady(p));
    Status s = engine->WaitAll(Deadline::AfterSeconds(10));
    // The engine stays failed.
    Status again = engine->MarkReady(0);
    if (again.ok()) return Internal("MarkReady succeeded on a failed engine");
    return s;
  });
  for (int r = 0; r < n - 1; ++r) {
    const Status& s = statuses[r];
    ASSERT_FALSE(s.ok()) << "rank " << r;
    EXPECT_TRUE(s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kUnavailable)
        << s.ToString();
    EXPECT_NE(s.message().find("rank 2"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("bucket 0"), std::string::npos) << s.ToString();
  }
}

TEST(FusionEngineTest, WaitAllNamesAParameterNeverMarked) {
  auto statuses = RunRanks(1, 1, [&](int, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
    CHORUS_ASSIGN_OR_RETURN(GradientBucketer b,
                            GradientBucketer::Create(BackwardTable({4, 4, 4}), 16));
    std::vector<float> grads(b.RequiredElems(), 1.0f);
    CHORUS_ASSIGN_OR_RETURN(auto engine, FusionEngine::Create(c, std::move(b), grads, {}));
    CHORUS_RETURN_IF_ERROR(engine->MarkReady(0));
    CHORUS_RETURN_IF_ERROR(engine->MarkReady(2));
    return engine->WaitAll(Deadline::After(std::chrono::milliseconds(100)));
  });
  EXPECT_EQ(statuses[0].code(), StatusCode::kDeadlineExceeded) << statuses[0].ToString();
  EXPECT_NE(statuses[0].message().find("parameter 1"), std::string::npos)
      << statuses[0].ToString();
}

TEST(FusionEngineTest, RejectsTooSmallGradientBuffer) {
  auto statuses = RunRanks(1, 1, [&](int, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
    CHORUS_ASSIGN_OR_RETURN(GradientBucketer b, GradientBucketer::Create({{0, 10}}, 16));
    std::vector<float> grads(9);
    auto engine = FusionEngine::Create(c, std::move(b), grads, {});
    return engine.has_value() ? Status::Ok() : engine.error();
  });
  EXPECT_EQ(statuses[0].code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace chorus::gossip
