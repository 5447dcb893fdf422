// Chrome trace writer (see trace.h).
#include "node/outputs/trace.h"

#include <nlohmann/json.hpp>

#include "common/files.h"

namespace chorus::node {

void TraceWriter::Add(std::string name, int tid, int64_t begin_us, int64_t end_us, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  if (spans_.size() >= max_spans_) return;  // bounded: long runs keep their first spans
  spans_.push_back({std::move(name), tid, begin_us, end_us, step});
}

void TraceWriter::Record(const gossip::CommSpan& span) {
  Add(span.name, 1, span.begin_us, span.end_us, span.step);
}

Status TraceWriter::Write(const std::string& path) const {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid_}, {"tid", 0},
                    {"args", {{"name", "compute"}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid_}, {"tid", 1},
                    {"args", {{"name", "communication"}}}});
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Span& s : spans_) {
      events.push_back({{"name", s.name}, {"ph", "X"}, {"pid", pid_}, {"tid", s.tid},
                        {"ts", s.begin_us}, {"dur", std::max<int64_t>(0, s.end_us - s.begin_us)},
                        {"args", {{"step", s.step}}}});
    }
  }
  const std::string text = nlohmann::json{{"traceEvents", events}}.dump();
  return WriteFileAtomic(path, AsBytes(text));
}

}  // namespace chorus::node
