// gossip/transport/fabric/: the Transport over libfabric (tcp;ofi_rxm, net,
// shm); the only folder that includes libfabric's headers.
//
// FabricTransport factory: the real data plane (libfabric RDM endpoints).
//
// One transport = one RDM endpoint with tagged messages, one address vector,
// one completion queue and a progress thread (tcp and shm need the CQ polled);
// over shm, one such endpoint per membership epoch (Transport::BeginEpoch).
// Our 64-bit Tag is the libfabric tag as is (ignore mask 0; no bits reserved);
// a receive for one source uses FI_DIRECTED_RECV, kAnySource is FI_ADDR_UNSPEC
// and its completion's source comes from fi_cq_readfrom (FI_SOURCE).
//
// Isend / Irecv never block: a post the provider refuses for lack of queue
// space (-FI_EAGAIN) waits in a FIFO backlog that progress retries.
//
// Providers are chosen by name: "tcp;ofi_rxm" (between hosts; large messages
// use rxm's rendezvous), "net" (tcp's native RDM endpoint) and "shm" (inside
// one host). For tcp;ofi_rxm and net the endpoint binds to `bind_address`
// (default 127.0.0.1, so tests and local runs never touch another interface):
// it is passed as the node to fi_getinfo with FI_SOURCE, no environment
// variable is needed. A multi-host run sets it to the host's address.
//
// Must not: include <rdma/...> here (callers stay free of libfabric; its types
// live in fabric_transport.cc and fabric_objects.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "gossip/transport/provider.h"
#include "gossip/transport/transport.h"

