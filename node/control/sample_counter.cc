// SampleCounter (see sample_counter.h).
#include "node/control/sample_counter.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <random>

namespace chorus::node {

void SampleCounter::Raise(const std::string& incarnation, uint64_t count) {
  uint64_t& entry = counts_[incarnation];
  entry = std::max(entry, count);
}

void SampleCounter::Merge(const std::map<std::string, uint64_t>& other) {
  for (const auto& [incarnation, count] : other) Raise(incarnation, count);
}

uint64_t SampleCounter::Total() const {
  uint64_t total = 0;
  for (const auto& [incarnation, count] : counts_) total += count;
  return total;
}

uint64_t SampleCounter::Of(const std::string& incarnation) const {
  auto it = counts_.find(incarnation);
  return it != counts_.end() ? it->second : 0;
}

std::string SampleCounter::Encode(const std::map<std::string, uint64_t>& counts) {
  std::string text;
  for (const auto& [incarnation, count] : counts) {
    if (!text.empty()) text += ';';
    text += incarnation + '=' + std::to_string(count);
  }
  return text;
}

Result<std::map<std::string, uint64_t>> SampleCounter::Decode(const std::string& text, const std::string& what) {
  std::map<std::string, uint64_t> counts;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(';', start);
    if (end == std::string::npos) end = text.size();
    const std::string entry = text.substr(start, end - start);
    const size_t eq = entry.rfind('=');
    uint64_t count = 0;
    const char* first = entry.data() + (eq == std::string::npos ? 0 : eq + 1);
    const char* last = entry.data() + entry.size();
    auto [ptr, ec] = std::from_chars(first, last, count);
    if (eq == std::string::npos || eq == 0 || first == last || ec != std::errc() || ptr != last) {
      return Err(DataLoss(what + ": sample counts: expected \"incarnation=count\" entries separated by ';', got \"" +
                          entry + "\""));
    }
    uint64_t& slot = counts[entry.substr(0, eq)];
    slot = std::max(slot, count);
    start = end + 1;
  }
  return counts;
}

std::string NewIncarnation(const std::string& name) {
  std::random_device device;
  const uint64_t id = (static_cast<uint64_t>(device()) << 32) ^ device();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(id));
  return name + "#" + hex;
}

}  // namespace chorus::node
