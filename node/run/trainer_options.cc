// Config -> TrainerOptions (see trainer_options.h).
#include "node/run/trainer_options.h"

#include <algorithm>

#include "topologies/topology_spec.h"

namespace chorus::node {

LarsNorm EffectiveLarsNorm(const Config& config) {
  const bool lars_on_cpu = config.train.optimizer == trainer::OptimizerKind::kLars && !config.train.device.on_gpu();
  const bool mixes_every_step = config.exchange.kind == ExchangeKind::kGossip &&
                                config.exchange.outer.optimizer == OuterOptimizer::kNone &&
                                config.exchange.period == 1;
  // auto is the node's own norm: a larger one paid at 16 to 64 simulated
  // nodes and drove the replicas apart at 128 (docs/performance.md, "Gossip
  // at parity"), so the methods that use one name it.
  return lars_on_cpu && mixes_every_step ? config.train.lars_norm : LarsNorm::kLocal;
}

int LarsNormNodes(const Config& config, int nodes) {
  int m = 1;
  switch (EffectiveLarsNorm(config)) {
    case LarsNorm::kGlobalBatch:
    case LarsNorm::kPeer:
      m = 0;
      break;
    case LarsNorm::kMixed: {
      // The node and its out-neighbours in a round: what one round averages.
      auto graph = topologies::MakeTopology(GossipTopologySpec(config), std::max(2, nodes));
      m = graph ? 1 + graph->OutDegree(0) : 1;
      break;
    }
    case LarsNorm::kLocal:
    case LarsNorm::kAuto:
    case LarsNorm::kMeanSketch:  // the exchange hands the optimizer the mean's norm (SetMeanSquares)
      return 1;
  }
  const int cap = config.train.lars_norm_nodes;
  if (cap > 0) m = m == 0 ? cap : std::min(m, cap);
  return m;
}

trainer::TrainerOptions MakeTrainerOptions(const Config& config, int global_batch, int64_t steps_per_epoch) {
  const TrainConfig& t = config.train;
  trainer::TrainerOptions o;
  o.model = t.model;
  o.precision = t.precision;
  o.optimizer = t.optimizer;
  o.base_lr = t.base_lr;
  o.momentum = t.momentum;
  o.weight_decay = t.weight_decay;
  o.lars_eta = t.lars_eta;
  o.lars_norm_nodes = LarsNormNodes(config, config.train.batch_size > 0 ? global_batch / config.train.batch_size : 1);
  o.lars_norm_peer = EffectiveLarsNorm(config) == LarsNorm::kPeer;
  o.lars_norm_mean = EffectiveLarsNorm(config) == LarsNorm::kMeanSketch;
  o.warmup_epochs = t.warmup_epochs;
  o.lr_decay_power = t.lr_decay_power;
  o.loss_scale.initial_scale = config.loss_scale.initial;
  o.loss_scale.growth_interval = config.loss_scale.growth_interval;
  o.loss_scale.growth_factor = config.loss_scale.growth_factor;
  o.loss_scale.backoff_factor = config.loss_scale.backoff_factor;
  o.loss_scale.min_scale = config.loss_scale.min_scale;
  o.batch_size = t.batch_size;
  o.global_batch = global_batch;
  o.epochs = t.epochs;
  o.steps_per_epoch = std::max<int64_t>(1, steps_per_epoch);
  o.seed = t.seed;
  o.threads = t.threads;
  o.device = t.device;
  o.cuda_graphs = t.cuda_graphs;
  return o;
}

}  // namespace chorus::node
