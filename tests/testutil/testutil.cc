#include "testutil/testutil.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace gantry::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base ? base : "/tmp") + "/gantry-test-XXXXXX";
  char* made = ::mkdtemp(pattern.data());
  path_ = made != nullptr ? made : "";
}

TempDir::~TempDir() {
  if (!path_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::size_t CountLines(const std::string& path) {
  std::string text = ReadFile(path);
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

std::string RunCommand(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return out;
  }
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) {
    out += buffer;
  }
  ::pclose(pipe);
  return out;
}

std::chrono::milliseconds Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start);
}

Watchdog::Watchdog(std::chrono::milliseconds timeout, std::string what) {
  thread_ = std::thread([this, timeout, what = std::move(what)] {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, timeout, [this] { return done_; })) {
      std::fprintf(stderr, "HANG: %s did not finish within %lld ms; aborting the test binary\n",
                   what.c_str(), static_cast<long long>(timeout.count()));
      std::fflush(stderr);
      std::abort();
    }
  });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void JoinWithin(std::vector<std::thread>& threads, std::chrono::milliseconds timeout,
                const std::string& what) {
  Watchdog watchdog(timeout, what);
  for (std::thread& thread : threads) {
    if (thread.joinable()) {
      thread.join();
    }
  }
}

bool WaitUntil(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

std::optional<std::string> WaitForFile(const std::string& path, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::string text = ReadFile(path);
    if (!text.empty()) {
      return text;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::nullopt;
}

namespace {
// Fields of /proc/PID/stat after the command name: state, ppid, ...
bool ReadStat(pid_t pid, char* state, pid_t* ppid) {
  std::string text = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  std::size_t close = text.rfind(')');
  if (close == std::string::npos) {
    return false;
  }
  std::istringstream rest(text.substr(close + 1));
  rest >> *state >> *ppid;
  return static_cast<bool>(rest);
}
}  // namespace

std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) {
    return out;
  }
  while (dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    long candidate = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') {
      continue;
    }
    char state = 0;
    pid_t ppid = 0;
    if (ReadStat(static_cast<pid_t>(candidate), &state, &ppid) && ppid == pid) {
      out.push_back(static_cast<pid_t>(candidate));
    }
  }
  ::closedir(proc);
  return out;
}

std::set<pid_t> ThreadsOf(pid_t pid, std::string_view name_prefix) {
  std::set<pid_t> threads;
  std::error_code error;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& entry : std::filesystem::directory_iterator(tasks, error)) {
    if (!name_prefix.empty()) {
      std::ifstream comm(entry.path() / "comm");
      std::string name;
      if (!std::getline(comm, name) || name.rfind(name_prefix, 0) != 0) {
        continue;
      }
    }
    threads.insert(static_cast<pid_t>(std::stol(entry.path().filename().string())));
  }
  return threads;
}

bool ProcessAlive(pid_t pid) {
  char state = 0;
  pid_t ppid = 0;
  return ReadStat(pid, &state, &ppid) && state != 'Z' && state != 'X';
}

std::string GantryCli() { return GANTRY_TEST_CLI; }
std::string GantryWorker() { return GANTRY_TEST_WORKER; }
std::string SourceDir() { return GANTRY_TEST_SOURCE_DIR; }

namespace {

// Runs one shell command line, bounded by coreutils' `timeout`; false (with
// its output in `error`) when it fails.
bool RunBounded(const std::string& command, const std::string& log, std::string* error) {
  const std::string line = "timeout 60 " + command + " >>'" + log + "' 2>&1";
  if (std::system(line.c_str()) != 0) {
    *error = "failed: " + command + "\n" + ReadFile(log);
    return false;
  }
  return true;
}

}  // namespace

std::optional<TestPki> MakeTestPki(const TempDir& dir, std::string* error) {
  const std::string log = dir.File("openssl.log");
  // EC P-256 keys: generated in milliseconds, unlike RSA.
  const std::string new_key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const auto make_ca = [&](const std::string& name) {
    return RunBounded("openssl req -x509" + new_key + " -days 1 -subj /CN=gantry-test-" + name +
                          " -keyout '" + dir.File(name + ".key") + "' -out '" +
                          dir.File(name + ".pem") + "'",
                      log, error);
  };
  // A key, a request, and a certificate signed by `ca` with `extensions`.
  const auto make_leaf = [&](const std::string& name, const std::string& ca,
                             const std::string& extensions) {
    WriteFile(dir.File(name + ".ext"), extensions);
    return RunBounded("openssl req" + new_key + " -subj /CN=" + name + " -keyout '" +
                          dir.File(name + ".key") + "' -out '" + dir.File(name + ".csr") + "'",
                      log, error) &&
           RunBounded("openssl x509 -req -days 1 -in '" + dir.File(name + ".csr") + "' -CA '" +
                          dir.File(ca + ".pem") + "' -CAkey '" + dir.File(ca + ".key") +
                          "' -set_serial 1 -extfile '" + dir.File(name + ".ext") + "' -out '" +
                          dir.File(name + ".pem") + "'",
                      log, error);
  };
  if (!make_ca("ca") || !make_ca("other-ca") || !make_ca("client-ca") ||
      !make_leaf("server", "ca",
                 "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
                 "subjectAltName=IP:127.0.0.1,DNS:localhost\n") ||
      !make_leaf("renewed-server", "other-ca",
                 "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
                 "subjectAltName=IP:127.0.0.1,DNS:localhost\n") ||
      !make_leaf("client", "client-ca",
                 "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")) {
    return std::nullopt;
  }
  return TestPki{.ca = dir.File("ca.pem"),
                 .server_cert = dir.File("server.pem"),
                 .server_key = dir.File("server.key"),
                 .other_ca = dir.File("other-ca.pem"),
                 .renewed_server_cert = dir.File("renewed-server.pem"),
                 .renewed_server_key = dir.File("renewed-server.key"),
                 .client_ca = dir.File("client-ca.pem"),
                 .client_cert = dir.File("client.pem"),
                 .client_key = dir.File("client.key")};
}

FakeGpus::FakeGpus(const char* names) {
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES")) {
    saved_cvd_ = cvd;
  }
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  ::setenv("GANTRY_FAKE_GPUS", names, 1);
}

FakeGpus::~FakeGpus() {
  ::unsetenv("GANTRY_FAKE_GPUS");
  if (saved_cvd_) {
    ::setenv("CUDA_VISIBLE_DEVICES", saved_cvd_->c_str(), 1);
  }
}

}  // namespace gantry::testing
