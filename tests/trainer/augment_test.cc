// Data augmentation: each sample's transform follows from (seed, epoch,
// index) alone, mirrors and shifts move the pixels where they say, and the
// uncovered border gets the blank pixel.
#include "trainer/augment.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <vector>

#include "trainer/batch_sampler.h"
#include "trainer/dataset.h"

namespace chorus::trainer {
namespace {

// n 1x4x5 images whose pixel (y, x) of image i holds 100 i + 10 y + x.
Dataset Numbered(int n) {
  Dataset d;
  d.count = n;
  d.height = 4;
  d.width = 5;
  for (int i = 0; i < n; ++i) {
    for (int y = 0; y < 4; ++y) {
      for (int x = 0; x < 5; ++x) d.images.push_back(static_cast<float>(100 * i + 10 * y + x));
    }
    d.labels.push_back(i % 10);
  }
  d.description = "numbered";
  return d;
}

Batch BatchOf(const Dataset& d, std::vector<int32_t> rows) {
  Batch b;
  EXPECT_TRUE(MakeBatch(d, rows, &b).ok());
  return b;
}

TEST(AugmentTest, ASamplesTransformDependsOnItsIndexAndEpochNotItsBatch) {
  AugmentOptions o;
  o.flip = true;
  o.shift = 2;
  o.fill = -1.0f;
  const Dataset d = Numbered(40);
  std::vector<int32_t> all(40);
  std::iota(all.begin(), all.end(), 0);
  Batch whole = BatchOf(d, all);
  AugmentBatch(o, 3, &whole);
  // Sample 7 alone, and second in another batch: the same pixels.
  Batch alone = BatchOf(d, {7});
  AugmentBatch(o, 3, &alone);
  Batch pair = BatchOf(d, {12, 7});
  AugmentBatch(o, 3, &pair);
  const size_t image = 20;
  const std::vector<float> expected(whole.images.begin() + 7 * image, whole.images.begin() + 8 * image);
  EXPECT_EQ(std::vector<float>(alone.images.begin(), alone.images.end()), expected);
  EXPECT_EQ(std::vector<float>(pair.images.begin() + image, pair.images.end()), expected);
  // Over 40 samples both mirrors and several shifts occur, and another epoch
  // or seed draws others.
  int mirrored = 0, moved = 0, other_epoch = 0, other_seed = 0;
  AugmentOptions reseeded = o;
  reseeded.seed = 2;
  for (int32_t row = 0; row < 40; ++row) {
    const SampleTransform t = TransformOf(o, 3, row);
    mirrored += t.mirror;
    moved += t.dx != 0 || t.dy != 0;
    EXPECT_LE(std::abs(t.dx), 2);
    EXPECT_LE(std::abs(t.dy), 2);
    const SampleTransform e = TransformOf(o, 4, row), s = TransformOf(reseeded, 3, row);
    other_epoch += e.mirror != t.mirror || e.dx != t.dx || e.dy != t.dy;
    other_seed += s.mirror != t.mirror || s.dx != t.dx || s.dy != t.dy;
  }
  EXPECT_GT(mirrored, 8);
  EXPECT_LT(mirrored, 32);
  EXPECT_GT(moved, 25);
  EXPECT_GT(other_epoch, 20);
  EXPECT_GT(other_seed, 20);
}

TEST(AugmentTest, PixelsLandWhereTheTransformSays) {
  AugmentOptions o;
  o.flip = true;
  o.shift = 1;
  o.fill = -1.0f;
  const Dataset d = Numbered(64);
  for (int32_t row = 0; row < 64; ++row) {
    const SampleTransform t = TransformOf(o, 0, row);
    Batch b = BatchOf(d, {row});
    AugmentBatch(o, 0, &b);
    for (int y = 0; y < 4; ++y) {
      for (int x = 0; x < 5; ++x) {
        const int sy = y - t.dy, sx = x - t.dx;
        const bool inside = sy >= 0 && sy < 4 && sx >= 0 && sx < 5;
        const float want = inside ? static_cast<float>(100 * row + 10 * sy + (t.mirror ? 4 - sx : sx)) : -1.0f;
        ASSERT_EQ(b.images[static_cast<size_t>(y * 5 + x)], want)
            << "row " << row << " (" << y << ", " << x << "), mirror " << t.mirror << ", dx " << t.dx << ", dy " << t.dy;
      }
    }
  }
}

TEST(AugmentTest, NoneLeavesTheBatchAndABlankPixelIsBlack) {
  const Dataset d = Numbered(3);
  Batch b = BatchOf(d, {0, 1, 2});
  const std::vector<float> before = b.images;
  AugmentBatch(AugmentOptions{}, 5, &b);
  EXPECT_EQ(b.images, before);
  EXPECT_FLOAT_EQ(BlankPixel() * kFashionMnistStd + kFashionMnistMean, 0.0f);
}

}  // namespace
}  // namespace chorus::trainer
