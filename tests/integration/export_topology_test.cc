// `gantry export` run for real without containers: every executor the
// manifests describe is started as their containers would start it (the
// exported args and config, on 127.0.0.1 ephemeral ports instead of
// 0.0.0.0:808x), the gateway as its pod would run it (`gantry flow` with the
// exported Flow of external steps, or `gantry gateway --replica-addresses`
// with dns:/// targets), and documents are posted through the gateway.
#include <arpa/inet.h>
#include <gantry/client.h>
#include <gantry/export.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/grpc_options.h"
#include "deployment/child_process.h"
#include "testutil/testutil.h"

namespace gantry {
namespace {

using internal::ChildProcess;
using internal::ChildProcessPtr;
using ::testing::HasSubstr;

constexpr auto kReadyTimeout = std::chrono::seconds(60);

// The executors of this binary (TagExec) serve the replicas.
std::string ThisProgram() {
  std::error_code error;
  return std::filesystem::read_symlink("/proc/self/exe", error).string();
}

ChildProcessPtr StartCli(const std::vector<std::string>& args, const std::string& log) {
  internal::ChildProcessOptions options;
  options.program = testing::GantryCli();
  options.args = args;
  options.output_file = log;
  options.env["GANTRY_WORKER_PROGRAM"] = ThisProgram();
  auto child = ChildProcess::Spawn(options);
  return child.ok() ? std::move(child).value() : nullptr;
}

// The documents of an exported file by "Kind/name".
std::map<std::string, YAML::Node> Objects(const std::string& path) {
  std::map<std::string, YAML::Node> out;
  for (const YAML::Node& doc : YAML::LoadAllFromFile(path)) {
    if (doc.IsMap()) {
      out[doc["kind"].as<std::string>() + "/" + doc["metadata"]["name"].as<std::string>()] = doc;
    }
  }
  return out;
}

// The container's args with `flag`'s value replaced.
void SetFlag(std::vector<std::string>& args, const std::string& flag, const std::string& value) {
  auto it = std::find(args.begin(), args.end(), flag);
  ASSERT_NE(it, args.end()) << flag;
  ASSERT_NE(it + 1, args.end()) << flag;
  *(it + 1) = value;
}

// One exported executor, started from its manifest on 127.0.0.1.
struct RunningExecutor {
  ChildProcessPtr process;
  int port = 0;
};

// Starts what `k8s_dir/<name>.yml` describes: its ConfigMap's executor.yml
// as the file, its container's args with host and port made local.
void StartExecutor(const testing::TempDir& dir, const std::string& k8s_dir, const std::string& name,
                   int copy, RunningExecutor* out) {
  auto objects = Objects(k8s_dir + "/" + name + ".yml");
  ASSERT_TRUE(objects.contains("ConfigMap/" + name + "-config")) << name;
  const std::string config = dir.File(name + ".executor.yml");
  testing::WriteFile(
      config,
      objects.at("ConfigMap/" + name + "-config")["data"]["executor.yml"].as<std::string>());
  const YAML::Node container =
      objects.at("Deployment/" + name)["spec"]["template"]["spec"]["containers"][0];
  std::vector<std::string> args;
  for (const YAML::Node& arg : container["args"]) {
    args.push_back(arg.as<std::string>());
  }
  ASSERT_EQ(args.front(), "executor");
  SetFlag(args, "--uses", config);
  SetFlag(args, "--host", "127.0.0.1");
  SetFlag(args, "--port", "0");
  const std::string port_file = dir.File(name + std::to_string(copy) + ".port");
  args.insert(args.end(), {"--port-file", port_file});
  const std::string log = dir.File(name + std::to_string(copy) + ".log");
  out->process = StartCli(args, log);
  ASSERT_NE(out->process, nullptr);
  auto port = testing::WaitForFile(port_file, kReadyTimeout);
  ASSERT_TRUE(port.has_value()) << testing::ReadFile(log);
  out->port = std::stoi(*port);
}

DocList MakeDocs(int n) {
  DocList docs;
  for (int i = 0; i < n; ++i) {
    docs.emplace_back("doc" + std::to_string(i));
  }
  return docs;
}

TEST(ExportTopologyTest, ExportedFlowRoutesThroughEveryExternalStep) {
  testing::TempDir dir;
  testing::WriteFile(dir.File("flow.yml"), R"(jtype: Flow
with: {name: chain}
executors:
  - {name: step_a, uses: TagExec, uses_with: {tag: a, value: "1"}}
  - {name: step_b, uses: TagExec, uses_with: {tag: b, value: "2"}, replicas: 2}
  - {name: step_c, uses: TagExec, uses_with: {tag: c, value: "3"}, needs: [step_a, step_b]}
)");
  const std::string k8s = dir.File("k8s");
  auto written = ExportKubernetes(dir.File("flow.yml"), k8s);
  ASSERT_TRUE(written.ok()) << written.status();

  std::map<std::string, RunningExecutor> executors;
  for (const std::string name : {"step-a", "step-b", "step-c"}) {
    StartExecutor(dir, k8s, name, 0, &executors[name]);
    if (HasFatalFailure()) {
      return;
    }
  }

  // The gateway's Flow, as its ConfigMap has it, pointed at those ports.
  auto gateway = Objects(k8s + "/gateway.yml");
  YAML::Node flow =
      YAML::Load(gateway.at("ConfigMap/gateway-config")["data"]["flow.yml"].as<std::string>());
  flow["with"]["host"] = "127.0.0.1";
  flow["with"]["port"] = 0;
  for (YAML::Node step : flow["executors"]) {
    ASSERT_TRUE(step["external"].as<bool>());
    std::string service = step["host"].as<std::string>();
    ASSERT_THAT(service, ::testing::EndsWith(".default.svc"));
    step["host"] = "127.0.0.1";
    step["port"] = executors.at(service.substr(0, service.find('.'))).port;
  }
  YAML::Emitter text;
  text << flow;
  testing::WriteFile(dir.File("gateway-flow.yml"), text.c_str());
  const std::string port_file = dir.File("gateway.port");
  ChildProcessPtr cli =
      StartCli({"flow", "--uses", dir.File("gateway-flow.yml"), "--port-file", port_file},
               dir.File("gateway.log"));
  ASSERT_NE(cli, nullptr);
  auto port = testing::WaitForFile(port_file, kReadyTimeout);
  ASSERT_TRUE(port.has_value()) << testing::ReadFile(dir.File("gateway.log"));

  Client client("127.0.0.1:" + *port);
  auto result = client.Post("/", MakeDocs(12), {.request_size = 4});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->size(), 12u);
  for (const Doc& doc : *result) {
    // a and b both ran on the client's documents' way to c, which merged
    // them; every step left its tag.
    EXPECT_THAT(std::string(doc.text()), HasSubstr("|a"));
    EXPECT_THAT(std::string(doc.text()), HasSubstr("|b"));
    EXPECT_THAT(std::string(doc.text()), ::testing::EndsWith("|c"));
    for (const char* tag : {"a", "b", "c"}) {
      EXPECT_TRUE(doc.tags().contains(tag)) << doc.text() << " lacks tag " << tag;
    }
  }
  EXPECT_THAT(testing::ReadFile(dir.File("gateway.log")),
              HasSubstr("step_b <- step_a (external: 127.0.0.1:"));

