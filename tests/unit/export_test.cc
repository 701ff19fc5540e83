// `gantry export`: the Kubernetes manifests and the compose file written for
// a Deployment and a Flow, read back with yaml-cpp.
#include <gantry/export.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "testutil/testutil.h"

namespace gantry {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

constexpr char kDeploymentYaml[] = R"(jtype: Deployment
with:
  name: encoder
  uses: {jtype: NoOpExec, with: {label: "007"}}
  replicas: 3
  env: {GREETING: hello, CUDA_VISIBLE_DEVICES: RR}
)";

constexpr char kFlowYaml[] = R"(jtype: Flow
with: {name: search}
executors:
  - {name: tokenizer, uses: NoOpExec, replicas: 2}
  - name: text_encoder
    uses: MyGPUExec
    gpus: 2
    uses_dynamic_batching:
      /encode: {preferred_batch_size: 16, timeout: 5, queue_timeout: 100, timeout_action: DELAY,
                allow_timeout_override: true}
  - {name: indexer, uses: NoOpExec, needs: [tokenizer, text_encoder]}
)";

// The documents of a multi-document file by "Kind/name".
std::map<std::string, YAML::Node> Objects(const std::string& path) {
  std::map<std::string, YAML::Node> out;
  for (const YAML::Node& doc : YAML::LoadAllFromFile(path)) {
    if (doc.IsMap()) {
      out[doc["kind"].as<std::string>() + "/" + doc["metadata"]["name"].as<std::string>()] = doc;
    }
  }
  return out;
}

std::vector<std::string> Strings(const YAML::Node& seq) {
  std::vector<std::string> out;
  for (const YAML::Node& item : seq) {
    out.push_back(item.as<std::string>());
  }
  return out;
}

// The argument after the first `flag` in `args`; nullopt when there is none.
std::optional<std::string> ValueAfter(const std::vector<std::string>& args,
                                      const std::string& flag) {
  auto it = std::find(args.begin(), args.end(), flag);
  if (it == args.end() || it + 1 == args.end()) {
    return std::nullopt;
  }
  return *(it + 1);
}

YAML::Node Container(const YAML::Node& deployment) {
  return deployment["spec"]["template"]["spec"]["containers"][0];
}

TEST(ExportKubernetesTest, DeploymentGetsExecutorAndGatewayObjects) {
  TempDir dir;
  WriteFile(dir.File("dep.yml"), kDeploymentYaml);
  auto written = ExportKubernetes(dir.File("dep.yml"), dir.File("k8s"), {.k8s_namespace = "ns1"});
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_EQ(written->size(), 2u);

  auto executor = Objects(dir.File("k8s/encoder.yml"));
  ASSERT_EQ(executor.size(), 3u);
  const YAML::Node dep = executor.at("Deployment/encoder");
  EXPECT_EQ(dep["metadata"]["namespace"].as<std::string>(), "ns1");
  EXPECT_EQ(dep["spec"]["replicas"].as<int>(), 3);
  const YAML::Node c = Container(dep);
  EXPECT_EQ(c["image"].as<std::string>(), "gantry:cpu");
  EXPECT_THAT(Strings(c["command"]), ElementsAre("gantry"));
  const std::vector<std::string> args = Strings(c["args"]);
  ASSERT_GE(args.size(), 7u);
  EXPECT_THAT(std::vector<std::string>(args.begin(), args.begin() + 7),
              ElementsAre("executor", "--uses", "/etc/gantry/executor.yml", "--host", "0.0.0.0",
                          "--port", "8081"));
  // Args stay strings once read back ("8081" is not the number 8081).
  EXPECT_EQ(c["args"][6].Tag(), "!");
  EXPECT_EQ(c["ports"][0]["containerPort"].as<int>(), 8081);
  EXPECT_EQ(c["readinessProbe"]["grpc"]["port"].as<int>(), 8081);
  EXPECT_EQ(c["livenessProbe"]["grpc"]["port"].as<int>(), 8081);
  EXPECT_EQ(c["startupProbe"]["grpc"]["port"].as<int>(), 8081);
  EXPECT_FALSE(c["resources"]) << "no GPU asked for";
  // The environment, less the GPU placement the cluster does itself.
  ASSERT_EQ(c["env"].size(), 1u);
  EXPECT_EQ(c["env"][0]["name"].as<std::string>(), "GREETING");
  EXPECT_EQ(c["volumeMounts"][0]["mountPath"].as<std::string>(), "/etc/gantry");
  EXPECT_EQ(dep["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"].as<std::string>(),
            "encoder-config");

  const YAML::Node config =
      YAML::Load(executor.at("ConfigMap/encoder-config")["data"]["executor.yml"].as<std::string>());
  EXPECT_EQ(config["jtype"].as<std::string>(), "NoOpExec");
  EXPECT_EQ(config["with"]["label"].as<std::string>(), "007");
  EXPECT_EQ(config["with"]["label"].Tag(), "!") << "a quoted string stays one";
  EXPECT_EQ(config["metas"]["name"].as<std::string>(), "encoder");

  const YAML::Node svc = executor.at("Service/encoder");
  EXPECT_EQ(svc["spec"]["clusterIP"].as<std::string>(), "None");
  EXPECT_EQ(svc["spec"]["selector"]["app"].as<std::string>(), "encoder");
  EXPECT_EQ(svc["spec"]["ports"][0]["port"].as<int>(), 8081);

  auto gateway = Objects(dir.File("k8s/gateway.yml"));
  ASSERT_EQ(gateway.size(), 2u);
  const YAML::Node g = Container(gateway.at("Deployment/gateway"));
  EXPECT_THAT(Strings(g["args"]),
              ::testing::IsSupersetOf({"gateway", "--replica-addresses",
                                       "dns:///encoder.ns1.svc:8081", "--port", "8080"}));
  EXPECT_EQ(g["readinessProbe"]["grpc"]["port"].as<int>(), 8080);
  EXPECT_EQ(g["livenessProbe"]["tcpSocket"]["port"].as<int>(), 8080);
  const YAML::Node gsvc = gateway.at("Service/gateway");
  EXPECT_FALSE(gsvc["spec"]["clusterIP"]);
  EXPECT_EQ(gsvc["spec"]["ports"][0]["port"].as<int>(), 8080);
}

