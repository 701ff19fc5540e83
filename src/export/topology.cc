#include "export/topology.h"

#include <gantry/config.h>
#include <gantry/device.h>

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

namespace gantry::exporting {

namespace fs = std::filesystem;

namespace {

// First line of every file written; a compose file without it is not ours.
constexpr std::string_view kHeader =
    "Written by `gantry export` from %s; edit the source YAML and export again.";

// Kubernetes names Services and Deployments with DNS-1035 labels; compose
// takes them too. Underscores and dots become dashes, letters lowercase.
StatusOr<std::string> DnsName(const Topology& t, const Step& step) {
  std::string out;
  for (char c : step.name) {
    if (c >= 'A' && c <= 'Z') {
      out += static_cast<char>(c - 'A' + 'a');
    } else if (c == '_' || c == '.') {
      out += '-';
    } else {
      out += c;
    }
  }
  bool ok = !out.empty() && out.size() <= 63 && out.front() >= 'a' && out.front() <= 'z' &&
            out.back() != '-';
  for (char c : out) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-');
  }
  if (!ok) {
    return Refuse(t, step.key_path + ".name",
                  "'" + step.name + "' cannot name a Kubernetes Service (as '" + out +
                      "': 1 to 63 of a-z, 0-9 and '-', starting with a letter, not ending "
                      "with '-')");
  }
  return out;
}

// GPUs per replica as a pod asks for them (whole ones); the device the
// executor is then given. Placement's `gpus` forms (deployment_rules.h).
Status ResolveGpus(const Topology& t, Step& step) {
  StatusOr<internal::GpuSpec> spec = internal::ParseGpuSpec(step.deployment.gpus);
  if (!spec.ok()) {
    return Refuse(t, step.key_path + ".gpus", spec.status().message());
  }
  using Kind = internal::GpuSpec::Kind;
  const Value* device = nullptr;
  if (auto it = step.deployment.uses_with.find("device"); it != step.deployment.uses_with.end()) {
    device = &it->second;
  }
  std::optional<Device> parsed;
  if (device != nullptr && device->AsText() != nullptr && *device->AsText() != "auto") {
    StatusOr<Device> d = Device::Parse(*device->AsText());
    if (!d.ok()) {
      return Refuse(t, step.key_path + ".uses_with.device", d.status().message());
    }
    parsed = *d;
  }
  switch (spec->kind) {
    case Kind::kNone:
      step.gpus = 0;
      break;
    case Kind::kAll:
      return Refuse(
          t, step.key_path + ".gpus",
          "\"all\" cannot be exported: a pod asks for a number of GPUs (gpus: 1, 2, ...)");
    case Kind::kCount:
      step.gpus = static_cast<int>(std::ceil(spec->amount));
      break;
    case Kind::kFraction:
    case Kind::kList:
      // A pod cannot ask for part of a GPU (sharing one needs the device
      // plugin's time-slicing, set up on the cluster), so a share gets a
      // whole one; from a list each replica took one, and which one is the
      // scheduler's choice in a cluster.
      step.gpus = 1;
      break;
    case Kind::kUnmanaged:
      step.gpus = parsed && parsed->is_cuda() ? 1 : 0;
      break;
  }
  if (step.gpus == 0) {
    if (parsed && parsed->is_cuda()) {
      return Refuse(t, step.key_path + ".uses_with.device",
                    "\"" + *device->AsText() + "\" with gpus: " + step.deployment.gpus +
                        " asks for a GPU and none; drop one of them");
    }
    return OkStatus();
  }
  if (!parsed) {
    // As placement does: a placed replica computes on its first GPU.
    step.deployment.uses_with.insert_or_assign("device", Value("cuda"));
  } else if (!parsed->is_cuda() || parsed->index() >= step.gpus) {
    return Refuse(t, step.key_path + ".uses_with.device",
                  "\"" + *device->AsText() + "\" is not among the " + std::to_string(step.gpus) +
                      " GPU(s) each pod gets (they are cuda:0 and up in the pod); use \"cuda\"");
  }
  return OkStatus();
}

constexpr std::string_view kApiKeyNotExported =
    "API keys are not written into manifests: remove it and give the exported gateway the "
    "environment variable GANTRY_API_KEY from a Kubernetes Secret or a compose secret";

// What the containers cannot carry over is refused by name rather than
// dropped without a word.
Status CheckExportable(const Topology& t, const Step& step) {
  const DeploymentOptions& d = step.deployment;
  // A Deployment's TLS is its gateway's, and goes to the exported one; a
  // Flow step's would be a server the export does not make.
  if (t.is_flow && (d.tls.enabled() || !d.tls.client_ca_file.empty())) {
    return Refuse(t, step.key_path + ".ssl_certfile",
                  "a Flow step's TLS files are not exported (only a Deployment's gateway's are)");
  }
  // The export mounts them into the gateway's container (or reads them for
  // Swarm's digests): a missing one would be a directory Docker makes.
  for (const auto& [key, path] :
       {std::pair<std::string_view, const std::string&>{"ssl_certfile", d.tls.cert_file},
        {"ssl_keyfile", d.tls.key_file},
        {"ssl_client_cafile", d.tls.client_ca_file}}) {
    if (!path.empty() && !std::ifstream(path).good()) {
      return Refuse(t, step.key_path + "." + std::string(key),
                    path + ": cannot read it (the export mounts it into the gateway's container)");
    }
  }
  if (!d.monitoring_targets_file.empty()) {
    return Refuse(t, step.key_path + ".monitoring_targets_file",
                  "a scrape-target file is not exported: Prometheus finds the exported pods by "
                  "their prometheus.io annotations (Kubernetes) or by service name (compose)");
  }
  // A key written into manifests would sit in plain text in a repository.
  if (!d.api_key.empty()) {
    return Refuse(t, step.key_path + ".api_key", kApiKeyNotExported);
  }
  // A Deployment's go to its exported gateway (--model); a Flow step has
  // no gateway of its own there.
  if (t.is_flow && !d.models.empty()) {
    return Refuse(t, step.key_path + ".models",
                  "a Flow step's served model names are not exported (only a Deployment's are)");
  }
  // A Deployment's bound goes to the exported gateway; a Flow step has no
  // gateway of its own there, so its bound would be lost.
  if (t.is_flow && d.max_concurrent_requests > 0) {
    return Refuse(t, step.key_path + ".max_concurrent_requests",
                  "a step's own bound is not exported (set it in the Flow's `with:`)");
  }
  if (internal::IsDockerUses(d.uses)) {
    // The exported pod runs `gantry executor --uses executor.yml`, whose
    // jtype must be a type: the one the Deployment would find in the image
    // is not visible from here.
    auto it = d.env.find("GANTRY_EXECUTOR");
    if (it == d.env.end() || it->second.empty() ||
        internal::KindOfUses(it->second) != internal::UsesKind::kExecutorType) {
      return Refuse(t, step.key_path + ".env.GANTRY_EXECUTOR",
                    "a docker:// executor is exported with its image, and its config must name "
                    "the executor type: set env GANTRY_EXECUTOR to a type name (e.g. "
                    "SentenceEncoder)");
    }
  }
  return OkStatus();
}

}  // namespace

