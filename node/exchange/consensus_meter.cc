// See consensus_meter.h.
#include "node/exchange/consensus_meter.h"

#include <optional>

#include "common/clock.h"
#include "common/log.h"
#include "gossip/protocols/consensus.h"
#include "gossip/protocols/gossip_tags.h"
#include "node/exchange/allreduce_exchange.h"

namespace chorus::node {

double ConsensusMeter::Measure(ClusterSession& session, const gossip::Collective* world,
                               std::span<const float> master, int64_t step, double op_timeout_s,
                               TraceWriter* trace, double not_measured) {
  if (step == step_) return distance_;
  gossip::Transport& transport = *session.transport;
  const gossip::TransportStats before = transport.Stats();
  const int64_t begin = NowMicros();
  Result<double> distance = [&]() -> Result<double> {
    std::optional<gossip::Collective> made;
    if (world == nullptr) {
      CHORUS_ASSIGN_OR_RETURN(gossip::Collective c, gossip::Collective::Create(transport, HostKeys(session.view)));
      made.emplace(std::move(c));
      world = &*made;
    }
    gossip::AllreduceOptions o;
    o.deadline = Deadline::AfterSeconds(op_timeout_s);
    const gossip::Tag tag_base = gossip::GossipCollectiveTagBase(
        tag_stream_, static_cast<uint32_t>(session.view.epoch), 2 * static_cast<uint64_t>(step));
    return gossip::MeasureConsensusDistance(*world, master, o, tag_base);
  }();
  const int64_t end = NowMicros();
  const gossip::TransportStats after = transport.Stats();
  cost_ += {after.bytes_sent - before.bytes_sent, after.bytes_received - before.bytes_received,
            after.bytes_sent_across_sites - before.bytes_sent_across_sites,
            static_cast<double>(end - begin) * 1e-6, true};
  if (trace != nullptr) trace->Add("consensus distance", 1, begin, end, step);
  step_ = step;
  distance_ = distance ? *distance : not_measured;
  if (!distance) {
    CHORUS_LOG_WARN(Subsys::kGossip, "after step ", step, ": consensus distance not measured: ",
                    distance.error().ToString());
  }
  return distance_;
}

MeasureCost& MeasureCost::operator+=(const MeasureCost& o) {
  sent += o.sent;
  received += o.received;
  sent_across_sites += o.sent_across_sites;
  seconds += o.seconds;
  measured = measured || o.measured;
  return *this;
}

nlohmann::json MeasureCost::TrainingBytes(const gossip::TransportStats& totals) const {
  auto less = [](uint64_t total, uint64_t part) { return total > part ? total - part : uint64_t{0}; };
  return {{"bytes_sent", less(totals.bytes_sent, sent)},
          {"bytes_received", less(totals.bytes_received, received)},
          {"bytes_sent_across_sites", less(totals.bytes_sent_across_sites, sent_across_sites)}};
}

void MeasureCost::AddMetrics(nlohmann::json& metrics) const {
  if (!measured) return;
  metrics["consensus_measure_bytes_sent"] = sent;
  metrics["consensus_measure_seconds"] = seconds;
}

}  // namespace chorus::node
