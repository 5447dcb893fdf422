// MetricsWriter and WriteSummary. nlohmann::json serialization is called with
// the replacing error handler, so invalid UTF-8 cannot throw; nothing else here
// throws. The atomic write itself is common/files.h's WriteFileAtomic.
#include "node/outputs/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "common/files.h"
#include "common/host_info.h"
#include "common/posix_io.h"

namespace chorus::node {
namespace {

std::string Serialize(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

Status CreateParent(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return Status::Ok();
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) return ErrnoStatus(ec.value(), "create folder " + parent.string());
  return Status::Ok();
}

}  // namespace

std::string NodeRunDir(const RunConfig& run, const std::string& node_name) {
  return (std::filesystem::path(run.output_dir) / run.name / node_name).string();
}

Result<std::unique_ptr<MetricsWriter>> MetricsWriter::Open(const std::string& path, bool append) {
  CHORUS_RETURN_IF_ERROR(CreateParent(path));
  // O_APPEND: each line lands at the end even if another writer appended meanwhile.
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (append ? 0 : O_TRUNC);
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) return Err(ErrnoStatus(errno, "open metrics file " + path));
  return std::unique_ptr<MetricsWriter>(new MetricsWriter(path, fd));
}

MetricsWriter::~MetricsWriter() { ::close(fd_); }

Status MetricsWriter::Append(const nlohmann::json& record) {
  if (!record.is_object()) {
    return InvalidArgument(path_ + ": a metrics record must be a JSON object, got " + record.type_name());
  }
  const std::string line = Serialize(record, -1) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  return WriteAll(fd_, AsBytes(line), "metrics file " + path_);
}

Status WriteSummary(const std::string& path, const nlohmann::json& summary) {
  CHORUS_RETURN_IF_ERROR(CreateParent(path));
  return WriteFileAtomic(path, AsBytes(Serialize(summary, 2) + "\n")).WithContext("write summary " + path);
}

nlohmann::json SummaryHeader(nlohmann::json exchange_metrics, const std::string& exchange,
                             const std::string& node, int rank, int world_size, const TrainConfig& train,
                             int global_batch, int64_t steps) {
  nlohmann::json summary = std::move(exchange_metrics);
  summary["node"] = node;
  summary["rank"] = rank;
  summary["world_size"] = world_size;
  summary["exchange"] = exchange;
  summary["model"] = trainer::ModelName(train.model);
  summary["precision"] = trainer::PrecisionName(train.precision);
  summary["device"] = train.device.Name();
  summary["optimizer"] = trainer::OptimizerKindName(train.optimizer);
  summary["epochs"] = train.epochs;
  summary["batch_size"] = train.batch_size;
  summary["global_batch"] = global_batch;
  summary["steps"] = steps;
  summary["threads"] = train.threads;
  const HostInfo host = ReadHostInfo();
  summary["host"] = {{"cpu", host.cpu_model}, {"cores", host.cores}};
  return summary;
}

}  // namespace chorus::node
