// A mini-batch of images and labels, as the data layer hands it to the trainer.
#pragma once

#include <cstdint>
#include <vector>

namespace chorus::trainer {

struct Batch {
  int size = 0;                  // images in this batch (the last one may be short)
  int channels = 1, height = 28, width = 28;
  std::vector<float> images;     // [size, channels, height, width], normalised
  std::vector<int32_t> labels;   // [size], 0..9
};

}  // namespace chorus::trainer
