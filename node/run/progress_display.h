// Training progress for a person watching: a bar redrawn in place on a terminal,
// or a log line every N steps otherwise.
//
//   epoch 2/5 [########............] 300/938 loss 0.4123 5120 samples/s ETA 3m12s
//
// The bar is redrawn at most every min_redraw_interval_s (10 per second by
// default) and at the end of each epoch, where it is kept on screen. The
// caller supplies the clock (elapsed_s) so that throttling and the ETA are
// deterministic. It only displays: metrics files are MetricsWriter's job.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "node/config/config.h"
#include "node/run/console_line.h"

namespace chorus::node {

enum class ProgressMode { kBar, kLines, kOff };

// run.progress to a mode: auto is a bar on a terminal and lines otherwise;
// bar also falls back to lines without a terminal (a bar in a file is noise).
ProgressMode ResolveProgressMode(ProgressSetting setting, bool is_terminal);
bool StderrIsTerminal();

struct ProgressUpdate {
  int epoch = 1;               // 1-based
  int epochs = 1;
  int64_t step = 0;            // steps done in this epoch, 1..steps_per_epoch
  int64_t steps_per_epoch = 1;
  double loss = 0.0;
  double samples_per_s = 0.0;
  double elapsed_s = 0.0;      // since training (or resuming) started, monotonic
};

struct ProgressOptions {
  ProgressMode mode = ProgressMode::kLines;
  int log_every_steps = 50;           // lines mode: one line every this many steps
  double min_redraw_interval_s = 0.1; // bar mode
  int width = 0;                      // bar mode: terminal columns; 0: ask the terminal (80 if unknown)
};

class ProgressDisplay {
 public:
  // `console` must outlive the display; it is used in bar mode only.
  ProgressDisplay(const ProgressOptions& options, ConsoleLine* console);
  ~ProgressDisplay();
  ProgressDisplay(const ProgressDisplay&) = delete;
  ProgressDisplay& operator=(const ProgressDisplay&) = delete;

  void Update(const ProgressUpdate& update);
  // Leaves a bar that is on screen there (ends its line).
  void Finish();

  // The text of one update, without the bar: "epoch 2/5 300/938 loss 0.4123 ...".
  static std::string FormatStatus(const ProgressUpdate& update, double eta_s);
  // "45s", "3m12s", "1h02m"; "?" when unknown (negative).
  static std::string FormatDuration(double seconds);

  int redraws() const { return redraws_; }

 private:
  double EstimateRemaining(const ProgressUpdate& update);
  std::string BarLine(const ProgressUpdate& update, double eta_s) const;

  ProgressOptions options_;
  ConsoleLine* console_;
  bool have_baseline_ = false;
  int64_t baseline_done_ = 0;
  double baseline_elapsed_s_ = 0.0;
  double last_draw_s_ = -1e300;
  int redraws_ = 0;
};

}  // namespace chorus::node
