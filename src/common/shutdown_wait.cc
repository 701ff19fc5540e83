#include "common/shutdown_wait.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <initializer_list>
#include <utility>

namespace gantry::internal {
namespace {

// The write end of the pipe that the waiting ShutdownWait reads, or -1.
std::atomic<int> g_wait_write_fd{-1};

// What the pipe carries: which of the two ended the wait.
constexpr char kWoken = 1;
constexpr char kSignalled = 2;

void OnShutdownSignal(int /*signal*/) {
  const int fd = g_wait_write_fd.load();
  if (fd >= 0) {
    const char byte = kSignalled;
    (void)!::write(fd, &byte, 1);
  }
}

// Installed once a signal has ended the wait, until the ShutdownWait goes.
void OnSignalWhileStopping(int /*signal*/) {
  static constexpr char kNote[] =
      "gantry: already stopping (requests in flight finish first); SIGKILL stops at once\n";
  (void)!::write(STDERR_FILENO, kNote, sizeof(kNote) - 1);
}

void Install(int signal, void (*handler)(int), struct sigaction* old) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  sigaction(signal, &action, old);
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
  if (restore_on_destroy_) {
    // Unless someone else has installed a handler of their own since.
    for (auto [signal, old] : {std::pair{SIGINT, &old_int_}, std::pair{SIGTERM, &old_term_}}) {
      struct sigaction now {};
      if (sigaction(signal, nullptr, &now) == 0 && now.sa_handler == OnSignalWhileStopping) {
        sigaction(signal, old, nullptr);
      }
    }
  }
  for (int fd : {read_fd_, write_fd_}) {
    if (fd >= 0) {
      ::close(fd);
    }
  }
}

void ShutdownWait::Wake() {
  if (write_fd_ >= 0) {
    const char byte = kWoken;
    (void)!::write(write_fd_, &byte, 1);
  }
}

void ShutdownWait::Wait() {
  if (!ok()) {
    return;
  }
  g_wait_write_fd.store(write_fd_);
  struct sigaction old_int {};
  struct sigaction old_term {};
  Install(SIGINT, OnShutdownSignal, &old_int);
  Install(SIGTERM, OnShutdownSignal, &old_term);
  char byte = 0;
  while (::read(read_fd_, &byte, 1) < 0 && errno == EINTR) {
  }
  if (byte == kSignalled) {
    // A signal asked for the stop: the next ones must not end the process
    // while it stops (see the header).
    Install(SIGINT, OnSignalWhileStopping, nullptr);
    Install(SIGTERM, OnSignalWhileStopping, nullptr);
    if (!restore_on_destroy_) {
      old_int_ = old_int;
      old_term_ = old_term;
      restore_on_destroy_ = true;
    }
  } else {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  }
  g_wait_write_fd.store(-1);
}

}  // namespace gantry::internal
