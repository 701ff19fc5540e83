#include "deployment/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

extern char** environ;

namespace gantry::internal {
namespace {

// Closes the descriptor it owns.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  ScopedFd(ScopedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ScopedFd& operator=(ScopedFd&&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

StatusOr<ChildProcessPtr> ChildProcess::Spawn(const ChildProcessOptions& options) {
  std::vector<std::string> argv_storage;
  argv_storage.push_back(options.program);
  argv_storage.insert(argv_storage.end(), options.args.begin(), options.args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_storage) {
    argv.push_back(arg.data());
  }
  argv.push_back(nullptr);

  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry(*e);
    std::size_t eq = entry.find('=');
    if (eq != std::string_view::npos) {
      env[std::string(entry.substr(0, eq))] = std::string(entry.substr(eq + 1));
    }
  }
  for (const auto& [key, value] : options.env) {
    env[key] = value;
  }
  std::vector<std::string> env_storage;
  for (const auto& [key, value] : env) {
    env_storage.push_back(key + "=" + value);
  }
  std::vector<char*> envp;
  for (std::string& entry : env_storage) {
    envp.push_back(entry.data());
  }
  envp.push_back(nullptr);

  // Each source is first copied, in this process, above every target and
  // every source (F_DUPFD_CLOEXEC: the copies vanish at exec), so that no
  // dup2 onto a target can clobber a source not yet placed, whatever the
  // descriptor numbers. dup2 clears FD_CLOEXEC on the target.
  int floor = 3;
  for (const auto& [child_fd, parent_fd] : options.fds) {
    floor = std::max({floor, child_fd + 1, parent_fd + 1});
  }
  std::vector<ScopedFd> copies;
  for (const auto& [child_fd, parent_fd] : options.fds) {
    int copy = ::fcntl(parent_fd, F_DUPFD_CLOEXEC, floor);
    if (copy < 0) {
      return FailedPreconditionError("cannot pass descriptor " + std::to_string(parent_fd) +
                                     " to " + options.program + " as " + std::to_string(child_fd) +
                                     ": " + std::strerror(errno));
    }
    copies.emplace_back(copy);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (std::size_t i = 0; i < options.fds.size(); ++i) {
    posix_spawn_file_actions_adddup2(&actions, copies[i].get(), options.fds[i].first);
  }
  if (!options.output_file.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, options.output_file.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  }
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  // The child starts with default signal handling and nothing blocked, even
  // if this process blocks SIGTERM for a sigwait thread.
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&attributes, &empty);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  pid_t pid = 0;
  int rc =
      posix_spawnp(&pid, options.program.c_str(), &actions, &attributes, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (rc != 0) {
    return FailedPreconditionError("cannot start " + options.program + ": " + std::strerror(rc));
  }
  return ChildProcessPtr(new ChildProcess(pid));
}

ChildProcess::~ChildProcess() { Terminate(std::chrono::milliseconds(5000)); }

bool ChildProcess::Running() {
  if (exit_status_) {
    return false;
  }
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exit_status_ = status;
    return false;
  }
  if (r < 0 && errno == ECHILD) {
    // Reaped elsewhere (e.g. a test's subreaper loop); treat as gone.
    exit_status_ = 0;
    return false;
  }
  return true;
}

void ChildProcess::Signal(int signal) {
  if (Running()) {
    ::kill(pid_, signal);
  }
}

bool ChildProcess::WaitFor(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (Running()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return false;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  return true;
}

int ChildProcess::Terminate(std::chrono::milliseconds grace) {
  if (Running()) {
    ::kill(pid_, SIGTERM);
    if (!WaitFor(grace)) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      exit_status_ = status;
    }
  }
  return exit_status_.value_or(0);
}

std::string ChildProcess::DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) {
    return "exited with code " + std::to_string(WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return std::string("killed by SIG") + (name ? name : std::to_string(WTERMSIG(status)));
  }
  return "ended with wait status " + std::to_string(status);
}

}  // namespace gantry::internal
