// Default sink and level for the logging facade.
#include "common/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace chorus {
namespace {

std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::mutex g_sink_mu;
LogSink& Sink() {
  static LogSink sink;
  return sink;
}

}  // namespace

std::string_view SubsysName(Subsys s) {
  switch (s) {
    case Subsys::kNode: return "node";
    case Subsys::kControl: return "control";
    case Subsys::kFabric: return "fabric";
    case Subsys::kGossip: return "gossip";
    case Subsys::kTrainer: return "trainer";
    case Subsys::kKernels: return "kernels";
    case Subsys::kData: return "data";
    case Subsys::kBench: return "bench";
  }
  return "?";
}

void SetLogSink(LogSink sink) {
  std::lock_guard<std::mutex> lock(g_sink_mu);
  Sink() = std::move(sink);
}

void SetLogLevel(LogLevel level) { g_level.store(level); }
LogLevel GetLogLevel() { return g_level.load(std::memory_order_relaxed); }

void LogWrite(LogLevel level, Subsys subsys, std::string_view message) {
  if (level < GetLogLevel()) return;
  std::lock_guard<std::mutex> lock(g_sink_mu);
  if (Sink()) {
    Sink()(level, subsys, message);
    return;
  }
  static constexpr const char* kLevelNames[] = {"trace", "debug", "info", "warn", "error", "off"};
  std::fprintf(stderr, "[%s] [%.*s] %.*s\n", kLevelNames[static_cast<int>(level)],
               static_cast<int>(SubsysName(subsys).size()), SubsysName(subsys).data(),
               static_cast<int>(message.size()), message.data());
}

}  // namespace chorus
