#include "common/shutdown_wait.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <string>

namespace gantry::internal {
namespace {

using namespace std::chrono_literals;

// This process's pipes: "pipe:[INODE]" by descriptor.
std::map<int, std::string> OpenPipes() {
  std::map<int, std::string> pipes;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(entry.path(), error).string();
    if (!error && target.rfind("pipe:", 0) == 0) {
      pipes[std::stoi(entry.path().filename().string())] = target;
    }
  }
  return pipes;
}

TEST(ShutdownWaitTest, AWakeBeforeTheWaitEndsItAtOnce) {
  ShutdownWait wait;
  ASSERT_TRUE(wait.ok());
  wait.Wake();
  auto waited = std::async(std::launch::async, [&] { wait.Wait(); });
  EXPECT_EQ(waited.wait_for(10s), std::future_status::ready);
}

// The handler in place for `signal` now.
void (*HandlerOf(int signal))(int) {
  struct sigaction now {};
  sigaction(signal, nullptr, &now);
  return now.sa_handler;
}

// SIGTERM ignored for one test, so that a stray one cannot end the test
// process; the handlers of before are put back when it goes.
class SigtermIgnored {
 public:
  SigtermIgnored() : sigint_before_(HandlerOf(SIGINT)) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGTERM, &ignore, &before_);
  }
  ~SigtermIgnored() { sigaction(SIGTERM, &before_, nullptr); }
  SigtermIgnored(const SigtermIgnored&) = delete;
  SigtermIgnored& operator=(const SigtermIgnored&) = delete;
  // SIGINT's handler when the test began.
  void (*sigint_before() const)(int) { return sigint_before_; }

 private:
  struct sigaction before_ {};
  void (*sigint_before_)(int);
};

TEST(ShutdownWaitTest, SigtermEndsTheWaitAndLaterOnesAreIgnoredUntilItGoes) {
  const SigtermIgnored ignored;
  bool ended = false;
  {
    ShutdownWait wait;
    ASSERT_TRUE(wait.ok());
    auto waited = std::async(std::launch::async, [&] { wait.Wait(); });
    // The handler is installed by the waiting thread; until then SIGTERM is
    // ignored, so send it until the wait ends (at most 10 s).
    const auto give_up = std::chrono::steady_clock::now() + 10s;
    while (waited.wait_for(20ms) != std::future_status::ready &&
           std::chrono::steady_clock::now() < give_up) {
      ::kill(::getpid(), SIGTERM);
    }
    ended = waited.wait_for(0s) == std::future_status::ready;
    if (!ended) {
      wait.Wake();
    }
    // While the stop it asked for runs, SIGTERM and SIGINT have a handler
    // (neither the default, which would end this process, nor the old one).
    for (int signal : {SIGTERM, SIGINT}) {
      EXPECT_NE(HandlerOf(signal), SIG_DFL) << strsignal(signal);
      EXPECT_NE(HandlerOf(signal), SIG_IGN) << strsignal(signal);
    }
    ::kill(::getpid(), SIGTERM);  // this test process lives on
    ::kill(::getpid(), SIGINT);
  }
  EXPECT_TRUE(ended);
  EXPECT_EQ(HandlerOf(SIGTERM), SIG_IGN) << "the old handler is back once the waiter is gone";
  EXPECT_EQ(HandlerOf(SIGINT), ignored.sigint_before());
}

TEST(ShutdownWaitTest, AWakeEndsTheWaitWithTheOldHandlersBackAtOnce) {
  const SigtermIgnored ignored;
  ShutdownWait wait;
  ASSERT_TRUE(wait.ok());
  wait.Wake();
  wait.Wait();
  EXPECT_EQ(HandlerOf(SIGTERM), SIG_IGN);
  EXPECT_EQ(HandlerOf(SIGINT), ignored.sigint_before());
}

// A Deployment's or Flow's waiter must not leak into the replicas it spawns.
TEST(ShutdownWaitTest, ItsPipeIsClosedOnExec) {
  const std::map<int, std::string> before = OpenPipes();
  ShutdownWait wait;
  ASSERT_TRUE(wait.ok());
  int made = 0;
  for (const auto& [fd, pipe] : OpenPipes()) {
    if (auto it = before.find(fd); it == before.end() || it->second != pipe) {
      ++made;
      EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0) << "fd " << fd;
    }
  }
  EXPECT_EQ(made, 2);
}

}  // namespace
}  // namespace gantry::internal