TEST(ExportKubernetesTest, FlowWithGpuStepRoutesThroughServices) {
  TempDir dir;
  WriteFile(dir.File("flow.yml"), kFlowYaml);
  auto written = ExportKubernetes(dir.File("flow.yml"), dir.File("out"),
                                  {.k8s_namespace = "prod", .gpu_image = "reg/gantry:cu12"});
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_EQ(written->size(), 4u);

  int port = 8081;
  for (const char* name : {"tokenizer", "text-encoder", "indexer"}) {
    SCOPED_TRACE(name);
    auto objects = Objects(dir.File(std::string("out/") + name + ".yml"));
    ASSERT_EQ(objects.size(), 3u);
    const YAML::Node c = Container(objects.at(std::string("Deployment/") + name));
    EXPECT_EQ(c["ports"][0]["containerPort"].as<int>(), port);
    EXPECT_EQ(objects.at(std::string("Service/") + name)["spec"]["clusterIP"].as<std::string>(),
              "None");
    ++port;
  }
  auto encoder = Objects(dir.File("out/text-encoder.yml"));
  const YAML::Node c = Container(encoder.at("Deployment/text-encoder"));
  EXPECT_EQ(c["image"].as<std::string>(), "reg/gantry:cu12");
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"].as<int>(), 2);
  const YAML::Node config = YAML::Load(
      encoder.at("ConfigMap/text-encoder-config")["data"]["executor.yml"].as<std::string>());
  EXPECT_EQ(config["with"]["device"].as<std::string>(), "cuda");
  EXPECT_EQ(config["dynamic_batching"]["/encode"]["preferred_batch_size"].as<int>(), 16);
  EXPECT_EQ(config["dynamic_batching"]["/encode"]["queue_timeout"].as<int>(), 100);
  EXPECT_EQ(config["dynamic_batching"]["/encode"]["timeout_action"].as<std::string>(), "DELAY");
  EXPECT_TRUE(config["dynamic_batching"]["/encode"]["allow_timeout_override"].as<bool>());
  EXPECT_EQ(config["metas"]["name"].as<std::string>(), "text_encoder");
  auto tokenizer = Objects(dir.File("out/tokenizer.yml"));
  EXPECT_EQ(tokenizer.at("Deployment/tokenizer")["spec"]["replicas"].as<int>(), 2);
  EXPECT_EQ(Container(tokenizer.at("Deployment/tokenizer"))["image"].as<std::string>(),
            "gantry:cpu");
  EXPECT_FALSE(Container(tokenizer.at("Deployment/tokenizer"))["resources"]);

  auto gateway = Objects(dir.File("out/gateway.yml"));
  ASSERT_EQ(gateway.size(), 3u);
  EXPECT_THAT(Strings(Container(gateway.at("Deployment/gateway"))["args"]),
              ElementsAre("flow", "--uses", "/etc/gantry/flow.yml"));
  const YAML::Node flow =
      YAML::Load(gateway.at("ConfigMap/gateway-config")["data"]["flow.yml"].as<std::string>());
  EXPECT_EQ(flow["jtype"].as<std::string>(), "Flow");
  EXPECT_EQ(flow["with"]["port"].as<int>(), 8080);
  EXPECT_EQ(flow["with"]["host"].as<std::string>(), "0.0.0.0");
  const YAML::Node steps = flow["executors"];
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[1]["name"].as<std::string>(), "text_encoder");
  EXPECT_TRUE(steps[1]["external"].as<bool>());
  EXPECT_EQ(steps[1]["host"].as<std::string>(), "text-encoder.prod.svc");
  EXPECT_EQ(steps[1]["port"].as<int>(), 8082);
  EXPECT_THAT(Strings(steps[2]["needs"]), ElementsAre("tokenizer", "text_encoder"));
}

TEST(ExportKubernetesTest, ExternalStepsStayWhereTheyAre) {
  TempDir dir;
  WriteFile(dir.File("flow.yml"), R"(jtype: Flow
with: {port: 8081}
executors:
  - {name: legacy, external: true, host: search.example.com, port: 443}
  - {name: ranker, uses: NoOpExec}
)");
  auto written = ExportKubernetes(dir.File("flow.yml"), dir.File("out"));
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_EQ(written->size(), 2u) << "no objects for the external step";
  EXPECT_FALSE(std::filesystem::exists(dir.File("out/legacy.yml")));
  // The gateway took 8081, so the first executor gets the next port.
  auto ranker = Objects(dir.File("out/ranker.yml"));
  EXPECT_EQ(Container(ranker.at("Deployment/ranker"))["ports"][0]["containerPort"].as<int>(), 8082);
  auto gateway = Objects(dir.File("out/gateway.yml"));
  const YAML::Node flow =
      YAML::Load(gateway.at("ConfigMap/gateway-config")["data"]["flow.yml"].as<std::string>());
  EXPECT_EQ(flow["executors"][0]["host"].as<std::string>(), "search.example.com");
  EXPECT_EQ(flow["executors"][0]["port"].as<int>(), 443);
  EXPECT_EQ(flow["executors"][1]["host"].as<std::string>(), "ranker.default.svc");
  EXPECT_EQ(flow["with"]["port"].as<int>(), 8081);
}

