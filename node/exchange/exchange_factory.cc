// MakeExchange (see exchange_factory.h).
#include "node/exchange/exchange_factory.h"

#include "node/exchange/allreduce_exchange.h"
#include "node/exchange/gossip_exchange.h"
#include "node/exchange/outer_exchange.h"

namespace chorus::node {

Result<std::unique_ptr<Exchange>> MakeExchange(const Config& config, ClusterSession* session,
                                               trainer::Trainer* trainer, TraceWriter* trace,
                                               double known_spectral_gap) {
  if (config.exchange.outer.optimizer != OuterOptimizer::kNone && config.exchange.kind != ExchangeKind::kNone) {
    CHORUS_ASSIGN_OR_RETURN(auto ex, OuterExchange::Create(config, session, trainer, trace));
    return std::unique_ptr<Exchange>(std::move(ex));
  }
  switch (config.exchange.kind) {
    case ExchangeKind::kAllreduce: {
      CHORUS_ASSIGN_OR_RETURN(auto ex, AllreduceExchange::Create(config, session, trainer, trace));
      return std::unique_ptr<Exchange>(std::move(ex));
    }
    case ExchangeKind::kGossip: {
      CHORUS_ASSIGN_OR_RETURN(auto ex, GossipExchange::Create(config, session, trainer, trace, known_spectral_gap));
      return std::unique_ptr<Exchange>(std::move(ex));
    }
    case ExchangeKind::kNone: break;
  }
  return std::unique_ptr<Exchange>(std::make_unique<SoloExchange>());
}

}  // namespace chorus::node
