// Test helpers shared by the transport tests: build a connected world of N
// transports of one kind (local hub, libfabric tcp;ofi_rxm in its eager mode
// and by rendezvous, net, shm, and tcp;ofi_rxm and net with every message
// sealed under an epoch key) and fill / check byte patterns.
//
// Must not: hide failures (every helper returns Result or asserts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "gossip/transport/transport.h"
#include "gossip/transport/fabric/fabric_transport.h"
#include "gossip/transport/local/local_transport.h"
#include "gossip/transport/seal/data_seal.h"

namespace chorus::gossip::testing {

// kTcp and kTcpSealed run rxm's eager mode (FabricOptions::rxm_eager_limit's
// default); the rendezvous kinds run its own protocols (rxm_eager_limit 0).
enum class TransportKind {
  kLocal, kTcp, kNet, kShm, kTcpSealed, kNetSealed, kTcpRendezvous, kTcpRendezvousSealed
};

inline bool Sealed(TransportKind kind) {
  return kind == TransportKind::kTcpSealed || kind == TransportKind::kNetSealed ||
         kind == TransportKind::kTcpRendezvousSealed;
}

inline bool RxmRendezvous(TransportKind kind) {
  return kind == TransportKind::kTcpRendezvous || kind == TransportKind::kTcpRendezvousSealed;
}

// The key a sealed world uses in membership epoch `epoch`.
inline DataKey WorldKey(uint64_t epoch) { return PublicTestKey("test world epoch " + std::to_string(epoch)); }

// A hub of `n` slots in virtual time: latency_s per message, bytes_per_second
// per sender NIC (<= 0: infinite), events in order when `ordered`
// (event_order.h).
inline std::shared_ptr<LocalHub> VirtualTimeHub(int n, double latency_s, double bytes_per_second,
                                                bool ordered = false) {
  LocalHubOptions options;
  options.world_size = n;
  options.virtual_time.enabled = true;
  options.virtual_time.latency_s = latency_s;
  options.virtual_time.bytes_per_second = bytes_per_second;
  options.virtual_time.ordered = ordered;
  return LocalHub::Create(options);
}

inline std::string KindName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kLocal: return "Local";
    case TransportKind::kTcp: return "FabricTcpRxm";
    case TransportKind::kNet: return "FabricNet";
    case TransportKind::kShm: return "FabricShm";
    case TransportKind::kTcpSealed: return "FabricTcpRxmSealed";
    case TransportKind::kNetSealed: return "FabricNetSealed";
    case TransportKind::kTcpRendezvous: return "FabricTcpRxmRendezvous";
    case TransportKind::kTcpRendezvousSealed: return "FabricTcpRxmRendezvousSealed";
  }
  return "?";
}

inline FabricProvider ProviderOf(TransportKind kind) {
  switch (kind) {
    case TransportKind::kShm: return FabricProvider::kShm;
    case TransportKind::kNet:
    case TransportKind::kNetSealed: return FabricProvider::kNet;
    default: return FabricProvider::kTcpRxm;
  }
}

inline std::string PeerName(int rank) { return "node" + std::to_string(rank); }

// N transports of one kind with SetPeers done (rank r is transports[r], named
// "node<r>"); a sealed kind's have WorldKey(0).
struct World {
  std::shared_ptr<LocalHub> hub;  // local kind only
  std::vector<std::unique_ptr<Transport>> transports;

  Transport& operator[](int r) { return *transports[r]; }
  int size() const { return static_cast<int>(transports.size()); }
};

inline Result<World> MakeWorld(TransportKind kind, int n, FabricOptions fabric = {}) {
  World world;
  if (kind == TransportKind::kLocal) {
    LocalHubOptions options;
    options.world_size = n;
    world.hub = LocalHub::Create(options);
    world.transports = world.hub->MakeAll();
  } else {
    fabric.provider = ProviderOf(kind);
    if (RxmRendezvous(kind)) fabric.rxm_eager_limit = 0;
    for (int r = 0; r < n; ++r) {
      fabric.node_name = PeerName(r);
      CHORUS_ASSIGN_OR_RETURN(auto t, MakeFabricTransport(fabric));
      world.transports.push_back(std::move(t));
    }
  }
  std::vector<PeerInfo> peers;
  for (int r = 0; r < n; ++r) {
    peers.push_back(PeerInfo{r, world.transports[r]->LocalAddress(), PeerName(r)});
  }
  for (int r = 0; r < n; ++r) {
    if (Sealed(kind)) CHORUS_RETURN_IF_ERROR(world.transports[r]->SetEpochKey(0, WorldKey(0)));
    CHORUS_RETURN_IF_ERROR(world.transports[r]->SetPeers(r, peers));
  }
  return world;
}

// A deterministic byte pattern of (seed, index), so a misplaced or stale byte
// shows up.
inline std::byte PatternByte(uint64_t seed, size_t i) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + i;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<std::byte>(x & 0xFF);
}

inline std::vector<std::byte> Pattern(uint64_t seed, size_t n) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = PatternByte(seed, i);
  return out;
}

// Index of the first byte that differs from Pattern(seed, n), or n.
inline size_t FirstMismatch(const std::vector<std::byte>& data, uint64_t seed, size_t n) {
  if (data.size() < n) return 0;
  for (size_t i = 0; i < n; ++i) {
    if (data[i] != PatternByte(seed, i)) return i;
  }
  return n;
}

inline std::span<const std::byte> AsBytes(const uint64_t& v) {
  return {reinterpret_cast<const std::byte*>(&v), sizeof(v)};
}
inline std::span<std::byte> AsWritableBytes(uint64_t& v) {
  return {reinterpret_cast<std::byte*>(&v), sizeof(v)};
}

}  // namespace chorus::gossip::testing