TEST(ExportComposeTest, FlowBecomesServicesWithReplicasGpusAndHealthchecks) {
  TempDir dir;
  WriteFile(dir.File("flow.yml"), kFlowYaml);
  auto written = ExportDockerCompose(dir.File("flow.yml"), dir.File("compose.yml"));
  ASSERT_TRUE(written.ok()) << written.status();
  const YAML::Node doc = YAML::LoadFile(dir.File("compose.yml"));
  const YAML::Node services = doc["services"];
  ASSERT_EQ(services.size(), 4u);
  EXPECT_EQ(services["tokenizer"]["deploy"]["replicas"].as<int>(), 2);
  EXPECT_FALSE(services["tokenizer"]["deploy"]["resources"]);
  const YAML::Node device =
      services["text-encoder"]["deploy"]["resources"]["reservations"]["devices"][0];
  EXPECT_EQ(device["driver"].as<std::string>(), "nvidia");
  EXPECT_EQ(device["count"].as<int>(), 2);
  EXPECT_THAT(Strings(device["capabilities"]), ElementsAre("gpu"));
  EXPECT_EQ(services["text-encoder"]["image"].as<std::string>(), "gantry:cuda");
  EXPECT_THAT(Strings(services["indexer"]["healthcheck"]["test"]),
              ElementsAre("CMD", "gantry", "ping", "127.0.0.1:8083"));
  EXPECT_THAT(Strings(services["indexer"]["volumes"]),
              ElementsAre("./compose.gantry/indexer.yml:/etc/gantry/executor.yml:ro"));
  const YAML::Node config = YAML::LoadFile(dir.File("compose.gantry/indexer.yml"));
  EXPECT_EQ(config["jtype"].as<std::string>(), "NoOpExec");

  const YAML::Node gateway = services["gateway"];
  EXPECT_THAT(Strings(gateway["ports"]), ElementsAre("8080:8080"));
  EXPECT_EQ(gateway["depends_on"]["indexer"]["condition"].as<std::string>(), "service_healthy");
  const YAML::Node flow = YAML::LoadFile(dir.File("compose.gantry/flow.yml"));
  EXPECT_EQ(flow["executors"][0]["host"].as<std::string>(), "tokenizer");
  EXPECT_EQ(flow["executors"][0]["port"].as<int>(), 8081);
}

TEST(ExportComposeTest, DeploymentGatewayUsesTheServiceName) {
  TempDir dir;
  WriteFile(dir.File("dep.yml"), kDeploymentYaml);
  auto written = ExportDockerCompose(dir.File("dep.yml"), dir.File("c.yml"));
  ASSERT_TRUE(written.ok()) << written.status();
  const YAML::Node services = YAML::LoadFile(dir.File("c.yml"))["services"];
  EXPECT_EQ(services["encoder"]["deploy"]["replicas"].as<int>(), 3);
  EXPECT_EQ(services["encoder"]["environment"]["GREETING"].as<std::string>(), "hello");
  EXPECT_FALSE(services["encoder"]["environment"]["CUDA_VISIBLE_DEVICES"]);
  EXPECT_THAT(Strings(services["gateway"]["command"]),
              ::testing::IsSupersetOf({"gateway", "--replica-addresses", "dns:///encoder:8081"}));
  // The gateway resolves the name again each time a connection ages out.
  EXPECT_EQ(ValueAfter(Strings(services["encoder"]["command"]), "--max-connection-age"), "30");
}

