// The one conversion of libfabric error codes into Status (see fabric_objects.h).
#include "gossip/transport/fabric/fabric_objects.h"

#include <cstdlib>

namespace chorus::gossip::fabric {

Status FabricStatus(int ret, std::string_view what) {
  const int err = std::abs(ret);
  StatusCode code = StatusCode::kInternal;
  switch (err) {
    case FI_ETRUNC:
    case FI_ETOOSMALL:
      code = StatusCode::kDataLoss;
      break;
    case FI_ECANCELED:
      code = StatusCode::kCancelled;
      break;
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case FI_EHOSTUNREACH:
    case FI_ENETUNREACH:
    case FI_ENETDOWN:
    case FI_EADDRNOTAVAIL:
    case FI_ENODATA:
      code = StatusCode::kUnavailable;
      break;
    case FI_ETIMEDOUT:
      code = StatusCode::kDeadlineExceeded;
      break;
    case FI_EINVAL:
    case FI_EBADFLAGS:
      code = StatusCode::kInvalidArgument;
      break;
    case FI_ENOMEM:
    case FI_ENOSPC:
    case FI_EAGAIN:
      code = StatusCode::kResourceExhausted;
      break;
    case FI_ENOSYS:
    case FI_EOPNOTSUPP:
      code = StatusCode::kUnimplemented;
      break;
    case FI_ENOENT:
      code = StatusCode::kNotFound;
      break;
    default:
      break;
  }
  std::string message(what);
  message += ": ";
  message += FabricErrorText(err);
  message += " (-" + std::to_string(err) + ")";
  return Status(code, std::move(message));
}

std::string VersionString(uint32_t version) {
  return std::to_string(FI_MAJOR(version)) + "." + std::to_string(FI_MINOR(version));
}

}  // namespace chorus::gossip::fabric
