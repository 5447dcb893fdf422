// Tests for the safetensors writer and reader: round
// trips of several dtypes, byte-exact output for known small files, rejection
// of corrupt files with errors naming the path and tensor, and no temp files
// left behind. Fixtures are written to a temporary directory at run time.
#include "trainer/safetensors.h"

#include "tests/util/temp_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/fp16.h"

namespace chorus::trainer {
namespace {

namespace fs = std::filesystem;

// Every test gets its own folder, named after this file.
class SafetensorsTempDir : public chorus::testing::TempDir {
 public:
  SafetensorsTempDir() : chorus::testing::TempDir("chorus_safetensors_test") {}
};

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void WriteSafetensorsBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

template <typename T>
std::vector<uint8_t> AsBytes(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());  // x86-64: little-endian
  return out;
}

// A file: 8-byte little-endian header length, the header text as given (no
// padding added), then `data`.
std::vector<uint8_t> RawFile(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + data.size());
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  for (char c : header) out.push_back(static_cast<uint8_t>(c));
  for (uint8_t b : data) out.push_back(b);
  return out;
}

NamedTensor Tensor(std::string name, std::string dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  return NamedTensor{std::move(name), std::move(dtype), std::move(shape), std::move(bytes)};
}

TEST(SafetensorsTest, RoundTripsDtypesEmptyTensorsAndMetadata) {
  SafetensorsTempDir dir;
  std::vector<uint16_t> halves;
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 1e-7f}) halves.push_back(FloatToHalfBits(f));
  const std::vector<NamedTensor> tensors = {
      Tensor("conv1.weight", "F32", {2, 3}, AsBytes(std::vector<float>{1, -2, 3.5f, 0, 1e-30f, -0.0f})),
      Tensor("bn.num_batches_tracked", "I64", {}, AsBytes(std::vector<int64_t>{1234567890123LL})),
      Tensor("fc.half", "F16", {5}, AsBytes(halves)),
      Tensor("mask", "U8", {3}, {1, 0, 255}),
      Tensor("empty", "F32", {0, 4}, {}),
      Tensor("steps", "I32", {2}, AsBytes(std::vector<int32_t>{-1, 7})),
      Tensor("lr", "F64", {1}, AsBytes(std::vector<double>{0.1})),
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "42"}, {"note", "é ünïcode"}};
  const std::string path = dir.File("model.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());

  Result<SafetensorsFile> file = ReadSafetensors(path);
  ASSERT_TRUE(file) << file.error().ToString();
  EXPECT_EQ(file->metadata, metadata);
  ASSERT_EQ(file->tensors.size(), tensors.size());
  for (const NamedTensor& want : tensors) {
    const NamedTensor* got = file->Find(want.name);
    ASSERT_NE(got, nullptr) << want.name;
    EXPECT_EQ(got->dtype, want.dtype) << want.name;
    EXPECT_EQ(got->shape, want.shape) << want.name;
    EXPECT_EQ(got->bytes, want.bytes) << want.name;
  }
  EXPECT_EQ(file->Find("absent"), nullptr);

  // Layout: wider dtypes first (I64, F64, then F32s, I32, F16, U8), callers'
  // order kept within one width, so each tensor is aligned to its element size.
  std::vector<std::string> order;
  for (const NamedTensor& t : file->tensors) order.push_back(t.name);
  EXPECT_EQ(order, (std::vector<std::string>{"bn.num_batches_tracked", "lr", "conv1.weight", "empty",
                                             "steps", "fc.half", "mask"}));
  const std::vector<uint8_t> raw = ReadBytes(path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | raw[i];
  EXPECT_EQ(header_len % 8, 0u) << "header padded to a multiple of 8";
  EXPECT_EQ(raw.size(), 8 + header_len + 8 + 8 + 24 + 8 + 10 + 3);
}

TEST(SafetensorsTest, MatchesTheReferenceBytesForAKnownFile) {
  // The byte array from the reference implementation's alignment test
  // (huggingface/safetensors, safetensors/src/tensor.rs): one F32 tensor "attn0"
  // of shape [1, 1, 2, 3] holding 0..5. The 65-byte JSON is padded with 7 spaces
  // to 72, the length field, so the data starts 8-byte aligned at offset 80.
  SafetensorsTempDir dir;
  const std::string path = dir.File("attn.safetensors");
  const std::vector<NamedTensor> tensors = {
      Tensor("attn0", "F32", {1, 1, 2, 3}, AsBytes(std::vector<float>{0, 1, 2, 3, 4, 5}))};
  ASSERT_TRUE(WriteSafetensors(path, tensors, {}).ok());
  const std::vector<uint8_t> expected = {
      72, 0, 0, 0, 0, 0, 0, 0, 123, 34, 97, 116, 116, 110, 48, 34, 58, 123, 34, 100, 116,
      121, 112, 101, 34, 58, 34, 70, 51, 50, 34, 44, 34, 115, 104, 97, 112, 101, 34, 58,
      91, 49, 44, 49, 44, 50, 44, 51, 93, 44, 34, 100, 97, 116, 97, 95, 111, 102, 102,
      115, 101, 116, 115, 34, 58, 91, 48, 44, 50, 52, 93, 125, 125, 32, 32, 32, 32, 32,
      32, 32, 0, 0, 0, 0, 0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64, 0, 0,
      160, 64};
  EXPECT_EQ(ReadBytes(path), expected);
}

TEST(SafetensorsTest, MetadataComesFirstAndPaddingIsSpaces) {
  SafetensorsTempDir dir;
  const std::string path = dir.File("m.safetensors");
  const std::vector<NamedTensor> tensors = {Tensor("w", "F16", {2}, {0x00, 0x3c, 0x00, 0xc0})};
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}).ok());
  const std::string json =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})";
  ASSERT_EQ(json.size(), 85u);
  EXPECT_EQ(ReadBytes(path), RawFile(json + "   ", {0x00, 0x3c, 0x00, 0xc0}));  // 85 + 3 = 88
}