// Swarm's stack file: format 3.8, configs instead of bind mounts, deploy's
// restart_policy and dnsrr instead of restart and depends_on, GPUs as
// generic resources.
TEST(ExportSwarmTest, FlowBecomesAStackSwarmCanDeploy) {
  TempDir dir;
  WriteFile(dir.File("flow.yml"), kFlowYaml);
  auto written = ExportDockerSwarm(dir.File("flow.yml"), dir.File("stack.yml"));
  ASSERT_TRUE(written.ok()) << written.status();
  const YAML::Node doc = YAML::LoadFile(dir.File("stack.yml"));
  EXPECT_EQ(doc["version"].as<std::string>(), "3.8");
  const YAML::Node services = doc["services"];
  ASSERT_EQ(services.size(), 4u);
  for (const auto& entry : services) {
    const std::string name = entry.first.as<std::string>();
    const YAML::Node service = entry.second;
    EXPECT_FALSE(service["restart"]) << name << ": Swarm ignores restart:";
    EXPECT_FALSE(service["depends_on"]) << name << ": Swarm ignores depends_on";
    EXPECT_FALSE(service["volumes"]) << name << ": configs travel as Swarm configs";
    EXPECT_EQ(service["deploy"]["restart_policy"]["condition"].as<std::string>(), "any") << name;
  }
  const YAML::Node tokenizer = services["tokenizer"];
  EXPECT_EQ(tokenizer["deploy"]["replicas"].as<int>(), 2);
  EXPECT_EQ(tokenizer["deploy"]["endpoint_mode"].as<std::string>(), "dnsrr");
  ASSERT_EQ(tokenizer["configs"].size(), 1u);
  const std::string source = tokenizer["configs"][0]["source"].as<std::string>();
  EXPECT_THAT(source, ::testing::MatchesRegex("tokenizer-[0-9a-f]{8}"));
  EXPECT_EQ(tokenizer["configs"][0]["target"].as<std::string>(), "/etc/gantry/executor.yml");
  EXPECT_EQ(doc["configs"][source]["file"].as<std::string>(), "./stack.gantry/tokenizer.yml");
  EXPECT_EQ(YAML::LoadFile(dir.File("stack.gantry/tokenizer.yml"))["jtype"].as<std::string>(),
            "NoOpExec");

  const YAML::Node gpu = services["text-encoder"]["deploy"]["resources"]["reservations"];
  EXPECT_FALSE(gpu["devices"]);
  EXPECT_EQ(gpu["generic_resources"][0]["discrete_resource_spec"]["kind"].as<std::string>(),
            "NVIDIA-GPU");
  EXPECT_EQ(gpu["generic_resources"][0]["discrete_resource_spec"]["value"].as<int>(), 2);

  const YAML::Node gateway = services["gateway"];
  ASSERT_EQ(gateway["ports"].size(), 1u);
  EXPECT_EQ(gateway["ports"][0]["target"].as<int>(), 8080);
  EXPECT_EQ(gateway["ports"][0]["published"].as<int>(), 8080);
  EXPECT_EQ(gateway["ports"][0]["mode"].as<std::string>(), "host");
  EXPECT_EQ(gateway["deploy"]["replicas"].as<int>(), 1);
  EXPECT_FALSE(gateway["deploy"]["endpoint_mode"]);
  const std::string flow_source = gateway["configs"][0]["source"].as<std::string>();
  EXPECT_EQ(gateway["configs"][0]["target"].as<std::string>(), "/etc/gantry/flow.yml");
  EXPECT_EQ(doc["configs"][flow_source]["file"].as<std::string>(), "./stack.gantry/flow.yml");
  EXPECT_EQ(
      YAML::LoadFile(dir.File("stack.gantry/flow.yml"))["executors"][0]["host"].as<std::string>(),
      "tokenizer");
}

// Swarm configs cannot be changed in place: an edited YAML exports configs
// of new names, an unchanged one the same names.
TEST(ExportSwarmTest, ConfigNamesFollowTheirText) {
  TempDir dir;
  auto source_of = [&](const std::string& yaml) {
    WriteFile(dir.File("dep.yml"), yaml);
    auto written = ExportDockerSwarm(dir.File("dep.yml"), dir.File("stack.yml"));
    EXPECT_TRUE(written.ok()) << written.status();
    const YAML::Node services = YAML::LoadFile(dir.File("stack.yml"))["services"];
    EXPECT_THAT(Strings(services["gateway"]["command"]),
                ::testing::IsSupersetOf({"--replica-addresses", "dns:///encoder:8081"}));
    return services["encoder"]["configs"][0]["source"].as<std::string>();
  };
  const std::string first = source_of(kDeploymentYaml);
  EXPECT_EQ(source_of(kDeploymentYaml), first);
  std::string edited = kDeploymentYaml;
  edited.replace(edited.find("007"), 3, "008");
  EXPECT_NE(source_of(edited), first);
}

// The gateway's bound travels to the exported gateway; a Flow step's own
// would have no gateway there and is refused by name.
TEST(ExportTest, MaxConcurrentRequestsGoesToTheGatewayOrIsRefusedForAStep) {
  TempDir dir;
  WriteFile(dir.File("dep.yml"),
            "jtype: Deployment\nwith: {name: encoder, uses: NoOpExec, max_concurrent_requests: "
            "16}\n");
  auto written = ExportDockerCompose(dir.File("dep.yml"), dir.File("c.yml"));
  ASSERT_TRUE(written.ok()) << written.status();
  const std::vector<std::string> command =
      Strings(YAML::LoadFile(dir.File("c.yml"))["services"]["gateway"]["command"]);
  auto flag = std::find(command.begin(), command.end(), "--max-concurrent-requests");
  ASSERT_NE(flag, command.end());
  ASSERT_NE(flag + 1, command.end());
  EXPECT_EQ(*(flag + 1), "16");

  WriteFile(dir.File("flow.yml"),
            "jtype: Flow\nexecutors:\n  - {name: a, uses: NoOpExec, max_concurrent_requests: 4}\n");
  auto step = ExportKubernetes(dir.File("flow.yml"), dir.File("out"));
  ASSERT_FALSE(step.ok());
  EXPECT_THAT(step.status().message(),
              HasSubstr("executors[0].max_concurrent_requests: a step's own bound is not "
                        "exported (set it in the Flow's `with:`)"));
}

TEST(ExportTest, LogFormatAndAccessLogReachEveryProcess) {
  TempDir dir;
  WriteFile(dir.File("dep.yml"),
            "jtype: Deployment\nwith: {name: encoder, uses: NoOpExec, log_format: json, "
            "access_log: true}\n");
  auto written = ExportDockerCompose(dir.File("dep.yml"), dir.File("c.yml"));
  ASSERT_TRUE(written.ok()) << written.status();
  const YAML::Node services = YAML::LoadFile(dir.File("c.yml"))["services"];
  const std::vector<std::string> gateway = Strings(services["gateway"]["command"]);
  EXPECT_NE(std::find(gateway.begin(), gateway.end(), "--access-log"), gateway.end());
  EXPECT_EQ(ValueAfter(gateway, "--log-format"), "json");
  const std::vector<std::string> executor = Strings(services["encoder"]["command"]);
  EXPECT_EQ(ValueAfter(executor, "--log-format"), "json");
}

