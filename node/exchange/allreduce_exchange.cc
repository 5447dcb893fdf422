// Synchronous all-reduce exchange with tensor fusion (see allreduce_exchange.h).
#include "node/exchange/allreduce_exchange.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>

#include "common/clock.h"
#include "common/log.h"
#include "common/quantile.h"
#include "node/cluster/step_agreement.h"
#include "node/exchange/batch_norm_state.h"
#include "node/exchange/trainer_state.h"

namespace chorus::node {

gossip::AllreduceCrossovers CrossoversFromConfig(gossip::FabricProvider provider, const CrossoversConfig& x) {
  gossip::AllreduceCrossovers out = gossip::CrossoversForProvider(provider);
  for (const CrossoverKey& k : kCrossoverKeys) {
    if (x.*k.kib >= 0) out.*k.bytes = static_cast<size_t>(x.*k.kib) * 1024;
  }
  return out;
}

Result<std::unique_ptr<AllreduceExchange>> AllreduceExchange::Create(const Config& config,
                                                                     ClusterSession* session,
                                                                     trainer::Trainer* trainer,
                                                                     TraceWriter* trace) {
  std::unique_ptr<AllreduceExchange> ex(new AllreduceExchange(config, session, trainer, trace));
  ex->algorithm_ = config.exchange.algorithm;
  if (Status built = ex->Build(); !built.ok()) {
    // Attaching the host's shared memory meets every member on the host: one
    // that died or froze there is a failure like a step's, and the others
    // re-form without it (and it learns it was removed).
    if (!MemberLost(built) || session == nullptr || session->control == nullptr) return Err(built);
    CHORUS_RETURN_IF_ERROR(ex->Failed(
        built, "setting up the all-reduce at epoch " + std::to_string(session->view.epoch), 0, /*abandon=*/false));
  }
  AllreduceExchange* self = ex.get();
  const std::optional<PoisonFault> poison_fault = PoisonFaultAsked();
  if (poison_fault && poison_fault->claim) ex->claim_fault_ = poison_fault;
  if (poison_fault && (poison_fault->lie || poison_fault->equivocate)) ex->report_fault_ = poison_fault;
  trainer->SetGradientReadyHook([self, poison = poison_fault](int param) {
    if (!self->engine_ || !self->hook_error_.ok()) return;
    const size_t n = self->trainer_->Parameters().size();
    if (poison && self->engine_->step() >= poison->from_step) {
      const trainer::ParameterInfo& p = self->trainer_->Parameters()[param];
      for (float& g : self->trainer_->Gradients().subspan(p.offset, p.count)) {
        g = poison->Apply(g);
      }
    }
    self->tuner_.GradientReady(n - 1 - static_cast<size_t>(param));
    Status s = self->engine_->MarkReady(n - 1 - static_cast<size_t>(param));
    if (!s.ok()) self->hook_error_ = s;
  });
  return ex;
}

AllreduceExchange::~AllreduceExchange() { trainer_->SetGradientReadyHook(nullptr); }

namespace {

// Fault injection for tests (docs/testing.md): with
// CHORUS_FAULT_STOP_BEFORE_ATTACH set, the node stops itself (SIGSTOP) just
// before it attaches the host's shared memory in the first membership epoch,
// as a node frozen there would be.
void StopBeforeAttachIfAsked(uint64_t epoch) {
  if (epoch == 0 && std::getenv("CHORUS_FAULT_STOP_BEFORE_ATTACH") != nullptr) raise(SIGSTOP);
}


// What `options` runs for each of `buckets` (elements of `element_bytes` on
// the wire), as "ring for 2 buckets, recursive-doubling for 1": where auto
// leads, so that a comparison says which algorithm each row ran.
std::string ResolvedAlgorithms(const gossip::Collective& collective, const gossip::AllreduceOptions& options,
                               const std::vector<gossip::GradientBucket>& buckets, size_t element_bytes) {
  std::vector<std::pair<gossip::AllreduceAlgorithm, int>> counts;
  for (const gossip::GradientBucket& b : buckets) {
    const gossip::AllreduceAlgorithm a = collective.Resolve(options, b.elems * element_bytes);
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == a; });
    if (it == counts.end()) {
      counts.push_back({a, 1});
    } else {
      ++it->second;
    }
  }
  std::string out;
  for (const auto& [a, n] : counts) {
    out += (out.empty() ? "" : ", ") + std::string(gossip::AllreduceAlgorithmName(a)) + " for " + std::to_string(n) +
           (n == 1 ? " bucket" : " buckets");
  }
  return out;
}

}  // namespace

