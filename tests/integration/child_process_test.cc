// ChildProcess passes descriptors by number: each child fd must get the
// parent fd it was paired with, whatever the numbers (above 100, and a
// parent fd that is also another pair's child fd).
#include "deployment/child_process.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <string>

#include "testutil/testutil.h"

namespace gantry::internal {
namespace {

// Opens a file holding `text` at descriptor `fd` of this process.
void OpenAt(const std::string& path, const std::string& text, int fd) {
  testing::WriteFile(path, text);
  ASSERT_EQ(::fcntl(fd, F_GETFD), -1) << "descriptor " << fd << " is already in use";
  int opened = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(opened, 0);
  if (opened != fd) {  // open may pick `fd` itself when it is the lowest free one
    ASSERT_EQ(::dup2(opened, fd), fd);
    ::close(opened);
  }
  // As the parent's descriptors are in real use: not inherited unless passed.
  ASSERT_EQ(::fcntl(fd, F_SETFD, FD_CLOEXEC), 0);
}

int CountOpenFds() {
  int n = 0;
  for (int fd = 0; fd < 1024; ++fd) {
    n += ::fcntl(fd, F_GETFD) != -1 ? 1 : 0;
  }
  return n;
}

TEST(ChildProcessTest, PassesDescriptorsAboveOneHundredAndOverlappingTargets) {
  testing::TempDir dir;
  // {child fd, parent fd}. The old code parked parent fds at 100 + child fd:
  // parking fd 110 (for child 3) at 103 overwrote the parent's fd 103 before
  // it was parked for child 10. 100 and 101 swap places.
  const std::map<int, int> pairs = {{3, 110}, {10, 103}, {100, 101}, {101, 100}, {4, 4}};
  std::map<int, std::string> contents;  // parent fd -> text
  for (int parent_fd : {110, 103, 101, 100, 4}) {
    contents[parent_fd] = "contents of parent fd " + std::to_string(parent_fd);
  }
  // fd 4 might be taken by the test runner; use it only when free.
  const bool use_fd4 = ::fcntl(4, F_GETFD) == -1;
  for (const auto& [parent_fd, text] : contents) {
    if (parent_fd == 4 && !use_fd4) {
      continue;
    }
    ASSERT_NO_FATAL_FAILURE(OpenAt(dir.File(std::to_string(parent_fd)), text, parent_fd));
  }
  const int fds_before = CountOpenFds();

  ChildProcessOptions options;
  options.program = "/bin/sh";
  // Each target is read through the child's own descriptor table.
  std::string script;
  for (const auto& [child_fd, parent_fd] : pairs) {
    if (child_fd == 4 && !use_fd4) {
      continue;
    }
    options.fds.emplace_back(child_fd, parent_fd);
    script += "printf '%s=' " + std::to_string(child_fd) + "; cat /proc/self/fd/" +
              std::to_string(child_fd) + "; echo; ";
  }
  options.args = {"-c", script};
  options.output_file = dir.File("out.log");
  auto child = ChildProcess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE((*child)->WaitFor(std::chrono::seconds(30)));
  ASSERT_TRUE(WIFEXITED(*(*child)->exit_status()) && WEXITSTATUS(*(*child)->exit_status()) == 0)
      << ChildProcess::DescribeWaitStatus(*(*child)->exit_status());

  std::string out = testing::ReadFile(dir.File("out.log"));
  for (const auto& [child_fd, parent_fd] : options.fds) {
    EXPECT_THAT(out,
                ::testing::HasSubstr(std::to_string(child_fd) + "=" + contents[parent_fd] + "\n"))
        << out;
  }
  // The parent's descriptors are untouched and no temporary copy is left.
  EXPECT_EQ(CountOpenFds(), fds_before);
  for (const auto& [parent_fd, text] : contents) {
    if (parent_fd == 4 && !use_fd4) {
      continue;
    }
    char buffer[128] = {};
    ssize_t got = ::pread(parent_fd, buffer, sizeof(buffer) - 1, 0);
    EXPECT_EQ(std::string(buffer, got > 0 ? static_cast<std::size_t>(got) : 0), text)
        << "parent fd " << parent_fd;
    ::close(parent_fd);
  }
}

}  // namespace
}  // namespace gantry::internal