TEST(ExportTest, AFlowsTracingReachesItsGatewayAndEveryStep) {
  TempDir dir;
  WriteFile(
      dir.File("flow.yml"),
      "jtype: Flow\nwith: {name: search, tracing: true, traces_exporter_host: otel-collector, "
      "traces_exporter_port: 4319}\nexecutors:\n  - {name: first, uses: NoOpExec}\n"
      "  - {name: second, uses: NoOpExec, replicas: 2}\n");
  auto written = ExportDockerCompose(dir.File("flow.yml"), dir.File("c.yml"));
  ASSERT_TRUE(written.ok()) << written.status();
  // The Flow's gateway reads the Flow's own YAML; each step's replicas take flags.
  const YAML::Node flow = YAML::LoadFile(dir.File("c.gantry/flow.yml"))["with"];
  EXPECT_TRUE(flow["tracing"].as<bool>());
  EXPECT_EQ(flow["traces_exporter_host"].as<std::string>(), "otel-collector");
  EXPECT_EQ(flow["traces_exporter_port"].as<int>(), 4319);
  const YAML::Node services = YAML::LoadFile(dir.File("c.yml"))["services"];
  for (const char* service : {"first", "second"}) {
    const std::vector<std::string> args = Strings(services[service]["command"]);
    EXPECT_NE(std::find(args.begin(), args.end(), "--tracing"), args.end()) << service;
    EXPECT_EQ(ValueAfter(args, "--traces-exporter-host"), "otel-collector") << service;
    EXPECT_EQ(ValueAfter(args, "--traces-exporter-port"), "4319") << service;
  }
}

TEST(ExportKubernetesTest, MonitoringGetsFixedPortsAndScrapeAnnotations) {
  TempDir dir;
  WriteFile(dir.File("dep.yml"),
            "jtype: Deployment\nwith: {name: encoder, uses: NoOpExec, monitoring: true, "
            "http_port: 9090}\n");
  auto written = ExportKubernetes(dir.File("dep.yml"), dir.File("k8s"));
  ASSERT_TRUE(written.ok()) << written.status();
  const auto check_pod = [](const YAML::Node& deployment, int metrics_port) {
    const YAML::Node annotations = deployment["spec"]["template"]["metadata"]["annotations"];
    ASSERT_TRUE(annotations) << "no annotations";
    EXPECT_EQ(annotations["prometheus.io/scrape"].as<std::string>(), "true");
    EXPECT_EQ(annotations["prometheus.io/port"].as<std::string>(), std::to_string(metrics_port));
    EXPECT_EQ(annotations["prometheus.io/path"].as<std::string>(), "/metrics");
    const YAML::Node c = Container(deployment);
    bool found = false;
    for (const YAML::Node& port : c["ports"]) {
      if (port["name"].as<std::string>() == "metrics") {
        found = true;
        EXPECT_EQ(port["containerPort"].as<int>(), metrics_port);
      }
    }
    EXPECT_TRUE(found) << "no metrics container port";
    EXPECT_EQ(ValueAfter(Strings(c["args"]), "--port-monitoring"), std::to_string(metrics_port));
  };
  check_pod(Objects(dir.File("k8s/encoder.yml")).at("Deployment/encoder"), 9090);
  // 9090 is the gateway's HTTP port here: its metrics take the next one.
  check_pod(Objects(dir.File("k8s/gateway.yml")).at("Deployment/gateway"), 9091);

  WriteFile(dir.File("clash.yml"),
            "jtype: Deployment\nwith: {name: encoder, uses: NoOpExec, monitoring: true, "
            "port_monitoring: 8080}\n");
  auto clash = ExportKubernetes(dir.File("clash.yml"), dir.File("k8s2"));
  ASSERT_FALSE(clash.ok());
  EXPECT_THAT(clash.status().message(),
              HasSubstr("with.port_monitoring: port 8080 is also the gateway's gRPC or HTTP port"));
  WriteFile(dir.File("targets.yml"),
            "jtype: Deployment\nwith: {name: encoder, uses: NoOpExec, monitoring_targets_file: "
            "t.json}\n");
  auto targets = ExportKubernetes(dir.File("targets.yml"), dir.File("k8s3"));
  ASSERT_FALSE(targets.ok());
  EXPECT_THAT(targets.status().message(),
              HasSubstr("with.monitoring_targets_file: a scrape-target file is not exported"));
}

TEST(ExportTest, ServedModelNamesGoToTheGatewayButAFlowStepsAreRefused) {
  TempDir dir;
  WriteFile(dir.File("dep.yml"),
            "jtype: Deployment\nwith: {name: encoder, uses: NoOpExec, models: {a: /encode, b: "
            "/rerank}}\n");
  auto written = ExportDockerCompose(dir.File("dep.yml"), dir.File("c.yml"));
  ASSERT_TRUE(written.ok()) << written.status();
  const std::vector<std::string> command =
      Strings(YAML::LoadFile(dir.File("c.yml"))["services"]["gateway"]["command"]);
  std::vector<std::string> models;
  for (auto it = command.begin(); it != command.end(); ++it) {
    if (*it == "--model" && it + 1 != command.end()) {
      models.push_back(*(it + 1));
    }
  }
  EXPECT_THAT(models, ::testing::ElementsAre("a=/encode", "b=/rerank"));

  WriteFile(dir.File("flow.yml"),
            "jtype: Flow\nexecutors:\n  - {name: s, uses: NoOpExec, models: {a: /encode}}\n");
  auto flow = ExportKubernetes(dir.File("flow.yml"), dir.File("out"));
  ASSERT_FALSE(flow.ok());
  EXPECT_THAT(flow.status().message(),
              HasSubstr("executors[0].models: a Flow step's served model names are not exported"));
}

