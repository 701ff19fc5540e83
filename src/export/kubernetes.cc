#include "export/kubernetes.h"

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

// Probe timing: the startup probe allows `timeout_ready` for the model to
// load; after that readiness and liveness take over.
constexpr int kProbePeriodSeconds = 5;
constexpr int kLivenessPeriodSeconds = 10;
constexpr int kProbeFailureThreshold = 3;

struct PodShape {
  std::string name{};
  std::string_view component{};
  std::string image{};
  int replicas = 1;
  Value::List args{};
  std::map<std::string, std::string> env{};
  std::vector<std::pair<std::string, int>> ports{};  // name, port; the first is gRPC
  int gpus = 0;
  bool has_config = false;
  // The step's `volumes:`, as hostPath volumes.
  std::vector<std::string> volumes{};
  std::int64_t startup_seconds = 0;
  // The gateway stays alive while its upstreams are down or still loading
  // (its health is NOT_SERVING then): startup and liveness probes on TCP,
  // or it would be restarted for them; readiness stays on gRPC health.
  bool liveness_on_tcp = false;
  // The gateway's TLS files, from the Secret kTlsSecretName at kTlsDir; its
  // readiness probe is then on TCP too (the kubelet's gRPC probe has no
  // TLS).
  bool tls = false;
  std::int64_t drain_ms = 0;
};

// Keys stay out of manifests: the gateway mounts a Secret the user makes,
// and the export says how.
std::string TlsSecretHint(const Topology& t, const ExportOptions& options) {
  const std::vector<TlsFile> files = GatewayTlsFiles(t);
  if (files.empty()) {
    return "";
  }
  std::string command = "kubectl create secret generic " + std::string(kTlsSecretName) + " -n " +
                        options.k8s_namespace;
  for (const TlsFile& file : files) {
    command += " --from-file=" + file.name + "=" + file.source;
  }
  return "; it mounts the Secret " + std::string(kTlsSecretName) + ", not written: " + command;
}

