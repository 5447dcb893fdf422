// Image classification data sets in memory: the Fashion-MNIST reader (IDX files,
// gzip-compressed, from Debian's dataset-fashion-mnist package), the IDX file
// parser underneath it, and a synthetic data set for benchmarks.
//
// Everything is validated on load (magic, dimensions, counts, label range, exact
// byte counts) and errors name the file. This file only reads and normalises data;
// it must not shuffle, shard or batch (batch_sampler.h does that) and never
// touches the network.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace chorus::trainer {

// A whole split held in memory, already normalised.
struct Dataset {
  int count = 0;
  int channels = 1, height = 28, width = 28;
  std::vector<float> images;     // [count, channels, height, width], normalised
  std::vector<int32_t> labels;   // [count], 0..kNumClasses-1
  std::string description;       // e.g. "Fashion-MNIST train: 60000 images from <dir>"

  int64_t ImageSize() const { return int64_t{channels} * height * width; }
};

enum class Split { kTrain, kTest };

inline constexpr int kNumClasses = 10;
inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";
inline constexpr const char* kFashionMnistPackage = "dataset-fashion-mnist";
inline constexpr int kFashionMnistTrainCount = 60000;
inline constexpr int kFashionMnistTestCount = 10000;

// Per-pixel statistics of the Fashion-MNIST training images after scaling to
// [0, 1] (the commonly quoted values, computed over all 60000 x 784 pixels:
// mean 0.28604, std 0.35302), rounded to four digits. A pixel x in 0..255
// becomes (x / 255 - kFashionMnistMean) / kFashionMnistStd.
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

// IDX magic numbers: two zero bytes, the element type (0x08 = unsigned byte),
// the number of dimensions.
inline constexpr uint32_t kIdxImagesMagic = 0x00000803;  // ubyte, 3 dims [N, rows, cols]
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // ubyte, 1 dim [N]

// One IDX file: its dimensions and raw unsigned-byte elements (row-major).
struct IdxArray {
  uint32_t magic = 0;
  std::vector<uint32_t> dims;
  std::vector<uint8_t> bytes;  // the records read: product of dims, or of fewer records when asked
  uint32_t records = 0;        // records in `bytes`: dims[0], or max_records when fewer
};

// Reads one IDX file of unsigned bytes, gzip-compressed (detected by the gzip
// magic; several concatenated gzip members are fine) or plain. Errors, each
// naming `path`: missing or unreadable file (from errno, kNotFound when absent);
// corrupt or truncated gzip stream, or bytes after it (kDataLoss); magic other
// than `expected_magic` or an element type other than unsigned byte
// (kInvalidArgument); fewer or more data bytes than the dimensions say (kDataLoss).
// With `max_records` > 0 and below the file's count, only the first
// `max_records` records are read (a gzip file is read and inflated that far): the
// dimensions stay as the header says, and damage or bytes past those records
// go unseen.
[[nodiscard]] Result<IdxArray> ReadIdxFile(const std::string& path, uint32_t expected_magic,
                                           uint32_t max_records = 0);

// Builds a data set from an images file ([N, 28, 28] ubyte) and a labels file
// ([N] ubyte): checks the dimensions, that both counts agree and equal
// `expected_count` (0 = any), that every label is in 0..9, then normalises the
// first `limit` images (0 = all; a limit above N takes all N; negative is an
// error). All labels are validated even when `limit` is smaller; of the
// images only the first `limit` are read (ReadIdxFile's max_records).
[[nodiscard]] Result<Dataset> LoadIdxImageDataset(const std::string& images_path,
                                                  const std::string& labels_path,
                                                  int expected_count, int limit,
                                                  const std::string& name);

// Loads a Fashion-MNIST split from `dir` (normally kFashionMnistDefaultDir):
// train-{images-idx3,labels-idx1}-ubyte.gz (60000) or t10k-... (10000). A
// missing file is kNotFound and says to install the Debian package
// dataset-fashion-mnist. `limit` as in LoadIdxImageDataset.
[[nodiscard]] Result<Dataset> LoadFashionMnist(const std::string& dir, Split split, int limit);

// A deterministic synthetic data set of `count` 1x28x28 images for benchmarks and
// smoke tests: each class has a fixed random prototype image (from `seed`) and
// every image is its class prototype plus noise, so a model can learn it. Labels
// are uniform over 0..9. Same (count, seed) -> same bytes on every platform.
Dataset MakeSyntheticDataset(int count, uint64_t seed);

// The first `count` examples of `data` (a copy; all of them when count >= data.count).
Dataset PrefixOf(const Dataset& data, int count);

}  // namespace chorus::trainer
