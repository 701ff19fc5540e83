// Block() of a Deployment or a Flow: waits until SIGINT or SIGTERM arrives or
// Wake() is called. A self-pipe carries both, because a signal handler may
// only write(2); it is close-on-exec, so that no replica inherits it.
//
// After a signal, further SIGINT and SIGTERM are ignored (with a line on
// stderr) until this object is destroyed: the stop they ask for is under
// way, and the default action would end the process in the middle of its
// drain, cutting requests in flight and leaving replicas unreaped. SIGKILL
// still ends it at once.
//
// Thread safety: Wake() may be called from any thread at any time, also
// during Wait(); Wait() from one thread at a time in the whole process (the
// process has one set of signal handlers).
#ifndef GANTRY_COMMON_SHUTDOWN_WAIT_H_
#define GANTRY_COMMON_SHUTDOWN_WAIT_H_

#include <csignal>

namespace gantry::internal {

class ShutdownWait {
 public:
  ShutdownWait();
  ~ShutdownWait();
  ShutdownWait(const ShutdownWait&) = delete;
  ShutdownWait& operator=(const ShutdownWait&) = delete;

  // False when the pipe could not be made; Wait() then returns at once.
  bool ok() const { return read_fd_ >= 0; }
  // Ends a Wait() now or the next one at once.
  void Wake();
  // Returns after SIGINT, SIGTERM or Wake(). After Wake() the signal
  // handlers installed before are put back at once; after a signal, when
  // this object is destroyed.
  void Wait();

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
  // The handlers to put back on destruction, after a Wait() ended by a signal.
  bool restore_on_destroy_ = false;
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

}  // namespace gantry::internal

#endif  // GANTRY_COMMON_SHUTDOWN_WAIT_H_
