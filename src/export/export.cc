#include <gantry/config.h>
#include <gantry/device.h>
#include <gantry/export.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <exception>
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
#include "core/limits.h"
#include "core/option_table.h"

namespace gantry {
namespace {

namespace fs = std::filesystem;

constexpr int kDefaultGatewayPort = 8080;
constexpr int kFirstExecutorPort = 8081;
constexpr std::string_view kConfigDir = "/etc/gantry";
constexpr std::string_view kGatewayName = "gateway";
// Lists what an export wrote into a folder, so that the next export may
// replace those files and nothing else.
constexpr std::string_view kMarkerFile = ".gantry-export";
// First line of every file written; a compose file without it is not ours.
constexpr std::string_view kHeader =
    "Written by `gantry export` from %s; edit the source YAML and export again.";
// Probe timing: the startup probe allows `timeout_ready` for the model to
// load; after that readiness and liveness take over.
constexpr int kProbePeriodSeconds = 5;
constexpr int kLivenessPeriodSeconds = 10;
constexpr int kProbeFailureThreshold = 3;
// A startup probe may not wait forever; `timeout_ready: -1` gets a day.
constexpr std::int64_t kMaxStartupSeconds = std::int64_t{24} * 3600;

// One executor of the exported topology.
struct Step {
  std::string name{};      // as in the YAML
  std::string dns_name{};  // the Kubernetes and compose name
  std::string key_path{};  // "with" or "executors[i]", for messages
  DeploymentOptions deployment{};
  std::vector<std::string> needs{};
  bool external = false;
  int port = 0;  // the executor's, in its container
  int gpus = 0;  // whole GPUs per replica
};

struct Topology {
  std::string source;
  bool is_flow = false;
  std::string name;  // the Flow's or the Deployment's
  int gateway_port = kDefaultGatewayPort;
  // The gateway's options (a Flow's are copied over through the option
  // table): its flags or its Flow `with:` are made from them.
  DeploymentOptions gateway{};
  std::string log_level;
  std::vector<Step> steps;
};

Status Refuse(const Topology& t, std::string_view key_path, std::string_view what) {
  return InvalidArgumentError(t.source + ": " + std::string(key_path) + ": " + std::string(what));
}

std::string HeaderFor(const Topology& t) {
  std::string header(kHeader);
  header.replace(header.find("%s"), 2, fs::path(t.source).filename().string());
  return header;
}

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

// What the containers cannot carry over is refused by name rather than
// dropped without a word.
Status CheckExportable(const Topology& t, const Step& step) {
  const DeploymentOptions& d = step.deployment;
  if (d.tls.enabled() || !d.tls.client_ca_file.empty()) {
    return Refuse(t, step.key_path + ".ssl_certfile",
                  "TLS files are not exported (terminate TLS at an Ingress or load balancer)");
  }
  if (d.monitoring || !d.monitoring_targets_file.empty()) {
    return Refuse(t, step.key_path + ".monitoring", "metrics are not exported yet");
  }
  if (!d.models.empty()) {
    return Refuse(t, step.key_path + ".models", "served model names are not exported yet");
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

// The executor type the exported config names: the Deployment's, or for a
// docker:// step the one its env gives the image (CheckExportable).
std::string ExecutorType(const Step& step) {
  const DeploymentOptions& d = step.deployment;
  return internal::IsDockerUses(d.uses) ? d.env.at("GANTRY_EXECUTOR") : d.uses;
}

// The image a step's pods run: its own for docker://IMAGE, else the GPU or
// the CPU image of the export's options.
std::string StepImage(const Step& step, const ExportOptions& options) {
  if (internal::IsDockerUses(step.deployment.uses)) {
    return std::string(internal::DockerImageOf(step.deployment.uses));
  }
  return step.gpus > 0 ? options.gpu_image : options.image;
}

// "SOURCE:TARGET[:MODE]" split up; SOURCE is absolute or a named volume.
struct VolumeParts {
  std::string source;
  std::string target;
  bool read_only = false;
};
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

StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return NotFoundError(path + ": cannot open");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The file is read and parsed once, by the loader of its `jtype`, which
// checks it whole (errors carry file:line:col and key).
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
    if (flow.monitoring) {
      return Refuse(t, "with.monitoring", "metrics are not exported yet");
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
  return t;
}

// ---- YAML out -------------------------------------------------------------

// Text that YAML would read back as something else (a number, a bool,
// null) or that starts with an indicator is quoted; args must stay strings.
bool NeedsQuotes(std::string_view text) {
  if (text.empty()) {
    return true;
  }
  char c = text.front();
  if ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == '~') {
    return true;
  }
  std::string lower;
  for (char ch : text) {
    lower += static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  }
  for (std::string_view word : {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}) {
    if (lower == word) {
      return true;
    }
  }
  return false;
}

Status Emit(YAML::Emitter& out, const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kNone:
      out << YAML::Null;
      return OkStatus();
    case Value::Kind::kText: {
      const std::string& text = *value.AsText();
      if (text.find('\n') != std::string::npos) {
        out << YAML::Literal << text;
      } else if (NeedsQuotes(text)) {
        out << YAML::DoubleQuoted << text;
      } else {
        out << text;
      }
      return OkStatus();
    }
    case Value::Kind::kInt:
      out << *value.AsInt();
      return OkStatus();
    case Value::Kind::kFloat:
      out << *value.AsFloat();
      return OkStatus();
    case Value::Kind::kBool:
      out << YAML::TrueFalseBool << *value.AsBool();
      return OkStatus();
    case Value::Kind::kList:
      out << YAML::BeginSeq;
      for (const Value& item : *value.AsList()) {
        GANTRY_RETURN_IF_ERROR(Emit(out, item));
      }
      out << YAML::EndSeq;
      return OkStatus();
    case Value::Kind::kDict:
      out << YAML::BeginMap;
      for (const auto& [key, item] : *value.AsDict()) {
        out << YAML::Key;
        if (NeedsQuotes(key)) {
          out << YAML::DoubleQuoted;
        }
        out << key << YAML::Value;
        GANTRY_RETURN_IF_ERROR(Emit(out, item));
      }
      out << YAML::EndMap;
      return OkStatus();
    default:
      return InvalidArgumentError("a " + value.DebugString() + " cannot be written as YAML");
  }
}

// One or more YAML documents, with the header comment first.
StatusOr<std::string> EmitDocuments(const Topology& t, const std::vector<Value>& docs) {
  YAML::Emitter out;
  out << YAML::Comment(HeaderFor(t));
  for (const Value& doc : docs) {
    out << YAML::BeginDoc;
    GANTRY_RETURN_IF_ERROR(Emit(out, doc));
  }
  if (!out.good()) {
    return InternalError("YAML emitter: " + out.GetLastError());
  }
  return std::string(out.c_str()) + "\n";
}

Value Text(std::string text) { return Value(std::move(text)); }
Value Int(std::int64_t n) { return Value(n); }
Value List(std::initializer_list<Value> items) { return Value(Value::List(items)); }

// The executor's own file: what `gantry executor --uses` reads.
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
      batching.emplace(endpoint, Value(std::move(one)));
    }
    doc.emplace("dynamic_batching", Value(std::move(batching)));
  }
  return Value(std::move(doc));
}

