// The data-coverage record (see sample_record.h).
#include "node/outputs/sample_record.h"

#include <cstdlib>
#include <utility>

#include "common/log.h"

namespace chorus::node {

std::unique_ptr<SampleRecord> SampleRecord::FromEnvironment(const std::string& node_name) {
  const char* dir = std::getenv("CHORUS_RECORD_SAMPLES_DIR");
  if (dir == nullptr || *dir == '\0') return nullptr;
  const std::string path = std::string(dir) + "/" + node_name + ".samples";
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) {
    CHORUS_LOG_WARN(Subsys::kNode, "CHORUS_RECORD_SAMPLES_DIR: cannot append to ", path, "; recording no samples");
    return nullptr;
  }
  return std::unique_ptr<SampleRecord>(new SampleRecord(file));
}

SampleRecord::~SampleRecord() { std::fclose(file_); }

void SampleRecord::Line(const std::string& text) {
  std::fputs((text + "\n").c_str(), file_);
  std::fflush(file_);
}

void SampleRecord::Pending(int epoch, uint64_t membership, int64_t step, std::span<const int32_t> indices) {
  pending_ = Step{membership, step};
  std::string text = "sent " + std::to_string(epoch) + " " + std::to_string(membership) + " " + std::to_string(step) + " ";
  for (size_t i = 0; i < indices.size(); ++i) text += (i > 0 ? "," : "") + std::to_string(indices[i]);
  Line(text);
}

void SampleRecord::Commit() {
  if (!pending_) return;
  Line("applied " + std::to_string(pending_->membership) + " " + std::to_string(pending_->step));
  pending_.reset();
}

void SampleRecord::Drop() { pending_.reset(); }

void SampleRecord::Restored(int64_t next_step) {
  Line("rewind " + std::to_string(next_step));
  if (pending_ && pending_->step < next_step) {
    Commit();  // the others summed it before this node's all-reduce failed
  } else {
    pending_.reset();
  }
}

void SampleRecord::EpochEnd(int epoch, int64_t samples_per_epoch) {
  Line("epoch " + std::to_string(epoch) + " " + std::to_string(samples_per_epoch));
}

}  // namespace chorus::node
