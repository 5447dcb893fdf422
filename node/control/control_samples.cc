// The control plane's count of the cluster's trained samples (a grow-only
// counter per node incarnation, spread by heartbeats: sample_counter.h) and
// the barrier-free admission that it bounds (ControlPlane::AdmitOnItsOwn).
#include <algorithm>
#include <chrono>

#include "node/control/control_plane_impl.h"

namespace chorus::node {

void ControlPlaneImpl::ReportSamples(uint64_t samples) {
  std::lock_guard<std::mutex> lock(mu_);
  progress_samples_ = samples;
  samples_.Raise(incarnation_, samples);
}

uint64_t ControlPlaneImpl::ClusterSamples(bool extrapolate) const {
  std::lock_guard<std::mutex> lock(mu_);
  // A live member's count may be extrapolated at its last rate for up to two
  // heartbeat intervals (its next count is on the way).
  return ClusterSamplesLocked(extrapolate, 2 * std::chrono::duration<double>(heartbeat_interval_).count());
}

uint64_t ControlPlaneImpl::ClusterSamplesLocked(bool extrapolate, double horizon_s) const {
  uint64_t total = samples_.Total();
  if (!extrapolate) return total;
  const Clock::time_point now = Clock::now();
  for (const auto& [name, heard] : samples_heard_) {
    if (!LiveOtherMember(name)) continue;
    const double since = std::min(horizon_s, std::chrono::duration<double>(now - heard.at).count());
    total += static_cast<uint64_t>(heard.per_second * std::max(0.0, since));
  }
  return total;
}

std::map<std::string, uint64_t> ControlPlaneImpl::SampleCounts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return samples_.counts();
}

void ControlPlaneImpl::MergeSampleCounts(const std::map<std::string, uint64_t>& counts) {
  std::lock_guard<std::mutex> lock(mu_);
  samples_.Merge(counts);
}

void ControlPlaneImpl::AdmitOnItsOwn(uint64_t until_samples) {
  std::lock_guard<std::mutex> lock(mu_);
  admit_on_its_own_ = true;
  admit_until_samples_ = until_samples;
}

// The members stop once the cluster's count reaches the budget, each hearing
// the others' counts up to a heartbeat late: no joiner within the samples the
// cluster trains in kAdmissionMarginBeats heartbeats of it (the members heard
// from at their last rates, this node counted as their average).
bool ControlPlaneImpl::AdmitsOnItsOwnNow(bool departures) const {
  constexpr double kAdmissionMarginBeats = 4.0;
  if (!admit_on_its_own_ || departures || phase_ != Phase::kMember) return false;
  if (std::none_of(applicants_.begin(), applicants_.end(), [](const Applicant& a) { return a.conn->established(); })) {
    return false;
  }
  double rate = 0.0;
  int heard = 0;
  for (const auto& [name, h] : samples_heard_) {
    if (!LiveOtherMember(name)) continue;
    rate += h.per_second;
    ++heard;
  }
  if (heard > 0) rate *= static_cast<double>(heard + 1) / heard;
  const double margin = kAdmissionMarginBeats * std::chrono::duration<double>(heartbeat_interval_).count() * rate;
  return static_cast<double>(ClusterSamplesLocked(/*extrapolate=*/false, 0.0)) + margin <
         static_cast<double>(admit_until_samples_);
}

}  // namespace chorus::node
