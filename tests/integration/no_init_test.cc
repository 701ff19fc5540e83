// A program that starts a Deployment without calling gantry::Init must fail
// at once with a message naming gantry::Init, having started no more than
// its own replicas: not a process storm.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <sstream>

#include "deployment/child_process.h"
#include "testutil/testutil.h"

namespace gantry {
namespace {

using internal::ChildProcess;
using ::testing::HasSubstr;

// Kills and reaps every process re-parented to this (subreaper) test.
void KillOrphans() {
  for (int round = 0; round < 50; ++round) {
    std::vector<pid_t> orphans = testing::ChildrenOf(::getpid());
    if (orphans.empty()) {
      return;
    }
    for (pid_t pid : orphans) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);  // bounded: SIGKILL cannot be caught
    }
  }
}

TEST(NoInitTest, DeploymentWithoutInitFailsNamingInitAndSpawnsOnlyItsReplicas) {
  // Orphaned descendants come to us, so none survives the test.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  testing::TempDir dir;
  internal::ChildProcessOptions options;
  options.program = GANTRY_NO_INIT_PROGRAM;
  options.env["GANTRY_NO_INIT_LOG"] = dir.File("starts.log");
  options.output_file = dir.File("out.log");
  auto child = ChildProcess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  const bool finished = (*child)->WaitFor(std::chrono::seconds(60));
  if (!finished) {
    (*child)->Terminate(std::chrono::milliseconds(100));
  }
  KillOrphans();
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 0), 0);

  std::string out = testing::ReadFile(dir.File("out.log"));
  ASSERT_TRUE(finished) << "the program did not finish within 60 s:\n" << out;
  const int status = *(*child)->exit_status();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1)
      << ChildProcess::DescribeWaitStatus(status) << "\n"
      << out;
  EXPECT_THAT(out, HasSubstr("deployment failed"));
  EXPECT_THAT(out, HasSubstr("did not call gantry::Init(argc, argv)"));
  // The program itself and its 2 replicas, each of which refused to spawn.
  std::istringstream starts(testing::ReadFile(dir.File("starts.log")));
  int lines = 0;
  for (std::string line; std::getline(starts, line);) {
    ++lines;
  }
  EXPECT_GE(lines, 2);
  EXPECT_LE(lines, 3) << "processes that ran main(): " << lines << "\n" << out;
}

}  // namespace
}  // namespace gantry
