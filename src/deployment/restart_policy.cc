#include "deployment/restart_policy.h"

#include <algorithm>

namespace gantry::internal {

RestartPolicy::RestartPolicy(std::chrono::milliseconds initial, std::chrono::milliseconds max,
                             int max_init_failures)
    : initial_(initial), max_(std::max(max, initial)), max_init_failures_(max_init_failures) {}

void RestartPolicy::OnReady(Clock::time_point now) {
  init_failures_ = 0;
  ready_since_ = now;
}

std::optional<std::chrono::milliseconds> RestartPolicy::OnExit(Clock::time_point now,
                                                               bool during_init) {
  if (during_init) {
    ++init_failures_;
    if (init_failures_ >= max_init_failures_) {
      return std::nullopt;
    }
  } else if (ready_since_ && now - *ready_since_ >= max_) {
    streak_ = 0;
  }
  ready_since_.reset();
  // initial * 2^streak without overflow: stop doubling once past max.
  std::chrono::milliseconds delay = initial_;
  for (int i = 0; i < streak_ && delay < max_; ++i) {
    delay *= 2;
  }
  ++streak_;
  return std::min(delay, max_);
}

}  // namespace gantry::internal
