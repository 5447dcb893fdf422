// A mini-batch of images and labels, as the data layer hands it to the trainer.
#pragma once

#include <cstdint>
#include <vector>

namespace chorus::trainer {

struct Dataset;

// What a batch carries: its images, or only which samples of its data set it
// holds (for a trainer that keeps the data set on its GPU and gathers there).
enum class BatchContents { kImages, kRows };

struct Batch {
  int size = 0;                  // images in this batch (the last one may be short)
  int channels = 1, height = 28, width = 28;
  std::vector<float> images;     // [size, channels, height, width], normalised; empty for kRows
  std::vector<int32_t> labels;   // [size], 0..9
  // The samples' indices in `source`, the data set they came from (MakeBatch
  // sets both; a batch built by hand may leave them empty).
  std::vector<int32_t> rows;
  const Dataset* source = nullptr;
};

}  // namespace chorus::trainer
