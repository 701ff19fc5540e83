// The `gantry` CLI driven as a user would: YAML files, real processes, ports
// read back from --port-file, signals.
#include <gantry/client.h>
#include <gantry/version.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "deployment/child_process.h"
#include "deployment/placement.h"
#include "testutil/testutil.h"

namespace gantry {
namespace {

using internal::ChildProcess;
using internal::ChildProcessPtr;
using ::testing::HasSubstr;

constexpr auto kReadyTimeout = std::chrono::seconds(60);

// `worker_program`: what the CLI runs as each replica; gantry-worker unless
// a test needs the executors of this binary (test_executors.cc).
ChildProcessPtr StartCli(const std::vector<std::string>& args, const std::string& log,
                         const std::string& worker_program = testing::GantryWorker(),
                         const std::map<std::string, std::string>& env = {}) {
  internal::ChildProcessOptions options;
  options.program = testing::GantryCli();
  options.args = args;
  options.output_file = log;
  options.env = env;
  options.env["GANTRY_WORKER_PROGRAM"] = worker_program;
  auto child = ChildProcess::Spawn(options);
  return child.ok() ? std::move(child).value() : nullptr;
}

// Runs the CLI to completion (bounded) and returns {exit code, output}.
std::pair<int, std::string> RunCli(const std::vector<std::string>& args) {
  testing::TempDir dir;
  ChildProcessPtr child = StartCli(args, dir.File("out.log"));
  if (!child || !child->WaitFor(std::chrono::seconds(60))) {
    return {-1, "did not finish"};
  }
  int status = *child->exit_status();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, testing::ReadFile(dir.File("out.log"))};
}

DocList MakeDocs(int n) {
  DocList docs;
  for (int i = 0; i < n; ++i) {
    docs.emplace_back("text " + std::to_string(i));
  }
  return docs;
}

TEST(CliTest, VersionAndHelp) {
  auto [code, out] = RunCli({"--version"});
  EXPECT_EQ(code, 0);
  EXPECT_THAT(out, HasSubstr(std::string("gantry ") + GANTRY_VERSION_STRING));
  auto [help_code, help] = RunCli({"deployment", "--help"});
  EXPECT_EQ(help_code, 0);
  EXPECT_THAT(help, HasSubstr("--uses"));
}

// `gantry executors` lists gantry-worker's types with their endpoints, and
// says which run their handlers on the receiving thread.
TEST(CliTest, ExecutorsListsTypesEndpointsAndWhereHandlersRun) {
  auto [code, out] = RunCli({"executors"});
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("NoOpExec  (handlers on the receiving thread)\n  /default"));
  if (out.find("SentenceEncoder") != std::string::npos) {  // a build with libtorch
    EXPECT_THAT(out, HasSubstr("\nSentenceEncoder\n  /encode              -> Encode"));
  }
}

TEST(CliTest, DeploymentFromYamlServesAndStopsOnSigterm) {
  testing::TempDir dir;
  std::string port_file = dir.File("port");
  ChildProcessPtr cli =
      StartCli({"deployment", "--uses", testing::SourceDir() + "/examples/seed/deployment.yml",
                "--port", "0", "--port-file", port_file},
               dir.File("cli.log"));
  ASSERT_NE(cli, nullptr);
  auto port = testing::WaitForFile(port_file, kReadyTimeout);
  ASSERT_TRUE(port.has_value()) << testing::ReadFile(dir.File("cli.log"));
  std::string address = "127.0.0.1:" + std::to_string(std::stoi(*port));

  auto [ping_code, ping_out] = RunCli({"ping", address});
  EXPECT_EQ(ping_code, 0) << ping_out;

  Client client(address);
  auto result = client.Post("/encode", MakeDocs(100), {.request_size = 32});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->size(), 100u);
  EXPECT_EQ((*result)[99].text(), "Embeddings calculated on CPU");
  EXPECT_EQ((*result)[99].embedding()->numel(), 5);

  std::vector<pid_t> workers = testing::ChildrenOf(cli->pid());
  EXPECT_EQ(workers.size(), 2u);
  cli->Signal(SIGTERM);
  ASSERT_TRUE(cli->WaitFor(std::chrono::seconds(30)));
  EXPECT_TRUE(WIFEXITED(*cli->exit_status()) && WEXITSTATUS(*cli->exit_status()) == 0)
      << ChildProcess::DescribeWaitStatus(*cli->exit_status());
  for (pid_t pid : workers) {
    EXPECT_FALSE(testing::ProcessAlive(pid));
  }
  std::string log = testing::ReadFile(dir.File("cli.log"));
  EXPECT_THAT(log, HasSubstr("is ready to serve"));
  EXPECT_THAT(log, HasSubstr("executor/rep-1@"));
  EXPECT_THAT(log, HasSubstr("ready and listening"));
}

