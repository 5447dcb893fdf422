// spdlog behind the log facade: a logger with one distributing sink (console,
// then a file once opened), installed with SetLogSink. spdlog throws
// spdlog::spdlog_ex on file errors; that is caught in OpenFile.
#include "node/run/logging.h"

#include <cstdio>
#include <filesystem>
#include <mutex>

#include <spdlog/logger.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "common/log.h"

namespace chorus::node {
namespace {

constexpr const char* kPattern = "[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v";

spdlog::level::level_enum ToSpdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return spdlog::level::trace;
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarn: return spdlog::level::warn;
    case LogLevel::kError: return spdlog::level::err;
    case LogLevel::kOff: return spdlog::level::off;
  }
  return spdlog::level::info;
}

Result<std::shared_ptr<spdlog::sinks::sink>> MakeFileSink(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return Err(ErrnoStatus(ec.value(), "create log folder " + parent.string()));
  std::shared_ptr<spdlog::sinks::sink> sink;
  try {
    sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
  } catch (const std::exception& e) {
    return Err(Unavailable("open log file " + path + ": " + e.what()));
  }
  sink->set_pattern(kPattern);
  return sink;
}

}  // namespace

struct LogSession::State {
  ConsoleLine console{stderr};
  std::shared_ptr<spdlog::sinks::dist_sink_mt> sinks = std::make_shared<spdlog::sinks::dist_sink_mt>();
  std::shared_ptr<spdlog::sinks::sink> file_sink;  // null while there is no log file
  std::shared_ptr<spdlog::logger> logger;
  std::mutex prefix_mu;
  std::string prefix;  // "[node3] " or empty

  std::string Prefix() {
    std::lock_guard<std::mutex> lock(prefix_mu);
    return prefix;
  }
};

LogSession::LogSession(std::shared_ptr<State> state) : state_(std::move(state)) {}

LogSession::~LogSession() {
  state_->logger->flush();
  SetLogSink(nullptr);
}

Status LogSession::OpenFile(const std::string& path) {
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<spdlog::sinks::sink> sink, MakeFileSink(path));
  if (state_->file_sink) state_->sinks->remove_sink(state_->file_sink);
  state_->sinks->add_sink(sink);
  state_->file_sink = std::move(sink);
  return Status::Ok();
}

void LogSession::SetPrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(state_->prefix_mu);
  state_->prefix = prefix.empty() ? "" : "[" + prefix + "] ";
}

ConsoleLine& LogSession::console() { return state_->console; }

void LogSession::Flush() { state_->logger->flush(); }

Result<std::unique_ptr<LogSession>> InstallLogging(const RunConfig& run,
                                                   const std::optional<std::string>& log_file,
                                                   const std::string& node_prefix) {
  const LogLevel level = run.log_level;
  auto state = std::make_shared<LogSession::State>();
  if (log_file) {
    CHORUS_ASSIGN_OR_RETURN(state->file_sink, MakeFileSink(*log_file));
    state->sinks->add_sink(state->file_sink);
  }
  auto console_sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  console_sink->set_pattern(kPattern);
  state->sinks->add_sink(console_sink);
  state->logger = std::make_shared<spdlog::logger>("chorus", state->sinks);
  state->logger->set_level(spdlog::level::trace);  // the facade filters by level
  state->logger->flush_on(spdlog::level::trace);   // a crash must not lose the last lines

  auto session = std::make_unique<LogSession>(state);
  session->SetPrefix(node_prefix);

  SetLogLevel(level);
  SetLogSink([state](LogLevel line_level, Subsys subsys, std::string_view message) {
    const std::string prefix = state->Prefix();
    state->console.WriteAbove([&] {
      state->logger->log(ToSpdlog(line_level), "{}[{}] {}", prefix, SubsysName(subsys), message);
    });
  });
  return session;
}

void FlushForExit(LogSession* log) {
  if (log != nullptr) log->Flush();
  std::fflush(stdout);
}

}  // namespace chorus::node
