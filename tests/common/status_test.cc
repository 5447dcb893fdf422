#include "common/status.h"

#include <gtest/gtest.h>

namespace chorus {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return Err(InvalidArgument("odd: " + std::to_string(x)));
  return x / 2;
}

Result<int> Quarter(int x) {
  CHORUS_ASSIGN_OR_RETURN(int h, Half(x));
  CHORUS_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckQuarter(int x) {
  auto q = Quarter(x);
  if (!q) return q.error();
  return Status::Ok();
}

TEST(Status, PropagatesThroughMacros) {
  EXPECT_EQ(*Quarter(8), 2);
  auto bad = Quarter(6);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.error().ToString(), "INVALID_ARGUMENT: odd: 3");
  EXPECT_TRUE(CheckQuarter(8).ok());
  EXPECT_FALSE(CheckQuarter(6).ok());
}

TEST(Status, WithContextPrefixes) {
  Status s = NotFound("file.toml").WithContext("loading config");
  EXPECT_EQ(s.message(), "loading config: file.toml");
  EXPECT_TRUE(Status::Ok().WithContext("x").ok());
}

TEST(Status, ErrnoMapsCodes) {
  EXPECT_EQ(ErrnoStatus(ENOENT, "open /x").code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoStatus(ECONNREFUSED, "connect").code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace chorus