// One default address: 127.0.0.1 unless --host, a YAML's host: or
// $GANTRY_HOST says otherwise. Every 127.x address is the loopback
// interface's, so a server bound to one of them is refused on the others.
TEST(CliTest, ServersListenOnLoopbackUnlessTheHostIsGiven) {
  const auto reachable = [](const std::string& host, const std::string& port) {
    return RunCli({"ping", host + ":" + port, "--timeout", "2000"}).first == 0;
  };
  const std::string executor_yml = testing::SourceDir() + "/examples/seed/executor.yml";
  struct Case {
    std::vector<std::string> args;
    std::map<std::string, std::string> env;
    std::string listens_on;
    std::string not_on;
  };
  const std::vector<Case> cases = {
      {{"executor", "--uses", executor_yml}, {{"GANTRY_HOST", ""}}, "127.0.0.1", "127.0.0.4"},
      {{"executor", "--uses", executor_yml},
       {{"GANTRY_HOST", "127.0.0.3"}},
       "127.0.0.3",
       "127.0.0.1"},
      {{"deployment", "--uses", testing::SourceDir() + "/examples/seed/deployment.yml", "--host",
        "127.0.0.2"},
       {{"GANTRY_HOST", "127.0.0.3"}},
       "127.0.0.2",
       "127.0.0.1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args[0] + " " + c.listens_on);
    testing::TempDir dir;
    std::vector<std::string> args = c.args;
    args.insert(args.end(), {"--port", "0", "--port-file", dir.File("port")});
    ChildProcessPtr cli = StartCli(args, dir.File("cli.log"), testing::GantryWorker(), c.env);
    ASSERT_NE(cli, nullptr);
    const auto port = testing::WaitForFile(dir.File("port"), kReadyTimeout);
    ASSERT_TRUE(port.has_value()) << testing::ReadFile(dir.File("cli.log"));
    const std::string port_text = std::to_string(std::stoi(*port));
    EXPECT_TRUE(reachable(c.listens_on, port_text));
    EXPECT_FALSE(reachable(c.not_on, port_text));
    cli->Signal(SIGTERM);
    EXPECT_TRUE(cli->WaitFor(std::chrono::seconds(30)));
  }
}

// A $GANTRY_HOST that is no address fails the server at once, naming it.
TEST(CliTest, AMalformedGantryHostFailsFastNamingIt) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"executor", "--uses", "NoOpExec", "--port", "0"},
        std::vector<std::string>{"gateway", "--replica-addresses", "127.0.0.1:1", "--port", "0"}}) {
    SCOPED_TRACE(args.front());
    testing::TempDir dir;
    ChildProcessPtr cli = StartCli(args, dir.File("cli.log"), testing::GantryWorker(),
                                   {{"GANTRY_HOST", "no such host!"}});
    ASSERT_NE(cli, nullptr);
    ASSERT_TRUE(cli->WaitFor(std::chrono::seconds(30))) << "still running";
    EXPECT_NE(*cli->exit_status(), 0);
    EXPECT_THAT(testing::ReadFile(dir.File("cli.log")),
                HasSubstr("cannot listen on no such host!:0"));
  }
}

TEST(CliTest, ExecutorFromYamlServesDirectly) {
  testing::TempDir dir;
  std::string port_file = dir.File("port");
  ChildProcessPtr cli =
      StartCli({"executor", "--uses", testing::SourceDir() + "/examples/seed/executor.yml",
                "--host", "127.0.0.1", "--port", "0", "--port-file", port_file},
               dir.File("cli.log"));
  ASSERT_NE(cli, nullptr);
  auto port = testing::WaitForFile(port_file, kReadyTimeout);
  ASSERT_TRUE(port.has_value()) << testing::ReadFile(dir.File("cli.log"));
  Client client("127.0.0.1:" + std::to_string(std::stoi(*port)));
  ASSERT_TRUE(client.Ping().ok()) << testing::ReadFile(dir.File("cli.log"));
  auto result = client.Post("/encode", MakeDocs(10), {.request_size = 3});
  ASSERT_TRUE(result.ok()) << result.status() << "\n" << testing::ReadFile(dir.File("cli.log"));
  EXPECT_EQ(result->size(), 10u);
  EXPECT_THAT(testing::ReadFile(dir.File("cli.log")), HasSubstr("encoder/rep-0@"));
}

// The local ports of this machine's established TCP connections to port
// `port` (/proc/net/tcp and tcp6: gRPC's sockets may be IPv6 with mapped
// IPv4 addresses), i.e. the client ends of them.
std::set<int> ClientPortsTo(int port) {
  std::set<int> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream tcp(table);
    std::string line;
    std::getline(tcp, line);  // the header
    while (std::getline(tcp, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      const auto port_of = [](const std::string& address) {
        return std::stoi(address.substr(address.find(':') + 1), nullptr, 16);
      };
      if (state == "01" && remote.find(':') != std::string::npos && port_of(remote) == port) {
        out.insert(port_of(local));
      }
    }
  }
  return out;
}

