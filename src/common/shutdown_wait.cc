#include "common/shutdown_wait.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <initializer_list>

namespace gantry::internal {
namespace {

// The write end of the pipe that the waiting ShutdownWait reads, or -1.
std::atomic<int> g_wait_write_fd{-1};

void OnShutdownSignal(int /*signal*/) {
  const int fd = g_wait_write_fd.load();
  if (fd >= 0) {
    const char byte = 1;
    (void)!::write(fd, &byte, 1);
  }
}

}  // namespace

ShutdownWait::ShutdownWait() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) == 0) {
    read_fd_ = fds[0];
    write_fd_ = fds[1];
  }
}

ShutdownWait::~ShutdownWait() {
  for (int fd : {read_fd_, write_fd_}) {
    if (fd >= 0) {
      ::close(fd);
    }
  }
}

void ShutdownWait::Wake() {
  if (write_fd_ >= 0) {
    const char byte = 1;
    (void)!::write(write_fd_, &byte, 1);
  }
}

void ShutdownWait::Wait() {
  if (!ok()) {
    return;
  }
  g_wait_write_fd.store(write_fd_);
  struct sigaction action {};
  action.sa_handler = OnShutdownSignal;
  sigemptyset(&action.sa_mask);
  struct sigaction old_int {};
  struct sigaction old_term {};
  sigaction(SIGINT, &action, &old_int);
  sigaction(SIGTERM, &action, &old_term);
  char byte = 0;
  while (::read(read_fd_, &byte, 1) < 0 && errno == EINTR) {
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  g_wait_write_fd.store(-1);
}

}  // namespace gantry::internal
