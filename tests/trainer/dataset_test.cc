// Tests for the IDX reader, the Fashion-MNIST loader and the synthetic data set.
// Crafted IDX files (plain and gzip) are written to a temporary directory at run
// time; the real data set is used when Debian's dataset-fashion-mnist is there.
#include "trainer/dataset.h"

#include "tests/util/temp_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace chorus::trainer {
namespace {

namespace fs = std::filesystem;

// Every test gets its own folder, named after this file.
class TempDir : public chorus::testing::TempDir {
 public:
  TempDir() : chorus::testing::TempDir("chorus_dataset_test") {}
};

std::vector<uint8_t> IdxBytes(uint32_t magic, const std::vector<uint32_t>& dims,
                              const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out;
  auto put32 = [&](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
  };
  put32(magic);
  for (uint32_t d : dims) put32(d);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<uint8_t> Gzip(const std::vector<uint8_t>& raw) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, Z_BEST_SPEED, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::vector<uint8_t> out(deflateBound(&zs, raw.size()) + 64);
  zs.next_in = const_cast<Bytef*>(raw.data());
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

// Pixel data with structure and variety, so that deflate output is not trivial.
std::vector<uint8_t> Pixels(size_t n) {
  std::vector<uint8_t> p(n);
  uint32_t x = 12345;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    p[i] = static_cast<uint8_t>((i % 28) * 9 + ((x >> 16) & 7));
  }
  return p;
}

std::vector<uint8_t> Labels(size_t n) {
  std::vector<uint8_t> l(n);
  for (size_t i = 0; i < n; ++i) l[i] = static_cast<uint8_t>((i * 7) % 10);
  return l;
}

// Writes a gzipped images file of `n` images of rows x cols and a labels file.
void WriteImageSet(const TempDir& dir, uint32_t n, uint32_t rows = 28, uint32_t cols = 28,
                   uint32_t labels = 0xffffffff) {
  if (labels == 0xffffffff) labels = n;
  WriteBytes(dir.File("images.gz"), Gzip(IdxBytes(kIdxImagesMagic, {n, rows, cols}, Pixels(size_t{n} * rows * cols))));
  WriteBytes(dir.File("labels.gz"), Gzip(IdxBytes(kIdxLabelsMagic, {labels}, Labels(labels))));
}

TEST(IdxReaderTest, ReadsGzippedFile) {
  TempDir dir;
  const std::vector<uint8_t> data = Pixels(3 * 4 * 5);
  WriteBytes(dir.File("a.gz"), Gzip(IdxBytes(kIdxImagesMagic, {3, 4, 5}, data)));
  Result<IdxArray> idx = ReadIdxFile(dir.File("a.gz"), kIdxImagesMagic);
  ASSERT_TRUE(idx) << idx.error().ToString();
  EXPECT_EQ(idx->magic, kIdxImagesMagic);
  EXPECT_EQ(idx->dims, (std::vector<uint32_t>{3, 4, 5}));
  EXPECT_EQ(idx->bytes, data);
}

TEST(IdxReaderTest, ReadsPlainFile) {
  TempDir dir;
  const std::vector<uint8_t> data = Labels(17);
  WriteBytes(dir.File("l"), IdxBytes(kIdxLabelsMagic, {17}, data));
  Result<IdxArray> idx = ReadIdxFile(dir.File("l"), kIdxLabelsMagic);
  ASSERT_TRUE(idx) << idx.error().ToString();
  EXPECT_EQ(idx->dims, (std::vector<uint32_t>{17}));
  EXPECT_EQ(idx->bytes, data);
}

TEST(IdxReaderTest, ReadsConcatenatedGzipMembers) {
  TempDir dir;
  const std::vector<uint8_t> raw = IdxBytes(kIdxLabelsMagic, {1000}, Labels(1000));
  const std::vector<uint8_t> first(raw.begin(), raw.begin() + 300);
  const std::vector<uint8_t> second(raw.begin() + 300, raw.end());
  std::vector<uint8_t> gz = Gzip(first);
  const std::vector<uint8_t> gz2 = Gzip(second);
  gz.insert(gz.end(), gz2.begin(), gz2.end());
  WriteBytes(dir.File("l.gz"), gz);
  Result<IdxArray> idx = ReadIdxFile(dir.File("l.gz"), kIdxLabelsMagic);
  ASSERT_TRUE(idx) << idx.error().ToString();
  EXPECT_EQ(idx->bytes, Labels(1000));
}

TEST(IdxReaderTest, TruncatedDataIsDataLoss) {
  TempDir dir;
  std::vector<uint8_t> raw = IdxBytes(kIdxImagesMagic, {2, 28, 28}, Pixels(2 * 784));
  raw.resize(raw.size() - 1);
  WriteBytes(dir.File("t.gz"), Gzip(raw));
  Result<IdxArray> idx = ReadIdxFile(dir.File("t.gz"), kIdxImagesMagic);
  ASSERT_FALSE(idx);
  EXPECT_EQ(idx.error().code(), StatusCode::kDataLoss);
  EXPECT_NE(idx.error().message().find(dir.File("t.gz")), std::string::npos) << idx.error().message();
  EXPECT_NE(idx.error().message().find("truncated"), std::string::npos) << idx.error().message();
}

TEST(IdxReaderTest, TruncatedHeaderIsDataLoss) {
  TempDir dir;
  const std::vector<uint8_t> raw = IdxBytes(kIdxImagesMagic, {2, 28, 28}, {});
  for (size_t keep : {size_t{0}, size_t{3}, size_t{9}}) {
    WriteBytes(dir.File("h"), std::vector<uint8_t>(raw.begin(), raw.begin() + keep));
    Result<IdxArray> idx = ReadIdxFile(dir.File("h"), kIdxImagesMagic);
    ASSERT_FALSE(idx) << keep;
    EXPECT_EQ(idx.error().code(), StatusCode::kDataLoss) << keep << ": " << idx.error().message();
  }
}

TEST(IdxReaderTest, TrailingBytesAreDataLoss) {
  TempDir dir;
  std::vector<uint8_t> raw = IdxBytes(kIdxLabelsMagic, {10}, Labels(10));
  raw.push_back(0);
  raw.push_back(0);
  WriteBytes(dir.File("x.gz"), Gzip(raw));
  Result<IdxArray> idx = ReadIdxFile(dir.File("x.gz"), kIdxLabelsMagic);
  ASSERT_FALSE(idx);
  EXPECT_EQ(idx.error().code(), StatusCode::kDataLoss);
  EXPECT_NE(idx.error().message().find("2 trailing bytes"), std::string::npos) << idx.error().message();
  EXPECT_NE(idx.error().message().find(dir.File("x.gz")), std::string::npos);
}

TEST(IdxReaderTest, TruncatedGzipStreamIsDataLoss) {
  TempDir dir;
  std::vector<uint8_t> gz = Gzip(IdxBytes(kIdxImagesMagic, {4, 28, 28}, Pixels(4 * 784)));
  gz.resize(gz.size() / 2);
  WriteBytes(dir.File("cut.gz"), gz);
  Result<IdxArray> idx = ReadIdxFile(dir.File("cut.gz"), kIdxImagesMagic);
  ASSERT_FALSE(idx);
  EXPECT_EQ(idx.error().code(), StatusCode::kDataLoss);
  EXPECT_NE(idx.error().message().find(dir.File("cut.gz")), std::string::npos) << idx.error().message();
  EXPECT_NE(idx.error().message().find("gzip"), std::string::npos) << idx.error().message();
}

TEST(IdxReaderTest, CorruptGzipStreamIsDataLoss) {
  TempDir dir;
  const std::vector<uint8_t> good = Gzip(IdxBytes(kIdxImagesMagic, {4, 28, 28}, Pixels(4 * 784)));
  // Damage the deflate body in several places (header is 10 bytes, trailer 8);
  // each must be caught (inflate error, CRC or length mismatch).
  for (size_t at : {good.size() / 4, good.size() / 2, good.size() - 12}) {
    std::vector<uint8_t> gz = good;
    gz[at] ^= 0x5a;
    WriteBytes(dir.File("bad.gz"), gz);
    Result<IdxArray> idx = ReadIdxFile(dir.File("bad.gz"), kIdxImagesMagic);
    ASSERT_FALSE(idx) << "damage at " << at;
    EXPECT_EQ(idx.error().code(), StatusCode::kDataLoss) << idx.error().message();
    EXPECT_NE(idx.error().message().find(dir.File("bad.gz")), std::string::npos) << idx.error().message();
  }
}

// max_records reads a prefix: the first records, byte for byte, with the
// header's dimensions; a stream cut after them reads, and read whole it is
// still an error; a prefix the stream does not hold is DataLoss.
// A file is inflated as it is read, in chunks: members whose ends fall
// anywhere in a chunk, or across two, read as one, and a byte after the
// last member is named with its offset.
TEST(IdxReaderTest, MembersLargerThanAReadChunkAndABytePastTheLast) {
  TempDir dir;
  std::mt19937 rng(7);
  std::vector<uint8_t> pixels(1000 * 784);
  for (uint8_t& p : pixels) p = static_cast<uint8_t>(rng());  // incompressible: ~780 KB compressed
  const std::vector<uint8_t> raw = IdxBytes(kIdxImagesMagic, {1000, 28, 28}, pixels);
  std::vector<uint8_t> gz;
  const size_t cuts[] = {0, 100000, 100001, 500000, raw.size()};
  for (size_t i = 0; i + 1 < std::size(cuts); ++i) {
    const std::vector<uint8_t> member =
        Gzip(std::vector<uint8_t>(raw.begin() + static_cast<ptrdiff_t>(cuts[i]),
                                  raw.begin() + static_cast<ptrdiff_t>(cuts[i + 1])));
    gz.insert(gz.end(), member.begin(), member.end());
  }
  WriteBytes(dir.File("m.gz"), gz);
  Result<IdxArray> idx = ReadIdxFile(dir.File("m.gz"), kIdxImagesMagic);
  ASSERT_TRUE(idx) << idx.error().ToString();
  EXPECT_EQ(idx->bytes, pixels);
  Result<IdxArray> prefix = ReadIdxFile(dir.File("m.gz"), kIdxImagesMagic, 700);
  ASSERT_TRUE(prefix) << prefix.error().ToString();
  EXPECT_EQ(prefix->bytes, std::vector<uint8_t>(pixels.begin(), pixels.begin() + 700 * 784));
  gz.push_back(0);
  WriteBytes(dir.File("m.gz"), gz);
  Result<IdxArray> past = ReadIdxFile(dir.File("m.gz"), kIdxImagesMagic);
  ASSERT_FALSE(past);
  EXPECT_EQ(past.error().code(), StatusCode::kDataLoss);
  EXPECT_NE(past.error().message().find("1 unexpected bytes after the end of the gzip stream (at offset " +
                                        std::to_string(gz.size() - 1) + ")"),
            std::string::npos)
      << past.error().message();
}

TEST(IdxReaderTest, AskedForFewerRecordsReadsOnlyThePrefix) {
  TempDir dir;
  const std::vector<uint8_t> pixels = Pixels(400 * 784);
  std::vector<uint8_t> gz = Gzip(IdxBytes(kIdxImagesMagic, {400, 28, 28}, pixels));
  gz.resize(gz.size() * 3 / 4);
  WriteBytes(dir.File("cut.gz"), gz);
  for (uint32_t n : {1u, 37u}) {
    Result<IdxArray> idx = ReadIdxFile(dir.File("cut.gz"), kIdxImagesMagic, n);
    ASSERT_TRUE(idx) << n << ": " << idx.error().ToString();
    EXPECT_EQ(idx->dims, (std::vector<uint32_t>{400, 28, 28}));
    EXPECT_EQ(idx->records, n);
    EXPECT_EQ(idx->bytes, std::vector<uint8_t>(pixels.begin(), pixels.begin() + n * 784)) << n;
  }
  EXPECT_FALSE(ReadIdxFile(dir.File("cut.gz"), kIdxImagesMagic));
  Result<IdxArray> beyond = ReadIdxFile(dir.File("cut.gz"), kIdxImagesMagic, 399);
  ASSERT_FALSE(beyond);
  EXPECT_EQ(beyond.error().code(), StatusCode::kDataLoss) << beyond.error().message();
  // A limit at or above the count reads the whole file, with every check.
  Result<IdxArray> all = ReadIdxFile(dir.File("cut.gz"), kIdxImagesMagic, 400);
  EXPECT_FALSE(all);
}

TEST(IdxReaderTest, GarbageAfterGzipStreamIsDataLoss) {
  TempDir dir;
  std::vector<uint8_t> gz = Gzip(IdxBytes(kIdxLabelsMagic, {10}, Labels(10)));
  gz.push_back('x');
  gz.push_back('y');
  WriteBytes(dir.File("g.gz"), gz);
  Result<IdxArray> idx = ReadIdxFile(dir.File("g.gz"), kIdxLabelsMagic);
  ASSERT_FALSE(idx);
  EXPECT_EQ(idx.error().code(), StatusCode::kDataLoss);
  EXPECT_NE(idx.error().message().find("after the end of the gzip stream"), std::string::npos)
      << idx.error().message();
}

TEST(IdxReaderTest, WrongMagicIsInvalidArgument) {
  TempDir dir;
  WriteBytes(dir.File("l.gz"), Gzip(IdxBytes(kIdxLabelsMagic, {10}, Labels(10))));
  Result<IdxArray> idx = ReadIdxFile(dir.File("l.gz"), kIdxImagesMagic);
  ASSERT_FALSE(idx);
  EXPECT_EQ(idx.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(idx.error().message().find("0x00000801"), std::string::npos) << idx.error().message();
  EXPECT_NE(idx.error().message().find(dir.File("l.gz")), std::string::npos);
}

TEST(IdxReaderTest, MissingFileIsNotFound) {
  TempDir dir;
  Result<IdxArray> idx = ReadIdxFile(dir.File("nope.gz"), kIdxLabelsMagic);
  ASSERT_FALSE(idx);
  EXPECT_EQ(idx.error().code(), StatusCode::kNotFound);
  EXPECT_NE(idx.error().message().find(dir.File("nope.gz")), std::string::npos);
}

TEST(IdxImageDatasetTest, LoadsAndNormalises) {
  TempDir dir;
  WriteImageSet(dir, 5);
  Result<Dataset> ds = LoadIdxImageDataset(dir.File("images.gz"), dir.File("labels.gz"), 5, 0, "tiny");
  ASSERT_TRUE(ds) << ds.error().ToString();
  EXPECT_EQ(ds->count, 5);
  EXPECT_EQ(ds->channels, 1);
  EXPECT_EQ(ds->height, 28);
  EXPECT_EQ(ds->width, 28);
  ASSERT_EQ(ds->images.size(), 5u * 784u);
  const std::vector<uint8_t> labels = Labels(5);
  const std::vector<int32_t> want_labels(labels.begin(), labels.end());
  EXPECT_EQ(ds->labels, want_labels);
  const std::vector<uint8_t> pixels = Pixels(5 * 784);
  for (size_t i = 0; i < pixels.size(); ++i) {
    const float want = (pixels[i] / 255.0f - kFashionMnistMean) / kFashionMnistStd;
    // Same float expression as the loader's lookup table: exact up to float rounding.
    ASSERT_NEAR(ds->images[i], want, 1e-6f) << "pixel " << i;
  }
  EXPECT_NE(ds->description.find("tiny"), std::string::npos);
}

TEST(IdxImageDatasetTest, LimitTakesFirstImages) {
  TempDir dir;
  WriteImageSet(dir, 6);
  Result<Dataset> all = LoadIdxImageDataset(dir.File("images.gz"), dir.File("labels.gz"), 0, 0, "t");
  Result<Dataset> two = LoadIdxImageDataset(dir.File("images.gz"), dir.File("labels.gz"), 0, 2, "t");
  Result<Dataset> many = LoadIdxImageDataset(dir.File("images.gz"), dir.File("labels.gz"), 0, 100, "t");
  ASSERT_TRUE(all && two && many);
  EXPECT_EQ(two->count, 2);
  EXPECT_EQ(std::vector<float>(all->images.begin(), all->images.begin() + 2 * 784), two->images);
  EXPECT_EQ(std::vector<int32_t>(all->labels.begin(), all->labels.begin() + 2), two->labels);
  EXPECT_EQ(many->count, 6);
  Result<Dataset> negative = LoadIdxImageDataset(dir.File("images.gz"), dir.File("labels.gz"), 0, -1, "t");
  ASSERT_FALSE(negative);
  EXPECT_EQ(negative.error().code(), StatusCode::kInvalidArgument);
}

TEST(IdxImageDatasetTest, WrongImageDimensionsAreRejected) {
  TempDir dir;
  WriteImageSet(dir, 3, 28, 27);
  Result<Dataset> ds = LoadIdxImageDataset(dir.File("images.gz"), dir.File("labels.gz"), 0, 0, "t");
  ASSERT_FALSE(ds);
  EXPECT_EQ(ds.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ds.error().message().find("[3, 28, 27]"), std::string::npos) << ds.error().message();
  EXPECT_NE(ds.error().message().find(dir.File("images.gz")), std::string::npos);
}

TEST(IdxImageDatasetTest, ImageAndLabelCountsMustAgree) {
  TempDir dir;
  WriteImageSet(dir, 5, 28, 28, 4);
  Result<Dataset> ds = LoadIdxImageDataset(dir.File("images.gz"), dir.File("labels.gz"), 0, 0, "t");
  ASSERT_FALSE(ds);
  EXPECT_EQ(ds.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ds.error().message().find("5 images"), std::string::npos) << ds.error().message();
  EXPECT_NE(ds.error().message().find("4 labels"), std::string::npos) << ds.error().message();
}

TEST(IdxImageDatasetTest, CountMustMatchExpected) {
  TempDir dir;
  WriteImageSet(dir, 5);
  Result<Dataset> ds = LoadIdxImageDataset(dir.File("images.gz"), dir.File("labels.gz"), 6, 0, "t");
  ASSERT_FALSE(ds);
  EXPECT_EQ(ds.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ds.error().message().find("expected 6"), std::string::npos) << ds.error().message();
}

TEST(IdxImageDatasetTest, LabelOutOfRangeIsRejected) {
  TempDir dir;
  WriteImageSet(dir, 5);
  std::vector<uint8_t> labels = Labels(5);
  labels[3] = 10;
  WriteBytes(dir.File("labels.gz"), Gzip(IdxBytes(kIdxLabelsMagic, {5}, labels)));
  // Even with a limit that does not reach the bad label, the whole file is checked.
  Result<Dataset> ds = LoadIdxImageDataset(dir.File("images.gz"), dir.File("labels.gz"), 0, 2, "t");
  ASSERT_FALSE(ds);
  EXPECT_EQ(ds.error().code(), StatusCode::kDataLoss);
  EXPECT_NE(ds.error().message().find("label 10 at index 3"), std::string::npos) << ds.error().message();
  EXPECT_NE(ds.error().message().find(dir.File("labels.gz")), std::string::npos);
}

TEST(FashionMnistTest, MissingFilesNameTheDebianPackage) {
  TempDir dir;
  Result<Dataset> ds = LoadFashionMnist(dir.path(), Split::kTrain, 0);
  ASSERT_FALSE(ds);
  EXPECT_EQ(ds.error().code(), StatusCode::kNotFound);
  EXPECT_NE(ds.error().message().find("dataset-fashion-mnist"), std::string::npos) << ds.error().message();
  EXPECT_NE(ds.error().message().find(dir.File("train-images-idx3-ubyte.gz")), std::string::npos)
      << ds.error().message();
}

bool HaveFashionMnist() {
  return fs::exists(std::string(kFashionMnistDefaultDir) + "/train-images-idx3-ubyte.gz");
}

TEST(FashionMnistTest, RealTrainSplit) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Debian package dataset-fashion-mnist is not installed";
  const auto start = std::chrono::steady_clock::now();
  Result<Dataset> ds = LoadFashionMnist(kFashionMnistDefaultDir, Split::kTrain, 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(ds) << ds.error().ToString();
  std::cout << "[          ] loaded " << ds->description << " in " << seconds << " s\n";
  EXPECT_EQ(ds->count, 60000);
  ASSERT_EQ(ds->images.size(), size_t{60000} * 784);
  ASSERT_EQ(ds->labels.size(), 60000u);
  std::array<int, kNumClasses> histogram{};
  for (int32_t l : ds->labels) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, kNumClasses);
    ++histogram[l];
  }
  for (int c = 0; c < kNumClasses; ++c) EXPECT_EQ(histogram[c], 6000) << "class " << c;
  double sum = 0, sum_sq = 0;
  for (float v : ds->images) {
    sum += v;
    sum_sq += double{v} * v;
  }
  const double mean = sum / ds->images.size();
  const double std = std::sqrt(sum_sq / ds->images.size() - mean * mean);
  // The constants are the data set's own mean and std rounded to 4 digits, so
  // the normalised pixels have mean ~0 and std ~1 to about 1e-3.
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(std, 1.0, 0.01);
}

