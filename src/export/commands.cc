#include "export/commands.h"

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

#include "core/deployment_rules.h"
#include "core/option_table.h"
#include "export/yaml_writer.h"

namespace gantry::exporting {

namespace fs = std::filesystem;

Value ExecutorConfigDoc(const Step& step) {
  Value::Dict doc;
  doc.emplace("jtype", Text(ExecutorType(step)));
  if (!step.deployment.uses_with.empty()) {
    doc.emplace("with", Value(step.deployment.uses_with));
  }
  Value::Dict metas = step.deployment.uses_metas;
  metas.emplace("name", Text(step.name));
  doc.emplace("metas", Value(std::move(metas)));
  if (!step.deployment.uses_dynamic_batching.empty()) {
    Value::Dict batching;
    for (const auto& [endpoint, b] : step.deployment.uses_dynamic_batching) {
      Value::Dict one;
      one.emplace("preferred_batch_size", Int(b.preferred_batch_size));
      one.emplace("timeout", Int(b.timeout_ms));
      one.emplace("flush_all", Value(b.flush_all));
      one.emplace("use_dynamic_batching", Value(b.enabled));
      if (b.max_batch_size > 0) {
        one.emplace("max_batch_size", Int(b.max_batch_size));
      }
      if (b.max_queue_size > 0) {
        one.emplace("max_queue_size", Int(b.max_queue_size));
      }
      if (b.queue_timeout_ms > 0) {
        one.emplace("queue_timeout", Int(b.queue_timeout_ms));
      }
      if (b.priority_levels > 0) {
        one.emplace("priority_levels", Int(b.priority_levels));
        one.emplace("default_priority_level", Int(b.default_priority_level));
      }
      if (b.timeout_action == DynamicBatching::TimeoutAction::kDelay) {
        one.emplace("timeout_action", Text("DELAY"));
      }
      if (b.allow_timeout_override) {
        one.emplace("allow_timeout_override", Value(true));
      }
      batching.emplace(endpoint, Value(std::move(one)));
    }
    doc.emplace("dynamic_batching", Value(std::move(batching)));
  }
  return Value(std::move(doc));
}

std::string StepAddress(const Step& step, std::string_view host) {
  return "dns:///" + std::string(host) + ":" + std::to_string(step.port);
}

Value GatewayFlowDoc(const Topology& t, const std::function<std::string(const Step&)>& host_of) {
  Value::Dict with;
  with.emplace("name", Text(t.name));
  with.emplace("host", Text("0.0.0.0"));
  with.emplace("port", Int(t.gateway_port));
  // The rest of the Flow's gateway options, where they differ from the
  // defaults.
  const FlowOptions defaults;
  for (const internal::OptionRow& row : internal::OptionTable()) {
    if (!row.flow.present() || !row.deployment.present() || with.contains(std::string(row.key))) {
      continue;
    }
    internal::OptionValue value = row.deployment.get(t.gateway);
    if (value == row.flow.get(defaults)) {
      continue;
    }
    if (const auto* n = std::get_if<std::int64_t>(&value)) {
      with.emplace(row.key, Int(*n));
    } else if (const auto* b = std::get_if<bool>(&value)) {
      with.emplace(row.key, Value(*b));
    } else {
      with.emplace(row.key, Text(std::get<std::string>(value)));
    }
  }
  Value::List executors;
  for (const Step& step : t.steps) {
    Value::Dict e;
    e.emplace("name", Text(step.name));
    e.emplace("external", Value(true));
    e.emplace("host", Text(step.external ? step.deployment.host : host_of(step)));
    e.emplace("port", Int(step.external ? step.deployment.port : step.port));
    if (!step.needs.empty()) {
      Value::List needs;
      for (const std::string& need : step.needs) {
        needs.emplace_back(need);
      }
      e.emplace("needs", Value(std::move(needs)));
    }
    executors.emplace_back(std::move(e));
  }
  Value::Dict doc;
  doc.emplace("jtype", Text("Flow"));
  doc.emplace("version", Text("1"));
  doc.emplace("with", Value(std::move(with)));
  doc.emplace("executors", Value(std::move(executors)));
  return Value(std::move(doc));
}

Value::List ExecutorArgs(const Topology& t, const Step& step) {
  Value::List args = {Text("executor"),
                      Text("--uses"),
                      Text(std::string(kConfigDir) + "/executor.yml"),
                      Text("--host"),
                      Text("0.0.0.0"),
                      Text("--port"),
                      Text(std::to_string(step.port)),
                      Text("--max-message-bytes"),
                      Text(std::to_string(step.deployment.max_message_bytes)),
                      Text("--max-connection-age"),
                      Text(std::to_string(kExportedMaxConnectionAgeSeconds))};
  std::string level = !step.deployment.log_level.empty() ? step.deployment.log_level : t.log_level;
  if (!level.empty()) {
    args.push_back(Text("--log-level"));
    args.push_back(Text(level));
  }
  if (!step.deployment.log_format.empty()) {
    args.push_back(Text("--log-format"));
    args.push_back(Text(step.deployment.log_format));
  }
  if (step.deployment.monitoring) {
    args.push_back(Text("--port-monitoring"));
    args.push_back(Text(std::to_string(step.deployment.port_monitoring)));
  }
  if (step.deployment.tracing) {
    args.push_back(Text("--tracing"));
    args.push_back(Text("--traces-exporter-host"));
    args.push_back(Text(step.deployment.traces_exporter_host));
    args.push_back(Text("--traces-exporter-port"));
    args.push_back(Text(std::to_string(step.deployment.traces_exporter_port)));
  }
  return args;
}

Value::List GatewayArgs(const Topology& t, std::string_view replica_addresses,
                        std::string_view tls_dir) {
  if (t.is_flow) {
    return {Text("flow"), Text("--uses"), Text(std::string(kConfigDir) + "/flow.yml")};
  }
  Value::List args = {Text("gateway"),
                      Text("--replica-addresses"),
                      Text(std::string(replica_addresses)),
                      Text("--host"),
                      Text("0.0.0.0"),
                      Text("--port"),
                      Text(std::to_string(t.gateway_port)),
                      Text("--name"),
                      Text(t.name)};
  if (!t.gateway.log_format.empty()) {
    args.push_back(Text("--log-format"));
    args.push_back(Text(t.gateway.log_format));
  }
  for (const auto& [model, endpoint] : t.gateway.models) {
    args.push_back(Text("--model"));
    args.push_back(Text(model + "=" + endpoint));
  }
  for (const TlsFile& file : GatewayTlsFiles(t)) {
    args.push_back(Text(std::string(file.flag)));
    args.push_back(Text(std::string(tls_dir) + "/" + file.name));
  }
  // The rest of `gantry gateway`'s flags, where they differ from the
  // defaults. The port is the exported one; the TLS files' paths are the
  // container's (above).
  const DeploymentOptions defaults;
  for (const internal::OptionRow& row : internal::OptionTable()) {
    if (!row.gateway_flag || row.key == "port" || !row.flag_group.empty()) {
      continue;
    }
    internal::OptionValue value = row.deployment.get(t.gateway);
    if (value == row.deployment.get(defaults)) {
      continue;
    }
    args.push_back(Text(std::string(row.flag)));
    // A bool is a flag, present or not (--cors).
    if (row.type != internal::OptionType::kBool) {
      args.push_back(Text(internal::OptionText(value)));
    }
  }
  return args;
}

std::map<std::string, std::string> ContainerEnv(const Step& step) {
  std::map<std::string, std::string> env = step.deployment.env;
  env.erase("CUDA_VISIBLE_DEVICES");
  return env;
}

}  // namespace gantry::exporting
