// Data augmentation (see augment.h).
#include "trainer/augment.h"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "common/split_mix64.h"
#include "trainer/dataset.h"

namespace chorus::trainer {
namespace {

uint64_t Mix(uint64_t x) { return SplitMix64(x).Next(); }

}  // namespace

float BlankPixel() { return (0.0f - kFashionMnistMean) / kFashionMnistStd; }

SampleTransform TransformOf(const AugmentOptions& options, int epoch, int32_t row) {
  const uint64_t key = Mix(Mix(options.seed ^ 0x6175676d656e74ULL) ^ static_cast<uint64_t>(static_cast<int64_t>(epoch))) ^
                       static_cast<uint64_t>(static_cast<int64_t>(row));
  SplitMix64 rng(key);
  SampleTransform t;
  t.mirror = options.flip && (rng.Next() & 1) != 0;
  if (options.shift > 0) {
    const uint64_t span = 2 * static_cast<uint64_t>(options.shift) + 1;
    t.dx = static_cast<int>(rng.Below(span)) - options.shift;
    t.dy = static_cast<int>(rng.Below(span)) - options.shift;
  }
  return t;
}

void AugmentBatch(const AugmentOptions& options, int epoch, Batch* batch) {
  if (!options.Any()) return;
  const int h = batch->height, w = batch->width, c = batch->channels;
  const size_t image = static_cast<size_t>(c) * h * w;
  if (batch->rows.size() != static_cast<size_t>(batch->size) || batch->images.size() != image * batch->size) return;
  std::vector<float> source(image);
  for (int k = 0; k < batch->size; ++k) {
    const SampleTransform t = TransformOf(options, epoch, batch->rows[static_cast<size_t>(k)]);
    if (!t.mirror && t.dx == 0 && t.dy == 0) continue;
    float* out = batch->images.data() + static_cast<size_t>(k) * image;
    std::copy(out, out + image, source.begin());
    for (int ch = 0; ch < c; ++ch) {
      const float* in = source.data() + static_cast<size_t>(ch) * h * w;
      float* plane = out + static_cast<size_t>(ch) * h * w;
      for (int y = 0; y < h; ++y) {
        const int sy = y - t.dy;
        for (int x = 0; x < w; ++x) {
          const int sx = x - t.dx;  // in the mirrored image
          const bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
          plane[y * w + x] = inside ? in[sy * w + (t.mirror ? w - 1 - sx : sx)] : options.fill;
        }
      }
    }
  }
}

}  // namespace chorus::trainer
