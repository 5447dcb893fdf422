// Private to gossip/transport/fabric: RAII owners of libfabric objects and the
// ONE conversion of libfabric error codes into Status.
//
// Every libfabric object (fabric, domain, cq, av, ep, mr) is held by a FidOwner
// that fi_close()s it exactly once; fi_info lists by an InfoOwner. Destruction
// order is the reverse of declaration order in the owning class, which must
// follow fabtests' setup order (fabric, domain, cq, av, ep) so the endpoint is
// closed first.
//
// Must not: be included outside gossip/transport/fabric/ (it pulls <rdma/...>).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "gossip/transport/fabric/fabric_api.h"

namespace chorus::gossip::fabric {

// Converts a libfabric return code (negative FI_E* value, as returned by every
// fi_* call) into a Status naming `what`. The one place for this error space.
Status FabricStatus(int ret, std::string_view what);

// Runs a libfabric call and returns its converted error from the enclosing
// function (Status or Result<T>) when it is negative.
#define CHORUS_FI_RETURN_IF_ERROR(call, what)                                  \
  do {                                                                         \
    const int chorus_fi_ret_ = static_cast<int>(call);                         \
    if (chorus_fi_ret_ < 0)                                                    \
      return ::chorus::Err(::chorus::gossip::fabric::FabricStatus(chorus_fi_ret_, (what))); \
  } while (0)

// Owns one libfabric object whose first member is `struct fid fid` (fid_fabric,
// fid_domain, fid_cq, fid_av, fid_ep, fid_mr).
template <typename T>
class FidOwner {
 public:
  FidOwner() = default;
  explicit FidOwner(T* obj) : obj_(obj) {}
  ~FidOwner() { Reset(); }
  FidOwner(const FidOwner&) = delete;
  FidOwner& operator=(const FidOwner&) = delete;
  FidOwner(FidOwner&& other) noexcept : obj_(other.obj_) { other.obj_ = nullptr; }
  FidOwner& operator=(FidOwner&& other) noexcept {
    if (this != &other) {
      Reset();
      obj_ = other.obj_;
      other.obj_ = nullptr;
    }
    return *this;
  }

  T* get() const { return obj_; }
  T** out() {
    Reset();
    return &obj_;
  }
  explicit operator bool() const { return obj_ != nullptr; }
  // Closes the object now; errors at close are not actionable and are ignored.
  void Reset() {
    if (obj_ != nullptr) {
      fi_close(&obj_->fid);
      obj_ = nullptr;
    }
  }

 private:
  T* obj_ = nullptr;
};

using FabricOwner = FidOwner<fid_fabric>;
using DomainOwner = FidOwner<fid_domain>;
using CqOwner = FidOwner<fid_cq>;
using AvOwner = FidOwner<fid_av>;
using EpOwner = FidOwner<fid_ep>;
using MrOwner = FidOwner<fid_mr>;

// Owns an fi_info list (fi_getinfo / fi_allocinfo / fi_dupinfo).
struct InfoDeleter {
  void operator()(fi_info* info) const {
    if (info != nullptr) FreeInfo(info);
  }
};
using InfoOwner = std::unique_ptr<fi_info, InfoDeleter>;

// "117.0" for FI_VERSION(117, 0).
std::string VersionString(uint32_t version);

}  // namespace chorus::gossip::fabric
