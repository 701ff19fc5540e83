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

Value ComposeHealthcheck(int port, std::int64_t start_seconds) {
  Value::Dict check;
  check.emplace("test", List({Text("CMD"), Text("gantry"), Text("ping"),
                              Text("127.0.0.1:" + std::to_string(port))}));
  check.emplace("interval", Text("5s"));
  check.emplace("timeout", Text("5s"));
  check.emplace("retries", Int(3));
  check.emplace("start_period", Text(std::to_string(start_seconds) + "s"));
  return Value(std::move(check));
}

Value::Dict ComposeService(const std::string& image, Value::List command) {
  Value::Dict service;
  service.emplace("image", Text(image));
  service.emplace("entrypoint", List({Text("gantry")}));
  service.emplace("command", Value(std::move(command)));
  service.emplace("restart", Text("unless-stopped"));
  return service;
}

}  // namespace

StatusOr<std::vector<OutFile>> RenderCompose(const Topology& t, const ExportOptions& options,
                                             const std::string& config_dir_name,
                                             std::vector<OutFile>* configs) {
  Value::Dict services;
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
    Value::Dict service = ComposeService(StepImage(step, options), ExecutorArgs(t, step));
    Value::List service_volumes = {Text("./" + config_dir_name + "/" + step.dns_name +
                                        ".yml:" + std::string(kConfigDir) + "/executor.yml:ro")};
    for (const std::string& volume : step.deployment.volumes) {
      service_volumes.push_back(Text(volume));
      if (!volume.starts_with('/')) {
        named_volumes.emplace(volume.substr(0, volume.find(':')), Value(Value::Dict{}));
      }
    }
    service.emplace("volumes", Value(std::move(service_volumes)));
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
    if (step.gpus > 0) {
      Value::Dict device;
      device.emplace("driver", Text("nvidia"));
      device.emplace("count", Int(step.gpus));
      device.emplace("capabilities", List({Text("gpu")}));
      Value::Dict reservations;
      reservations.emplace("devices", List({Value(std::move(device))}));
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
  Value::Dict gateway = ComposeService(options.image, GatewayArgs(t, addresses));
  if (t.is_flow) {
    YAML::Emitter flow;
    GANTRY_RETURN_IF_ERROR(Emit(flow, GatewayFlowDoc(t, service_host)));
    configs->push_back({"flow.yml", std::string(flow.c_str()) + "\n", "gateway's Flow"});
    gateway.emplace("volumes", List({Text("./" + config_dir_name + "/flow.yml:" +
                                          std::string(kConfigDir) + "/flow.yml:ro")}));
  }
  Value::List ports;
  for (const auto& [name, port] : GatewayPorts(t)) {
    ports.push_back(Text(std::to_string(port) + ":" + std::to_string(port)));
  }
  gateway.emplace("ports", Value(std::move(ports)));
  gateway.emplace("healthcheck", ComposeHealthcheck(t.gateway_port, 60));
  if (!depends_on.empty()) {
    gateway.emplace("depends_on", Value(std::move(depends_on)));
  }
  services.emplace(std::string(kGatewayName), Value(std::move(gateway)));
  Value::Dict doc;
  // 2.4 is the newest file format docker-compose 1.x knows that has both
  // `depends_on: condition: service_healthy` and healthcheck start_period;
  // 1.27+ reads `deploy:` replicas and GPU reservations in it too.
  doc.emplace("version", Text("2.4"));
  doc.emplace("services", Value(std::move(services)));
  if (!named_volumes.empty()) {
    doc.emplace("volumes", Value(std::move(named_volumes)));
  }
  GANTRY_ASSIGN_OR_RETURN(std::string text, EmitDocuments(t, {Value(std::move(doc))}));
  return std::vector<OutFile>{{"", std::move(text), "compose file"}};
}

}  // namespace gantry::exporting
