// common/: Status and Result, the logging facade, fp16, clocks, files and POSIX
// I/O helpers, enum names; std only.
//
// Status and Result<T>: how every library function in Chorus reports failure.
//
// A Status carries a code and a message that names what failed and where (file,
// peer, key). Result<T> is tl::expected<T, Status>. Library code never throws;
// exceptions from third-party code are caught at the edge that calls it and
// turned into a Status there. Std (and tl::expected) only.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <tl/expected.hpp>

namespace chorus {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // bad config value, bad frame, bad shape
  kNotFound,           // missing file or key
  kDataLoss,           // corrupt or truncated data
  kUnavailable,        // peer gone, connection refused
  kDeadlineExceeded,   // a wait ran past its deadline
  kPermissionDenied,   // authentication failed
  kFailedPrecondition, // wrong state, version mismatch
  kOutOfRange,
  kResourceExhausted,  // queue or frame over its limit
  kCancelled,
  kAborted,
  kUnimplemented,
  kInternal,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  // Lets `return Err(...)` and the macros below work in functions returning Status.
  Status(tl::unexpected<Status> u) : Status(std::move(u.value())) {}  // NOLINT

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "DEADLINE_EXCEEDED: recv from rank 3 (127.0.0.1:4001) ..."
  std::string ToString() const;

  // Returns a copy with `context` prepended: "context: message".
  Status WithContext(std::string_view context) const;

  // Lets Status be ignored explicitly where a failure does not matter.
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename T>
using Result = tl::expected<T, Status>;

// Ok, or `result`'s error: for a caller that needs only whether it worked.
template <typename T>
Status StatusOf(const Result<T>& result) {
  return result ? Status::Ok() : result.error();
}

inline tl::unexpected<Status> Err(Status s) { return tl::unexpected<Status>(std::move(s)); }
inline tl::unexpected<Status> Err(StatusCode code, std::string message) {
  return tl::unexpected<Status>(Status(code, std::move(message)));
}

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Converts errno (the one place for that error space) into a Status.
Status ErrnoStatus(int err, std::string_view what);

}  // namespace chorus

#define CHORUS_CONCAT_INNER(a, b) a##b
#define CHORUS_CONCAT(a, b) CHORUS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is not ok.
// Works in functions returning Status or Result<T>.
#define CHORUS_RETURN_IF_ERROR(expr)                                 \
  do {                                                               \
    ::chorus::Status chorus_status_ = (expr);                        \
    if (!chorus_status_.ok()) return ::chorus::Err(std::move(chorus_status_)); \
  } while (0)

// `CHORUS_ASSIGN_OR_RETURN(auto x, MakeX());`
#define CHORUS_ASSIGN_OR_RETURN(lhs, expr)                                  \
  auto CHORUS_CONCAT(chorus_result_, __LINE__) = (expr);                    \
  if (!CHORUS_CONCAT(chorus_result_, __LINE__))                             \
    return ::chorus::Err(std::move(CHORUS_CONCAT(chorus_result_, __LINE__)).error()); \
  lhs = std::move(*CHORUS_CONCAT(chorus_result_, __LINE__))