// The gRPC target through which the gateway reaches a step's replicas.
std::string StepAddress(const Step& step, std::string_view host) {
  return "dns:///" + std::string(host) + ":" + std::to_string(step.port);
}

// The Flow the exported gateway runs: the same graph, every step external.
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
                      Text(std::to_string(step.deployment.max_message_bytes))};
  std::string level = !step.deployment.log_level.empty() ? step.deployment.log_level : t.log_level;
  if (!level.empty()) {
    args.push_back(Text("--log-level"));
    args.push_back(Text(level));
  }
  return args;
}

Value::List GatewayArgs(const Topology& t, std::string_view replica_addresses) {
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
  // The rest of `gantry gateway`'s flags, where they differ from the
  // defaults. The port is the exported one; TLS files are refused
  // (CheckExportable).
  const DeploymentOptions defaults;
  for (const internal::OptionRow& row : internal::OptionTable()) {
    if (!row.gateway_flag || row.key == "port" || !row.flag_group.empty()) {
      continue;
    }
    internal::OptionValue value = row.deployment.get(t.gateway);
    if (value != row.deployment.get(defaults)) {
      args.push_back(Text(std::string(row.flag)));
      args.push_back(Text(internal::OptionText(value)));
    }
  }
  return args;
}

// The executor's environment, less what the container runtime now decides
// (GPU visibility comes from the device plugin or the nvidia runtime).
std::map<std::string, std::string> ContainerEnv(const Step& step) {
  std::map<std::string, std::string> env = step.deployment.env;
  env.erase("CUDA_VISIBLE_DEVICES");
  return env;
}

// ---- Files out -------------------------------------------------------------

struct OutFile {
  std::string name;  // inside its folder
  std::string text;
  std::string what;
};

// Makes `dir` ready for `files`: created if missing; if it exists, it may
// hold only what the last export listed in its marker, which is removed.
Status PrepareDir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) {
      return FailedPreconditionError(dir.string() + ": cannot create: " + ec.message());
    }
    return OkStatus();
  }
  if (!fs::is_directory(dir, ec)) {
    return FailedPreconditionError(dir.string() + ": exists and is not a directory");
  }
  std::set<std::string> ours;
  if (StatusOr<std::string> marker = ReadText((dir / kMarkerFile).string()); marker.ok()) {
    std::istringstream lines(*marker);
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) {
        ours.insert(line);
      }
    }
  }
  std::vector<std::string> foreign;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name != kMarkerFile && !ours.contains(name)) {
      foreign.push_back(name);
    }
  }
  if (ec) {
    return FailedPreconditionError(dir.string() + ": cannot list: " + ec.message());
  }
  if (!foreign.empty()) {
    std::sort(foreign.begin(), foreign.end());
    std::string names;
    for (std::size_t i = 0; i < foreign.size() && i < 5; ++i) {
      names += (i == 0 ? "" : ", ") + foreign[i];
    }
    if (foreign.size() > 5) {
      names += ", ...";
    }
    return FailedPreconditionError(
        dir.string() + ": exists and holds files that gantry export did not write (" + names +
        "); nothing was written: give a new or empty directory, or remove them");
  }
  for (const std::string& name : ours) {
    fs::remove(dir / name, ec);
  }
  return OkStatus();
}