Status AllreduceExchange::Build() {
  engine_.reset();
  const MembershipView& view = session_->view;
  const gossip::Tag tag_base = EpochTagBase(view.epoch);  // a fresh range per membership epoch
  const Duration op_timeout = std::chrono::duration_cast<Duration>(
      std::chrono::duration<double>(config_.fabric.op_timeout_s));
  std::optional<gossip::HostSegmentOptions> segment;
  if (config_.exchange.shared_memory) {
    segment = gossip::HostSegmentOptions{};
    segment->tag_base = tag_base;  // the attach uses a phase no bucket's all-reduce uses
    segment->deadline = Deadline::After(op_timeout);
    StopBeforeAttachIfAsked(view.epoch);
  }
  CHORUS_ASSIGN_OR_RETURN(gossip::Collective c,
                          gossip::Collective::Create(*session_->transport, HostKeys(view), segment,
                                                      SiteKeys(view, config_.exchange.link_aware)));
  collective_ = std::make_unique<gossip::Collective>(std::move(c));
  if (collective_->segment() != nullptr) {
    CHORUS_LOG_INFO(Subsys::kGossip, "all-reduce inside the host through shared memory ",
                    collective_->segment()->Describe());
  }

  const bool tune = config_.exchange.first_bucket_kib < 0 && !virtual_time_ && view.size() > 1;
  first_bucket_choice_.clear();
  CHORUS_RETURN_IF_ERROR(BuildEngine(config_.exchange.first_bucket_kib > 0
                                         ? static_cast<size_t>(config_.exchange.first_bucket_kib) * 1024
                                         : 0));
  tuner_.Stop();
  if (tune) tuner_.Start(engine_->bucketer().params(), WireElementBytes());
  return Status::Ok();
}

Status AllreduceExchange::BuildEngine(size_t first_bucket_bytes) {
  engine_.reset();
  const MembershipView& view = session_->view;
  const gossip::Tag tag_base = EpochTagBase(view.epoch);
  const Duration op_timeout = std::chrono::duration_cast<Duration>(
      std::chrono::duration<double>(config_.fabric.op_timeout_s));
  // Backward order is the reverse of the parameter table.
  std::span<const trainer::ParameterInfo> params = trainer_->Parameters();
  // Slice b of the bucketer is parameter n-1-b of the table.
  const size_t n = params.size();
  std::vector<gossip::ParamSlice> slices(n);
  for (size_t b = 0; b < n; ++b) {
    const trainer::ParameterInfo& p = params[n - 1 - b];
    slices[b] = {p.offset, p.count, static_cast<int64_t>(p.layer)};
  }
  // A small first bucket puts the last layers' sum on the wire while the rest
  // of backward runs; it pays only where that backward outlasts an all-reduce's
  // latency and a core is free to run it (gossip/fusion/overlap_model.h), so
  // under auto the measured model decides (DecideFirstBucket).
  const size_t bucket_bytes = static_cast<size_t>(config_.exchange.bucket_kib) * 1024;
  bucket_sizes_ = {bucket_bytes, first_bucket_bytes > 0 ? first_bucket_bytes : bucket_bytes};
  CHORUS_ASSIGN_OR_RETURN(gossip::GradientBucketer bucketer,
                          gossip::GradientBucketer::Create(std::move(slices), bucket_sizes_));
  buckets_ = bucketer.buckets().size();
  const std::vector<gossip::GradientBucket> buckets = bucketer.buckets();
  gossip::FusionOptions options;
  options.allreduce.algorithm = algorithm_;
  options.allreduce.crossovers = CrossoversFromConfig(config_.fabric.provider, config_.exchange.crossovers);
  // The mean over the ranks: each rank's gradients arrive weighted by its
  // share of the global batch already (SampleWeighting), which follows the
  // load balancer's split as well as the members' batches.
  options.allreduce.pre_scale = 1.0f / static_cast<float>(view.size());
  options.allreduce.tag_base = tag_base;
  options.bucket_timeout = op_timeout;
  options.trace = trace_;
  options.fp16_wire = config_.exchange.fp16_wire;
  checks_contributions_ = config_.exchange.poison_check && view.size() >= 3;
  options.measure_contributions = checks_contributions_;
  // Over FP32 the engine sums the gradients in place: a receive the provider
  // kept after its cancel (the old engine's) may still write into them, so
  // they move to fresh storage, the old kept for good.
  const int unreleased = session_->transport->UnreleasedBuffers();
  if (unreleased > unreleased_at_engine_) {
    trainer_->ReplaceGradientStorage();
    CHORUS_LOG_WARN(Subsys::kGossip, "gradients moved to fresh storage: the provider may still write into the old (",
                    unreleased, " cancelled operation(s) not released)");
  }
  unreleased_at_engine_ = unreleased;
  CHORUS_ASSIGN_OR_RETURN(engine_, gossip::FusionEngine::Create(*collective_, std::move(bucketer),
                                                                trainer_->Gradients(), options));
  engine_->SetAudited(checks_contributions_ && audit_.On(view.epoch));  // a rebuild keeps the epoch's audit
  resolved_ = ResolvedAlgorithms(*collective_, options.allreduce, buckets, WireElementBytes());
  hook_error_ = Status::Ok();
  return Status::Ok();
}

