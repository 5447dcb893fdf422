// SampleCounter: the cluster's trained-sample count as a grow-only counter
// (a G-counter, as in CRDTs) with one entry per node incarnation. An
// incarnation is a node name plus the id of the process that ran under it
// ("node2#9f3c..."), so a node restarted under its name counts afresh beside
// its earlier run's entry instead of under it; departed incarnations stay
// counted. Replicas merge by taking each entry's maximum, which is
// idempotent, commutative and associative: heartbeats, a joiner's live state
// and every resumed checkpoint can carry the whole map, in any order and
// any number of times, and every node ends with the same total.
//
// Must not: know about heartbeats or checkpoints (callers carry Encode's text).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"

namespace chorus::node {

class SampleCounter {
 public:
  // Raises `incarnation`'s entry to `count` (never lowers it).
  void Raise(const std::string& incarnation, uint64_t count);
  // Raises every entry of `other`.
  void Merge(const std::map<std::string, uint64_t>& other);
  // The sum over the incarnations.
  uint64_t Total() const;
  uint64_t Of(const std::string& incarnation) const;
  const std::map<std::string, uint64_t>& counts() const { return counts_; }

  // "incarnation=count" entries joined by ';' (incarnations hold neither
  // character: node names are checked by the config), and back; Decode names
  // `what` in its error.
  static std::string Encode(const std::map<std::string, uint64_t>& counts);
  static Result<std::map<std::string, uint64_t>> Decode(const std::string& text, const std::string& what);

 private:
  std::map<std::string, uint64_t> counts_;
};

// A new incarnation of `name`: the name, '#', and 16 hex digits drawn at random.
std::string NewIncarnation(const std::string& name);

}  // namespace chorus::node