Value::Dict Labels(const Topology& t, const std::string& name, std::string_view component) {
  Value::Dict labels;
  labels.emplace("app", Text(name));
  labels.emplace("app.kubernetes.io/name", Text(name));
  labels.emplace("app.kubernetes.io/component", Text(std::string(component)));
  // Label values are at most 63 characters of a restricted set; the
  // name is for people, so one that does not fit is left out.
  bool fits = !t.name.empty() && t.name.size() <= 63;
  for (char c : t.name) {
    fits = fits &&
           (std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.');
  }
  if (fits) {
    labels.emplace("app.kubernetes.io/part-of", Text(t.name));
  }
  return labels;
}

Value::Dict Metadata(const Topology& t, const ExportOptions& options, const std::string& name,
                     std::string_view component) {
  Value::Dict metadata;
  metadata.emplace("name", Text(name));
  metadata.emplace("namespace", Text(options.k8s_namespace));
  metadata.emplace("labels", Value(Labels(t, name, component)));
  return metadata;
}

// A probe of `kind` ("grpc": the health service; "tcpSocket": the port
// accepts) on `port`.
Value Probe(std::string_view kind, int port, int period, int failures) {
  Value::Dict target;
  target.emplace("port", Int(port));
  Value::Dict probe;
  probe.emplace(std::string(kind), Value(std::move(target)));
  probe.emplace("periodSeconds", Int(period));
  probe.emplace("timeoutSeconds", Int(5));
  probe.emplace("failureThreshold", Int(failures));
  return Value(std::move(probe));
}

Value GrpcProbe(int port, int period, int failures) {
  return Probe("grpc", port, period, failures);
}

Value TcpProbe(int port, int period, int failures) {
  return Probe("tcpSocket", port, period, failures);
}

std::vector<std::pair<std::string, int>> ExecutorPorts(const Step& step) {
  std::vector<std::pair<std::string, int>> ports = {{"grpc", step.port}};
  if (step.deployment.monitoring) {
    ports.emplace_back("metrics", step.deployment.port_monitoring);
  }
  return ports;
}

Value ContainerPort(std::string name, int port) {
  Value::Dict p;
  p.emplace("name", Text(std::move(name)));
  p.emplace("containerPort", Int(port));
  p.emplace("protocol", Text("TCP"));
  return Value(std::move(p));
}

Value ServicePort(std::string name, int port) {
  Value::Dict p;
  p.emplace("name", Text(std::move(name)));
  p.emplace("port", Int(port));
  p.emplace("targetPort", Int(port));
  p.emplace("protocol", Text("TCP"));
  return Value(std::move(p));
}

Value ConfigMapDoc(const Topology& t, const ExportOptions& options, const std::string& name,
                   std::string_view component, const std::string& key, std::string text) {
  Value::Dict data;
  data.emplace(key, Text(std::move(text)));
  Value::Dict doc;
  doc.emplace("apiVersion", Text("v1"));
  doc.emplace("kind", Text("ConfigMap"));
  doc.emplace("metadata", Value(Metadata(t, options, name + "-config", component)));
  doc.emplace("data", Value(std::move(data)));
  return Value(std::move(doc));
}

Value DeploymentDoc(const Topology& t, const ExportOptions& options, const PodShape& pod) {
  const int grpc_port = pod.ports.front().second;
  Value::Dict container;
  container.emplace("name", Text(std::string(pod.component)));
  container.emplace("image", Text(pod.image));
  container.emplace("imagePullPolicy", Text("IfNotPresent"));
  container.emplace("command", List({Text("gantry")}));
  container.emplace("args", Value(pod.args));
  if (!pod.env.empty()) {
    Value::List env;
    for (const auto& [key, value] : pod.env) {
      Value::Dict e;
      e.emplace("name", Text(key));
      e.emplace("value", Text(value));
      env.emplace_back(std::move(e));
    }
    container.emplace("env", Value(std::move(env)));
  }
  Value::List ports;
  for (const auto& [name, port] : pod.ports) {
    ports.push_back(ContainerPort(name, port));
  }
  container.emplace("ports", Value(std::move(ports)));
  std::int64_t startup_failures = std::max<std::int64_t>(
      1, (pod.startup_seconds + kProbePeriodSeconds - 1) / kProbePeriodSeconds);
  container.emplace(
      "startupProbe",
      pod.liveness_on_tcp
          ? TcpProbe(grpc_port, kProbePeriodSeconds, static_cast<int>(startup_failures))
          : GrpcProbe(grpc_port, kProbePeriodSeconds, static_cast<int>(startup_failures)));
  container.emplace("readinessProbe",
                    pod.tls ? TcpProbe(grpc_port, kProbePeriodSeconds, kProbeFailureThreshold)
                            : GrpcProbe(grpc_port, kProbePeriodSeconds, kProbeFailureThreshold));
  container.emplace("livenessProbe",
                    pod.liveness_on_tcp
                        ? TcpProbe(grpc_port, kLivenessPeriodSeconds, kProbeFailureThreshold)
                        : GrpcProbe(grpc_port, kLivenessPeriodSeconds, kProbeFailureThreshold));
  if (pod.gpus > 0) {
    Value::Dict limits;
    limits.emplace("nvidia.com/gpu", Int(pod.gpus));
    Value::Dict resources;
    resources.emplace("limits", Value(std::move(limits)));
    container.emplace("resources", Value(std::move(resources)));
  }
  Value::Dict pod_spec;
  Value::List mounts;
  Value::List volumes;
  if (pod.has_config) {
    Value::Dict mount;
    mount.emplace("name", Text("config"));
    mount.emplace("mountPath", Text(std::string(kConfigDir)));
    mount.emplace("readOnly", Value(true));
    mounts.emplace_back(std::move(mount));
    Value::Dict config_map;
    config_map.emplace("name", Text(pod.name + "-config"));
    Value::Dict volume;
    volume.emplace("name", Text("config"));
    volume.emplace("configMap", Value(std::move(config_map)));
    volumes.emplace_back(std::move(volume));
  }
  if (pod.tls) {
    Value::Dict mount;
    mount.emplace("name", Text("tls"));
    mount.emplace("mountPath", Text(std::string(kTlsDir)));
    mount.emplace("readOnly", Value(true));
    mounts.emplace_back(std::move(mount));
    Value::Dict secret;
    secret.emplace("secretName", Text(std::string(kTlsSecretName)));
    Value::Dict volume;
    volume.emplace("name", Text("tls"));
    volume.emplace("secret", Value(std::move(secret)));
    volumes.emplace_back(std::move(volume));
  }
  for (std::size_t i = 0; i < pod.volumes.size(); ++i) {
    VolumeParts parts = SplitVolume(pod.volumes[i]);
    const std::string name = "volume-" + std::to_string(i);
    Value::Dict mount;
    mount.emplace("name", Text(name));
    mount.emplace("mountPath", Text(parts.target));
    mount.emplace("readOnly", Value(parts.read_only));
    mounts.emplace_back(std::move(mount));
    Value::Dict host_path;
    host_path.emplace("path", Text(parts.source));
    Value::Dict volume;
    volume.emplace("name", Text(name));
    volume.emplace("hostPath", Value(std::move(host_path)));
    volumes.emplace_back(std::move(volume));
  }
  if (!mounts.empty()) {
    container.emplace("volumeMounts", Value(std::move(mounts)));
    pod_spec.emplace("volumes", Value(std::move(volumes)));
  }
  pod_spec.emplace("containers", List({Value(std::move(container))}));
  // Time to drain requests in flight on SIGTERM, and a margin to exit.
  pod_spec.emplace("terminationGracePeriodSeconds", Int(pod.drain_ms / 1000 + 10));

  Value::Dict match;
  match.emplace("app", Text(pod.name));
  Value::Dict selector;
  selector.emplace("matchLabels", Value(std::move(match)));
  Value::Dict template_metadata;
  template_metadata.emplace("labels", Value(Labels(t, pod.name, pod.component)));
  // The annotations Prometheus's usual Kubernetes scrape configuration
  // (and most operators' defaults) look for.
  for (const auto& [port_name, port] : pod.ports) {
    if (port_name == "metrics") {
      Value::Dict annotations;
      annotations.emplace("prometheus.io/scrape", Text("true"));
      annotations.emplace("prometheus.io/port", Text(std::to_string(port)));
      annotations.emplace("prometheus.io/path", Text("/metrics"));
      template_metadata.emplace("annotations", Value(std::move(annotations)));
    }
  }
  Value::Dict pod_template;
  pod_template.emplace("metadata", Value(std::move(template_metadata)));
  pod_template.emplace("spec", Value(std::move(pod_spec)));
  Value::Dict spec;
  spec.emplace("replicas", Int(pod.replicas));
  spec.emplace("selector", Value(std::move(selector)));
  spec.emplace("template", Value(std::move(pod_template)));
  Value::Dict doc;
  doc.emplace("apiVersion", Text("apps/v1"));
  doc.emplace("kind", Text("Deployment"));
  doc.emplace("metadata", Value(Metadata(t, options, pod.name, pod.component)));
  doc.emplace("spec", Value(std::move(spec)));
  return Value(std::move(doc));
}

Value ServiceDoc(const Topology& t, const ExportOptions& options, const PodShape& pod,
                 bool headless) {
  Value::Dict selector;
  selector.emplace("app", Text(pod.name));
  Value::List ports;
  for (const auto& [name, port] : pod.ports) {
    ports.push_back(ServicePort(name, port));
  }
  Value::Dict spec;
  if (headless) {
    // One DNS record per ready pod: the gateway's round_robin spreads over
    // them, where a ClusterIP would pin its one connection to one pod.
    spec.emplace("clusterIP", Text("None"));
  } else {
    spec.emplace("type", Text("ClusterIP"));
  }
  spec.emplace("selector", Value(std::move(selector)));
  spec.emplace("ports", Value(std::move(ports)));
  Value::Dict doc;
  doc.emplace("apiVersion", Text("v1"));
  doc.emplace("kind", Text("Service"));
  doc.emplace("metadata", Value(Metadata(t, options, pod.name, pod.component)));
  doc.emplace("spec", Value(std::move(spec)));
  return Value(std::move(doc));
}

}  // namespace

