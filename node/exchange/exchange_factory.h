// The one place an Exchange is built from the config (exchange.kind), for a
// real node (RunNode) and a virtual one (`chorus simulate`) alike.
#pragma once

#include <memory>

#include "common/status.h"
#include "node/cluster/cluster_session.h"
#include "node/config/config.h"
#include "node/exchange/exchange.h"
#include "node/outputs/trace.h"
#include "trainer/trainer.h"

namespace chorus::node {

// The exchange exchange.kind names (an OuterExchange where
// exchange.outer.optimizer is set), over `session` (null for kind none) and
// its members; `trace` may be null. `known_spectral_gap` (>= 0) spares each
// gossip node the graph's eigenvalue computation when the caller did it once.
[[nodiscard]] Result<std::unique_ptr<Exchange>> MakeExchange(const Config& config, ClusterSession* session,
                                                             trainer::Trainer* trainer, TraceWriter* trace,
                                                             double known_spectral_gap = -1.0);

}  // namespace chorus::node
