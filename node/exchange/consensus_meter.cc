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
  bytes_sent_ += after.bytes_sent - before.bytes_sent;
  bytes_received_ += after.bytes_received - before.bytes_received;
  bytes_sent_across_sites_ += after.bytes_sent_across_sites - before.bytes_sent_across_sites;
  seconds_ += static_cast<double>(end - begin) * 1e-6;
  if (trace != nullptr) trace->Add("consensus distance", 1, begin, end, step);
  step_ = step;
  distance_ = distance ? *distance : not_measured;
  if (!distance) {
    CHORUS_LOG_WARN(Subsys::kGossip, "after step ", step, ": consensus distance not measured: ",
                    distance.error().ToString());
  }
  return distance_;
}

void ConsensusMeter::AddMetrics(nlohmann::json& metrics) const {
  if (step_ < 0) return;
  metrics["consensus_measure_bytes_sent"] = bytes_sent_;
  metrics["consensus_measure_seconds"] = seconds_;
}

}  // namespace chorus::node