TEST(ExportTest, GatewaySettingsGoToTheGatewayButAnApiKeyIsRefused) {
  TempDir dir;
  WriteFile(dir.File("dep.yml"),
            "jtype: Deployment\nwith: {name: encoder, uses: NoOpExec, timeout_send: 2500, "
            "cors: true}\n");
  auto written = ExportDockerCompose(dir.File("dep.yml"), dir.File("c.yml"));
  ASSERT_TRUE(written.ok()) << written.status();
  const std::vector<std::string> command =
      Strings(YAML::LoadFile(dir.File("c.yml"))["services"]["gateway"]["command"]);
  auto flag = std::find(command.begin(), command.end(), "--timeout-send");
  ASSERT_NE(flag, command.end());
  ASSERT_NE(flag + 1, command.end());
  EXPECT_EQ(*(flag + 1), "2500");
  auto cors = std::find(command.begin(), command.end(), "--cors");
  ASSERT_NE(cors, command.end());
  // A flag without a value: the next argument is another flag.
  EXPECT_TRUE(cors + 1 == command.end() || (cors + 1)->starts_with("--")) << *(cors + 1);

  WriteFile(dir.File("keyed.yml"),
            "jtype: Deployment\nwith: {name: encoder, uses: NoOpExec, api_key: k}\n");
  auto keyed = ExportKubernetes(dir.File("keyed.yml"), dir.File("out"));
  ASSERT_FALSE(keyed.ok());
  EXPECT_THAT(keyed.status().message(), HasSubstr("with.api_key: API keys are not written"));
  EXPECT_THAT(keyed.status().message(), HasSubstr("GANTRY_API_KEY"));
  WriteFile(dir.File("flow.yml"),
            "jtype: Flow\nwith: {api_key: k}\nexecutors:\n  - {name: a, uses: NoOpExec}\n");
  auto flow = ExportDockerCompose(dir.File("flow.yml"), dir.File("f.yml"));
  ASSERT_FALSE(flow.ok());
  EXPECT_THAT(flow.status().message(), HasSubstr("with.api_key"));
}

constexpr char kDockerStepYaml[] = R"(jtype: Deployment
with:
  name: encoder
  uses: docker://team/encoder:1.2
  env: {GANTRY_EXECUTOR: SentenceEncoder}
  volumes: [./models:/models:ro, cache:/cache]
)";

// A Deployment's TLS files go to its exported gateway: from a Secret the
// user makes (Kubernetes), bind mounts (compose) or Swarm secrets, with
// probes that need no certificate. A Flow step's are refused by name.
TEST(ExportTest, TheGatewaysTlsFilesTravelWithoutTheirTextInTheManifests) {
  TempDir dir;
  WriteFile(dir.File("cert.pem"), "certificate text");
  WriteFile(dir.File("key.pem"), "private key text");
  WriteFile(dir.File("ca.pem"), "client CA text");
  WriteFile(dir.File("dep.yml"),
            "jtype: Deployment\nwith: {name: encoder, uses: NoOpExec, ssl_certfile: cert.pem, "
            "ssl_keyfile: key.pem, ssl_client_cafile: ca.pem}\n");

  auto k8s = ExportKubernetes(dir.File("dep.yml"), dir.File("k8s"));
  ASSERT_TRUE(k8s.ok()) << k8s.status();
  const std::string gateway_text = ReadFile(dir.File("k8s/gateway.yml"));
  EXPECT_THAT(gateway_text, ::testing::Not(HasSubstr("private key text")));
  const YAML::Node deployment = Objects(dir.File("k8s/gateway.yml")).at("Deployment/gateway");
  const YAML::Node g = Container(deployment);
  const std::vector<std::string> args = Strings(g["args"]);
  EXPECT_EQ(ValueAfter(args, "--ssl-certfile"), "/etc/gantry/tls/tls.crt");
  EXPECT_EQ(ValueAfter(args, "--ssl-keyfile"), "/etc/gantry/tls/tls.key");
  EXPECT_EQ(ValueAfter(args, "--ssl-client-cafile"), "/etc/gantry/tls/ca.crt");
  EXPECT_TRUE(g["readinessProbe"]["tcpSocket"]) << "the kubelet's gRPC probe has no TLS";
  EXPECT_EQ(g["volumeMounts"][0]["mountPath"].as<std::string>(), "/etc/gantry/tls");
  EXPECT_EQ(deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"]
                .as<std::string>(),
            "gateway-tls");
  const auto hint = std::find_if(k8s->begin(), k8s->end(), [](const ExportedFile& f) {
    return f.what.find("Secret") != std::string::npos;
  });
  ASSERT_NE(hint, k8s->end());
  EXPECT_THAT(hint->what, HasSubstr("kubectl create secret generic gateway-tls -n default "
                                    "--from-file=tls.crt=" +
                                    dir.File("cert.pem")));

  auto compose = ExportDockerCompose(dir.File("dep.yml"), dir.File("c.yml"));
  ASSERT_TRUE(compose.ok()) << compose.status();
  const YAML::Node gateway = YAML::LoadFile(dir.File("c.yml"))["services"]["gateway"];
  EXPECT_THAT(Strings(gateway["volumes"]),
              ElementsAre(dir.File("cert.pem") + ":/etc/gantry/tls/tls.crt:ro",
                          dir.File("key.pem") + ":/etc/gantry/tls/tls.key:ro",
                          dir.File("ca.pem") + ":/etc/gantry/tls/ca.crt:ro"));
  EXPECT_EQ(Strings(gateway["healthcheck"]["test"])[1], "bash");

  auto stack = ExportDockerSwarm(dir.File("dep.yml"), dir.File("s.yml"));
  ASSERT_TRUE(stack.ok()) << stack.status();
  const YAML::Node doc = YAML::LoadFile(dir.File("s.yml"));
  const YAML::Node swarm_gateway = doc["services"]["gateway"];
  EXPECT_EQ(ValueAfter(Strings(swarm_gateway["command"]), "--ssl-keyfile"), "/run/secrets/tls.key");
  ASSERT_EQ(swarm_gateway["secrets"].size(), 3u);
  const std::string key_secret = swarm_gateway["secrets"][1]["source"].as<std::string>();
  EXPECT_THAT(key_secret, ::testing::MatchesRegex("gateway-tls-key-[0-9a-f]{8}"));
  EXPECT_EQ(swarm_gateway["secrets"][1]["target"].as<std::string>(), "tls.key");
  EXPECT_EQ(doc["secrets"][key_secret]["file"].as<std::string>(), dir.File("key.pem"));

  WriteFile(dir.File("flow.yml"),
            "jtype: Flow\nexecutors:\n  - {name: a, uses: NoOpExec, ssl_certfile: cert.pem, "
            "ssl_keyfile: key.pem}\n");
  auto step = ExportDockerCompose(dir.File("flow.yml"), dir.File("f.yml"));
  ASSERT_FALSE(step.ok());
  EXPECT_THAT(step.status().message(),
              HasSubstr("executors[0].ssl_certfile: a Flow step's TLS files are not exported"));

  WriteFile(dir.File("missing.yml"),
            "jtype: Deployment\nwith: {uses: NoOpExec, ssl_certfile: cert.pem, "
            "ssl_keyfile: gone.pem}\n");
  auto missing = ExportDockerCompose(dir.File("missing.yml"), dir.File("m.yml"));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr("with.ssl_keyfile: " + dir.File("gone.pem") + ": cannot read it"));
}

