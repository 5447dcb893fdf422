// SampleRecord: which samples a node's steps put into the cluster's model, for
// the tests of data coverage (every sample of an epoch trained once by the
// cluster through joins, deaths and re-forms). Off unless the environment
// names a folder: CHORUS_RECORD_SAMPLES_DIR=DIR appends to DIR/<node>.samples,
// one line at a time (a killed node's lines stay), in lock-step modes only:
//
//   sent E M S i0,i1,...   step S of epoch E, in membership epoch M, sent
//                          the gradient of these samples to the exchange
//   applied M S            that step went into this node's update
//   rewind S               this node took a state at step S: its steps S and
//                          later no longer count (the state holds none of
//                          them; they are trained again)
//   epoch E N              epoch E ended; its partitions held N samples
//                          (BatchSampler::SamplesPerEpoch: the rest of the
//                          data set was left out by the cuts)
//
// A step is applied once its gradient is summed here (Commit) or, when its
// all-reduce failed here, once the state the node takes shows that the others
// summed it (Restored at a later step); a step abandoned everywhere (Drop) is
// not, and its batch is trained again. A killed node writes no verdict on
// its last step: its gradient was summed where the survivors applied the same
// (M, S), which is how a reader of the records tells.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace chorus::node {

class SampleRecord {
 public:
  // The record of node `node_name`, or null when CHORUS_RECORD_SAMPLES_DIR is
  // unset or its file cannot be opened (said in the log).
  static std::unique_ptr<SampleRecord> FromEnvironment(const std::string& node_name);
  ~SampleRecord();
  SampleRecord(const SampleRecord&) = delete;
  SampleRecord& operator=(const SampleRecord&) = delete;

  // The step being trained, in membership epoch `membership`, before its
  // exchange (its "sent" line); its verdict comes with Commit, Drop or Restored.
  void Pending(int epoch, uint64_t membership, int64_t step, std::span<const int32_t> indices);
  void Commit();
  void Drop();
  // This node took another's state, which runs `next_step` next.
  void Restored(int64_t next_step);
  void EpochEnd(int epoch, int64_t samples_per_epoch);

 private:
  explicit SampleRecord(std::FILE* file) : file_(file) {}
  void Line(const std::string& text);

  struct Step {
    uint64_t membership = 0;
    int64_t step = 0;
  };
  std::FILE* file_;
  std::optional<Step> pending_;
};

}  // namespace chorus::node