// --max-connection-age: the executor asks its clients to reconnect (gRPC
// GOAWAY), which a gateway reaching replicas by one DNS name needs to find
// new ones; calls go on meanwhile. Out of range, it is refused by name.
TEST(CliTest, ExecutorAsksItsClientsToReconnectAfterMaxConnectionAge) {
  testing::TempDir dir;
  std::string port_file = dir.File("port");
  ChildProcessPtr cli = StartCli({"executor", "--uses", "NoOpExec", "--port", "0", "--port-file",
                                  port_file, "--max-connection-age", "1"},
                                 dir.File("cli.log"));
  ASSERT_NE(cli, nullptr);
  auto port_text = testing::WaitForFile(port_file, kReadyTimeout);
  ASSERT_TRUE(port_text.has_value()) << testing::ReadFile(dir.File("cli.log"));
  const int port = std::stoi(*port_text);
  Client client("127.0.0.1:" + std::to_string(port));
  std::set<int> client_ports;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (client_ports.size() < 3 && std::chrono::steady_clock::now() < until) {
    auto result = client.Post("/", MakeDocs(2));
    ASSERT_TRUE(result.ok()) << result.status();
    for (int local : ClientPortsTo(port)) {
      client_ports.insert(local);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(client_ports.size(), 3u) << "the client kept its connection for 20 s";

  auto [code, out] = RunCli({"executor", "--uses", "NoOpExec", "--max-connection-age", "90000"});
  EXPECT_NE(code, 0);
  EXPECT_THAT(out, HasSubstr("--max-connection-age"));
  // A port out of range is refused, not wrapped (70000 listened on 4464).
  for (const char* port : {"70000", "-5"}) {
    auto [port_code, port_out] = RunCli({"executor", "--uses", "NoOpExec", "--port", port});
    EXPECT_NE(port_code, 0) << port;
    EXPECT_THAT(port_out, HasSubstr("--port")) << port;
  }
}

// A cgroup of its own with a CPU quota of one core (v2 `cpu.max`, or v1's
// cpu controller), removed by the destructor; `path` empty when none could
// be made (no writable cgroup file system: not root, or a container).
class OneCoreCgroup {
 public:
  OneCoreCgroup() {
    const std::string name = "gantry-test-" + std::to_string(::getpid());
    std::error_code error;
    if (std::filesystem::exists("/sys/fs/cgroup/cgroup.controllers") &&
        std::filesystem::create_directory("/sys/fs/cgroup/" + name, error) && !error) {
      path_ = "/sys/fs/cgroup/" + name;
      if (!Write("cpu.max", "100000 100000")) {
        Remove();
      }
    } else if (std::filesystem::is_directory("/sys/fs/cgroup/cpu") &&
               std::filesystem::create_directory("/sys/fs/cgroup/cpu/" + name, error) && !error) {
      path_ = "/sys/fs/cgroup/cpu/" + name;
      if (!Write("cpu.cfs_period_us", "100000") || !Write("cpu.cfs_quota_us", "100000")) {
        Remove();
      }
    }
  }
  ~OneCoreCgroup() { Remove(); }
  OneCoreCgroup(const OneCoreCgroup&) = delete;
  OneCoreCgroup& operator=(const OneCoreCgroup&) = delete;
  const std::string& path() const { return path_; }

 private:
  bool Write(const std::string& file, const std::string& text) {
    std::ofstream out(path_ + "/" + file);
    out << text;
    out.close();
    return static_cast<bool>(out);
  }
  void Remove() {
    if (!path_.empty()) {
      ::rmdir(path_.c_str());  // empty once its processes are gone
      path_.clear();
    }
  }
  std::string path_;
};

// `gantry executor` started inside `cgroup` (by a shell that moves itself
// there and then execs the CLI), with `env` added.
ChildProcessPtr StartExecutorInCgroup(const std::string& cgroup, const std::string& port_file,
                                      const std::string& log,
                                      std::map<std::string, std::string> env = {}) {
  internal::ChildProcessOptions options;
  options.program = "/bin/sh";
  options.args = {"-c", "echo $$ > '" + cgroup + "/cgroup.procs' && exec '" + testing::GantryCli() +
                            "' executor --uses '" + testing::SourceDir() +
                            "/examples/seed/executor.yml' --host 127.0.0.1 --port 0 "
                            "--port-file '" +
                            port_file + "'"};
  options.output_file = log;
  options.env = std::move(env);
  options.env["GANTRY_WORKER_PROGRAM"] = testing::GantryWorker();
  auto child = ChildProcess::Spawn(options);
  return child.ok() ? std::move(child).value() : nullptr;
}

// libgomp and libtorch ignore a CPU quota; the worker sizes its thread pools
// by it (unless the user set OMP_NUM_THREADS), as a container or pod with a
// cpu limit needs.
TEST(CliTest, AWorkerInACgroupWithACpuQuotaSizesItsThreadPoolsByIt) {
  if (internal::AffinityCpuCores() < 2) {
    GTEST_SKIP() << "needs 2 or more cores to put a 1-core quota below them";
  }
  OneCoreCgroup cgroup;
  if (cgroup.path().empty()) {
    GTEST_SKIP() << "no writable cgroup cpu controller here (needs root outside a container)";
  }
  const std::string quota_line = "the CPU quota of this process's cgroup allows 1 of the";
  for (const bool user_sized : {false, true}) {
    SCOPED_TRACE(user_sized ? "OMP_NUM_THREADS set" : "left to the worker");
    testing::TempDir dir;
    std::map<std::string, std::string> env;
    if (user_sized) {
      env["OMP_NUM_THREADS"] = "2";
    }
    ChildProcessPtr cli =
        StartExecutorInCgroup(cgroup.path(), dir.File("port"), dir.File("cli.log"), env);
    ASSERT_NE(cli, nullptr);
    auto port = testing::WaitForFile(dir.File("port"), kReadyTimeout);
    ASSERT_TRUE(port.has_value()) << testing::ReadFile(dir.File("cli.log"));
    Client client("127.0.0.1:" + std::to_string(std::stoi(*port)));
    auto result = client.Post("/encode", MakeDocs(4), {.request_size = 2});
    ASSERT_TRUE(result.ok()) << result.status();
    const std::string log = testing::ReadFile(dir.File("cli.log"));
    if (user_sized) {
      EXPECT_THAT(log, ::testing::Not(HasSubstr(quota_line)));
    } else {
      EXPECT_THAT(log, HasSubstr(quota_line + " " + std::to_string(internal::AffinityCpuCores()) +
                                 " cores it may run on: OMP_NUM_THREADS=1"));
    }
    cli->Terminate(std::chrono::seconds(10));
  }
}

TEST(CliTest, BadYamlIsReportedWithFileAndLine) {
  testing::TempDir dir;
  std::string yaml = dir.File("bad.yml");
  testing::WriteFile(yaml, "jtype: Deployment\nwith:\n  uses: MyGPUExec\n  replicas: two\n");
  auto [code, out] = RunCli({"deployment", "--uses", yaml});
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr(yaml + ":4:"));
  EXPECT_THAT(out, HasSubstr("with.replicas"));
}

TEST(CliTest, UnknownJtypeFromYamlIsReported) {
  testing::TempDir dir;
  std::string yaml = dir.File("dep.yml");
  testing::WriteFile(yaml, "jtype: Deployment\nwith:\n  uses: NoSuchExecutor\n  port: 0\n");
  auto [code, out] = RunCli({"deployment", "--uses", yaml});
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("unknown executor type (jtype) 'NoSuchExecutor'"));
  EXPECT_THAT(out, HasSubstr("MyGPUExec"));
}