  // The gateway's health (its pod's readiness probe) follows the external
  // steps: NOT_SERVING once one of them is gone.
  EXPECT_TRUE(client.Ping().ok());
  executors.at("step-c").process.reset();  // SIGTERM, reaped
  EXPECT_TRUE(testing::WaitUntil([&] { return !client.Ping().ok(); }, std::chrono::seconds(20)))
      << "the gateway still reports SERVING without step_c";
}

TEST(ExportTopologyTest, ExportedDeploymentGatewayReachesReplicasByDnsTarget) {
  testing::TempDir dir;
  testing::WriteFile(dir.File("dep.yml"), R"(jtype: Deployment
with:
  name: tagger
  uses: TagExec
  uses_with: {tag: t, value: "x"}
  replicas: 2
  http_port: 8000
  models: {tag-model: /tag, other-model: /other}
)");
  const std::string k8s = dir.File("k8s");
  auto written = ExportKubernetes(dir.File("dep.yml"), k8s, {.k8s_namespace = "ns"});
  ASSERT_TRUE(written.ok()) << written.status();
  // Two pods of one Deployment; here two processes on two ports.
  RunningExecutor first;
  RunningExecutor second;
  StartExecutor(dir, k8s, "tagger", 0, &first);
  StartExecutor(dir, k8s, "tagger", 1, &second);
  if (HasFatalFailure()) {
    return;
  }

  // What the gateway's channels are made with (common/grpc_options.h): a
  // dns:/// target gets round_robin, a plain host:port keeps pick_first.
  for (const auto& [target, policy] : std::vector<std::pair<std::string, std::string>>{
           {"dns:///127.0.0.1:" + std::to_string(first.port), "round_robin"},
           {"127.0.0.1:" + std::to_string(first.port), "pick_first"}}) {
    auto channel = internal::MakeChannel(target, std::int64_t{1} << 20);
    ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() + kReadyTimeout))
        << target;
    EXPECT_EQ(channel->GetLoadBalancingPolicyName(), policy) << target;
  }

  auto gateway = Objects(k8s + "/gateway.yml");
  const YAML::Node container =
      gateway.at("Deployment/gateway")["spec"]["template"]["spec"]["containers"][0];
  std::vector<std::string> args;
  for (const YAML::Node& arg : container["args"]) {
    args.push_back(arg.as<std::string>());
  }
  ASSERT_EQ(args.front(), "gateway");
  auto addresses = std::find(args.begin(), args.end(), "--replica-addresses");
  ASSERT_NE(addresses, args.end());
  ASSERT_EQ(*(addresses + 1), "dns:///tagger.ns.svc:8081");
  // The same dns:/// form, resolved here to the two local replicas.
  SetFlag(args, "--replica-addresses",
          "dns:///127.0.0.1:" + std::to_string(first.port) +
              ",dns:///127.0.0.1:" + std::to_string(second.port));
  SetFlag(args, "--host", "127.0.0.1");
  SetFlag(args, "--port", "0");
  SetFlag(args, "--http-port", "0");
  const std::string port_file = dir.File("gateway.port");
  const std::string http_port_file = dir.File("gateway.http-port");
  args.insert(args.end(), {"--port-file", port_file, "--http-port-file", http_port_file});
  ChildProcessPtr cli = StartCli(args, dir.File("gateway.log"));
  ASSERT_NE(cli, nullptr);
  auto port = testing::WaitForFile(port_file, kReadyTimeout);
  ASSERT_TRUE(port.has_value()) << testing::ReadFile(dir.File("gateway.log"));

  // The YAML's served model names reach the exported gateway.
  auto http_port = testing::WaitForFile(http_port_file, kReadyTimeout);
  ASSERT_TRUE(http_port.has_value());
  httplib::Client http("127.0.0.1", std::stoi(*http_port));
  http.set_read_timeout(30, 0);
  auto models = http.Get("/v1/models");
  ASSERT_TRUE(models) << httplib::to_string(models.error());
  EXPECT_EQ(models->status, 200) << models->body;
  EXPECT_THAT(models->body, ::testing::HasSubstr("\"tag-model\""));
  EXPECT_THAT(models->body, ::testing::HasSubstr("\"other-model\""));

  Client client("127.0.0.1:" + *port);
  std::set<std::int64_t> pids;
  for (int i = 0; i < 8; ++i) {
    auto result = client.Post("/", MakeDocs(2));
    ASSERT_TRUE(result.ok()) << result.status();
    for (const Doc& doc : *result) {
      EXPECT_THAT(std::string(doc.text()), ::testing::EndsWith("|t"));
      const Value& pid = doc.tags().at("pid_t");
      ASSERT_NE(pid.AsInt(), nullptr);
      pids.insert(*pid.AsInt());
    }
  }
  EXPECT_EQ(pids.size(), 2u) << "the gateway spreads requests over both replicas";
}

