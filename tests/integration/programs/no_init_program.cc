// A program that embeds a Deployment of its own executor but forgets
// gantry::Init(argc, argv). Run by no_init_test.cc. Each start of main()
// appends a line to $GANTRY_NO_INIT_LOG (inherited by every worker child),
// so the test counts every process that ever ran this program. A fuse
// stops main() without spawning once the log holds kFuse lines, so that the
// old behaviour (a process storm) shows up as too many lines rather than
// taking the machine down.
#include <gantry/deployment.h>
#include <gantry/executor.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

namespace no_init {

class NoInitExec final : public gantry::Executor {
  GANTRY_EXECUTOR(NoInitExec);
  explicit NoInitExec(const gantry::ExecutorContext& /*context*/) {}
  GANTRY_REQUESTS(Echo, "/echo");
  void Echo(gantry::DocList& /*docs*/) {}
};
GANTRY_REGISTER_EXECUTOR(NoInitExec);

constexpr int kFuse = 16;

}  // namespace no_init

int main(int /*argc*/, char** /*argv*/) {
  const char* log = std::getenv("GANTRY_NO_INIT_LOG");
  if (log == nullptr) {
    std::cerr << "set GANTRY_NO_INIT_LOG\n";
    return 2;
  }
  int starts = 0;
  {
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) {
      ++starts;
    }
  }
  std::ofstream(log, std::ios::app) << ::getpid() << "\n";
  if (starts >= no_init::kFuse) {
    return 3;  // the fuse: never spawn beyond this
  }
  // gantry::Init(argc, argv) is missing here on purpose.
  gantry::Deployment dep(
      {.uses = "NoInitExec", .replicas = 2, .timeout_ready = std::chrono::milliseconds(20000)});
  if (!dep.ok()) {
    std::cerr << "deployment failed: " << dep.status().message() << "\n";
    return 1;
  }
  std::cout << "deployment started\n";
  return 0;
}
