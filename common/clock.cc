// Back-off policy for polling waits.
#include "common/clock.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <thread>

namespace chorus {

std::string SecondsText(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", seconds);
  return text;
}

std::string SecondsText(Duration d) { return SecondsText(std::chrono::duration<double>(d).count()); }

namespace {

double CpuSeconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

double ThreadCpuSeconds() { return CpuSeconds(CLOCK_THREAD_CPUTIME_ID); }
double ProcessCpuSeconds() { return CpuSeconds(CLOCK_PROCESS_CPUTIME_ID); }

void Backoff::Pause() {
  ++iter_;
  if (iter_ <= 16) {
    return;  // a handful of immediate re-polls: cheap and catches fast completions
  }
  if (iter_ <= 64) {
    std::this_thread::yield();
    return;
  }
  // 1us, 2us, 4us, ... capped.
  const uint32_t step = std::min<uint32_t>(iter_ - 64, 20);
  auto sleep = std::chrono::microseconds(1u << std::min<uint32_t>(step, 20));
  std::this_thread::sleep_for(std::min(sleep, max_sleep_));
}

}  // namespace chorus