TEST(ExportComposeTest, ADockerStepKeepsItsImageAndItsVolumes) {
  TempDir dir;
  WriteFile(dir.File("dep.yml"), kDockerStepYaml);
  auto written = ExportDockerCompose(dir.File("dep.yml"), dir.File("c.yml"));
  ASSERT_TRUE(written.ok()) << written.status();
  const YAML::Node doc = YAML::LoadFile(dir.File("c.yml"));
  const YAML::Node encoder = doc["services"]["encoder"];
  EXPECT_EQ(encoder["image"].as<std::string>(), "team/encoder:1.2");
  EXPECT_EQ(doc["services"]["gateway"]["image"].as<std::string>(), "gantry:cpu");
  EXPECT_THAT(Strings(encoder["volumes"]),
              ElementsAre("./c.gantry/encoder.yml:/etc/gantry/executor.yml:ro",
                          dir.path() + "/models:/models:ro", "cache:/cache"));
  EXPECT_TRUE(doc["volumes"]["cache"].IsMap()) << "a named volume is declared";
  EXPECT_EQ(YAML::LoadFile(dir.File("c.gantry/encoder.yml"))["jtype"].as<std::string>(),
            "SentenceEncoder");
}

TEST(ExportKubernetesTest, ADockerStepKeepsItsImageAndMountsHostPaths) {
  TempDir dir;
  std::string yaml = kDockerStepYaml;
  yaml.replace(yaml.find(", cache:/cache"), 14, "");
  WriteFile(dir.File("dep.yml"), yaml);
  auto written = ExportKubernetes(dir.File("dep.yml"), dir.File("k8s"), {});
  ASSERT_TRUE(written.ok()) << written.status();
  auto executor = Objects(dir.File("k8s/encoder.yml"));
  const YAML::Node dep = executor.at("Deployment/encoder");
  const YAML::Node c = Container(dep);
  EXPECT_EQ(c["image"].as<std::string>(), "team/encoder:1.2");
  ASSERT_EQ(c["volumeMounts"].size(), 2u);
  EXPECT_EQ(c["volumeMounts"][1]["mountPath"].as<std::string>(), "/models");
  EXPECT_TRUE(c["volumeMounts"][1]["readOnly"].as<bool>());
  const YAML::Node volume = dep["spec"]["template"]["spec"]["volumes"][1];
  EXPECT_EQ(volume["hostPath"]["path"].as<std::string>(), dir.path() + "/models");
  const YAML::Node config =
      YAML::Load(executor.at("ConfigMap/encoder-config")["data"]["executor.yml"].as<std::string>());
  EXPECT_EQ(config["jtype"].as<std::string>(), "SentenceEncoder");
}

TEST(ExportTest, DockerStepsWithoutATypeOrWithNamedVolumesAreRefusedByName) {
  TempDir dir;
  std::string no_type = kDockerStepYaml;
  no_type.replace(no_type.find("  env: {GANTRY_EXECUTOR: SentenceEncoder}\n"), 42, "");
  WriteFile(dir.File("dep.yml"), no_type);
  auto refused = ExportDockerCompose(dir.File("dep.yml"), dir.File("c.yml"));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("with.env.GANTRY_EXECUTOR"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("c.yml")));

  WriteFile(dir.File("named.yml"), kDockerStepYaml);
  auto named = ExportKubernetes(dir.File("named.yml"), dir.File("k8s"), {});
  ASSERT_FALSE(named.ok());
  EXPECT_THAT(named.status().message(), HasSubstr("named volume \"cache\""));
}

