// A one-line progress bar on stderr for Client::Post: redrawn in place on a
// terminal, printed at most once a second otherwise (logs stay readable).
//
// Thread safety: one thread at a time.
#ifndef GANTRY_CLIENT_PROGRESS_BAR_H_
#define GANTRY_CLIENT_PROGRESS_BAR_H_

#include <chrono>
#include <cstddef>
#include <string>

namespace gantry::internal {

class ProgressBar {
 public:
  ProgressBar(std::string label, std::size_t total);
  void Update(std::size_t done);
  // Draws the final state and ends the line.
  void Finish();

 private:
  void Draw(bool final_line);

  std::string label_;
  std::size_t total_;
  std::size_t done_ = 0;
  bool tty_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace gantry::internal

#endif  // GANTRY_CLIENT_PROGRESS_BAR_H_