TEST(SafetensorsTest, ReadsUnpaddedFilesFromOlderWriters) {
  // The reference's Python test file from before padding was introduced: a
  // 60-byte header with no padding, one I32 [2, 2] tensor of zeros.
  SafetensorsTempDir dir;
  const std::string path = dir.File("old.safetensors");
  WriteSafetensorsBytes(path, RawFile(R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})",
                           std::vector<uint8_t>(16, 0)));
  Result<SafetensorsFile> file = ReadSafetensors(path);
  ASSERT_TRUE(file) << file.error().ToString();
  ASSERT_EQ(file->tensors.size(), 1u);
  EXPECT_EQ(file->tensors[0].name, "test");
  EXPECT_EQ(file->tensors[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(file->tensors[0].bytes, std::vector<uint8_t>(16, 0));
  EXPECT_TRUE(file->metadata.empty());
}

TEST(SafetensorsTest, NoTensorsIsAValidFile) {
  SafetensorsTempDir dir;
  const std::string path = dir.File("none.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {}, {}).ok());
  EXPECT_EQ(ReadBytes(path), RawFile("{}      ", {}));
  Result<SafetensorsFile> file = ReadSafetensors(path);
  ASSERT_TRUE(file) << file.error().ToString();
  EXPECT_TRUE(file->tensors.empty());
}

TEST(SafetensorsTest, WriterRejectsBadTensors) {
  SafetensorsTempDir dir;
  const std::string path = dir.File("bad.safetensors");
  struct Case {
    std::vector<NamedTensor> tensors;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {{Tensor("a", "F32", {2}, {0, 0, 0, 0})}, "does not match"},
      {{Tensor("a", "Q4", {1}, {0})}, "unknown dtype"},
      {{Tensor("a", "U8", {1}, {0}), Tensor("a", "U8", {1}, {0})}, "twice"},
      {{Tensor("__metadata__", "U8", {1}, {0})}, "not allowed"},
      {{Tensor("a", "U8", {-1}, {})}, "does not match"},
  };
  for (const Case& c : cases) {
    const Status s = WriteSafetensors(path, c.tensors, {});
    ASSERT_FALSE(s.ok()) << c.expect;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  }
  EXPECT_TRUE(dir.List().empty()) << "nothing written for rejected input";
}

// Writes `bytes` and expects ReadSafetensors to fail with kDataLoss and a
// message holding the path and every string in `needles`.
void ExpectRejected(const SafetensorsTempDir& dir, const std::vector<uint8_t>& bytes,
                    const std::vector<std::string>& needles) {
  const std::string path = dir.File("corrupt.safetensors");
  WriteSafetensorsBytes(path, bytes);
  Result<SafetensorsFile> file = ReadSafetensors(path);
  ASSERT_FALSE(file) << needles[0];
  EXPECT_EQ(file.error().code(), StatusCode::kDataLoss) << file.error().message();
  EXPECT_NE(file.error().message().find(path), std::string::npos) << file.error().message();
  for (const std::string& n : needles) {
    EXPECT_NE(file.error().message().find(n), std::string::npos) << "want '" << n << "' in: "
                                                                 << file.error().message();
  }
}

TEST(SafetensorsTest, RejectsBadHeaderLength) {
  SafetensorsTempDir dir;
  ExpectRejected(dir, {1, 2, 3}, {"shorter than the 8-byte header length"});
  std::vector<uint8_t> too_long = RawFile("{}", {});
  too_long[0] = 200;  // claims 200 header bytes, file has 2
  ExpectRejected(dir, too_long, {"header length 200 runs past the end"});
  std::vector<uint8_t> huge = RawFile("{}", {});
  huge[7] = 0x01;  // 2^56 + 2
  ExpectRejected(dir, huge, {"over the 100000000-byte limit"});
  ExpectRejected(dir, RawFile("", {}), {"does not start with '{'"});
  ExpectRejected(dir, RawFile("[1, 2]", {}), {"does not start with '{'"});
}

TEST(SafetensorsTest, RejectsBadJson) {
  SafetensorsTempDir dir;
  ExpectRejected(dir, RawFile(R"({"a":{"dtype":"F32",)", {}), {"not valid JSON"});
  ExpectRejected(dir, RawFile(R"({"__metadata__":{"k":1}})", {}), {"__metadata__", "'k'", "not a string"});
  ExpectRejected(dir, RawFile(R"({"a":[1]})", {}), {"tensor 'a'", "not a JSON object"});
  ExpectRejected(dir, RawFile(R"({"a":{"dtype":"F32","shape":[1]}})", {0, 0, 0, 0}),
                 {"tensor 'a'", "data_offsets"});
  ExpectRejected(dir, RawFile(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", {0, 0, 0, 0}),
                 {"tensor 'a'", "unknown dtype 'F33'"});
  ExpectRejected(dir, RawFile(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", {0, 0, 0, 0}),
                 {"tensor 'a'", "shape"});
  ExpectRejected(dir,
                 RawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", {0, 0, 0, 0}),
                 {"tensor 'a'", "unknown field 'x'"});
}

TEST(SafetensorsTest, RejectsBadOffsets) {
  SafetensorsTempDir dir;
  const std::vector<uint8_t> eight(8, 0);
  // Out of range: ends past the data area.
  ExpectRejected(dir, RawFile(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", eight),
                 {"tensor 'a'", "run past the 8 data bytes"});
  // Shape disagrees with the span.
  ExpectRejected(dir, RawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", eight),
                 {"tensor 'a'", "needs 4 bytes", "span 8"});
  // End before begin.
  ExpectRejected(dir, RawFile(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", eight),
                 {"tensor 'a'", "end before"});
  // Overlap.
  ExpectRejected(dir,
                 RawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                         eight),
                 {"tensor 'b'", "overlaps tensor 'a'"});
  // Gap between tensors.
  ExpectRejected(dir, RawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
                 {"tensor 'a'", "belong to no tensor"});
  // Bytes after the last tensor.
  ExpectRejected(dir, RawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight),
                 {"4 bytes after the last tensor"});
  // Shape product overflows.
  ExpectRejected(dir,
                 RawFile(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                         eight),
                 {"tensor 'a'", "too many"});
}

TEST(SafetensorsTest, RejectsTruncatedFile) {
  SafetensorsTempDir dir;
  const std::string path = dir.File("t.safetensors");
  const std::vector<NamedTensor> tensors = {
      Tensor("w", "F32", {4}, AsBytes(std::vector<float>{1, 2, 3, 4})),
      Tensor("b", "F32", {2}, AsBytes(std::vector<float>{5, 6}))};
  ASSERT_TRUE(WriteSafetensors(path, tensors, {}).ok());
  std::vector<uint8_t> bytes = ReadBytes(path);
  bytes.resize(bytes.size() - 3);
  ExpectRejected(dir, bytes, {"tensor 'b'", "run past"});
  bytes.resize(20);  // inside the header
  ExpectRejected(dir, bytes, {"runs past the end of the file"});
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  SafetensorsTempDir dir;
  Result<SafetensorsFile> file = ReadSafetensors(dir.File("absent.safetensors"));
  ASSERT_FALSE(file);
  EXPECT_EQ(file.error().code(), StatusCode::kNotFound);
  EXPECT_NE(file.error().message().find(dir.File("absent.safetensors")), std::string::npos);
}

}  // namespace
}  // namespace chorus::trainer