TEST(CliTest, FlowFromYamlServesAndStopsOnSigterm) {
  testing::TempDir dir;
  std::string port_file = dir.File("port");
  ChildProcessPtr cli =
      StartCli({"flow", "--uses", testing::SourceDir() + "/examples/flow/flow.yml", "--port", "0",
                "--port-file", port_file},
               dir.File("cli.log"));
  ASSERT_NE(cli, nullptr);
  auto port = testing::WaitForFile(port_file, kReadyTimeout);
  ASSERT_TRUE(port.has_value()) << testing::ReadFile(dir.File("cli.log"));
  Client client("127.0.0.1:" + std::to_string(std::stoi(*port)));
  auto result = client.Post("/encode", MakeDocs(50), {.request_size = 8});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->size(), 50u);
  EXPECT_EQ((*result)[49].text(), "Embeddings calculated on CPU");
  EXPECT_EQ((*result)[49].embedding()->numel(), 5);

  std::vector<pid_t> workers = testing::ChildrenOf(cli->pid());
  EXPECT_EQ(workers.size(), 3u);  // encoder x2, passthrough x1
  cli->Signal(SIGTERM);
  ASSERT_TRUE(cli->WaitFor(std::chrono::seconds(30)));
  EXPECT_TRUE(WIFEXITED(*cli->exit_status()) && WEXITSTATUS(*cli->exit_status()) == 0)
      << ChildProcess::DescribeWaitStatus(*cli->exit_status());
  for (pid_t pid : workers) {
    EXPECT_FALSE(testing::ProcessAlive(pid));
  }
  std::string log = testing::ReadFile(dir.File("cli.log"));
  EXPECT_THAT(log, HasSubstr("Flow 'flow' is ready to serve"));
  EXPECT_THAT(log, HasSubstr("passthrough <- encoder"));
}

// --http-port 0 has the kernel pick the port, so nothing else can take it
// between choosing and binding; --http-port-file says which it was.
TEST(CliTest, HttpPortFileReportsThePortPicked) {
  testing::TempDir dir;
  ChildProcessPtr cli =
      StartCli({"flow", "--uses", testing::SourceDir() + "/examples/flow/flow.yml", "--port", "0",
                "--http-port", "0", "--http-port-file", dir.File("http-port"), "--port-file",
                dir.File("port")},
               dir.File("cli.log"));
  ASSERT_NE(cli, nullptr);
  ASSERT_TRUE(testing::WaitForFile(dir.File("port"), kReadyTimeout).has_value())
      << testing::ReadFile(dir.File("cli.log"));
  // Written before the port file.
  std::string http_port = testing::ReadFile(dir.File("http-port"));
  ASSERT_GT(std::stoi(http_port), 0) << http_port;
  std::string reply = testing::RunCommand(
      "curl -s --max-time 60 -X POST http://127.0.0.1:" + std::to_string(std::stoi(http_port)) +
      "/post -H 'Content-Type: application/json' "
      "-d '{\"execEndpoint\": \"/encode\", \"data\": [{\"text\": \"a\"}]}'");
  EXPECT_THAT(reply, HasSubstr("Embeddings calculated on CPU"));
  cli->Signal(SIGTERM);
  EXPECT_TRUE(cli->WaitFor(std::chrono::seconds(30)));
}

TEST(CliTest, HttpPortFileWithoutAnHttpGatewayIsRefused) {
  testing::TempDir dir;
  auto [code, out] =
      RunCli({"deployment", "--uses", testing::SourceDir() + "/examples/seed/deployment.yml",
              "--port", "0", "--http-port-file", dir.File("http-port")});
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("--http-port-file: no HTTP gateway to report"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("http-port")));
}

