// Tests for common/files.h: whole-file reads with a bound, and WriteFileAtomic
// (written, replaced, no temporary file left behind, errors naming the path).
#include "common/files.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/util/temp_dir.h"

namespace chorus {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

TEST(WriteFileAtomicTest, WritesReplacesAndLeavesNoTempFile) {
  TempDir dir;
  const std::string path = dir.File("out.bin");
  const std::vector<uint8_t> first = {1, 2, 3};
  const std::vector<uint8_t> second(100000, 7);
  ASSERT_TRUE(WriteFileAtomic(path, first).ok());
  EXPECT_EQ(ReadBytes(path), first);
  ASSERT_TRUE(WriteFileAtomic(path, second).ok());
  EXPECT_EQ(ReadBytes(path), second);
  ASSERT_TRUE(WriteFileAtomic(path, {}).ok());
  EXPECT_TRUE(ReadBytes(path).empty());
  EXPECT_EQ(dir.List(), std::vector<std::string>{"out.bin"});
}

TEST(WriteFileAtomicTest, MissingDirectoryIsAnErrorNamingThePath) {
  TempDir dir;
  const std::string path = dir.File("no/such/dir/out.bin");
  const Status s = WriteFileAtomic(path, std::vector<uint8_t>{1});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_TRUE(dir.List().empty());
}

TEST(WriteFileAtomicTest, RenameFailureRemovesTheTempFile) {
  // The target is an existing non-empty directory: rename fails after the temp
  // file was written, which must then be removed.
  TempDir dir;
  const std::string path = dir.File("target");
  fs::create_directories(path + "/child");
  const Status s = WriteFileAtomic(path, std::vector<uint8_t>{1, 2});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_EQ(dir.List(), std::vector<std::string>{"target"});
}

TEST(ReadFileTest, ReadsBytesAndTextAndEnforcesTheBound) {
  TempDir dir;
  const std::string path = dir.File("data.txt");
  ASSERT_TRUE(WriteFileAtomic(path, AsBytes("hello\n")).ok());
  Result<std::string> text = ReadFileText(path);
  ASSERT_TRUE(text) << text.error().ToString();
  EXPECT_EQ(*text, "hello\n");
  Result<std::vector<uint8_t>> bytes = ReadFileBytes(path);
  ASSERT_TRUE(bytes);
  EXPECT_EQ(bytes->size(), 6u);
  Result<std::string> bounded = ReadFileText(path, 5);
  ASSERT_FALSE(bounded);
  EXPECT_EQ(bounded.error().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(bounded.error().message().find(path), std::string::npos);
  Result<std::string> missing = ReadFileText(dir.File("absent"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.error().message().find(dir.File("absent")), std::string::npos);
}

}  // namespace
}  // namespace chorus
