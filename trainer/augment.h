// Data augmentation of training batches: a left-right mirror and a small
// translation of each image, drawn from the sample alone.
//
// Every transform is a function of (seed, epoch, sample index): the same
// sample in the same epoch is transformed the same way whatever batch, node,
// node count or method draws it, so that methods compared on one data set
// see one augmented data set, and a resumed run sees what it would have seen.
#pragma once

#include <cstdint>

#include "trainer/batch.h"

namespace chorus::trainer {

struct AugmentOptions {
  bool flip = false;  // mirror left-right with probability 1/2
  int shift = 0;      // translate by a uniform -shift..shift pixels in each direction
  uint64_t seed = 1;
  float fill = 0.0f;  // what uncovered pixels get: the data set's blank pixel after normalising

  bool Any() const { return flip || shift > 0; }
};

// The normalised value of a black Fashion-MNIST pixel (dataset.h).
float BlankPixel();

// One sample's transform.
struct SampleTransform {
  bool mirror = false;
  int dx = 0, dy = 0;  // the image moves right by dx and down by dy
};
SampleTransform TransformOf(const AugmentOptions& options, int epoch, int32_t row);

// Transforms `batch`'s images in place, sample k by TransformOf(options,
// epoch, batch->rows[k]). A batch without its images and rows (MakeBatch
// with BatchContents::kImages gives both) is left as it is.
void AugmentBatch(const AugmentOptions& options, int epoch, Batch* batch);

}  // namespace chorus::trainer
