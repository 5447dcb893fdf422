// Consensus phase (consensus.h): exact distance measurement, the all-reduce
// average with its bitwise-identity check, and gossip until a bound.
#include "gossip/protocols/consensus.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "common/checksum.h"
#include "common/log.h"
#include "gossip/protocols/dpsgd_gossip.h"
#include "gossip/protocols/gossip_tags.h"
#include "topologies/graph_builders.h"

namespace chorus::gossip {
namespace {

AllreduceOptions WithTags(const AllreduceOptions& base, Tag tag_base, Deadline deadline) {
  AllreduceOptions o = base;
  o.tag_base = tag_base;
  o.deadline = deadline;
  o.pre_scale = 1.0f;
  o.post_scale = 1.0f;
  return o;
}

// Every rank's checksum, through an all-reduce of 4 x size floats (16-bit pieces).
Result<std::vector<uint64_t>> GatherChecksums(const Collective& world, uint64_t checksum,
                                              const AllreduceOptions& options) {
  const int n = world.size();
  std::vector<float> pieces(4 * static_cast<size_t>(n), 0.0f);
  for (int k = 0; k < 4; ++k) {
    pieces[4 * static_cast<size_t>(world.rank()) + k] =
        static_cast<float>((checksum >> (16 * k)) & 0xffffu);
  }
  CHORUS_RETURN_IF_ERROR(world.Allreduce(std::span<float>(pieces), options));
  std::vector<uint64_t> out(n, 0);
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < 4; ++k) {
      out[r] |= static_cast<uint64_t>(pieces[4 * static_cast<size_t>(r) + k]) << (16 * k);
    }
  }
  return out;
}

}  // namespace

Result<double> MeasureConsensusDistance(const Collective& world, std::span<const float> params,
                                        const AllreduceOptions& options, Tag tag_base,
                                        std::vector<float>* mean, std::vector<float>* distances_out) {
  std::vector<float> local_mean, local_distances;
  std::vector<float>& m = mean ? *mean : local_mean;
  m.assign(params.begin(), params.end());
  AllreduceOptions sum = WithTags(options, tag_base, options.deadline);
  sum.post_scale = 1.0f / static_cast<float>(world.size());
  CHORUS_RETURN_IF_ERROR(world.Allreduce(std::span<float>(m), sum));

  double diff2 = 0.0;
  double norm2 = 0.0;
  for (size_t i = 0; i < params.size(); ++i) {
    const double d = static_cast<double>(params[i]) - static_cast<double>(m[i]);
    diff2 += d * d;
    norm2 += static_cast<double>(m[i]) * static_cast<double>(m[i]);
  }
  std::vector<float>& distances = distances_out ? *distances_out : local_distances;
  distances.assign(world.size(), 0.0f);
  distances[world.rank()] = static_cast<float>(std::sqrt(diff2));
  CHORUS_RETURN_IF_ERROR(
      world.Allreduce(std::span<float>(distances),
                      WithTags(options, tag_base + kTagsPerCollective, options.deadline)));
  const double max_distance = *std::max_element(distances.begin(), distances.end());
  const double norm = std::sqrt(norm2);
  return norm > 0.0 ? max_distance / norm : max_distance;
}

namespace {

Status CheckOptions(const ConsensusOptions& options) {
  if (options.method != ConsensusMethod::kGossip) return Status::Ok();
  if (!(options.bound > 0.0)) {
    return InvalidArgument("consensus: bound must be > 0, got " + std::to_string(options.bound));
  }
  if (options.check_every < 1 || options.max_rounds < 0) {
    return InvalidArgument("consensus: check_every must be >= 1 and max_rounds >= 0");
  }
  return Status::Ok();
}

// The tag bases of the phase's collective calls, in call order (see the
// consensus.h file comment).
class TagBases {
 public:
  explicit TagBases(const ConsensusOptions& options) : options_(options) {}
  Tag Next() {
    const Tag base = GossipCollectiveTagBase(options_.tag_stream, options_.epoch, call_);
    call_ += 2;  // MeasureConsensusDistance uses two ranges
    return base;
  }