Status WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    return FailedPreconditionError(path.string() + ": cannot write");
  }
  return OkStatus();
}

StatusOr<std::vector<ExportedFile>> WriteDir(const fs::path& dir,
                                             const std::vector<OutFile>& files) {
  GANTRY_RETURN_IF_ERROR(PrepareDir(dir));
  std::string marker;
  std::vector<ExportedFile> written;
  for (const OutFile& f : files) {
    GANTRY_RETURN_IF_ERROR(WriteFile(dir / f.name, f.text));
    marker += f.name + "\n";
    written.push_back({(dir / f.name).string(), f.what});
  }
  GANTRY_RETURN_IF_ERROR(WriteFile(dir / kMarkerFile, marker));
  return written;
}

// ---- Kubernetes -------------------------------------------------------------

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

Value GrpcProbe(int port, int period, int failures) {
  Value::Dict grpc;
  grpc.emplace("port", Int(port));
  Value::Dict probe;
  probe.emplace("grpc", Value(std::move(grpc)));
  probe.emplace("periodSeconds", Int(period));
  probe.emplace("timeoutSeconds", Int(5));
  probe.emplace("failureThreshold", Int(failures));
  return Value(std::move(probe));
}

Value TcpProbe(int port, int period, int failures) {
  Value::Dict tcp;
  tcp.emplace("port", Int(port));
  Value::Dict probe;
  probe.emplace("tcpSocket", Value(std::move(tcp)));
  probe.emplace("periodSeconds", Int(period));
  probe.emplace("timeoutSeconds", Int(5));
  probe.emplace("failureThreshold", Int(failures));
  return Value(std::move(probe));
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
  std::int64_t drain_ms = 0;
};

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
                    GrpcProbe(grpc_port, kProbePeriodSeconds, kProbeFailureThreshold));
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

std::int64_t StartupSeconds(const DeploymentOptions& d) {
  return std::clamp<std::int64_t>(d.timeout_ready.count() / 1000, 1, kMaxStartupSeconds);
}

std::vector<std::pair<std::string, int>> GatewayPorts(const Topology& t) {
  std::vector<std::pair<std::string, int>> ports = {{"grpc", t.gateway_port}};
  if (t.gateway.http_port >= 0) {
    ports.emplace_back("http", t.gateway.http_port);
  }
  return ports;
}

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
                 .ports = {{"grpc", step.port}},
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
  files.push_back(
      {"gateway.yml", std::move(text),
       std::string("gateway: ") + (t.is_flow ? "ConfigMap, " : "") + "Deployment, Service"});
  return files;
}

// ---- docker-compose ---------------------------------------------------------

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

}  // namespace

StatusOr<std::vector<ExportedFile>> ExportKubernetes(const std::string& config_path,
                                                     const std::string& out_dir,
                                                     const ExportOptions& options) {
  GANTRY_ASSIGN_OR_RETURN(Topology topology, LoadTopology(config_path));
  GANTRY_ASSIGN_OR_RETURN(std::vector<OutFile> files, RenderKubernetes(topology, options));
  return WriteDir(out_dir, files);
}

StatusOr<std::vector<ExportedFile>> ExportDockerCompose(const std::string& config_path,
                                                        const std::string& out_file,
                                                        const ExportOptions& options) {
  GANTRY_ASSIGN_OR_RETURN(Topology topology, LoadTopology(config_path));
  const fs::path out(out_file);
  if (out.filename().empty()) {
    return InvalidArgumentError(out_file + ": expected a file name such as compose.yml");
  }
  const std::string config_dir_name = out.stem().string() + ".gantry";
  std::vector<OutFile> configs;
  GANTRY_ASSIGN_OR_RETURN(std::vector<OutFile> compose,
                          RenderCompose(topology, options, config_dir_name, &configs));
  std::error_code ec;
  if (fs::exists(out, ec)) {
    StatusOr<std::string> existing = ReadText(out.string());
    if (!existing.ok() || !existing->starts_with("# Written by `gantry export`")) {
      return FailedPreconditionError(
          out_file +
          ": exists and was not written by gantry export; nothing was written: give "
          "a new file name, or remove it");
    }
  }
  fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  if (!fs::is_directory(parent, ec)) {
    return FailedPreconditionError(parent.string() + ": no such directory");
  }
  GANTRY_ASSIGN_OR_RETURN(std::vector<ExportedFile> written,
                          WriteDir(parent / config_dir_name, configs));
  GANTRY_RETURN_IF_ERROR(WriteFile(out, compose.front().text));
  written.insert(written.begin(), ExportedFile{out.string(), compose.front().what});
  return written;
}

}  // namespace gantry