Status AllreduceExchange::DecideFirstBucket() {
  tuner_.Stop();
  const MembershipView& view = session_->view;
  const Deadline deadline = Deadline::AfterSeconds(config_.fabric.op_timeout_s);
  const gossip::Tag tag_base = EpochTagBase(view.epoch) + (gossip::Tag{5} << 37) + (gossip::Tag{1} << 30);
  // A small call's fixed cost, measured now on every rank: the first call
  // lines the ranks up, the median of the next ones is the figure.
  gossip::AllreduceOptions probe;
  probe.algorithm = algorithm_;
  probe.crossovers = CrossoversFromConfig(config_.fabric.provider, config_.exchange.crossovers);
  probe.tag_base = tag_base;
  probe.deadline = deadline;
  std::vector<double> call_us;
  for (int i = 0; i < 6; ++i) {
    float one = 1.0f;
    const int64_t begin = NowMicros();
    CHORUS_RETURN_IF_ERROR(collective_->Allreduce(std::span<float>(&one, 1), probe));
    if (i > 0) call_us.push_back(static_cast<double>(NowMicros() - begin));
  }
  const std::vector<float> mine = gossip::FlattenOverlapFigures(tuner_.Figures(Quantile(call_us, 0.5)));
  CHORUS_ASSIGN_OR_RETURN(std::vector<float> all,
                          GatherFromEveryRank(*collective_, mine, tag_base + gossip::kTagsPerCollective, deadline));
  std::vector<gossip::OverlapFigures> ranks;
  for (int r = 0; r < view.size(); ++r) {
    ranks.push_back(gossip::UnflattenOverlapFigures(
        std::span<const float>(all).subspan(static_cast<size_t>(r) * mine.size(), mine.size())));
  }
  const gossip::FirstBucketChoice choice =
      gossip::ChooseFirstBucket(tuner_.prefix_bytes(), engine_->bucketer().buckets().front().elems * WireElementBytes(),
                                ranks);
  first_bucket_choice_ = choice.reason;
  CHORUS_LOG_INFO(Subsys::kGossip, "overlap at epoch ", view.epoch, ": ", choice.reason);
  if (choice.bytes == 0) return Status::Ok();
  return BuildEngine(choice.bytes);
}

std::string AllreduceExchange::Describe() const {
  std::string algorithm(gossip::AllreduceAlgorithmName(config_.exchange.algorithm));
  if (config_.exchange.algorithm == gossip::AllreduceAlgorithm::kAuto && !resolved_.empty()) {
    algorithm += " (" + resolved_ + ")";
  }
  return "allreduce " + algorithm + " over " + std::to_string(session_->view.size()) +
         " nodes (" + session_->transport->Describe() + ", " + std::to_string(buckets_) +
         " fusion buckets of up to " + std::to_string(config_.exchange.bucket_kib) + " KiB" +
         (bucket_sizes_.first_bucket_bytes != bucket_sizes_.bucket_bytes
              ? ", the first up to " + std::to_string((bucket_sizes_.first_bucket_bytes + 1023) / 1024) + " KiB"
              : std::string()) +
         (config_.exchange.first_bucket_kib < 0
              ? "; overlap: " + (first_bucket_choice_.empty() ? std::string("measured in the first ") +
                                                                    std::to_string(FirstBucketTuner::kWarmupSteps +
                                                                                   FirstBucketTuner::kMeasuredSteps) +
                                                                    " steps"
                                                              : first_bucket_choice_)
              : std::string()) +
         ")";
}

Status AllreduceExchange::BeforeStep(int64_t /*step*/) {
  if (config_.exchange.fp16_wire && engine_) {
    engine_->SetWireScale(static_cast<float>(trainer_->loss_scaler().scale()));
  }
  return Status::Ok();
}

