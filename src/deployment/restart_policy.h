// RestartPolicy: when a replica whose process died is started again, and
// when it is given up. Pure logic over a clock value the caller passes, so
// that it is tested without processes (tests/unit/restart_policy_test.cc);
// the Deployment (deployment.cc) applies it to each replica.
//
//   delay of the k-th restart in a row = min(initial * 2^(k-1), max)
//
// The doubling starts over once the replica has been ready for `max`
// without dying (a replica that crashes once a day restarts fast). A replica
// that fails `max_init_failures` starts in a row (dies, throws or hangs
// before it reports ready) is given up.
//
// Thread safety: one thread at a time (one object per replica).
#ifndef GANTRY_DEPLOYMENT_RESTART_POLICY_H_
#define GANTRY_DEPLOYMENT_RESTART_POLICY_H_

#include <chrono>
#include <optional>

namespace gantry::internal {

class RestartPolicy {
 public:
  using Clock = std::chrono::steady_clock;

  RestartPolicy(std::chrono::milliseconds initial, std::chrono::milliseconds max,
                int max_init_failures);

  // The replica reported ready at `now`.
  void OnReady(Clock::time_point now);
  // Its process ended at `now`; `during_init`: before it reported ready.
  // Returns how long to wait before starting it again, or nullopt when it
  // is to be given up (max_init_failures starts in a row failed).
  std::optional<std::chrono::milliseconds> OnExit(Clock::time_point now, bool during_init);

  // Failed starts since the replica was last ready.
  int init_failures() const { return init_failures_; }

 private:
  std::chrono::milliseconds initial_;
  std::chrono::milliseconds max_;
  int max_init_failures_;
  // Restarts since the replica last stayed ready for `max_`.
  int streak_ = 0;
  int init_failures_ = 0;
  std::optional<Clock::time_point> ready_since_;
};

}  // namespace gantry::internal

#endif  // GANTRY_DEPLOYMENT_RESTART_POLICY_H_