// A port file that cannot be written stops the command with the reason, for
// the gateway commands and for a lone executor alike: a script waiting for
// the file would otherwise wait forever on a server that is up.
TEST(CliTest, UnwritablePortFileIsAnErrorNamingIt) {
  testing::TempDir dir;
  const std::string port_file = dir.File("no-such-dir") + "/port";
  auto [code, out] =
      RunCli({"deployment", "--uses", testing::SourceDir() + "/examples/seed/deployment.yml",
              "--port", "0", "--port-file", port_file});
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("gantry: error: port file " + port_file + ": cannot write " +
                             port_file + ".tmp (No such file or directory)"));

  auto [executor_code, executor_out] =
      RunCli({"executor", "--uses", testing::SourceDir() + "/examples/seed/executor.yml", "--host",
              "127.0.0.1", "--port", "0", "--port-file", port_file});
  EXPECT_EQ(executor_code, 1);
  EXPECT_THAT(executor_out, HasSubstr("port file " + port_file + ": cannot write"));
}

TEST(CliTest, BadFlowYamlIsReportedWithFileKeyAndStep) {
  testing::TempDir dir;
  std::string yaml = dir.File("flow.yml");
  testing::WriteFile(yaml,
                     "jtype: Flow\nexecutors:\n  - name: a\n    uses: NoOpExec\n    needs: b\n"
                     "  - name: b\n    uses: NoOpExec\n");
  auto [code, out] = RunCli({"flow", "--uses", yaml});
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr(yaml + ":5:12: executors[0].needs[0]: the steps form a cycle: 'a' "
                                    "needs 'b' needs 'a'"));
}

TEST(CliTest, PingFailsForNothingListening) {
  auto [code, out] = RunCli({"ping", "127.0.0.1:1", "--timeout", "300"});
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("is not ready"));
}

// Renews `pki`'s server certificate in place (one signed by other_ca),
// sends SIGHUP to `cli`, and expects new connections to `address` to get it
// within a bounded wait, the log to say so, and clients of the old CA to be
// refused from then on.
void ExpectSighupServesTheRenewedCertificate(ChildProcess& cli, const testing::TestPki& pki,
                                             const std::string& address, const std::string& log) {
  std::filesystem::copy_file(pki.renewed_server_cert, pki.server_cert,
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(pki.renewed_server_key, pki.server_key,
                             std::filesystem::copy_options::overwrite_existing);
  cli.Signal(SIGHUP);
  int renewed_code = -1;
  std::string renewed_out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (renewed_code != 0 && std::chrono::steady_clock::now() < deadline) {
    std::tie(renewed_code, renewed_out) =
        RunCli({"ping", address, "--timeout", "1000", "--tls", "--ssl-cafile", pki.other_ca});
  }
  EXPECT_EQ(renewed_code, 0) << renewed_out << testing::ReadFile(log);
  EXPECT_THAT(testing::ReadFile(log), HasSubstr("SIGHUP: TLS certificate and key read again"));
  auto [old_code, old_out] =
      RunCli({"ping", address, "--timeout", "1000", "--tls", "--ssl-cafile", pki.ca});
  EXPECT_EQ(old_code, 1) << old_out;
}

TEST(CliTest, DeploymentServesTlsFromYamlAndPingUsesIt) {
  testing::TempDir dir;
  std::string error;
  std::optional<testing::TestPki> pki = testing::MakeTestPki(dir, &error);
  ASSERT_TRUE(pki.has_value()) << error;
  std::string yaml = dir.File("dep.yml");
  testing::WriteFile(yaml, "jtype: Deployment\nwith:\n  uses: " + testing::SourceDir() +
                               "/examples/seed/executor.yml\n  replicas: 1\n  ssl_certfile: " +
                               pki->server_cert + "\n  ssl_keyfile: " + pki->server_key + "\n");
  std::string port_file = dir.File("port");
  ChildProcessPtr cli = StartCli(
      {"deployment", "--uses", yaml, "--port", "0", "--port-file", port_file}, dir.File("cli.log"));
  ASSERT_NE(cli, nullptr);
  auto port = testing::WaitForFile(port_file, kReadyTimeout);
  ASSERT_TRUE(port.has_value()) << testing::ReadFile(dir.File("cli.log"));
  std::string address = "127.0.0.1:" + std::to_string(std::stoi(*port));

  auto [tls_code, tls_out] = RunCli({"ping", address, "--tls", "--ssl-cafile", pki->ca});
  EXPECT_EQ(tls_code, 0) << tls_out;
  auto [plain_code, plain_out] = RunCli({"ping", address, "--timeout", "1000"});
  EXPECT_EQ(plain_code, 1) << plain_out;
  auto [wrong_code, wrong_out] =
      RunCli({"ping", address, "--timeout", "1000", "--tls", "--ssl-cafile", pki->other_ca});
  EXPECT_EQ(wrong_code, 1) << wrong_out;

  Client client(address, {.tls = {.enabled = true, .ca_file = pki->ca}});
  auto result = client.Post("/encode", MakeDocs(5), {.timeout = std::chrono::seconds(30)});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->size(), 5u);

  // A certificate renewed in place is served after SIGHUP.
  ExpectSighupServesTheRenewedCertificate(*cli, *pki, address, dir.File("cli.log"));

  cli->Signal(SIGTERM);
  ASSERT_TRUE(cli->WaitFor(std::chrono::seconds(30)));
  EXPECT_TRUE(WIFEXITED(*cli->exit_status()) && WEXITSTATUS(*cli->exit_status()) == 0)
      << ChildProcess::DescribeWaitStatus(*cli->exit_status());
}

