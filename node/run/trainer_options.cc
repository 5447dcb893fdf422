// Config -> TrainerOptions (see trainer_options.h).
#include "node/run/trainer_options.h"

#include <algorithm>

namespace chorus::node {

bool LarsGlobalBatchNorm(const Config& config) {
  switch (config.train.lars_norm) {
    case LarsNorm::kLocal:
      return false;
    case LarsNorm::kGlobalBatch:
      return true;
    case LarsNorm::kAuto:
      break;
  }
  const bool own_gradient =
      config.exchange.kind == ExchangeKind::kGossip || config.exchange.outer.optimizer != OuterOptimizer::kNone;
  return own_gradient && !config.train.device.on_gpu() && config.train.optimizer == trainer::OptimizerKind::kLars;
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
  o.lars_global_batch_norm = LarsGlobalBatchNorm(config);
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
