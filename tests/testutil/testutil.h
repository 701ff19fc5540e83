// Helpers for tests that start real processes: temp dirs, files that appear,
// processes' children. Every wait is bounded by a deadline.
#ifndef GANTRY_TESTS_TESTUTIL_TESTUTIL_H_
#define GANTRY_TESTS_TESTUTIL_TESTUTIL_H_

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace gantry::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The file's contents once it exists and is non-empty; nullopt at timeout.
std::optional<std::string> WaitForFile(const std::string& path, std::chrono::milliseconds timeout);
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& text);

// Pids whose parent is `pid` (from /proc).
std::vector<pid_t> ChildrenOf(pid_t pid);
// True while `pid` exists and is not a zombie.
bool ProcessAlive(pid_t pid);

// Path of a built program, from the compile definitions of the test target.
std::string GantryCli();
std::string GantryWorker();
std::string SourceDir();

}  // namespace gantry::testing

#endif  // GANTRY_TESTS_TESTUTIL_TESTUTIL_H_
