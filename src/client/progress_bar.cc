#include "client/progress_bar.h"

#include <unistd.h>

#include <cstdio>

namespace gantry::internal {

ProgressBar::ProgressBar(std::string label, std::size_t total)
    : label_(std::move(label)),
      total_(total),
      tty_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {
  Draw(false);
}

void ProgressBar::Update(std::size_t done) {
  done_ = done;
  auto now = std::chrono::steady_clock::now();
  auto interval = tty_ ? std::chrono::milliseconds(50) : std::chrono::milliseconds(1000);
  if (now - last_draw_ >= interval) {
    Draw(false);
  }
}

void ProgressBar::Finish() {
  if (!finished_) {
    finished_ = true;
    Draw(true);
  }
}

void ProgressBar::Draw(bool final_line) {
  last_draw_ = std::chrono::steady_clock::now();
  double seconds = std::chrono::duration<double>(last_draw_ - start_).count();
  double fraction = total_ == 0 ? 1.0 : static_cast<double>(done_) / static_cast<double>(total_);
  constexpr int kWidth = 30;
  int filled = static_cast<int>(fraction * kWidth);
  std::string bar;
  for (int i = 0; i < kWidth; ++i) {
    bar += i < filled ? "#" : "-";
  }
  double rate = seconds > 0 ? static_cast<double>(done_) / seconds : 0.0;
  std::fprintf(stderr, "%s%s [%s] %zu/%zu docs %3.0f%% %.1fs %.0f docs/s%s", tty_ ? "\r" : "",
               label_.c_str(), bar.c_str(), done_, total_, fraction * 100, seconds, rate,
               (final_line || !tty_) ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace gantry::internal
