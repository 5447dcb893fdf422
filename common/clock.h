// Clocks and deadlines. Every blocking call in Chorus takes a Deadline. Std only.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace chorus {

using Clock = std::chrono::steady_clock;
using Duration = Clock::duration;

class Deadline {
 public:
  static Deadline After(Duration d) { return Deadline(Clock::now() + d); }
  static Deadline AfterSeconds(double s) {
    return After(std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s)));
  }
  static Deadline Never() { return Deadline(Clock::time_point::max()); }
  static Deadline Now() { return Deadline(Clock::now()); }

  explicit Deadline(Clock::time_point when) : when_(when) {}

  bool Expired() const { return Clock::now() >= when_; }
  Clock::time_point when() const { return when_; }
  Duration Remaining() const {
    auto now = Clock::now();
    return now >= when_ ? Duration::zero() : when_ - now;
  }
  bool IsNever() const { return when_ == Clock::time_point::max(); }

 private:
  Clock::time_point when_;
};

// Seconds for a message, with three significant digits ("0.5", "5.12", "60").
std::string SecondsText(double seconds);
std::string SecondsText(Duration d);

// Seconds since an arbitrary epoch (steady): for metrics and traces.
inline double NowSeconds() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}
inline int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
      .count();
}

// This thread's CPU seconds (CLOCK_THREAD_CPUTIME_ID): does not advance while
// the thread waits, is descheduled or the process is stopped.
double ThreadCpuSeconds();
// The process's CPU seconds, all its threads (CLOCK_PROCESS_CPUTIME_ID).
double ProcessCpuSeconds();

// Exponential back-off for waits that poll: spin a few times, then yield, then
// sleep with growing intervals up to `max_sleep`. Keeps 8 nodes on 2 cores live.
class Backoff {
 public:
  explicit Backoff(std::chrono::microseconds max_sleep = std::chrono::microseconds(1000))
      : max_sleep_(max_sleep) {}
  void Pause();
  void Reset() { iter_ = 0; }

 private:
  std::chrono::microseconds max_sleep_;
  uint32_t iter_ = 0;
};

}  // namespace chorus
