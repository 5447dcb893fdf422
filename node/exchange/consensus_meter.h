// The exact consensus distance of the members' master weights at an
// evaluation (gossip/protocols/consensus.h), measured for the exchanges that
// let replicas differ (gossip, the outer step), with what the measurement
// itself cost kept apart, so that bytes_sent and bytes_received say what
// training costs.
//
// Must not: decide when to measure (the exchange answers
// Exchange::ExactConsensusDistance) or touch the weights.
#pragma once

#include <cstdint>
#include <span>

#include <nlohmann/json.hpp>

#include "gossip/collectives/collective.h"
#include "gossip/protocols/gossip_tags.h"
#include "node/cluster/cluster_session.h"
#include "node/outputs/trace.h"

namespace chorus::node {

// What the consensus measurements cost a node, kept out of training's
// counts: the bytes they sent and received, and their seconds.
struct MeasureCost {
  uint64_t sent = 0, received = 0, sent_across_sites = 0;
  double seconds = 0.0;
  bool measured = false;  // at least one measurement ran

  MeasureCost& operator+=(const MeasureCost& o);
  // bytes_sent, bytes_received and bytes_sent_across_sites of training: the
  // transport's `totals` less these (never below zero: a meter may count a
  // message before the transport does).
  nlohmann::json TrainingBytes(const gossip::TransportStats& totals) const;
  // consensus_measure_bytes_sent and consensus_measure_seconds, once measured.
  void AddMetrics(nlohmann::json& metrics) const;
};

class ConsensusMeter {
 public:
  // `tag_stream`: the gossip tag stream of its calls (gossip_tags.h); two
  // meters that may measure the same step need different streams.
  explicit ConsensusMeter(uint8_t tag_stream = gossip::kDistanceTagStream) : tag_stream_(tag_stream) {}

  // Two all-reduces over the session's members (over `world` when given, else
  // over a collective made for the call) on the meter's tag stream
  // at call index 2 * step, each waiting at most
  // op_timeout_s. A second call for the same step returns the first result
  // without communicating. A failure is logged and gives `not_measured`.
  double Measure(ClusterSession& session, const gossip::Collective* world, std::span<const float> master,
                 int64_t step, double op_timeout_s, TraceWriter* trace, double not_measured);

  // What the measurements cost so far.
  const MeasureCost& cost() const { return cost_; }

 private:
  uint8_t tag_stream_;
  int64_t step_ = -1;
  double distance_ = 0.0;
  MeasureCost cost_;
};

}  // namespace chorus::node
