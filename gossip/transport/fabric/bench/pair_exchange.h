// gossip/transport/fabric/bench/: the 2-rank all-reduce's data pattern straight on
// a libfabric endpoint, for bench/bench_pair_exchange only.
//
// PairExchange: one of two processes running a 2-rank all-reduce's data
// pattern straight on a libfabric endpoint, outside FabricTransport, with two
// large-message protocols side by side (bench/bench_pair_exchange.cc times
// them). Exchange halves, add the peer's half into the kept one, exchange the
// sums (halving-doubling at 2 ranks):
//   kTagged  fi_tsend / fi_trecv, receives posted first, as the all-reduces
//            post them. Over tcp;ofi_rxm a message above the eager limit goes
//            by rendezvous (RTS, the receiver's fi_read, then an ack).
//   kWrite   fi_write straight into the peer's registered scratch (one half
//            for the halves, the other for the sums, which the peer then
//            copies into its buffer: no key to swap per call), then an 8-byte
//            tagged notice that the provider orders after the write
//            (FI_ORDER_SAW): the data moves with no handshake first, as a
//            receiver-advertised protocol would move it. FabricTransport does
//            not do this: it would be a second data path with its own
//            deadlines and failure handling. Measured: docs/performance.md
//            ("2026-11-24: paired, after the small tree and the larger segments").
// The endpoint comes from GetInfo, as FabricTransport's does (the same hints
// and provider settings, plus FI_RMA and FI_ORDER_SAW). Waits spin on the CQ
// (a core per rank) with no deadline: a measurement between two processes of
// one bench, not a data plane. Buffers start on a page, as Chorus's do.
//
// Must not: include <rdma/...> here (its users stay free of libfabric).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "gossip/transport/provider.h"

namespace chorus::gossip {

enum class PairProtocol { kTagged, kWrite };

class PairExchange {
 public:
  // Sends this side's blob to the peer (through whatever joins the two
  // processes) and returns the peer's.
  using Swap = std::function<Result<std::vector<uint8_t>>(std::span<const uint8_t>)>;

  // Opens an endpoint of `provider` on 127.0.0.1 (shm: none), swaps endpoint
  // names and scratch regions with the peer through `swap`, and makes first
  // contact (rank 0 sends first). `self` is 0 or 1; `bytes` a multiple of 8.
  [[nodiscard]] static Result<std::unique_ptr<PairExchange>> Open(FabricProvider provider, size_t bytes,
                                                                  int self, const Swap& swap);
  virtual ~PairExchange() = default;

  // One all-reduce of the buffer with `protocol`. With `check` the buffer
  // starts at self + 1 everywhere, must end at 3, and is zeroed after (zeros
  // stay zeros: unchecked calls cost the same throughout).
  [[nodiscard]] virtual Status Call(PairProtocol protocol, bool check) = 0;
};

}  // namespace chorus::gossip
