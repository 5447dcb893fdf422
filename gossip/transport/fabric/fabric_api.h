// libfabric, opened on first use (dlopen) instead of linked. Loading it runs
// the constructors of the provider libraries Debian's libfabric links
// (libinfinipath's calibrates a clock with 0.2 s of sleeps), which every
// process that linked it paid before main(): each test process and each
// `chorus` command that never opens a fabric (docs/testing.md). Only the six
// functions libfabric exports that Chorus calls go through this table; the
// rest of its API is inline functions over the objects' operation tables.
// Internal to gossip/transport/fabric/.
#pragma once

#include <rdma/fabric.h>

#include "common/status.h"

namespace chorus::gossip::fabric {

struct FabricApi {
  decltype(&::fi_getinfo) getinfo = nullptr;
  decltype(&::fi_freeinfo) freeinfo = nullptr;
  decltype(&::fi_dupinfo) dupinfo = nullptr;
  decltype(&::fi_fabric) fabric = nullptr;
  decltype(&::fi_strerror) strerror = nullptr;
  decltype(&::fi_version) version = nullptr;
};

// Opens libfabric once (thread-safe) and returns its functions, or an
// Unavailable error that names the library or symbol that was not found.
Result<const FabricApi*> Libfabric();

// fi_freeinfo: `info` came from libfabric, which is therefore open.
void FreeInfo(fi_info* info);

// fi_strerror(err) when libfabric is open (any error code from it implies
// it is), else the number alone.
std::string FabricErrorText(int err);

}  // namespace chorus::gossip::fabric