Status AllreduceExchange::AfterBackward(int64_t step, int local_samples) {
  tuner_.BackwardEnded();
  Status s = hook_error_;
  if (s.ok()) s = engine_->WaitAll(Deadline::AfterSeconds(config_.fabric.op_timeout_s));
  // The timings are copied only while the overlap model measures.
  if (s.ok() && tuner_.measuring() && tuner_.StepDone(engine_->LastStepTimings())) s = DecideFirstBucket();
  if (s.ok() && checks_contributions_) s = CheckContributions(step, local_samples);
  if (s.ok()) return Status::Ok();
  ++failed_steps_;
  return Failed(s, "step " + std::to_string(step) + ": all-reduce", step + 1, /*abandon=*/true);
}

void AllreduceExchange::SetMemberShares(const std::vector<int>& shares) {
  shares_ = {shares, session_->view.epoch};
}

Status AllreduceExchange::CheckContributions(int64_t step, int local_samples) {
  const MembershipView& view = session_->view;
  double weight = local_samples;
  if (claim_fault_ && step >= claim_fault_->from_step) weight *= claim_fault_->factor;  // fault injection
  gossip::StepContribution mine = engine_->LastContribution();
  gossip::AuditFigures audit = engine_->LastAudit();
  const bool faulty = report_fault_ && step >= report_fault_->from_step;
  if (faulty && report_fault_->lie) report_fault_->Misreport(view.self_rank, &mine, &audit);
  std::vector<std::string> names(view.size());
  for (int r = 0; r < view.size(); ++r) names[r] = view.members[r].name;
  CheckRules rules = CheckRulesFrom(config_);
  rules.signer = session_->part_signer.get();
  rules.equivocate = faulty && report_fault_->EquivocatesNow();
  rules.bounds.max_total = view.GlobalBatch();
  // The shares of this membership only (a re-form installs new ones).
  if (const std::vector<int>* shares = shares_.For(view)) {
    rules.bounds.max_each.assign(shares->begin(), shares->end());
  }
  CHORUS_ASSIGN_OR_RETURN(const StepCheck check,
                          CheckStep(*collective_, view.epoch, CheckedSum::kGradients, mine, weight, audit, rules,
                                    Deadline::AfterSeconds(config_.fabric.op_timeout_s)));
  const PoisonVerdict& verdict = check.verdict;
  const std::vector<std::string> expel = poison_.Record(verdict, names, check.audited, check.figures.agreed);
  ReportVerdict(verdict, expel, names, view.self_rank, step, "step", config_.exchange.poison_expel_after,
                session_->control.get());
  if (verdict.abandon && !step_abandoned_) {
    // As for a re-form's failed step: applied nowhere, its batch trained again.
    if (live_ != nullptr) live_->PutBackStep();
    step_abandoned_ = true;
  }
  if (audit_.Note(verdict, view.epoch, "step " + std::to_string(step), "all-reduce is")) engine_->SetAudited(true);
  return Status::Ok();
}

Result<std::vector<double>> AllreduceExchange::GatherFromMembers(double mine) {
  Result<std::vector<double>> values = GatherMemberValues(*collective_, session_->view.epoch, mine,
                                                          Deadline::AfterSeconds(config_.fabric.op_timeout_s));
  if (!values) {
    CHORUS_RETURN_IF_ERROR(Failed(values.error(), "gathering values from the members",
                                  live_ != nullptr ? live_->NextStep() : 0, /*abandon=*/false));
    return std::vector<double>();
  }
  return values;
}

Status AllreduceExchange::Failed(const Status& failure, const std::string& what, int64_t next_step, bool abandon) {
  return StopOrReform(config_, failure, what, [&] { return Reform(failure, next_step, abandon); });
}

Result<int64_t> AllreduceExchange::InstallAndShare(const MembershipView& next, int64_t next_step) {
  CHORUS_RETURN_IF_ERROR(session_->InstallPeers(next, ReformDeadline(config_)));
  CHORUS_RETURN_IF_ERROR(Build());
  return ShareLiveStateIfAny(*collective_, next, live_, next_step, ReformDeadline(config_), 0,
                             config_.exchange.state_sources);
}

Status AllreduceExchange::Admit(const MembershipView& next, int64_t next_step) {
  Result<int64_t> admitted = InstallAndShare(next, next_step);
  if (admitted) {
    ++admissions_;
    return Status::Ok();
  }
  return Failed(admitted.error(), "admitting at epoch " + std::to_string(next.epoch), next_step, /*abandon=*/false);
}

Status AllreduceExchange::Joined() {
  const int64_t next_step = live_ != nullptr ? live_->NextStep() : 0;
  Result<int64_t> shared =
      ShareLiveStateIfAny(*collective_, session_->view, live_, next_step, ReformDeadline(config_), 0,
                          config_.exchange.state_sources);
  if (shared) return Status::Ok();
  return Failed(shared.error(), "taking the live state at epoch " + std::to_string(session_->view.epoch),
                live_ != nullptr ? live_->NextStep() : 0, /*abandon=*/false);
}