// `gantry gateway` (what exports run) re-reads its certificate on SIGHUP too.
TEST(CliTest, GatewayServesARenewedCertificateAfterSighup) {
  testing::TempDir dir;
  std::string error;
  std::optional<testing::TestPki> pki = testing::MakeTestPki(dir, &error);
  ASSERT_TRUE(pki.has_value()) << error;
  std::string executor_port_file = dir.File("executor.port");
  ChildProcessPtr executor =
      StartCli({"executor", "--uses", testing::SourceDir() + "/examples/seed/executor.yml",
                "--port", "0", "--port-file", executor_port_file},
               dir.File("executor.log"));
  ASSERT_NE(executor, nullptr);
  auto executor_port = testing::WaitForFile(executor_port_file, kReadyTimeout);
  ASSERT_TRUE(executor_port.has_value()) << testing::ReadFile(dir.File("executor.log"));
  std::string gateway_port_file = dir.File("gateway.port");
  ChildProcessPtr gateway = StartCli(
      {"gateway", "--replica-addresses", "127.0.0.1:" + std::to_string(std::stoi(*executor_port)),
       "--port", "0", "--port-file", gateway_port_file, "--ssl-certfile", pki->server_cert,
       "--ssl-keyfile", pki->server_key},
      dir.File("gateway.log"));
  ASSERT_NE(gateway, nullptr);
  auto gateway_port = testing::WaitForFile(gateway_port_file, kReadyTimeout);
  ASSERT_TRUE(gateway_port.has_value()) << testing::ReadFile(dir.File("gateway.log"));
  const std::string address = "127.0.0.1:" + std::to_string(std::stoi(*gateway_port));
  int code = -1;
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + kReadyTimeout;
  while (code != 0 && std::chrono::steady_clock::now() < deadline) {
    std::tie(code, out) =
        RunCli({"ping", address, "--timeout", "1000", "--tls", "--ssl-cafile", pki->ca});
  }
  ASSERT_EQ(code, 0) << out << testing::ReadFile(dir.File("gateway.log"));

  ExpectSighupServesTheRenewedCertificate(*gateway, *pki, address, dir.File("gateway.log"));
  Client client(address, {.tls = {.enabled = true, .ca_file = pki->other_ca}});
  auto result = client.Post("/encode", MakeDocs(3), {.timeout = std::chrono::seconds(30)});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->size(), 3u);
}

TEST(CliTest, BadTlsFlagsAreReportedNamingFileAndFlag) {
  testing::TempDir dir;
  std::string missing = dir.File("missing.pem");
  auto [code, out] =
      RunCli({"deployment", "--uses", testing::SourceDir() + "/examples/seed/deployment.yml",
              "--port", "0", "--ssl-certfile", missing, "--ssl-keyfile", missing});
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("TLS certificate (ssl_certfile) '" + missing + "': cannot open"));

  auto [half_code, half_out] =
      RunCli({"gateway", "--replica-addresses", "127.0.0.1:1", "--ssl-keyfile", missing});
  EXPECT_EQ(half_code, 1);
  EXPECT_THAT(half_out, HasSubstr("got only ssl_keyfile"));

  auto [ping_code, ping_out] =
      RunCli({"ping", "127.0.0.1:1", "--tls", "--ssl-cafile", missing, "--timeout", "300"});
  EXPECT_EQ(ping_code, 1);
  EXPECT_THAT(ping_out, HasSubstr("TLS CA file '" + missing + "': cannot open"));
}

// This test binary: gantry::Init makes it a worker serving ChaosExec.
std::string ThisProgram() {
  std::error_code error;
  return std::filesystem::read_symlink("/proc/self/exe", error).string();
}

