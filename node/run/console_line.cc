// ConsoleLine: erase with "\r" + ANSI erase-line, redraw in place.
#include "node/run/console_line.h"

namespace chorus::node {

void ConsoleLine::Show(const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  text_ = text;
  visible_ = true;
  DrawLocked();
}

void ConsoleLine::Hide() {
  std::lock_guard<std::mutex> lock(mu_);
  if (visible_) EraseLocked();
  visible_ = false;
  text_.clear();
}

void ConsoleLine::Keep() {
  std::lock_guard<std::mutex> lock(mu_);
  if (visible_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
  visible_ = false;
  text_.clear();
}

void ConsoleLine::WriteAbove(const std::function<void()>& write) {
  std::lock_guard<std::mutex> lock(mu_);
  if (visible_) EraseLocked();
  write();
  if (visible_) DrawLocked();
}

bool ConsoleLine::visible() const {
  std::lock_guard<std::mutex> lock(mu_);
  return visible_;
}

void ConsoleLine::EraseLocked() {
  std::fputs("\r\033[K", out_);
  std::fflush(out_);
}

void ConsoleLine::DrawLocked() {
  std::fputs("\r\033[K", out_);
  std::fputs(text_.c_str(), out_);
  std::fflush(out_);
}

}  // namespace chorus::node
