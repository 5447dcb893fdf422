// Installs spdlog as the sink of the common/log.h facade for one node process.
//
// Lines look like
//   [2026-11-22 10:00:00.123] [info] [trainer] message
//   [2026-11-22 10:00:00.123] [info] [node3] [trainer] message   (with a prefix)
// on stderr (coloured on a terminal) and, once a file is opened, in that file.
// Console lines go through the session's ConsoleLine so that they do not
// garble a progress bar. Lower layers never see spdlog; they log through the
// facade. No global spdlog logger is registered: the session owns its logger.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "node/config/config.h"
#include "node/run/console_line.h"

namespace chorus::node {

class LogSession {
 public:
  struct State;  // shared with the installed sink; defined in logging.cc

  explicit LogSession(std::shared_ptr<State> state);
  // Flushes and gives the facade back its default sink (plain stderr).
  ~LogSession();
  LogSession(const LogSession&) = delete;
  LogSession& operator=(const LogSession&) = delete;

  // Also writes every line to `path` (appending; parent folders are created).
  // Replaces a file opened before.
  [[nodiscard]] Status OpenFile(const std::string& path);
  // Text shown in brackets before the subsystem, e.g. "node3"; empty for none.
  void SetPrefix(const std::string& prefix);
  // The transient line (progress bar) of this session's console.
  ConsoleLine& console();
  void Flush();

 private:
  std::shared_ptr<State> state_;
};

// Flushes `log` (none when null) and stdout: what a process does before it
// _exits on a signal (StopRequest's before_exit).
void FlushForExit(LogSession* log);

// Sets the facade's level from run.log_level and its sink to a new spdlog
// logger: console (stderr) plus `log_file` when given. One session at a time:
// destroy the previous one first.
[[nodiscard]] Result<std::unique_ptr<LogSession>> InstallLogging(
    const RunConfig& run, const std::optional<std::string>& log_file, const std::string& node_prefix);

}  // namespace chorus::node