namespace chorus::gossip {

struct FabricOptions {
  // libfabric provider, matched exactly against fi_info->fabric_attr->prov_name.
  FabricProvider provider = FabricProvider::kTcpRxm;
  // Human name of this endpoint, used in Describe() and log lines ("node2").
  std::string node_name;
  // Address the tcp provider binds to ("" = provider default, every interface).
  // Ignored by shm.
  std::string bind_address = "127.0.0.1";
  // TCP port the tcp;ofi_rxm or net endpoint listens on (0 = a free port the
  // kernel picks). A port in use fails Open with kUnavailable naming it; shm
  // has no port and rejects any other value with kInvalidArgument.
  uint16_t port = 0;
  // shm only: the endpoint's name, set with fi_setname before it is enabled
  // ("" = the provider's own, "fi_shm://<pid>:<domain>:<endpoint>"). The
  // transport sets it for the endpoints it opens at BeginEpoch.
  std::string endpoint_name;
  // Register buffers even when the provider does not require FI_MR_LOCAL
  // (tests use it to exercise the registration cache).
  bool force_memory_registration = false;
  // Registrations kept by the LRU cache.
  size_t mr_cache_capacity = 64;
  // Completion queue depth (0 = provider default).
  size_t cq_size = 0;
  // Request::Wait first polls the CQ without yielding this long (0: never), as
  // fi_pingpong and MPI's shared-memory transports do: a message is then seen
  // within one poll rather than one sched_yield round trip later.
  // Only for hosts with a core per busy process: a thread that polls without
  // yielding keeps a peer that shares its core waiting, and takes a core from
  // training's kernel threads while communication overlaps backward.
  // Measured: docs/libfabric.md ("Progress and waiting").
  std::chrono::microseconds busy_poll{0};
  // Request::Wait then polls the CQ itself (yielding between polls) this long,
  // then blocks on a condition variable fed by the progress thread. Short waits
  // then cost no thread hand-off; long waits cost no CPU.
  std::chrono::microseconds wait_spin{200};
  // ... plus this much per MiB of the operation (capped at 64 ms in all): a large
  // transfer moves only while someone drives the CQ, and a sleeping waiter
  // leaves that to the progress thread's back-off. Measured: docs/libfabric.md
  // ("Progress and waiting").
  std::chrono::microseconds wait_spin_per_mib{1000};
  // Longest sleep of the progress thread between empty polls while idle.
  std::chrono::microseconds progress_max_sleep{1000};
  // tcp;ofi_rxm only (ignored elsewhere). > 0: messages up to this many bytes
  // go eagerly, read by tcp straight into the posted receive (rxm's dynamic
  // receive buffers, FI_OFI_RXM_ENABLE_DYN_RBUF=1 and FI_OFI_RXM_EAGER_LIMIT);
  // one that arrives before its receive waits in a buffer of its own size.
  // Every receive then ends with an overflow iovec of this size, so that a
  // message longer than its receive is a kDataLoss error (sealed: dropped)
  // instead of a truncation, which in this mode would end the connection's
  // stream for good. 0: rxm's own protocols (messages above its 16 KiB eager
  // limit go by rendezvous: a request, the receiver's RMA read, then an
  // acknowledgement, each needing the other side's progress). Every endpoint
  // of a cluster must use the same value (rxm refuses connections between
  // different eager limits). The FI_OFI_RXM_* variables, when set in the
  // environment, win. Measured: docs/libfabric.md ("Eager transfers").
  size_t rxm_eager_limit = kDefaultRxmEagerLimit;
  // How long a cancelled or abandoned operation's completion is awaited before
  // the request gives up (its context stays owned by the transport).
  std::chrono::milliseconds cancel_timeout{2000};
  // ... but only this long for operations with a peer that was declared dead
  // for its silence (Transport::PeerSilent). Its silence has already lasted
  // the dead timeout, so what the provider still holds then waits on that
  // peer (a segmented send to a frozen or cut-off node is never released),
  // and every survivor's re-form would otherwise wait cancel_timeout for it.
  // The other members' operations, failed with the epoch, keep the full
  // wait: a live peer's message in flight still lands in their buffers;
  // except where nodes follow new views at their own pace, whose every
  // member ends the epoch's operations at once (a join must pause nobody).
  std::chrono::milliseconds dead_peer_release_wait{200};
  // shm only. A killed peer can leave a provider call spinning for ever (shm's
  // send lock lives in the receiver's region); the transport's watchdog
  // releases such locks once the peer's process has exited (shm_region_lock.h).
  // A provider call that has still run `wedged_after` while some peer's process
  // has exited can never return: `on_wedged` is called once, from the
  // watchdog thread, with an error that names the call and the exited peers,
  // and a node exits (node/cluster/cluster_session.cc). Unset, the error is
  // logged. Details: docs/libfabric.md ("`shm`", "A dead peer's spin lock").
  std::chrono::milliseconds wedged_after{5000};
  // Once Transport::SetEpochKey gives an epoch's key: every message carries a
  // MAC (and, with `encrypt`, its payload is encrypted: a copy per send), and
  // what does not verify is dropped (gossip/transport/seal/data_seal.h).
  // Ignored over shm. Every member must agree (shared settings).
  bool authenticate = true;
  bool encrypt = false;
  // Fault injection for tests (a member replaying a message of an earlier
  // epoch; the node sets it from CHORUS_FAULT_REPLAY): the first message
  // sealed under the first epoch key is kept as it went on the wire, and
  // sent again, unchanged, under the tag of the first send sealed under a
  // later key, just before that send, so that the receive of that send takes it.
  bool replay_fault = false;
  std::function<void(const Status&)> on_wedged;
};

// FabricOptions::busy_poll for `busy_processes` processes waiting on this host
// at once: over shm, 200 us (far longer than a small message's round trip) when
// each has a core of this process's CPU set, else 0. Always 0 over tcp, where
// loopback packets are processed in softirq context that a poller which never
// yields starves. Measured: docs/libfabric.md ("Progress and waiting").
// An `override_us` >= 0 (a bench's --busy-poll-us) is returned as it is.
std::chrono::microseconds BusyPollFor(FabricProvider provider, int busy_processes,
                                      int override_us = -1);

// Opens an endpoint (getinfo, fabric, domain, cq, av, ep, enable). The returned
// transport is ready for LocalAddress(); call SetPeers() before sending.
[[nodiscard]] Result<std::unique_ptr<Transport>> MakeFabricTransport(const FabricOptions& options);

// The version of `provider` as "117.0" (fi_info->fabric_attr->prov_version), for
// the control plane's version check. NotFound when the provider is unavailable.
[[nodiscard]] Result<std::string> FabricProviderVersion(FabricProvider provider);
// The libfabric library version, fi_version(), as "1.17".
std::string LibfabricVersion();

// Memory-registration cache counters of a transport made by MakeFabricTransport
// (InvalidArgument for any other transport).
struct FabricMrStats {
  bool registering = false;  // true when buffers are registered at all
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t entries = 0;
};
[[nodiscard]] Result<FabricMrStats> GetFabricMrStats(const Transport& transport);

}  // namespace chorus::gossip