Status AllreduceExchange::Finish() {
  const MembershipView& view = session_->view;
  if (view.size() < 2) return Status::Ok();
  const Deadline deadline = ReformDeadline(config_);
  // CPU nodes are bitwise identical after every step (same arithmetic on the
  // same averaged gradients). A GPU applies the update with other arithmetic
  // (FMA, reduction order), so with one in the cluster the replicas drift
  // apart in the last bits: end with rank 0's model everywhere.
  const bool any_gpu = std::any_of(view.members.begin(), view.members.end(),
                                   [](const Member& m) { return m.device.on_gpu(); });
  if (any_gpu) {
    gossip::CollectiveOptions bo;
    bo.tag_base = FinishTagBase(view.epoch);
    bo.deadline = deadline;
    CHORUS_RETURN_IF_ERROR(
        collective_->Broadcast(std::as_writable_bytes(trainer_->MasterWeights()), 0, bo));
    trainer_->RefreshWorkingCopy();
    CHORUS_LOG_INFO(Subsys::kGossip, "GPU nodes in the cluster: every node ends with rank 0's model");
  }
  // Each node's BatchNorm saw only its own batches: one mean for the model file.
  return AverageBatchNormState(*collective_, *trainer_, FinishTagBase(view.epoch) + gossip::kTagsPerCollective,
                               deadline);
}

Status AllreduceExchange::Reform(const Status& failure, int64_t next_step, bool abandon) {
  Status s = ReformOverSurvivors(*session_, config_, failure, "all-reduce", [&](const MembershipView& next) {
    return ReformAt(next, next_step, abandon);
  });
  if (s.ok()) ++reforms_;
  return s;
}

Status AllreduceExchange::ReformAt(const MembershipView& next, int64_t next_step, bool abandon) {
  // The failed step (`abandon`) is applied on no survivor: survivors may
  // disagree on whether its sum completed (one finished step s and failed at
  // s + 1, another failed at s). Its batch goes back to the data and it is
  // the step to run next.
  if (abandon && live_ != nullptr) {
    live_->PutBackStep();
    --next_step;
  }
  // A member that joined and has no state yet (its sender died) takes it
  // first, with the sender's step.
  CHORUS_ASSIGN_OR_RETURN(next_step, InstallAndShare(next, next_step));
  // Then every survivor takes the new rank 0's whole live state: its master,
  // momentum, loss scaler and BatchNorm statistics, its step, and its place
  // in the data, from which the rest of the epoch is re-cut over the new
  // members (the loop's FollowMembership). What rank 0's model has trained
  // stays taken; what it has not, the dead members' rest and the abandoned
  // batch included, is trained once.
  if (live_ != nullptr) {
    if (next.self_rank != 0) live_->NeedState();
    CHORUS_ASSIGN_OR_RETURN(next_step,
                            ShareLiveStateIfAny(*collective_, next, live_, next_step, ReformDeadline(config_), 1));
  } else {
    CHORUS_RETURN_IF_ERROR(
        BroadcastTrainerState(*collective_, *trainer_, {}, ResyncTagBase(next.epoch), ReformDeadline(config_)));
  }
  steps_to_catch_up_ = 0;
  // Not even a zero-gradient update for the failed step: it would move the
  // weights by lr(step) (momentum, weight decay).
  step_abandoned_ = abandon;
  return Status::Ok();
}

Status AllreduceExchange::Resumed(int64_t next_step) {
  CHORUS_ASSIGN_OR_RETURN(const int64_t skip, CatchUpOnResume(*collective_, session_->view, live_, next_step, config_));
  CHORUS_RETURN_IF_ERROR(
      BroadcastTrainerState(*collective_, *trainer_, {}, ResyncTagBase(session_->view.epoch), ReformDeadline(config_)));
  steps_to_catch_up_ = skip;
  return Status::Ok();
}

nlohmann::json AllreduceExchange::Metrics() const {
  gossip::TransportStats t = session_->transport->Stats();
  return {{"bytes_sent", t.bytes_sent},
          {"bytes_received", t.bytes_received},
          {"bytes_sent_across_sites", t.bytes_sent_across_sites},
          {"membership_epoch", session_->view.epoch},
          {"world_size", session_->view.size()},
          {"reforms", reforms_},
          {"admissions", admissions_},
          {"poison", poison_.Summary()}};
}

}  // namespace chorus::node
