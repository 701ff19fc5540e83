#include "common/shutdown_wait.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
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

TEST(ShutdownWaitTest, SigtermEndsTheWaitAndTheOldHandlerIsPutBack) {
  ShutdownWait wait;
  ASSERT_TRUE(wait.ok());
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  struct sigaction before {};
  ASSERT_EQ(sigaction(SIGTERM, &ignore, &before), 0);
  auto waited = std::async(std::launch::async, [&] { wait.Wait(); });
  // The handler is installed by the waiting thread; until then SIGTERM is
  // ignored, so send it until the wait ends (at most 10 s).
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (waited.wait_for(20ms) != std::future_status::ready &&
         std::chrono::steady_clock::now() < give_up) {
    ::kill(::getpid(), SIGTERM);
  }
  const bool ended = waited.wait_for(0s) == std::future_status::ready;
  if (!ended) {
    wait.Wake();
  }
  struct sigaction after {};
  sigaction(SIGTERM, &before, &after);
  EXPECT_TRUE(ended);
  EXPECT_EQ(after.sa_handler, SIG_IGN);
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