StatusOr<std::vector<OutFile>> RenderKubernetes(const Topology& t, const ExportOptions& options) {
  std::vector<OutFile> files;
  auto service_host = [&](const Step& step) {
    return step.dns_name + "." + options.k8s_namespace + ".svc";
  };
  for (const Step& step : t.steps) {
    if (step.external) {
      continue;
    }
    YAML::Emitter config;
    GANTRY_RETURN_IF_ERROR(Emit(config, ExecutorConfigDoc(step)));
    for (const std::string& volume : step.deployment.volumes) {
      if (!volume.starts_with('/')) {
        return Refuse(t, step.key_path + ".volumes",
                      "named volume \"" + volume.substr(0, volume.find(':')) +
                          "\" has no Kubernetes form here: use a path (exported as hostPath) "
                          "and give the pods a PersistentVolumeClaim by editing the manifest");
      }
    }
    PodShape pod{.name = step.dns_name,
                 .component = "executor",
                 .image = StepImage(step, options),
                 .replicas = step.deployment.replicas,
                 .args = ExecutorArgs(t, step),
                 .env = ContainerEnv(step),
                 .ports = ExecutorPorts(step),
                 .gpus = step.gpus,
                 .has_config = true,
                 .volumes = step.deployment.volumes,
                 .startup_seconds = StartupSeconds(step.deployment),
                 .drain_ms = step.deployment.timeout_drain.count()};
    GANTRY_ASSIGN_OR_RETURN(
        std::string text,
        EmitDocuments(t, {ConfigMapDoc(t, options, pod.name, pod.component, "executor.yml",
                                       std::string(config.c_str()) + "\n"),
                          DeploymentDoc(t, options, pod), ServiceDoc(t, options, pod, true)}));
    files.push_back({step.dns_name + ".yml", std::move(text),
                     "executor '" + step.name + "': ConfigMap, Deployment, headless Service"});
  }
  std::string addresses =
      t.is_flow ? "" : StepAddress(t.steps.front(), service_host(t.steps.front()));
  PodShape gateway{.name = std::string(kGatewayName),
                   .component = "gateway",
                   .image = options.image,
                   .args = GatewayArgs(t, addresses),
                   .ports = GatewayPorts(t),
                   .has_config = t.is_flow,
                   .startup_seconds = 60,
                   .liveness_on_tcp = true,
                   .tls = !GatewayTlsFiles(t).empty(),
                   .drain_ms = t.gateway.timeout_drain.count()};
  std::vector<Value> docs;
  if (t.is_flow) {
    YAML::Emitter flow;
    GANTRY_RETURN_IF_ERROR(Emit(flow, GatewayFlowDoc(t, service_host)));
    docs.push_back(ConfigMapDoc(t, options, gateway.name, gateway.component, "flow.yml",
                                std::string(flow.c_str()) + "\n"));
  }
  docs.push_back(DeploymentDoc(t, options, gateway));
  docs.push_back(ServiceDoc(t, options, gateway, false));
  GANTRY_ASSIGN_OR_RETURN(std::string text, EmitDocuments(t, docs));
  files.push_back({"gateway.yml", std::move(text),
                   std::string("gateway: ") + (t.is_flow ? "ConfigMap, " : "") +
                       "Deployment, Service" + TlsSecretHint(t, options)});
  return files;
}

}  // namespace gantry::exporting