// The CLI from YAML: a killed worker is replaced, then SIGTERM under load
// lets every request in flight finish and refuses new ones.
TEST(CliTest, DeploymentRespawnsAWorkerAndDrainsOnSigterm) {
  testing::TempDir dir;
  const std::string log = dir.File("calls.log");
  const std::string yaml = dir.File("dep.yml");
  testing::WriteFile(yaml,
                     "jtype: Deployment\nwith:\n  uses: ChaosExec\n  name: clidrain\n"
                     "  uses_with:\n    log: " +
                         log +
                         "\n  replicas: 2\n"
                         "  restart_backoff_initial: 100\n  timeout_drain: 20000\n");
  const std::string port_file = dir.File("port");
  ChildProcessPtr cli = StartCli({"deployment", "--uses", yaml, "--port", "0", "--port-file",
                                  port_file, "--max-init-failures", "3"},
                                 dir.File("cli.log"), ThisProgram());
  ASSERT_NE(cli, nullptr);
  auto port = testing::WaitForFile(port_file, kReadyTimeout);
  ASSERT_TRUE(port.has_value()) << testing::ReadFile(dir.File("cli.log"));
  const std::string address = "127.0.0.1:" + std::to_string(std::stoi(*port));
  std::vector<pid_t> workers = testing::ChildrenOf(cli->pid());
  ASSERT_EQ(workers.size(), 2u);

  // Respawn: a SIGKILLed worker is replaced by a new child that serves.
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(workers[0], SIGKILL), 0);
  Client client(address);
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        std::vector<pid_t> now = testing::ChildrenOf(cli->pid());
        return now.size() == 2 && std::find(now.begin(), now.end(), workers[0]) == now.end() &&
               testing::ReadFile(dir.File("cli.log")).find("restarted: ready") != std::string::npos;
      },
      std::chrono::seconds(10)))
      << testing::ReadFile(dir.File("cli.log"));
  std::printf("[ measured ] CLI: killed worker replaced and ready after %lld ms\n",
              static_cast<long long>(testing::Since(killed_at).count()));
  workers = testing::ChildrenOf(cli->pid());

  // SIGTERM while two requests of 1.5 s run, one on each replica: both
  // handlers have started (logged), so both are in flight.
  constexpr int kInFlight = 2;
  std::vector<StatusOr<DocList>> results(kInFlight, InternalError("not run"));
  std::vector<std::thread> posters;
  for (int t = 0; t < kInFlight; ++t) {
    posters.emplace_back([&, t] {
      results[static_cast<std::size_t>(t)] =
          Client(address).Post("/work", {Doc("inflight " + std::to_string(t))},
                               {.parameters = Parameters(Value::Dict{{"sleep_ms", Value(1500.0)}}),
                                .timeout = std::chrono::seconds(60)});
    });
  }
  // No ASSERT while the posters run: they are joined (bounded) first.
  EXPECT_TRUE(testing::WaitUntil([&] { return testing::CountLines(log) >= kInFlight; },
                                 std::chrono::seconds(20)));
  cli->Signal(SIGTERM);
  EXPECT_TRUE(testing::WaitUntil([&] { return !client.Ping(std::chrono::milliseconds(500)).ok(); },
                                 std::chrono::seconds(5)));
  auto refused = client.Post("/work", {Doc("late")}, {.timeout = std::chrono::seconds(5)});
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("deployment 'clidrain' is shutting down"));
  testing::JoinWithin(posters, std::chrono::seconds(30), "posts in flight");
  for (int t = 0; t < kInFlight; ++t) {
    const auto& result = results[static_cast<std::size_t>(t)];
    ASSERT_TRUE(result.ok()) << "request " << t << " was in flight and lost: " << result.status();
    EXPECT_EQ((*result)[0].text(), "done:inflight " + std::to_string(t));
  }
  ASSERT_TRUE(cli->WaitFor(std::chrono::seconds(30)));
  EXPECT_TRUE(WIFEXITED(*cli->exit_status()) && WEXITSTATUS(*cli->exit_status()) == 0)
      << ChildProcess::DescribeWaitStatus(*cli->exit_status());
  for (pid_t pid : workers) {
    EXPECT_FALSE(testing::ProcessAlive(pid));
  }
  EXPECT_EQ(testing::ReadFile(log).find(" late"), std::string::npos);
  EXPECT_THAT(testing::ReadFile(dir.File("cli.log")), HasSubstr("drained"));
}

// A second SIGTERM (and a SIGINT) while the first one's drain runs, as
// `timeout` or an impatient Ctrl-C sends them: the drain goes on, the request
// in flight is answered, the worker is reaped and the CLI exits 0 (the
// default action used to end it with 143 in the middle of its drain).
TEST(CliTest, MoreSignalsDuringTheDrainDoNotCutItShort) {
  testing::TempDir dir;
  const std::string log = dir.File("calls.log");
  // One ChaosExec replica that logs each call; requests in flight get 20 s.
  testing::WriteFile(dir.File("dep.yml"),
                     "jtype: Deployment\nwith:\n  uses: ChaosExec\n"
                     "  timeout_drain: 20000\n  uses_with:\n    log: " +
                         log + "\n");
  ChildProcessPtr cli = StartCli(
      {"deployment", "--uses", dir.File("dep.yml"), "--port", "0", "--port-file", dir.File("port")},
      dir.File("cli.log"), ThisProgram());
  ASSERT_NE(cli, nullptr);
  const std::optional<std::string> port = testing::WaitForFile(dir.File("port"), kReadyTimeout);
  ASSERT_TRUE(port.has_value()) << testing::ReadFile(dir.File("cli.log"));
  const std::string address = "127.0.0.1:" + std::to_string(std::stoi(*port));
  const std::vector<pid_t> workers = testing::ChildrenOf(cli->pid());
  ASSERT_EQ(workers.size(), 1u);

  StatusOr<DocList> result = InternalError("not run");
  std::vector<std::thread> posters;
  posters.emplace_back([&] {
    result =
        Client(address).Post("/work", {Doc("inflight")},
                             {.parameters = Parameters(Value::Dict{{"sleep_ms", Value(1500.0)}}),
                              .timeout = std::chrono::seconds(60)});
  });
  // No ASSERT while the poster runs: it is joined (bounded) first.
  EXPECT_TRUE(
      testing::WaitUntil([&] { return testing::CountLines(log) >= 1; }, std::chrono::seconds(20)));
  cli->Signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  cli->Signal(SIGTERM);
  cli->Signal(SIGINT);
  testing::JoinWithin(posters, std::chrono::seconds(30), "the post in flight");
  ASSERT_TRUE(result.ok()) << "the request in flight was lost: " << result.status();
  EXPECT_EQ((*result)[0].text(), "done:inflight");
  ASSERT_TRUE(cli->WaitFor(std::chrono::seconds(30)));
  EXPECT_TRUE(WIFEXITED(*cli->exit_status()) && WEXITSTATUS(*cli->exit_status()) == 0)
      << ChildProcess::DescribeWaitStatus(*cli->exit_status()) << "\n"
      << testing::ReadFile(dir.File("cli.log"));
  EXPECT_FALSE(testing::ProcessAlive(workers[0]));
  const std::string cli_log = testing::ReadFile(dir.File("cli.log"));
  EXPECT_THAT(cli_log, HasSubstr("drained"));
  EXPECT_THAT(cli_log, HasSubstr("already stopping"));
}