TEST(ExportTopologyTest, FlowIsNotServingWhileAnExternalStepCannotBeReached) {
  testing::TempDir dir;
  // A port that refuses connections: bound, never listened on, held until
  // the test ends so nothing else takes it.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int dead_port = ntohs(address.sin_port);
  testing::WriteFile(dir.File("flow.yml"),
                     "jtype: Flow\nwith: {host: 127.0.0.1}\nexecutors:\n"
                     "  - {name: gone, external: true, host: 127.0.0.1, port: " +
                         std::to_string(dead_port) + "}\n");
  const std::string port_file = dir.File("gateway.port");
  ChildProcessPtr cli =
      StartCli({"flow", "--uses", dir.File("flow.yml"), "--port", "0", "--port-file", port_file},
               dir.File("gateway.log"));
  ASSERT_NE(cli, nullptr);
  auto port = testing::WaitForFile(port_file, kReadyTimeout);
  ASSERT_TRUE(port.has_value()) << testing::ReadFile(dir.File("gateway.log"));
  Client client("127.0.0.1:" + *port);
  // Before any request: the gateway has tried the step and found it down.
  EXPECT_TRUE(testing::WaitUntil([&] { return !client.Ping().ok(); }, std::chrono::seconds(20)))
      << "SERVING with its only step unreachable";
  auto result = client.Post("/", MakeDocs(1));
  EXPECT_FALSE(result.ok());
  ::close(fd);
}

