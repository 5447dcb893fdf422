// One virtual node of `chorus simulate` (see simulate_node.h).
#include "node/lab/simulate/simulate_node.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "common/log.h"
#include "node/cluster/cluster_session.h"
#include "node/exchange/exchange.h"
#include "node/exchange/exchange_factory.h"
#include "node/outputs/metrics.h"
#include "node/run/trainer_options.h"
#include "node/run/training_loop.h"

namespace chorus::node {
namespace {

using nlohmann::json;

std::string NodeName(int rank) { return "node" + std::to_string(rank); }

// Epoch 0 of a cluster of `batch_sizes.size()` hub slots, as seen by `self`:
// rank i is slot i with batch batch_sizes[i], each on its own host (no
// hierarchical grouping), in site i % sites.
MembershipView VirtualView(int self, const std::vector<int>& batch_sizes, int sites) {
  const int world_size = static_cast<int>(batch_sizes.size());
  MembershipView view;
  view.epoch = 0;
  view.self_rank = self;
  for (int r = 0; r < world_size; ++r) {
    Member m;
    m.rank = r;
    m.name = NodeName(r);
    m.control_address = "virtual:" + std::to_string(r);
    m.data_address = gossip::LocalHub::EncodeAddress(r);
    m.batch_size = batch_sizes[static_cast<size_t>(r)];
    m.host_group = m.name;
    if (sites > 1) m.site = "site" + std::to_string(r % sites);
    view.members.push_back(std::move(m));
  }
  return view;
}

// The virtual clock of one hub slot: a step's forward/backward costs the
// modelled compute, its update the modelled update time; evaluations cost
// nothing.
class VirtualClock final : public StepClock {
 public:
  // `forward_backward_s`: a pass over `batch` images; a pass over another
  // number (load balancing re-splits the global batch) costs in proportion.
  VirtualClock(gossip::LocalHub& hub, int slot, double forward_backward_s, double update_s, int batch)
      : hub_(hub), slot_(slot), forward_backward_s_(forward_backward_s), update_s_(update_s), batch_(batch) {}
  double Now() override { return hub_.VirtualNow(slot_); }
  void ComputeStarts(int samples) override {
    Advance(forward_backward_s_ * static_cast<double>(samples) / static_cast<double>(std::max(1, batch_)));
  }
  void ComputeEnded(double /*measured_s*/) override {}
  void UpdateStarts() override { Advance(update_s_); }

 private:
  void Advance(double seconds) {
    hub_.AdvanceVirtual(slot_, seconds);
    compute_seconds_ += seconds;
  }