TEST(FashionMnistTest, RealTestSplitAndLimit) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Debian package dataset-fashion-mnist is not installed";
  Result<Dataset> ds = LoadFashionMnist(kFashionMnistDefaultDir, Split::kTest, 0);
  ASSERT_TRUE(ds) << ds.error().ToString();
  EXPECT_EQ(ds->count, 10000);
  std::array<int, kNumClasses> histogram{};
  for (int32_t l : ds->labels) ++histogram[l];
  for (int c = 0; c < kNumClasses; ++c) EXPECT_EQ(histogram[c], 1000) << "class " << c;
  Result<Dataset> some = LoadFashionMnist(std::string(kFashionMnistDefaultDir) + "/", Split::kTest, 100);
  ASSERT_TRUE(some) << some.error().ToString();
  EXPECT_EQ(some->count, 100);
  EXPECT_EQ(some->labels, std::vector<int32_t>(ds->labels.begin(), ds->labels.begin() + 100));
  EXPECT_EQ(some->images, std::vector<float>(ds->images.begin(), ds->images.begin() + 100 * 784));
}

TEST(SyntheticDatasetTest, DeterministicAndWellFormed) {
  const Dataset a = MakeSyntheticDataset(200, 7);
  const Dataset b = MakeSyntheticDataset(200, 7);
  const Dataset c = MakeSyntheticDataset(200, 8);
  EXPECT_EQ(a.count, 200);
  ASSERT_EQ(a.images.size(), 200u * 784u);
  ASSERT_EQ(a.labels.size(), 200u);
  EXPECT_EQ(a.images, b.images);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(a.images, c.images);
  std::array<int, kNumClasses> histogram{};
  for (int32_t l : a.labels) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, kNumClasses);
    ++histogram[l];
  }
  // 200 uniform labels: 20 per class expected, sd ~4.2; 0 would be a broken draw.
  for (int c2 = 0; c2 < kNumClasses; ++c2) EXPECT_GT(histogram[c2], 0) << "class " << c2;
  for (float v : a.images) ASSERT_TRUE(std::isfinite(v));
}

