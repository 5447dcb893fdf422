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

  // Bytes the measurements sent and received, and the seconds they took.
  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t bytes_received() const { return bytes_received_; }
  uint64_t bytes_sent_across_sites() const { return bytes_sent_across_sites_; }
  // consensus_measure_bytes_sent and consensus_measure_seconds, once measured.
  void AddMetrics(nlohmann::json& metrics) const;

 private:
  uint8_t tag_stream_;
  int64_t step_ = -1;
  double distance_ = 0.0;
  uint64_t bytes_sent_ = 0, bytes_received_ = 0, bytes_sent_across_sites_ = 0;
  double seconds_ = 0.0;
};

}  // namespace chorus::node
