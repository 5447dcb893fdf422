// Chrome trace (trace.json, chrome://tracing or Perfetto): compute and
// communication spans per step, so the overlap of backward with the gradient
// all-reduce is visible. Thread-safe; spans are kept in memory and written
// atomically at the end.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "gossip/fusion/fusion_trace.h"

namespace chorus::node {

class TraceWriter final : public gossip::CommTraceSink {
 public:
  explicit TraceWriter(int pid, size_t max_spans = 200000) : pid_(pid), max_spans_(max_spans) {}

  // A complete span on track `tid` (0: compute, 1: communication).
  void Add(std::string name, int tid, int64_t begin_us, int64_t end_us, int64_t step);
  void Record(const gossip::CommSpan& span) override;
  [[nodiscard]] Status Write(const std::string& path) const;

 private:
  struct Span {
    std::string name;
    int tid;
    int64_t begin_us, end_us, step;
  };
  const int pid_;
  const size_t max_spans_;
  mutable std::mutex mu_;
  std::vector<Span> spans_;
};

}  // namespace chorus::node