TEST(SyntheticDatasetTest, ImagesOfOneClassAreCloserThanAcrossClasses) {
  // Each image is its class prototype plus noise uniform in [-0.5, 0.5)
  // (variance 1/12); prototypes are uniform in [-1, 1) (variance 1/3). The mean
  // squared distance per pixel is 2/12 = 0.17 within a class and 2/12 + 2/3 =
  // 0.83 across classes; the bounds below sit halfway, far from both (each
  // average is over thousands of pixels).
  const Dataset ds = MakeSyntheticDataset(100, 3);
  double within = 0, across = 0;
  int n_within = 0, n_across = 0;
  for (int i = 0; i < 20; ++i) {
    for (int j = i + 1; j < 20; ++j) {
      double d = 0;
      for (int p = 0; p < 784; ++p) {
        const double diff = ds.images[i * 784 + p] - ds.images[j * 784 + p];
        d += diff * diff;
      }
      d /= 784;
      if (ds.labels[i] == ds.labels[j]) {
        within += d;
        ++n_within;
      } else {
        across += d;
        ++n_across;
      }
    }
  }
  ASSERT_GT(n_within, 0);
  ASSERT_GT(n_across, 0);
  EXPECT_LT(within / n_within, 0.5);
  EXPECT_GT(across / n_across, 0.5);
}

TEST(SyntheticDatasetTest, ZeroCountIsEmpty) {
  const Dataset ds = MakeSyntheticDataset(0, 1);
  EXPECT_EQ(ds.count, 0);
  EXPECT_TRUE(ds.images.empty());
  EXPECT_TRUE(ds.labels.empty());
}

}  // namespace
}  // namespace chorus::trainer
