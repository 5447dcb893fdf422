// Audited all-reduce (see allreduce_audited.h).
//
// Progress: every scatter send is posted before the first receive, so no rank
// waits for a peer that waits for it; the receives then drain peer by peer.
// The gather receives land in chunks this rank sent in the scatter, so they
// start once those sends completed.
#include "gossip/collectives/allreduce_audited.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "gossip/collectives/collective_internal.h"
#include "topologies/chunking.h"

namespace chorus::gossip {

void AuditFigures::Add(const AuditFigures& o) {
  if (empty()) {
    *this = o;
    return;
  }
  for (size_t r = 0; r < sent.size() && r < o.sent.size(); ++r) {
    sent[r].Add(o.sent[r]);
    received[r].Add(o.received[r]);
    gathered[r].Add(o.gathered[r]);
  }
  summed.Add(o.summed);
}

void AuditFigures::Scale(double factor) {
  for (size_t r = 0; r < sent.size(); ++r) {
    sent[r].sumsq *= factor;
    received[r].sumsq *= factor;
    gathered[r].sumsq *= factor;
  }
  summed.sumsq *= factor;
}

namespace {

float Widen(float v) { return v; }
float Widen(uint16_t h) { return HalfBitsToFloat(h); }

template <typename T>
ChunkFigure Measure(std::span<const T> values) {
  ChunkFigure f;
  for (T raw : values) {
    const float v = Widen(raw);
    f.sumsq += static_cast<double>(v) * v;
    if (!std::isfinite(v)) f.finite = false;
  }
  return f;
}

Status WaitAll(std::vector<RequestPtr>& requests, Deadline deadline, const std::string& what) {
  for (RequestPtr& r : requests) {
    auto done = r->Wait(deadline);
    if (!done) return done.error().WithContext(what);
  }
  requests.clear();
  return Status::Ok();
}

template <typename T>
Status AuditedSum(const CollectiveGroup& group, std::span<T> data, const AllreduceOptions& options,
                  AuditFigures* figures) {
  const int n = group.size();
  const int self = group.self();
  CHORUS_ASSIGN_OR_RETURN(std::vector<topologies::Range> chunks,
                          topologies::PartitionChunks(static_cast<int64_t>(data.size()), n));
  auto chunk = [&](int c) {
    return data.subspan(static_cast<size_t>(chunks[c].begin), static_cast<size_t>(chunks[c].size()));
  };
  const size_t segment = options.segment_elems;
  const Tag scatter = CollectiveTag(options.tag_base, CollectivePhase::kAuditScatter);
  const Tag gather = CollectiveTag(options.tag_base, CollectivePhase::kAuditGather);
  AuditFigures& f = *figures;
  f = AuditFigures{};
  f.sent.resize(n);
  f.received.resize(n);
  f.gathered.resize(n);

  std::vector<RequestPtr> sends;
  for (int k = 0; k < n; ++k) {
    f.sent[k] = Measure<T>(chunk(k));
    if (k != self) CHORUS_RETURN_IF_ERROR(detail::SendSegments<T>(group, k, scatter, chunk(k), segment, &sends));
  }
  f.received[self] = f.sent[self];
  std::vector<std::vector<T>> from(n);
  for (int j = 0; j < n; ++j) {
    if (j == self) continue;
    from[j].resize(chunk(self).size());
    CHORUS_RETURN_IF_ERROR(detail::ReceiveSegments<T>(group, j, scatter, std::span<T>(from[j]), false, segment,
                                                      options.inflight_segments, options.deadline,
                                                      "audited reduce-scatter from rank " + std::to_string(j)));
    f.received[j] = Measure<T>(std::span<const T>(from[j]));
  }
  CHORUS_RETURN_IF_ERROR(WaitAll(sends, options.deadline, "audited reduce-scatter sends"));
  // The sum in rank order, this rank's own chunk at its place: the same
  // order whoever owns the chunk.
  std::vector<T> sum(chunk(self).size());
  for (int j = 0; j < n; ++j) {
    const std::span<const T> part = j == self ? std::span<const T>(chunk(self)) : std::span<const T>(from[j]);
    if (j == 0) {
      std::copy(part.begin(), part.end(), sum.begin());
    } else {
      detail::AddInto(sum.data(), part.data(), part.size());
    }
  }
  std::copy(sum.begin(), sum.end(), chunk(self).begin());
  f.summed = Measure<T>(chunk(self));
  f.gathered[self] = f.summed;

  return detail::DirectAllgather<T>(group, gather, chunk, segment, options.inflight_segments, options.deadline,
                                    "audited all-gather", [&](int k) { f.gathered[k] = Measure<T>(chunk(k)); });
}

template <typename T>
Status Audited(const CollectiveGroup& group, std::span<T> data, const AllreduceOptions& options,
               AuditFigures* figures) {
  return detail::RunAllreduce<T>(group, data, options, "audited all-reduce",
                                 [&] { return AuditedSum(group, data, options, figures); });
}

}  // namespace

Status AllreduceAudited(const CollectiveGroup& group, std::span<float> data, const AllreduceOptions& options,
                        AuditFigures* figures) {
  return Audited(group, data, options, figures);
}

Status AllreduceAudited(const CollectiveGroup& group, std::span<uint16_t> half, const AllreduceOptions& options,
                        AuditFigures* figures) {
  return Audited(group, half, options, figures);
}

}  // namespace chorus::gossip
