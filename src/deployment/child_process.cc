#include "deployment/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

extern char** environ;

namespace gantry::internal {

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

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // Two passes so that no dup2 target clobbers a source not yet copied:
  // first park every source above the targets, then place them.
  int park = 100;
  for (const auto& [child_fd, parent_fd] : options.fds) {
    posix_spawn_file_actions_adddup2(&actions, parent_fd, park + child_fd);
  }
  for (const auto& [child_fd, parent_fd] : options.fds) {
    posix_spawn_file_actions_adddup2(&actions, park + child_fd, child_fd);
    posix_spawn_file_actions_addclose(&actions, park + child_fd);
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
