// Block() of a Deployment or a Flow: waits until SIGINT or SIGTERM arrives or
// Wake() is called. A self-pipe carries both, because a signal handler may
// only write(2); it is close-on-exec, so that no replica inherits it.
//
// Thread safety: Wake() may be called from any thread at any time, also
// during Wait(); Wait() from one thread at a time in the whole process (the
// process has one set of signal handlers).
#ifndef GANTRY_COMMON_SHUTDOWN_WAIT_H_
#define GANTRY_COMMON_SHUTDOWN_WAIT_H_

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
  // Returns after SIGINT, SIGTERM or Wake(), with the signal handlers that
  // were installed before put back.
  void Wait();

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
};

}  // namespace gantry::internal

#endif  // GANTRY_COMMON_SHUTDOWN_WAIT_H_