 private:
  const ConsensusOptions& options_;
  uint64_t call_ = 0;
};

// Checks that every rank holds the same bytes of `params`; on a mismatch
// broadcasts rank 0's and checks again.
Status MakeIdentical(const Collective& world, std::span<float> params, const ConsensusOptions& options,
                     const AllreduceOptions& allreduce, TagBases& tags, ConsensusReport& report) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    report.checksum = WeightsChecksum(params);
    CHORUS_ASSIGN_OR_RETURN(auto sums,
                            GatherChecksums(world, report.checksum,
                                            WithTags(allreduce, tags.Next(), options.deadline)));
    report.identical =
        std::all_of(sums.begin(), sums.end(), [&](uint64_t s) { return s == sums[0]; });
    if (report.identical) break;
    if (attempt == 1) {
      return Internal("consensus: replicas differ even after broadcasting rank 0's bytes");
    }
    CHORUS_LOG_WARN(Subsys::kGossip,
                    "consensus: all-reduce results differ between ranks; "
                    "broadcasting rank 0's bytes");
    CollectiveOptions broadcast;
    broadcast.tag_base = tags.Next();
    broadcast.deadline = options.deadline;
    CHORUS_RETURN_IF_ERROR(world.Broadcast(
        std::span<std::byte>(reinterpret_cast<std::byte*>(params.data()), params.size_bytes()), 0,
        broadcast));
    report.repaired = true;
  }
  return Status::Ok();
}

// kAllreduceAverage: every replica takes the exact mean, bitwise identical.
Result<ConsensusReport> AverageByAllreduce(const Collective& world, std::span<float> params,
                                           const ConsensusOptions& options, const AllreduceOptions& allreduce,
                                           TagBases& tags) {
  ConsensusReport report;
  std::vector<float> mean;
  CHORUS_ASSIGN_OR_RETURN(report.distance_before,
                          MeasureConsensusDistance(world, params, allreduce, tags.Next(), &mean));
  report.measurements = 1;
  std::copy(mean.begin(), mean.end(), params.begin());
  CHORUS_RETURN_IF_ERROR(MakeIdentical(world, params, options, allreduce, tags, report));
  report.distance_after = 0.0;
  report.reached = true;
  return report;
}

// kGossip: D-PSGD rounds over `graph` (complete when null) until the measured
// distance is within the bound or max_rounds have run.
Result<ConsensusReport> GossipUntilBound(const Collective& world, const topologies::Graph* graph,
                                         std::span<float> params, const ConsensusOptions& options,
                                         const AllreduceOptions& allreduce, TagBases& tags) {
  ConsensusReport report;
  std::optional<topologies::Graph> complete;
  if (!graph) {
    CHORUS_ASSIGN_OR_RETURN(auto c, topologies::CompleteGraph(world.size()));
    complete.emplace(std::move(c));
  }
  const topologies::Graph& g = graph ? *graph : *complete;
  DpsgdOptions dpsgd;
  dpsgd.tag_stream = options.tag_stream;
  dpsgd.epoch = options.epoch;
  CHORUS_ASSIGN_OR_RETURN(auto mixer, DpsgdGossip::Create(world.transport(), g, dpsgd));
  while (true) {
    CHORUS_ASSIGN_OR_RETURN(const double d,
                            MeasureConsensusDistance(world, params, allreduce, tags.Next()));
    if (report.measurements == 0) report.distance_before = d;
    ++report.measurements;
    report.distance_after = d;
    if (d <= options.bound) {
      report.reached = true;
      break;
    }
    if (report.gossip_rounds >= options.max_rounds) break;
    const int64_t rounds =
        std::min<int64_t>(options.check_every, options.max_rounds - report.gossip_rounds);
    for (int64_t k = 0; k < rounds; ++k) {
      CHORUS_RETURN_IF_ERROR(mixer->Mix(params, report.gossip_rounds, options.deadline)
                                 .WithContext("consensus gossip"));
      ++report.gossip_rounds;
    }
  }
  report.checksum = WeightsChecksum(params);
  return report;
}

}  // namespace

Result<ConsensusReport> RunConsensus(const Collective& world, const topologies::Graph* graph,
                                     std::span<float> params, const ConsensusOptions& options) {
  CHORUS_RETURN_IF_ERROR(CheckOptions(options));
  TagBases tags(options);
  AllreduceOptions allreduce = options.allreduce;
  allreduce.deadline = options.deadline;
  if (options.method == ConsensusMethod::kAllreduceAverage) {
    return AverageByAllreduce(world, params, options, allreduce, tags);
  }
  return GossipUntilBound(world, graph, params, options, allreduce, tags);
}

}  // namespace chorus::gossip
