#include "core/worker_mode.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

namespace gantry::internal {
namespace {

std::atomic<bool> g_worker_main_entered{false};

}  // namespace

void NoteWorkerMainEntered() { g_worker_main_entered.store(true); }

Status CheckNotAnUninitialisedWorker(const std::vector<std::string>& argv) {
  if (argv.size() < 2 || argv[1] != kWorkerFlag || g_worker_main_entered.load()) {
    return OkStatus();
  }
  return FailedPreconditionError(
      "this process was started as a Gantry worker (" + argv[0] + " " + kWorkerFlag +
      " ...) but main() did not call gantry::Init(argc, argv) first; a worker does not start a "
      "Deployment, or every replica would spawn replicas of its own without end. Call "
      "gantry::Init(argc, argv) first thing in main() (see gantry/init.h)");
}

std::vector<std::string> SelfArgv() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> argv;
  std::size_t begin = 0;
  while (begin < all.size()) {
    std::size_t end = all.find('\0', begin);
    if (end == std::string::npos) {
      end = all.size();
    }
    argv.push_back(all.substr(begin, end - begin));
    begin = end + 1;
  }
  return argv;
}

void ExitIfUninitialisedWorker() {
  std::vector<std::string> argv = SelfArgv();
  Status status = CheckNotAnUninitialisedWorker(argv);
  if (status.ok()) {
    return;
  }
  spdlog::error("{}", status.message());
  spdlog::default_logger()->flush();
  for (std::size_t i = 2; i + 1 < argv.size(); ++i) {
    if (argv[i] == "--status-fd") {
      const int fd = std::atoi(argv[i + 1].c_str());
      const std::string line = "ERROR " + status.message();
      std::size_t written = 0;
      while (fd >= 0 && written < line.size()) {
        ssize_t n = ::write(fd, line.data() + written, line.size() - written);
        if (n < 0 && errno == EINTR) {
          continue;
        }
        if (n <= 0) {
          break;
        }
        written += static_cast<std::size_t>(n);
      }
      break;
    }
  }
  std::fflush(nullptr);
  // _Exit: nothing of main() has been set up for a worker, and static
  // destructors could wait on threads the program started.
  std::_Exit(1);
}

}  // namespace gantry::internal