TEST(ExportTest, ForeignFilesAreNotClobbered) {
  TempDir dir;
  WriteFile(dir.File("dep.yml"), kDeploymentYaml);
  std::filesystem::create_directories(dir.File("k8s"));
  WriteFile(dir.File("k8s/mine.yml"), "keep: me\n");
  auto refused = ExportKubernetes(dir.File("dep.yml"), dir.File("k8s"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("did not write (mine.yml)"));
  EXPECT_EQ(ReadFile(dir.File("k8s/mine.yml")), "keep: me\n");
  EXPECT_FALSE(std::filesystem::exists(dir.File("k8s/encoder.yml")));

  // An earlier export's own files are replaced, twice over.
  ASSERT_TRUE(ExportKubernetes(dir.File("dep.yml"), dir.File("fresh")).ok());
  ASSERT_TRUE(ExportKubernetes(dir.File("dep.yml"), dir.File("fresh")).ok());

  WriteFile(dir.File("compose.yml"), "services: {}\n");
  auto compose = ExportDockerCompose(dir.File("dep.yml"), dir.File("compose.yml"));
  ASSERT_FALSE(compose.ok());
  EXPECT_THAT(compose.status().message(), HasSubstr("was not written by gantry export"));
  EXPECT_EQ(ReadFile(dir.File("compose.yml")), "services: {}\n");
}

// HTTP on any free port (0) gets a fixed one, as gRPC's does: a Service or a
// compose mapping of port 0 is not valid.
TEST(ExportKubernetesTest, AnHttpPortOfZeroBecomesAFixedPort) {
  TempDir dir;
  WriteFile(dir.File("dep.yml"),
            "jtype: Deployment\nwith: {name: encoder, uses: NoOpExec, http_port: 0}\n");
  auto written = ExportKubernetes(dir.File("dep.yml"), dir.File("k8s"));
  ASSERT_TRUE(written.ok()) << written.status();
  const YAML::Node c = Container(Objects(dir.File("k8s/gateway.yml")).at("Deployment/gateway"));
  std::vector<int> ports;
  for (const YAML::Node& port : c["ports"]) {
    ports.push_back(port["containerPort"].as<int>());
  }
  EXPECT_THAT(ports, ::testing::UnorderedElementsAre(8080, 8000));
  EXPECT_EQ(ValueAfter(Strings(c["args"]), "--http-port"), "8000");
  for (const YAML::Node& port :
       Objects(dir.File("k8s/gateway.yml")).at("Service/gateway")["spec"]["ports"]) {
    EXPECT_GT(port["port"].as<int>(), 0);
  }
  // A gRPC port of 8000 leaves HTTP the next one.
  WriteFile(dir.File("f.yml"),
            "jtype: Flow\nwith: {port: 8000, http_port: 0}\nexecutors:\n  - {name: a, uses: "
            "NoOpExec}\n");
  auto compose = ExportDockerCompose(dir.File("f.yml"), dir.File("c.yml"));
  ASSERT_TRUE(compose.ok()) << compose.status();
  EXPECT_THAT(ReadFile(dir.File("c.yml")), HasSubstr("8001:8001"));
  EXPECT_THAT(ReadFile(dir.File("c.yml")), ::testing::Not(HasSubstr("\"0:0\"")));
}

TEST(ExportTest, BadInputNamesFileLineAndKey) {
  TempDir dir;
  WriteFile(dir.File("bad.yml"), "jtype: Flow\nexecutors:\n  - {name: a, uses: X, replicas: 0}\n");
  auto bad = ExportKubernetes(dir.File("bad.yml"), dir.File("out"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr(dir.File("bad.yml") + ":3:34: executors[0].replicas: expected"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("out")));

  WriteFile(dir.File("all.yml"), "jtype: Deployment\nwith: {uses: X, gpus: all}\n");
  auto all = ExportDockerCompose(dir.File("all.yml"), dir.File("c.yml"));
  ASSERT_FALSE(all.ok());
  EXPECT_THAT(all.status().message(), HasSubstr("all.yml: with.gpus: \"all\" cannot be exported"));

  WriteFile(dir.File("name.yml"), "jtype: Deployment\nwith: {uses: X, name: 9lives}\n");
  auto name = ExportKubernetes(dir.File("name.yml"), dir.File("out"));
  ASSERT_FALSE(name.ok());
  EXPECT_THAT(name.status().message(), HasSubstr("with.name: '9lives' cannot name a Kubernetes"));

  WriteFile(dir.File("same.yml"),
            "jtype: Deployment\nwith: {uses: X, name: enc, port: 9000, http_port: 9000}\n");
  auto same = ExportKubernetes(dir.File("same.yml"), dir.File("out"));
  ASSERT_FALSE(same.ok());
  EXPECT_THAT(same.status().message(),
              HasSubstr("same.yml: with.http_port: 9000 is also the gateway's gRPC port"));

  WriteFile(dir.File("other.yml"), "jtype: NoOpExec\n");
  auto other = ExportKubernetes(dir.File("other.yml"), dir.File("out"));
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.status().message(), HasSubstr("other.yml:1:8: jtype: expected \"Deployment\""));
}

}  // namespace
}  // namespace gantry
