// One virtual node of `chorus simulate` (see simulate_node.h).
#include "node/lab/simulate/simulate_node.h"

#include <algorithm>
#include <optional>

#include "node/exchange/allreduce_exchange.h"
#include "node/cluster/cluster_session.h"
#include "node/exchange/exchange.h"
#include "node/exchange/gossip_exchange.h"
#include "node/outputs/metrics.h"
#include "node/run/trainer_options.h"
#include "trainer/batch_sampler.h"

namespace chorus::node {
namespace {

using nlohmann::json;

std::string NodeName(int rank) { return "node" + std::to_string(rank); }

// Epoch 0 of a cluster of `world_size` hub slots, as seen by `self`: rank i is
// slot i, each on its own host (no hierarchical grouping).
MembershipView VirtualView(int self, int world_size, int batch_size) {
  MembershipView view;
  view.epoch = 0;
  view.self_rank = self;
  for (int r = 0; r < world_size; ++r) {
    Member m;
    m.rank = r;
    m.name = NodeName(r);
    m.control_address = "virtual:" + std::to_string(r);
    m.data_address = gossip::LocalHub::EncodeAddress(r);
    m.batch_size = batch_size;
    m.host_group = m.name;
    view.members.push_back(std::move(m));
  }
  return view;
}

Result<std::unique_ptr<Exchange>> MakeExchange(const Config& config, ClusterSession* session,
                                               trainer::Trainer* trainer, double spectral_gap) {
  if (config.exchange.kind == ExchangeKind::kAllreduce) {
    CHORUS_ASSIGN_OR_RETURN(auto ex, AllreduceExchange::Create(config, session, trainer, nullptr));
    return std::unique_ptr<Exchange>(std::move(ex));
  }
  if (config.exchange.kind == ExchangeKind::kGossip) {
    CHORUS_ASSIGN_OR_RETURN(auto ex, GossipExchange::Create(config, session, trainer, nullptr,
                                                             spectral_gap));
    return std::unique_ptr<Exchange>(std::move(ex));
  }
  return std::unique_ptr<Exchange>(std::make_unique<SoloExchange>());
}

// The training loop of one node; returns its summary.
Result<json> Train(const VirtualNodeSpec& spec) {
  const Config& config = *spec.config;
  const TrainConfig& tc = config.train;
  gossip::LocalHub& hub = *spec.hub;
  const int slot = spec.rank;

  CHORUS_ASSIGN_OR_RETURN(trainer::BatchSampler sampler,
                          trainer::BatchSampler::Create(spec.train->count, tc.batch_size, tc.seed,
                                                        spec.rank, spec.world_size,
                                                        /*drop_last=*/true));
  const int64_t steps_per_epoch = sampler.BatchesPerEpoch();
  if (steps_per_epoch < 1) {
    return Err(InvalidArgument(std::to_string(spec.train->count) + " training images over " +
                               std::to_string(spec.world_size) + " nodes give no batch of " +
                               std::to_string(tc.batch_size) + " per node"));
  }
  const int global_batch = tc.batch_size * spec.world_size;
  CHORUS_ASSIGN_OR_RETURN(
      std::unique_ptr<trainer::Trainer> trainer,
      trainer::Trainer::Create(MakeTrainerOptions(config, global_batch, steps_per_epoch)));

  ClusterSession session;
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<gossip::LocalTransport> transport,
                          hub.MakeTransport(slot));
  session.transport = std::move(transport);
  session.view = VirtualView(spec.rank, spec.world_size, tc.batch_size);
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Exchange> exchange,
                          MakeExchange(config, &session, trainer.get(), spec.spectral_gap));
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<MetricsWriter> metrics,
                          MetricsWriter::Open(spec.dir + "/metrics.jsonl", /*append=*/false));

  int64_t step = 0;
  int64_t samples = 0;
  double last_loss = 0.0;
  double window_start = hub.VirtualNow(slot);
  int64_t window_samples = 0, window_steps = 0;
  double window_loss = 0.0;
  size_t next_eval = 0;
  trainer::Batch batch;

  auto record = [&](int epoch) {
    json r = exchange->Metrics();
    r["step"] = step;
    r["epoch"] = epoch;
    r["epoch_progress"] = static_cast<double>(step) / static_cast<double>(steps_per_epoch);
    r["time"] = hub.VirtualNow(slot);
    r["samples"] = samples;
    r["lr"] = trainer->LearningRate(std::max<int64_t>(0, step - 1));
    return r;
  };

  for (int epoch = 0; epoch < tc.epochs; ++epoch) {
    sampler.StartEpoch(epoch);
    for (int64_t i = 0; i < steps_per_epoch; ++i) {
      if (!sampler.Next(*spec.train, &batch)) break;
      hub.AdvanceVirtual(slot, spec.forward_backward_s);
      CHORUS_RETURN_IF_ERROR(exchange->BeforeStep(step));
      CHORUS_ASSIGN_OR_RETURN(trainer::ForwardBackwardResult pass, trainer->ForwardBackward(batch));
      CHORUS_RETURN_IF_ERROR(exchange->AfterBackward(step, pass.samples));
      hub.AdvanceVirtual(slot, spec.update_s);
      CHORUS_ASSIGN_OR_RETURN(trainer::UpdateResult update, trainer->ApplyUpdate(step));
      CHORUS_RETURN_IF_ERROR(exchange->AfterUpdate(step));
      ++step;
      samples += pass.samples;
      last_loss = pass.loss;
      window_samples += pass.samples;
      window_loss += pass.loss;
      ++window_steps;

      const bool epoch_end = i + 1 == steps_per_epoch;
      if (step % spec.log_every == 0 || epoch_end) {
        json r = record(epoch_end ? epoch + 1 : epoch);
        const double now = r["time"].get<double>();
        r["loss"] = window_loss / static_cast<double>(window_steps);
        r["lr"] = update.lr;
        r["loss_scale"] = update.loss_scale;
        r["samples_per_s"] = now > window_start ? window_samples / (now - window_start) : 0.0;
        // No parameter_checksum here: a byte-wise hash of the weights per record
        // and node was a quarter of the wall time; summary.json has the final one.
        CHORUS_RETURN_IF_ERROR(metrics->Append(r));
        window_start = now;
        window_samples = 0;
        window_loss = 0.0;
        window_steps = 0;
      }
      while (next_eval < spec.eval_steps.size() && spec.eval_steps[next_eval] < step) ++next_eval;
      if (next_eval < spec.eval_steps.size() && spec.eval_steps[next_eval] == step) {
        CHORUS_ASSIGN_OR_RETURN(trainer::EvalResult eval, trainer->Evaluate(*spec.eval_set, 256));
        json r = record(epoch_end ? epoch + 1 : epoch);
        r["eval_accuracy"] = eval.accuracy;
        r["eval_loss"] = eval.loss;
        r["eval_samples"] = eval.count;
        r["loss"] = last_loss;
        CHORUS_RETURN_IF_ERROR(metrics->Append(r));
        ++next_eval;
      }
    }
  }
  const double train_seconds = hub.VirtualNow(slot);

  CHORUS_RETURN_IF_ERROR(exchange->Finish());
  const double finish_seconds = hub.VirtualNow(slot) - train_seconds;
  const uint64_t checksum = trainer->ParameterChecksum();
  trainer::EvalResult final_eval;
  if (spec.final_eval != nullptr) {
    CHORUS_ASSIGN_OR_RETURN(final_eval,
                            spec.final_eval->Evaluate(*trainer, *spec.eval_set, checksum));
  } else {
    CHORUS_ASSIGN_OR_RETURN(final_eval, trainer->Evaluate(*spec.eval_set, 256));
  }

  json summary = SummaryHeader(exchange->Metrics(), exchange->Describe(), NodeName(spec.rank), spec.rank, spec.world_size, tc, global_batch, step);
  summary["time_base"] = "virtual";
  summary["train_seconds"] = train_seconds;
  summary["finish_seconds"] = finish_seconds;
  summary["compute_seconds"] = static_cast<double>(step) * (spec.forward_backward_s + spec.update_s);
  summary["samples_per_s"] = samples / std::max(1e-12, train_seconds);
  summary["test_accuracy"] = final_eval.accuracy;
  summary["test_loss"] = final_eval.loss;
  summary["test_samples"] = final_eval.count;
  summary["final_train_loss"] = last_loss;
  summary["skipped_steps"] = trainer->loss_scaler().skipped_steps();
  summary["parameter_checksum"] = std::to_string(checksum);
  CHORUS_RETURN_IF_ERROR(WriteSummary(spec.dir + "/summary.json", summary));
  return summary;
}

}  // namespace

Result<trainer::EvalResult> EvalCache::Evaluate(trainer::Trainer& trainer,
                                                const trainer::Dataset& data, uint64_t checksum) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = results_.find(checksum);
    if (it != results_.end()) return it->second;
  }
  // Evaluated outside the lock: two nodes with the same weights may both get
  // here, and both compute the same result.
  CHORUS_ASSIGN_OR_RETURN(trainer::EvalResult result, trainer.Evaluate(data, 256));
  std::lock_guard<std::mutex> lock(mu_);
  results_.emplace(checksum, result);
  return result;
}

Result<json> RunVirtualNode(const VirtualNodeSpec& spec) {
  if (spec.config == nullptr || !spec.hub || spec.train == nullptr || spec.eval_set == nullptr) {
    return Err(InvalidArgument("virtual " + NodeName(spec.rank) + ": incomplete spec"));
  }
  auto summary = Train(spec);
  if (!summary) return Err(summary.error().WithContext("virtual " + NodeName(spec.rank)));
  return summary;
}

}  // namespace chorus::node
