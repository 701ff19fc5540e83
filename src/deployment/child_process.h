// ChildProcess: owns one spawned program. The destructor terminates it
// (SIGTERM, then SIGKILL after the grace period) and always reaps it, so no
// child outlives its owner as a zombie or an orphan of ours.
//
// Thread safety: one thread at a time.
#ifndef GANTRY_DEPLOYMENT_CHILD_PROCESS_H_
#define GANTRY_DEPLOYMENT_CHILD_PROCESS_H_

#include <gantry/status.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gantry::internal {

struct ChildProcessOptions {
  // Path of the program; searched in $PATH if it has no '/'.
  std::string program;
  // argv[1...]; argv[0] is `program`.
  std::vector<std::string> args;
  // Added to (or replacing in) this process's environment.
  std::map<std::string, std::string> env;
  // {child fd, parent fd}: the child gets a copy of parent fd at child fd.
  // Any numbers work, a parent fd that is another pair's child fd included.
  std::vector<std::pair<int, int>> fds;
  // Redirect the child's stdout/stderr to this file (appending); empty
  // keeps ours.
  std::string output_file;
};

class ChildProcess {
 public:
  static StatusOr<std::unique_ptr<ChildProcess>> Spawn(const ChildProcessOptions& options);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // The wait status once reaped.
  std::optional<int> exit_status() const { return exit_status_; }

  // Reaps the child if it has exited; true if it is still running.
  bool Running();
  // Sends `signal` if the child still runs.
  void Signal(int signal);
  // SIGTERM, wait up to `grace`, SIGKILL, reap. Returns the wait status.
  int Terminate(std::chrono::milliseconds grace);
  // Waits up to `timeout` for the child to exit by itself.
  bool WaitFor(std::chrono::milliseconds timeout);

  // "exited with code 3", "killed by SIGKILL".
  static std::string DescribeWaitStatus(int status);

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  std::optional<int> exit_status_;
};

using ChildProcessPtr = std::unique_ptr<ChildProcess>;

}  // namespace gantry::internal

#endif  // GANTRY_DEPLOYMENT_CHILD_PROCESS_H_