  gossip::LocalHub& hub_;
  const int slot_;
  const double forward_backward_s_;
  const double update_s_;
  const int batch_;
};

// The simulation's own hooks into the training loop: the consensus board's
// copies and distances, and the sample budget's ledger (at the node's turn).
void AttachSimulationHooks(const VirtualNodeSpec& spec, ClusterSession& session, LoopSetup* setup) {
  LoopSetup& s = *setup;
  const Config& config = *spec.config;
  if (spec.board != nullptr) {
    VirtualConsensusBoard* board = spec.board;
    const int rank = spec.rank;
    const double timeout_s = config.fabric.op_timeout_s;
    s.after_step = [board, rank](int64_t step, std::span<const float> master) { board->Deposit(step, rank, master); };
    s.trained = [board, rank](int64_t step, std::span<const float> master) { board->Finished(step, rank, master); };
    if (!spec.ordered) {
      s.exact_distance = [board, rank, timeout_s](int64_t step) { return board->Distance(rank, step, timeout_s); };
    }
  }
  if (spec.ledger != nullptr && session.transport->Order() != nullptr) {
    SampleLedger* ledger = spec.ledger;
    gossip::EventOrder* order = session.transport->Order();
    const int rank = spec.rank;
    const double timeout_s = config.fabric.op_timeout_s;
    s.session = &session;  // its pace (no control plane: nothing else of a cluster's)
    s.cluster_samples = [ledger, order, rank, timeout_s](uint64_t own) {
      // Reported and read at this node's turn: the total holds what every
      // node reported before this moment, never what one reports later.
      const Status turn = order->AwaitTurn(Deadline::AfterSeconds(timeout_s));
      if (!turn.ok()) CHORUS_LOG_WARN(Subsys::kNode, "sample budget: ", turn.ToString());
      return ledger->Report(rank, own);
    };
  }
}

// The training of one node; returns its summary.
Result<json> Train(const VirtualNodeSpec& spec) {
  const Config& config = *spec.config;
  gossip::LocalHub& hub = *spec.hub;
  const int slot = spec.rank;

  if (spec.cpu_meter != nullptr) spec.cpu_meter->AdoptThread(slot);
  const std::vector<int> batch_sizes =
      spec.batch_sizes != nullptr ? *spec.batch_sizes
                                  : std::vector<int>(static_cast<size_t>(spec.world_size), config.train.batch_size);
  const int global_batch = std::accumulate(batch_sizes.begin(), batch_sizes.end(), 0);
  CHORUS_ASSIGN_OR_RETURN(const int64_t steps_per_epoch,
                          ClusterStepsPerEpoch(config, spec.train->count, global_batch));
  CHORUS_ASSIGN_OR_RETURN(
      std::unique_ptr<trainer::Trainer> trainer,
      trainer::Trainer::Create(MakeTrainerOptions(config, global_batch, steps_per_epoch)));
  if (spec.mean_gradient != nullptr) {
    trainer->optimizer().SetMeanGradient(
        [barrier = spec.mean_gradient, slot](std::span<const float> gradient) {
          return barrier->Arrive(slot, gradient);
        });
  }

  ClusterSession session;
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<gossip::LocalTransport> transport, hub.MakeTransport(slot));
  session.transport = std::move(transport);
  session.view = VirtualView(spec.rank, batch_sizes, spec.sites);
  // The transport's peers know their sites (what crosses them is counted).
  std::vector<gossip::PeerInfo> peers;
  const std::vector<bool> other_site = OtherSites(session.view);
  for (const Member& m : session.view.members) {
    peers.push_back({m.rank, m.data_address, m.name, other_site[static_cast<size_t>(m.rank)]});
  }
  CHORUS_RETURN_IF_ERROR(session.transport->SetPeers(spec.rank, peers));
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Exchange> exchange,
                          MakeExchange(config, &session, trainer.get(), nullptr, spec.spectral_gap));
  // A sample of the nodes evaluates, so the exchange's exact consensus
  // distance (a collective of every node) is not measured; the board's is.
  exchange->SetEvaluationsInLockstep(false);
  exchange->SetVirtualTime(true);
  if (spec.cpu_meter != nullptr) {
    exchange = std::make_unique<MeteredExchange>(std::move(exchange), spec.cpu_meter, &hub, slot);
  }
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<MetricsWriter> metrics,
                          MetricsWriter::Open(spec.dir + "/metrics.jsonl", /*append=*/false));

  VirtualClock clock(hub, slot, spec.forward_backward_s, spec.update_s,
                     batch_sizes[static_cast<size_t>(spec.rank)]);
  LoopSetup s;
  s.config = &config;
  s.trainer = trainer.get();
  s.exchange = exchange.get();
  s.metrics = metrics.get();
  s.clock = &clock;
  s.train = spec.train;
  s.test = spec.eval_set;
  s.node_name = NodeName(spec.rank);
  s.rank = spec.rank;
  s.world_size = spec.world_size;
  s.batch_sizes = batch_sizes;
  s.evals.step_set = spec.eval_set;
  s.evals.at_steps = spec.eval_steps;
  s.log_every = spec.log_every;
  s.record_epoch_ends = true;
  // No parameter_checksum in the records: a byte-wise hash of the weights per
  // record and node was a quarter of the wall time; the summary has the final one.
  s.checksum_in_records = false;
  if (spec.final_eval != nullptr) {
    s.final_evaluation = [&spec](trainer::Trainer& t, uint64_t checksum) {
      return spec.final_eval->Evaluate(t, *spec.eval_set, checksum);
    };
  }
  AttachSimulationHooks(spec, session, &s);
  TrainingLoop loop(std::move(s));
  CHORUS_ASSIGN_OR_RETURN(std::optional<json> summary, loop.Run());
  if (!summary) return Err(Internal("stopped without a stop request"));
  (*summary)["time_base"] = "virtual";
  (*summary)["exchange_cpu_seconds"] = spec.cpu_meter != nullptr ? spec.cpu_meter->Charged(slot) : 0.0;
  CHORUS_RETURN_IF_ERROR(WriteSummary(spec.dir + "/summary.json", *summary));
  return std::move(*summary);
}

}  // namespace

uint64_t SampleLedger::Report(int rank, uint64_t own) {
  std::lock_guard<std::mutex> lock(mu_);
  own_.at(static_cast<size_t>(rank)) = own;
  return std::accumulate(own_.begin(), own_.end(), uint64_t{0});
}

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
