// node/outputs/: what a run leaves on disk (metrics.jsonl, summary.json, trace.json).
//
// What a run leaves on disk for people and for `chorus report`:
// runs/<run>/<node>/metrics.jsonl (one JSON object per line, flushed as written)
// and summary.json (written atomically, so a reader never sees half a file).
//
// The caller chooses the fields of each record (step, epoch, time, loss, lr,
// loss_scale, skipped_steps, samples_per_s, eval_accuracy, eval_loss,
// bytes_sent, bytes_received, consensus_distance, ...); this file only writes
// them. Non-finite numbers become null (JSON has no NaN).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "node/config/config.h"

namespace chorus::node {

// <output_dir>/<run name>/<node_name>: where one node's files go.
std::string NodeRunDir(const RunConfig& run, const std::string& node_name);

class MetricsWriter {
 public:
  // Opens (creating parent folders) `path`; `append` keeps earlier lines (resume),
  // otherwise the file starts empty.
  [[nodiscard]] static Result<std::unique_ptr<MetricsWriter>> Open(const std::string& path, bool append);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Writes `record` (a JSON object) as one line with a single write(2).
  // Thread-safe.
  [[nodiscard]] Status Append(const nlohmann::json& record);

  const std::string& path() const { return path_; }

 private:
  MetricsWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  std::string path_;
  int fd_;
  std::mutex mu_;
};

// The fields every summary.json starts with, real node or virtual one: the
// exchange's metrics (Exchange::Metrics) and description, who the node is,
// the training setup (with train.threads as "threads") and the host it ran on
// ("host": {"cpu", "cores"}, see common/host_info.h), so that a report can tell
// whether nodes shared cores.
nlohmann::json SummaryHeader(nlohmann::json exchange_metrics, const std::string& exchange,
                             const std::string& node, int rank, int world_size, const TrainConfig& train,
                             int global_batch, int64_t steps);

// Writes `summary` pretty-printed to `path` atomically (temporary file, fsync,
// rename, fsync of the folder), creating parent folders.
[[nodiscard]] Status WriteSummary(const std::string& path, const nlohmann::json& summary);

}  // namespace chorus::node
