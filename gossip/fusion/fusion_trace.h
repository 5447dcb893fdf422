// Communication spans of the fusion engine (begin and end of each bucket's
// all-reduce) and the sink interface they go to, so that node/ can write them into
// a Chrome trace next to the compute spans.
//
// Must not: format traces or touch files (node/ does); block in Record.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "gossip/collectives/collective_options.h"

namespace chorus::gossip {

struct CommSpan {
  std::string name;      // "allreduce bucket 3"
  int64_t step = 0;      // the engine's step counter (0 for the first WaitAll round)
  size_t bucket = 0;
  size_t bytes = 0;      // bytes of the bucket's buffer
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;  // as resolved for the call
  int64_t begin_us = 0;  // NowMicros() (common/clock.h) around the all-reduce,
  int64_t end_us = 0;    // pack and unpack included
  bool ok = true;
};

// Receives spans from the engine's communication thread.
class CommTraceSink {
 public:
  virtual ~CommTraceSink() = default;
  virtual void Record(const CommSpan& span) = 0;
};

// A sink that keeps every span in memory (thread-safe).
class CommSpanRecorder final : public CommTraceSink {
 public:
  void Record(const CommSpan& span) override {
    std::lock_guard<std::mutex> lock(mu_);
    spans_.push_back(span);
  }
  std::vector<CommSpan> Spans() const {
    std::lock_guard<std::mutex> lock(mu_);
    return spans_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<CommSpan> spans_;
};

}  // namespace chorus::gossip
