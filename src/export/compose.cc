#include "export/compose.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

#include "export/commands.h"
#include "export/yaml_writer.h"

namespace gantry::exporting {

namespace fs = std::filesystem;

namespace {

// `tls`: a TCP connect instead of gRPC health, which a certificate for
// another name than 127.0.0.1, or a required client certificate, would
// fail.
Value ComposeHealthcheck(int port, std::int64_t start_seconds, bool tls = false) {
  Value::Dict check;
  check.emplace("test", tls ? List({Text("CMD"), Text("bash"), Text("-c"),
                                    Text("exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(port))})
                            : List({Text("CMD"), Text("gantry"), Text("ping"),
                                    Text("127.0.0.1:" + std::to_string(port))}));
  check.emplace("interval", Text("5s"));
  check.emplace("timeout", Text("5s"));
  check.emplace("retries", Int(3));
  check.emplace("start_period", Text(std::to_string(start_seconds) + "s"));
  return Value(std::move(check));
}

Value::Dict ComposeService(const std::string& image, Value::List command, ComposeTarget target) {
  Value::Dict service;
  service.emplace("image", Text(image));
  service.emplace("entrypoint", List({Text("gantry")}));
  service.emplace("command", Value(std::move(command)));
  // Swarm ignores `restart:`; its deploy.restart_policy says it there.
  if (target == ComposeTarget::kDockerCompose) {
    service.emplace("restart", Text("unless-stopped"));
  }
  return service;
}

// Swarm restarts a task whatever made it stop, as `unless-stopped` does.
Value SwarmRestartPolicy() {
  Value::Dict policy;
  policy.emplace("condition", Text("any"));
  policy.emplace("delay", Text("5s"));
  return Value(std::move(policy));
}

// Swarm configs cannot change once made, so the name of each carries a
// digest of its text (FNV-1a, 64 bits): an export of an edited YAML makes
// new configs and `docker stack deploy` rolls the services over to them.
std::string ContentDigest(std::string_view text) {
  std::uint64_t hash = 14695981039346656037ULL;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  constexpr std::string_view kHex = "0123456789abcdef";
  std::string digest;
  for (int shift = 60; shift >= 32; shift -= 4) {
    digest.push_back(kHex[(hash >> shift) & 0xf]);
  }
  return digest;
}

// The service's `configs:` entry and the top-level one it names, for a
// file written into the config folder.
Value SwarmConfig(const OutFile& file, const std::string& config_dir_name, std::string_view target,
                  Value::Dict* top_level_configs) {
  const std::string stem = file.name.substr(0, file.name.rfind('.'));
  const std::string key = stem + "-" + ContentDigest(file.text);
  Value::Dict source;
  source.emplace("file", Text("./" + config_dir_name + "/" + file.name));
  top_level_configs->emplace(key, Value(std::move(source)));
  Value::Dict use;
  use.emplace("source", Text(key));
  use.emplace("target", Text(std::string(target)));
  return List({Value(std::move(use))});
}

}  // namespace

StatusOr<std::vector<OutFile>> RenderCompose(const Topology& t, const ExportOptions& options,
                                             const std::string& config_dir_name,
                                             std::vector<OutFile>* configs, ComposeTarget target) {
  const bool swarm = target == ComposeTarget::kSwarm;
  Value::Dict services;
  Value::Dict swarm_configs;
  Value::Dict depends_on;
  // Named volumes of the steps' `volumes:`, declared at the top level.
  Value::Dict named_volumes;
  auto service_host = [](const Step& step) { return step.dns_name; };
  for (const Step& step : t.steps) {
    if (step.external) {
      continue;
    }
    YAML::Emitter config;
    GANTRY_RETURN_IF_ERROR(Emit(config, ExecutorConfigDoc(step)));
    configs->push_back({step.dns_name + ".yml", std::string(config.c_str()) + "\n",
                        "executor '" + step.name + "' config"});
    Value::Dict service = ComposeService(StepImage(step, options), ExecutorArgs(t, step), target);
    const std::string config_target = std::string(kConfigDir) + "/executor.yml";
    Value::List service_volumes;
    if (swarm) {
      service.emplace("configs",
                      SwarmConfig(configs->back(), config_dir_name, config_target, &swarm_configs));
    } else {
      service_volumes.push_back(
          Text("./" + config_dir_name + "/" + configs->back().name + ":" + config_target + ":ro"));
    }
    for (const std::string& volume : step.deployment.volumes) {
      service_volumes.push_back(Text(volume));
      if (!volume.starts_with('/')) {
        named_volumes.emplace(volume.substr(0, volume.find(':')), Value(Value::Dict{}));
      }
    }
    if (!service_volumes.empty()) {
      service.emplace("volumes", Value(std::move(service_volumes)));
    }
    if (std::map<std::string, std::string> env = ContainerEnv(step); !env.empty()) {
      Value::Dict environment;
      for (const auto& [key, value] : env) {
        environment.emplace(key, Text(value));
      }
      service.emplace("environment", Value(std::move(environment)));
    }
    service.emplace("healthcheck", ComposeHealthcheck(step.port, StartupSeconds(step.deployment)));
    Value::Dict deploy;
    deploy.emplace("replicas", Int(step.deployment.replicas));
    if (swarm) {
      // No virtual IP: the service name resolves to every task's address,
      // so the gateway's round_robin reaches each replica (a VIP would give
      // it one address and one replica per connection).
      deploy.emplace("endpoint_mode", Text("dnsrr"));
      deploy.emplace("restart_policy", SwarmRestartPolicy());
    }
    if (step.gpus > 0) {
      Value::Dict reservations;
      if (swarm) {
        // Swarm schedules GPUs as generic resources the nodes advertise
        // (dockerd's node-generic-resources), not as device requests.
        Value::Dict spec;
        spec.emplace("kind", Text("NVIDIA-GPU"));
        spec.emplace("value", Int(step.gpus));
        Value::Dict resource;
        resource.emplace("discrete_resource_spec", Value(std::move(spec)));
        reservations.emplace("generic_resources", List({Value(std::move(resource))}));
      } else {
        Value::Dict device;
        device.emplace("driver", Text("nvidia"));
        device.emplace("count", Int(step.gpus));
        device.emplace("capabilities", List({Text("gpu")}));
        reservations.emplace("devices", List({Value(std::move(device))}));
      }
      Value::Dict resources;
      resources.emplace("reservations", Value(std::move(reservations)));
      deploy.emplace("resources", Value(std::move(resources)));
    }
    service.emplace("deploy", Value(std::move(deploy)));
    services.emplace(step.dns_name, Value(std::move(service)));
    Value::Dict condition;
    condition.emplace("condition", Text("service_healthy"));
    depends_on.emplace(step.dns_name, Value(std::move(condition)));
  }
  const std::string addresses =
      t.is_flow ? "" : StepAddress(t.steps.front(), service_host(t.steps.front()));
  Value::Dict gateway = ComposeService(
      options.image, GatewayArgs(t, addresses, swarm ? kSwarmSecretsDir : kTlsDir), target);
  const std::vector<TlsFile> tls_files = GatewayTlsFiles(t);
  Value::List gateway_volumes;
  Value::List gateway_secrets;
  Value::Dict swarm_secrets;
  for (const TlsFile& file : tls_files) {
    if (swarm) {
      // Swarm secrets are immutable too: named by a digest of the file.
      GANTRY_ASSIGN_OR_RETURN(std::string text, ReadText(file.source));
      std::string key = "gateway-" + file.name + "-" + ContentDigest(text);
      std::replace(key.begin(), key.end(), '.', '-');
      Value::Dict source;
      source.emplace("file", Text(file.source));
      swarm_secrets.emplace(key, Value(std::move(source)));
      Value::Dict use;
      use.emplace("source", Text(key));
      use.emplace("target", Text(file.name));
      gateway_secrets.push_back(Value(std::move(use)));
    } else {
      gateway_volumes.push_back(
          Text(file.source + ":" + std::string(kTlsDir) + "/" + file.name + ":ro"));
    }
  }
  if (!gateway_secrets.empty()) {
    gateway.emplace("secrets", Value(std::move(gateway_secrets)));
  }
  if (t.is_flow) {
    YAML::Emitter flow;
    GANTRY_RETURN_IF_ERROR(Emit(flow, GatewayFlowDoc(t, service_host)));
    configs->push_back({"flow.yml", std::string(flow.c_str()) + "\n", "gateway's Flow"});
    const std::string flow_target = std::string(kConfigDir) + "/flow.yml";
    if (swarm) {
      gateway.emplace("configs",
                      SwarmConfig(configs->back(), config_dir_name, flow_target, &swarm_configs));
    } else {
      gateway_volumes.push_back(Text("./" + config_dir_name + "/flow.yml:" + flow_target + ":ro"));
    }
  }
  if (!gateway_volumes.empty()) {
    gateway.emplace("volumes", Value(std::move(gateway_volumes)));
  }
  Value::List ports;
  for (const auto& [name, port] : GatewayPorts(t)) {
    if (swarm) {
      // On the node that runs the gateway, not through the routing mesh:
      // the gateway balances over the replicas itself, an IPVS hop in
      // front of it adds nothing, and the mesh needs kernel support
      // (IPVS, IP aliases) that some hosts lack.
      Value::Dict published;
      published.emplace("target", Int(port));
      published.emplace("published", Int(port));
      published.emplace("protocol", Text("tcp"));
      published.emplace("mode", Text("host"));
      ports.push_back(Value(std::move(published)));
    } else {
      ports.push_back(Text(std::to_string(port) + ":" + std::to_string(port)));
    }
  }
  gateway.emplace("ports", Value(std::move(ports)));
  gateway.emplace("healthcheck", ComposeHealthcheck(t.gateway_port, 60, !tls_files.empty()));
  if (swarm) {
    // Swarm has no start order (it ignores depends_on): the gateway comes up
    // at once and answers UNAVAILABLE until the executors' tasks are healthy
    // and their names resolve.
    Value::Dict deploy;
    deploy.emplace("replicas", Int(1));
    deploy.emplace("restart_policy", SwarmRestartPolicy());
    gateway.emplace("deploy", Value(std::move(deploy)));
  } else if (!depends_on.empty()) {
    gateway.emplace("depends_on", Value(std::move(depends_on)));
  }
  services.emplace(std::string(kGatewayName), Value(std::move(gateway)));
  Value::Dict doc;
  // 2.4 is the newest file format docker-compose 1.x knows that has both
  // `depends_on: condition: service_healthy` and healthcheck start_period;
  // 1.27+ reads `deploy:` replicas and GPU reservations in it too. `docker
  // stack deploy` reads only 3.x; 3.8 has configs with `file:`, healthcheck
  // start_period and generic resources.
  doc.emplace("version", Text(swarm ? "3.8" : "2.4"));
  doc.emplace("services", Value(std::move(services)));
  if (!named_volumes.empty()) {
    doc.emplace("volumes", Value(std::move(named_volumes)));
  }
  if (!swarm_configs.empty()) {
    doc.emplace("configs", Value(std::move(swarm_configs)));
  }
  if (!swarm_secrets.empty()) {
    doc.emplace("secrets", Value(std::move(swarm_secrets)));
  }
  GANTRY_ASSIGN_OR_RETURN(std::string text, EmitDocuments(t, {Value(std::move(doc))}));
  return std::vector<OutFile>{
      {"", std::move(text), swarm ? "stack file for docker stack deploy" : "compose file"}};
}

}  // namespace gantry::exporting
