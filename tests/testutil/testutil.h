// Helpers for tests that start real processes: temp dirs, files that appear,
// processes' children. Every wait is bounded by a deadline.
#ifndef GANTRY_TESTS_TESTUTIL_TESTUTIL_H_
#define GANTRY_TESTS_TESTUTIL_TESTUTIL_H_

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
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

// Polls `condition` every 20 ms until it holds (true) or `timeout` passes
// (false).
bool WaitUntil(const std::function<bool()>& condition, std::chrono::milliseconds timeout);

// The file's contents once it exists and is non-empty; nullopt at timeout.
std::optional<std::string> WaitForFile(const std::string& path, std::chrono::milliseconds timeout);
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& text);
// Lines in the file (its newlines); 0 when it does not exist. For call logs
// that executors in other processes append to.
std::size_t CountLines(const std::string& path);

// Runs `command` with /bin/sh and returns its stdout (bounded by the
// command itself, e.g. curl --max-time).
std::string RunCommand(const std::string& command);

// Time from `start` to now, in milliseconds, for measured bounds.
std::chrono::milliseconds Since(std::chrono::steady_clock::time_point start);

// Pids whose parent is `pid` (from /proc).
std::vector<pid_t> ChildrenOf(pid_t pid);
// True while `pid` exists and is not a zombie.
bool ProcessAlive(pid_t pid);
// The thread ids of `pid` now (from /proc/<pid>/task), only those whose name
// (comm) starts with `name_prefix` when it is not empty; empty once `pid` is gone.
std::set<pid_t> ThreadsOf(pid_t pid, std::string_view name_prefix = {});

// Bounds a wait that cannot be given a timeout itself (joining threads
// that call into a server): if it is still alive `timeout` after it was
// made, it prints `what` and aborts the test binary, which fails the test
// instead of hanging it. Thread safety: one owner.
class Watchdog {
 public:
  Watchdog(std::chrono::milliseconds timeout, std::string what);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mutex_
  std::thread thread_;
};

// Joins every thread under a Watchdog of `timeout`.
void JoinWithin(std::vector<std::thread>& threads, std::chrono::milliseconds timeout,
                const std::string& what);

// Certificates for TLS tests, made by the `openssl` command in `dir`: a CA
// and a server certificate it signed (for 127.0.0.1 and localhost), an
// unrelated CA and a server certificate for the same names it signed (a
// renewal, for reload tests), and a client CA with a client certificate it
// signed. All
// PEM, keys unencrypted; valid for a day. nullopt (with the reason in
// `error`) when openssl is missing or fails; every openssl run is bounded.
struct TestPki {
  std::string ca;
  std::string server_cert;
  std::string server_key;
  std::string other_ca;
  std::string renewed_server_cert;  // signed by other_ca
  std::string renewed_server_key;
  std::string client_ca;
  std::string client_cert;
  std::string client_key;
};
std::optional<TestPki> MakeTestPki(const TempDir& dir, std::string* error);

// Sets GANTRY_FAKE_GPUS (GPU placement without a GPU) and clears
// CUDA_VISIBLE_DEVICES for one test; the destructor restores both.
// Thread safety: one owner, and no other thread may read the environment.
class FakeGpus {
 public:
  explicit FakeGpus(const char* names);
  ~FakeGpus();
  FakeGpus(const FakeGpus&) = delete;
  FakeGpus& operator=(const FakeGpus&) = delete;

 private:
  std::optional<std::string> saved_cvd_;
};

// Path of a built program, from the compile definitions of the test target.
std::string GantryCli();
std::string GantryWorker();
std::string SourceDir();

}  // namespace gantry::testing

#endif  // GANTRY_TESTS_TESTUTIL_TESTUTIL_H_