Status Refuse(const Topology& t, std::string_view key_path, std::string_view what) {
  return InvalidArgumentError(t.source + ": " + std::string(key_path) + ": " + std::string(what));
}

std::vector<TlsFile> GatewayTlsFiles(const Topology& t) {
  const ServerTlsOptions& tls = t.gateway.tls;
  std::vector<TlsFile> files;
  if (!tls.enabled()) {
    return files;
  }
  // Absolute: compose takes a bind source without a leading / or . for the
  // name of a volume.
  const auto absolute = [](const std::string& path) { return fs::absolute(path).string(); };
  files.push_back({absolute(tls.cert_file), "tls.crt", "--ssl-certfile"});
  files.push_back({absolute(tls.key_file), "tls.key", "--ssl-keyfile"});
  if (!tls.client_ca_file.empty()) {
    files.push_back({absolute(tls.client_ca_file), "ca.crt", "--ssl-client-cafile"});
  }
  return files;
}

std::string HeaderFor(const Topology& t) {
  std::string header(kHeader);
  header.replace(header.find("%s"), 2, fs::path(t.source).filename().string());
  return header;
}

std::string ExecutorType(const Step& step) {
  const DeploymentOptions& d = step.deployment;
  return internal::IsDockerUses(d.uses) ? d.env.at("GANTRY_EXECUTOR") : d.uses;
}

std::string StepImage(const Step& step, const ExportOptions& options) {
  if (internal::IsDockerUses(step.deployment.uses)) {
    return std::string(internal::DockerImageOf(step.deployment.uses));
  }
  return step.gpus > 0 ? options.gpu_image : options.image;
}

VolumeParts SplitVolume(const std::string& volume) {
  VolumeParts parts;
  std::size_t first = volume.find(':');
  std::size_t second = volume.find(':', first + 1);
  parts.source = volume.substr(0, first);
  parts.target = volume.substr(
      first + 1, second == std::string::npos ? std::string::npos : second - first - 1);
  parts.read_only = second != std::string::npos && volume.substr(second + 1).starts_with("ro");
  return parts;
}

