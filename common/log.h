// Logging facade: subsystem-tagged log lines without a dependency on any logging
// library. node/ installs a sink (spdlog) at start; until then lines go to stderr.
// Lower layers call Log*() and never see spdlog. Std only.
//
// Usage: CHORUS_LOG_INFO(Subsys::kTrainer, "epoch ", epoch, " loss ", loss);
#pragma once

#include <functional>
#include <sstream>
#include <string>
#include <string_view>

#include "common/enum_names.h"

namespace chorus {

enum class Subsys { kNode, kControl, kFabric, kGossip, kTrainer, kKernels, kData, kBench };
enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };
inline constexpr EnumName<LogLevel> kLogLevelNames[] = {
    {LogLevel::kTrace, "trace"}, {LogLevel::kDebug, "debug"}, {LogLevel::kInfo, "info"},
    {LogLevel::kWarn, "warn"},   {LogLevel::kError, "error"}, {LogLevel::kOff, "off"}};

std::string_view SubsysName(Subsys s);

// A sink receives fully formatted messages. Installed once by main(), before threads start.
using LogSink = std::function<void(LogLevel, Subsys, std::string_view)>;
void SetLogSink(LogSink sink);
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();

void LogWrite(LogLevel level, Subsys subsys, std::string_view message);

template <typename... Args>
void LogParts(LogLevel level, Subsys subsys, const Args&... args) {
  if (level < GetLogLevel()) return;
  std::ostringstream out;
  (out << ... << args);
  LogWrite(level, subsys, out.str());
}

}  // namespace chorus

#define CHORUS_LOG_DEBUG(subsys, ...) ::chorus::LogParts(::chorus::LogLevel::kDebug, subsys, __VA_ARGS__)
#define CHORUS_LOG_INFO(subsys, ...) ::chorus::LogParts(::chorus::LogLevel::kInfo, subsys, __VA_ARGS__)
#define CHORUS_LOG_WARN(subsys, ...) ::chorus::LogParts(::chorus::LogLevel::kWarn, subsys, __VA_ARGS__)
#define CHORUS_LOG_ERROR(subsys, ...) ::chorus::LogParts(::chorus::LogLevel::kError, subsys, __VA_ARGS__)
