// ProgressDisplay: bar or lines, with the ETA taken from the steps done since
// the first update (so that a resumed run does not count epochs it skipped).
#include "node/run/progress_display.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/log.h"

namespace chorus::node {
namespace {

constexpr int kBarCells = 20;
constexpr int kDefaultWidth = 80;

int TerminalWidth() {
  winsize size{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return kDefaultWidth;
}

int64_t StepsDone(const ProgressUpdate& u) { return (u.epoch - 1) * u.steps_per_epoch + u.step; }

}  // namespace

ProgressMode ResolveProgressMode(ProgressSetting setting, bool is_terminal) {
  switch (setting) {
    case ProgressSetting::kOff: return ProgressMode::kOff;
    case ProgressSetting::kLines: return ProgressMode::kLines;
    case ProgressSetting::kAuto:
    case ProgressSetting::kBar: break;
  }
  return is_terminal ? ProgressMode::kBar : ProgressMode::kLines;
}

bool StderrIsTerminal() { return ::isatty(STDERR_FILENO) == 1; }

ProgressDisplay::ProgressDisplay(const ProgressOptions& options, ConsoleLine* console)
    : options_(options), console_(console) {
  if (options_.mode == ProgressMode::kBar && options_.width <= 0) options_.width = TerminalWidth();
  options_.log_every_steps = std::max(1, options_.log_every_steps);
}

ProgressDisplay::~ProgressDisplay() { Finish(); }

void ProgressDisplay::Update(const ProgressUpdate& update) {
  if (options_.mode == ProgressMode::kOff) return;
  const double eta_s = EstimateRemaining(update);
  const bool epoch_end = update.step >= update.steps_per_epoch;
  if (options_.mode == ProgressMode::kLines) {
    if (update.step % options_.log_every_steps == 0 || epoch_end) {
      CHORUS_LOG_INFO(Subsys::kTrainer, FormatStatus(update, eta_s));
    }
    return;
  }
  if (!epoch_end && update.elapsed_s - last_draw_s_ < options_.min_redraw_interval_s) return;
  last_draw_s_ = update.elapsed_s;
  ++redraws_;
  console_->Show(BarLine(update, eta_s));
  if (epoch_end) console_->Keep();
}

void ProgressDisplay::Finish() {
  if (options_.mode == ProgressMode::kBar && console_ != nullptr) console_->Keep();
}

double ProgressDisplay::EstimateRemaining(const ProgressUpdate& update) {
  const int64_t done = StepsDone(update);
  if (!have_baseline_) {
    // The first update only starts the clock: its steps may predate it (resume).
    have_baseline_ = true;
    baseline_done_ = done;
    baseline_elapsed_s_ = update.elapsed_s;
    return -1.0;
  }
  const int64_t done_since = done - baseline_done_;
  const double seconds_since = update.elapsed_s - baseline_elapsed_s_;
  if (done_since <= 0 || seconds_since <= 0) return -1.0;
  const int64_t remaining = int64_t{update.epochs} * update.steps_per_epoch - done;
  return std::max<int64_t>(remaining, 0) * seconds_since / done_since;
}

std::string ProgressDisplay::FormatStatus(const ProgressUpdate& u, double eta_s) {
  char text[160];
  std::snprintf(text, sizeof(text), "epoch %d/%d %lld/%lld loss %.4f %.0f samples/s ETA %s", u.epoch,
                u.epochs, static_cast<long long>(u.step), static_cast<long long>(u.steps_per_epoch), u.loss,
                u.samples_per_s, FormatDuration(eta_s).c_str());
  return text;
}

std::string ProgressDisplay::FormatDuration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  const long long total = std::llround(seconds);
  char text[32];
  if (total < 60) {
    std::snprintf(text, sizeof(text), "%llds", total);
  } else if (total < 3600) {
    std::snprintf(text, sizeof(text), "%lldm%02llds", total / 60, total % 60);
  } else {
    std::snprintf(text, sizeof(text), "%lldh%02lldm", total / 3600, (total % 3600) / 60);
  }
  return text;
}

std::string ProgressDisplay::BarLine(const ProgressUpdate& u, double eta_s) const {
  const double fraction =
      u.steps_per_epoch > 0 ? std::clamp(static_cast<double>(u.step) / u.steps_per_epoch, 0.0, 1.0) : 0.0;
  const int filled = static_cast<int>(fraction * kBarCells);
  std::string bar(kBarCells + 2, '.');  // "[####........]"
  bar.front() = '[';
  bar.back() = ']';
  std::fill_n(bar.begin() + 1, filled, '#');
  // "epoch 2/5 [####....] 300/938 loss ...": the bar goes after the epoch.
  std::string status = FormatStatus(u, eta_s);
  const size_t after_epoch = status.find(' ', status.find(' ') + 1);
  std::string line = status.substr(0, after_epoch);
  line += ' ';
  line += bar;
  line.append(status, after_epoch);
  // A line as wide as the terminal wraps and breaks the in-place redraw.
  if (options_.width > 1 && line.size() >= static_cast<size_t>(options_.width)) line.resize(options_.width - 1);
  return line;
}

}  // namespace chorus::node