// Runs the CLI to completion (bounded): {exit code, output}.
std::pair<int, std::string> RunCli(const std::vector<std::string>& args) {
  testing::TempDir dir;
  ChildProcessPtr child = StartCli(args, dir.File("out.log"));
  if (!child || !child->WaitFor(std::chrono::seconds(60))) {
    return {-1, "did not finish"};
  }
  int status = *child->exit_status();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, testing::ReadFile(dir.File("out.log"))};
}

TEST(ExportCliTest, NamesWhatItWroteAndWhatIsWrong) {
  testing::TempDir dir;
  testing::WriteFile(dir.File("dep.yml"), "jtype: Deployment\nwith: {uses: NoOpExec}\n");
  auto [code, out] = RunCli({"export", "kubernetes", dir.File("dep.yml"), dir.File("k8s")});
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("wrote " + dir.File("k8s") + "/executor.yml"));
  EXPECT_THAT(out, HasSubstr("gateway.yml (gateway: Deployment, Service)"));

  std::tie(code, out) = RunCli({"export", "swarm", dir.File("dep.yml"), dir.File("stack.yml")});
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(
      out, HasSubstr("wrote " + dir.File("stack.yml") + " (stack file for docker stack deploy)"));
  EXPECT_THAT(out, HasSubstr("wrote " + dir.File("stack.gantry") + "/executor.yml"));

  std::tie(code, out) = RunCli({"export", "helm", dir.File("dep.yml"), dir.File("out")});
  EXPECT_EQ(code, 1);
  EXPECT_THAT(
      out, HasSubstr("unknown export target 'helm' (targets: kubernetes, docker-compose, swarm)"));

  testing::WriteFile(dir.File("bad.yml"), "jtype: Deployment\nwith: {uses: X, replicas: two}\n");
  std::tie(code, out) =
      RunCli({"export", "docker-compose", dir.File("bad.yml"), dir.File("c.yml")});
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr(dir.File("bad.yml") + ":2:"));
  EXPECT_THAT(out, HasSubstr("with.replicas"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("c.yml")));
}

}  // namespace
}  // namespace gantry