// --max-concurrent-requests overrides the YAML's bound on what the gateway
// forwards at once: with 1, a second request while one runs is refused.
TEST(CliTest, MaxConcurrentRequestsFlagBoundsTheGateway) {
  testing::TempDir dir;
  const std::string log = dir.File("calls.log");
  const std::string yaml = dir.File("dep.yml");
  testing::WriteFile(yaml,
                     "jtype: Deployment\nwith:\n  uses: ChaosExec\n  name: bounded\n"
                     "  max_concurrent_requests: 50\n  uses_with:\n    log: " +
                         log + "\n");
  const std::string port_file = dir.File("port");
  ChildProcessPtr cli = StartCli({"deployment", "--uses", yaml, "--port", "0", "--port-file",
                                  port_file, "--max-concurrent-requests", "1"},
                                 dir.File("cli.log"), ThisProgram());
  ASSERT_NE(cli, nullptr);
  auto port = testing::WaitForFile(port_file, kReadyTimeout);
  ASSERT_TRUE(port.has_value()) << testing::ReadFile(dir.File("cli.log"));
  const std::string address = "127.0.0.1:" + std::to_string(std::stoi(*port));
  StatusOr<DocList> slow = InternalError("not run");
  std::thread poster([&] {
    slow = Client(address).Post("/work", {Doc("slow")},
                                {.parameters = Parameters(Value::Dict{{"sleep_ms", Value(3000.0)}}),
                                 .timeout = std::chrono::seconds(60)});
  });
  // No ASSERT while the poster runs: it is joined (bounded) first.
  EXPECT_TRUE(
      testing::WaitUntil([&] { return testing::CountLines(log) >= 1; }, std::chrono::seconds(20)));
  auto refused =
      Client(address).Post("/work", {Doc("second")}, {.timeout = std::chrono::seconds(5)});
  std::vector<std::thread> posters;
  posters.push_back(std::move(poster));
  testing::JoinWithin(posters, std::chrono::seconds(30), "the slow post");
  ASSERT_TRUE(slow.ok()) << slow.status();
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr("gateway of deployment 'bounded' is busy: max_concurrent_requests is 1 "
                        "and that many requests are in flight; retry later"));
  auto after = Client(address).Post("/work", {Doc("after")}, {.timeout = std::chrono::seconds(10)});
  EXPECT_TRUE(after.ok()) << after.status();
  cli->Signal(SIGTERM);
  EXPECT_TRUE(cli->WaitFor(std::chrono::seconds(30)));
}

TEST(CliTest, SigkillOfTheParentLeavesNoWorkerBehind) {
  // Become the subreaper so that orphaned workers are re-parented to this
  // test and can be observed (and reaped) here, not by init.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  testing::TempDir dir;
  std::string port_file = dir.File("port");
  ChildProcessPtr cli =
      StartCli({"deployment", "--uses", testing::SourceDir() + "/examples/seed/deployment.yml",
                "--port", "0", "--port-file", port_file},
               dir.File("cli.log"));
  ASSERT_NE(cli, nullptr);
  ASSERT_TRUE(testing::WaitForFile(port_file, kReadyTimeout).has_value())
      << testing::ReadFile(dir.File("cli.log"));
  std::vector<pid_t> workers = testing::ChildrenOf(cli->pid());
  ASSERT_EQ(workers.size(), 2u);

  cli->Signal(SIGKILL);
  ASSERT_TRUE(cli->WaitFor(std::chrono::seconds(10)));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (pid_t pid : workers) {
    bool gone = false;
    while (!gone && std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      pid_t r = ::waitpid(pid, &status, WNOHANG);
      gone = r == pid || (r < 0 && errno == ECHILD && !testing::ProcessAlive(pid));
      if (!gone) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    if (!gone) {
      ::kill(pid, SIGKILL);  // do not leak it even when the test fails
      ::waitpid(pid, nullptr, 0);
    }
    EXPECT_TRUE(gone) << "worker " << pid << " outlived its killed parent";
  }
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 0), 0);
}

}  // namespace
}  // namespace gantry
