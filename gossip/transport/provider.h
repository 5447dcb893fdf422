// The libfabric providers Chorus runs over, named once: each name is the
// provider's own (fi_info->fabric_attr->prov_name), so the fabric transport
// hands it to fi_getinfo as it is. Plain C++: no libfabric headers.
#pragma once

#include <cstddef>
#include <string_view>

#include "common/enum_names.h"

namespace chorus::gossip {

enum class FabricProvider {
  kTcpRxm,  // TCP with the RxM utility provider: reliable messages between hosts
  kNet,     // libfabric's net provider (TCP, RDM natively)
  kShm,     // shared memory inside one host
};
inline constexpr EnumName<FabricProvider> kFabricProviderNames[] = {
    {FabricProvider::kTcpRxm, "tcp;ofi_rxm"},
    {FabricProvider::kNet, "net"},
    {FabricProvider::kShm, "shm"},
};
inline std::string_view ProviderName(FabricProvider provider) { return NameOf(kFabricProviderNames, provider); }

// tcp;ofi_rxm: the largest message sent eagerly by default
// (FabricOptions::rxm_eager_limit, fabric.rxm_eager_kib): every message of a
// fused all-reduce bucket's size (1 MiB) and below, and a whole MLP's
// parameters in one gossip message (940 KB).
inline constexpr size_t kDefaultRxmEagerLimit = size_t{1} << 20;

}  // namespace chorus::gossip
