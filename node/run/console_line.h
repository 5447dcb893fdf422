// The one transient line at the bottom of the terminal (the progress bar).
//
// Log lines and the progress bar share stderr. The logging sink writes each log
// line through WriteAbove(), which erases the bar, writes the line and redraws
// the bar, so that neither garbles the other. Thread-safe. It does not decide
// what the line says (ProgressDisplay does) and does not check for a terminal.
#pragma once

#include <cstdio>
#include <functional>
#include <mutex>
#include <string>

namespace chorus::node {

class ConsoleLine {
 public:
  explicit ConsoleLine(std::FILE* out = stderr) : out_(out) {}
  ConsoleLine(const ConsoleLine&) = delete;
  ConsoleLine& operator=(const ConsoleLine&) = delete;

  // Replaces the transient line with `text` (one line, no '\n').
  void Show(const std::string& text);
  // Erases the transient line; later log lines are written plainly.
  void Hide();
  // Ends the transient line with a newline so that it stays on screen.
  void Keep();
  // Runs `write` (which writes whole lines to the same stream) with the
  // transient line erased, then redraws it.
  void WriteAbove(const std::function<void()>& write);

  bool visible() const;

 private:
  void EraseLocked();
  void DrawLocked();

  std::FILE* out_;
  mutable std::mutex mu_;
  std::string text_;
  bool visible_ = false;
};

}  // namespace chorus::node