StatusOr<Topology> LoadTopology(const std::string& path) {
  GANTRY_ASSIGN_OR_RETURN(DeploymentOrFlow config, LoadDeploymentOrFlowConfig(path));
  Topology t;
  t.source = path;
  t.is_flow = std::holds_alternative<FlowOptions>(config);
  if (t.is_flow) {
    FlowOptions& flow = std::get<FlowOptions>(config);
    t.name = flow.name;
    t.gateway_port = flow.port != 0 ? flow.port : kDefaultGatewayPort;
    t.gateway = internal::DeploymentOptionsOfFlow(flow);
    if (!flow.api_key.empty()) {
      return Refuse(t, "with.api_key", kApiKeyNotExported);
    }
    for (std::size_t i = 0; i < flow.executors.size(); ++i) {
      FlowStep& s = flow.executors[i];
      t.steps.push_back(Step{.name = s.deployment.name,
                             .key_path = "executors[" + std::to_string(i) + "]",
                             .deployment = std::move(s.deployment),
                             .needs = std::move(s.needs),
                             .external = s.external});
    }
  } else {
    DeploymentOptions& deployment = std::get<DeploymentOptions>(config);
    t.name = deployment.name;
    t.gateway_port = deployment.port != 0 ? deployment.port : kDefaultGatewayPort;
    t.gateway = deployment;
    t.log_level = deployment.log_level;
    std::string name = deployment.name;
    t.steps.push_back(
        Step{.name = std::move(name), .key_path = "with", .deployment = std::move(deployment)});
  }
  // A manifest needs fixed ports: HTTP on "any free port" becomes 8000 (or
  // the next one the gRPC port leaves), as gRPC's becomes kDefaultGatewayPort.
  if (t.gateway.http_port == 0) {
    t.gateway.http_port = kDefaultExportedHttpPort;
    while (t.gateway.http_port == t.gateway_port) {
      ++t.gateway.http_port;
    }
  }
  if (t.gateway.http_port == t.gateway_port) {
    return Refuse(t, "with.http_port",
                  std::to_string(t.gateway_port) + " is also the gateway's gRPC port");
  }
  std::set<std::string> taken = {std::string(kGatewayName)};
  std::set<int> ports = {t.gateway_port, t.gateway.http_port};
  int next_port = kFirstExecutorPort;
  for (Step& step : t.steps) {
    if (step.external) {
      step.dns_name = step.name;
      continue;
    }
    GANTRY_RETURN_IF_ERROR(CheckExportable(t, step));
    GANTRY_ASSIGN_OR_RETURN(step.dns_name, DnsName(t, step));
    if (!taken.insert(step.dns_name).second) {
      return Refuse(t, step.key_path + ".name",
                    "'" + step.name + "' becomes '" + step.dns_name +
                        "', a name already taken (by another step or the gateway)");
    }
    GANTRY_RETURN_IF_ERROR(ResolveGpus(t, step));
    while (ports.contains(next_port)) {
      ++next_port;
    }
    step.port = next_port++;
    ports.insert(step.port);
  }
  // Metrics on fixed ports: the gateway's `port_monitoring` (else 9090 or
  // the next port its container leaves free), each executor's 9090 (its
  // own container; a Flow's `monitoring` turns it on for every step).
  if (t.gateway.monitoring) {
    const std::set<int> gateway_ports = {t.gateway_port, t.gateway.http_port};
    if (t.gateway.port_monitoring == 0) {
      t.gateway.port_monitoring = kMetricsPort;
      while (gateway_ports.contains(t.gateway.port_monitoring)) {
        ++t.gateway.port_monitoring;
      }
    } else if (gateway_ports.contains(t.gateway.port_monitoring)) {
      return Refuse(t, "with.port_monitoring",
                    "port " + std::to_string(t.gateway.port_monitoring) +
                        " is also the gateway's gRPC or HTTP port");
    }
  }
  for (Step& step : t.steps) {
    if (step.external || !(step.deployment.monitoring || (t.is_flow && t.gateway.monitoring))) {
      continue;
    }
    step.deployment.monitoring = true;
    step.deployment.port_monitoring = step.port == kMetricsPort ? kMetricsPort + 1 : kMetricsPort;
  }
  // A Flow's `tracing` sends every step's spans to the Flow's collector.
  for (Step& step : t.steps) {
    if (!step.external && t.is_flow && t.gateway.tracing && !step.deployment.tracing) {
      step.deployment.tracing = true;
      step.deployment.traces_exporter_host = t.gateway.traces_exporter_host;
      step.deployment.traces_exporter_port = t.gateway.traces_exporter_port;
    }
  }
  return t;
}

std::int64_t StartupSeconds(const DeploymentOptions& d) {
  return std::clamp<std::int64_t>(d.timeout_ready.count() / 1000, 1, kMaxStartupSeconds);
}

std::vector<std::pair<std::string, int>> GatewayPorts(const Topology& t) {
  std::vector<std::pair<std::string, int>> ports = {{"grpc", t.gateway_port}};
  if (t.gateway.http_port >= 0) {
    ports.emplace_back("http", t.gateway.http_port);
  }
  if (t.gateway.monitoring) {
    ports.emplace_back("metrics", t.gateway.port_monitoring);
  }
  return ports;
}

}  // namespace gantry::exporting
