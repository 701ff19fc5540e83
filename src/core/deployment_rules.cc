#include "core/deployment_rules.h"

#include <gantry/device.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <utility>

#include "core/gpu_inventory.h"
#include "core/logging.h"

namespace gantry::internal {

UsesKind KindOfUses(std::string_view uses) {
  if (IsDockerUses(uses)) {
    return UsesKind::kImage;
  }
  if (uses.ends_with(".yml") || uses.ends_with(".yaml")) {
    return UsesKind::kExecutorFile;
  }
  return UsesKind::kExecutorType;
}

void MergeExecutorConfig(ExecutorConfig config, DeploymentOptions& options) {
  options.uses = std::move(config.jtype);
  if (options.config_dir.empty()) {
    options.config_dir = std::move(config.config_dir);
  }
  // std::map::merge keeps the options' own entries where both have a key.
  options.uses_with.merge(config.with);
  options.uses_metas.merge(config.metas);
  options.uses_dynamic_batching.merge(config.dynamic_batching);
}
namespace {

std::string Quote(std::string_view text) { return "\"" + std::string(text) + "\""; }

}  // namespace

bool InRange(const IntRule& rule, std::int64_t value) {
  return value >= rule.min && value <= rule.max;
}

std::string ExpectedGot(const IntRule& rule, std::string_view got) {
  return "expected " + std::string(rule.expected) + ", got " + std::string(got);
}

Status CheckIntOption(const IntRule& rule, std::string_view key, std::int64_t value) {
  if (InRange(rule, value)) {
    return OkStatus();
  }
  if (!rule.bounded_above) {
    return InvalidArgumentError(std::string(key) + " must be >= " + std::to_string(rule.min) +
                                ", got " + std::to_string(value));
  }
  return InvalidArgumentError(std::string(key) + " " + std::to_string(value) + " is outside " +
                              std::to_string(rule.min) + ".." + std::to_string(rule.max));
}

Status CheckDeviceValue(const Value& device) {
  const std::string* text = device.AsText();
  if (text == nullptr) {
    return InvalidArgumentError(
        "expected a device string (\"cpu\", \"cuda\", \"cuda:N\" or \"auto\"), got " +
        device.DebugString());
  }
  return Device::Parse(*text).status();
}

Status CheckLogLevel(std::string_view level) {
  for (std::string_view known : {"debug", "info", "warning", "error"}) {
    if (level == known) {
      return OkStatus();
    }
  }
  return InvalidArgumentError("expected one of debug, info, warning, error; got " + Quote(level));
}

Status CheckLogFormat(std::string_view format) {
  if (format == "text" || format == "json") {
    return OkStatus();
  }
  return InvalidArgumentError("expected text or json; got " + Quote(format));
}

Status CheckEnvName(std::string_view name) {
  if (name.empty() || name.find('=') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos) {
    return InvalidArgumentError("not a valid environment variable name (empty, or has '=')");
  }
  return OkStatus();
}

Status CheckDeploymentName(std::string_view name) {
  if (name.empty() || name.find('/') != std::string_view::npos) {
    return InvalidArgumentError("deployment name '" + std::string(name) +
                                "' must be non-empty and contain no '/'");
  }
  return OkStatus();
}

Status CheckDynamicBatching(const DynamicBatching& batching) {
  if (!InRange(kPreferredBatchSizeRule, batching.preferred_batch_size) ||
      !InRange(kBatchTimeoutRule, batching.timeout_ms) ||
      !InRange(kBatchLimitRule, batching.max_batch_size) ||
      !InRange(kBatchLimitRule, batching.max_queue_size)) {
    return InvalidArgumentError(
        "preferred_batch_size must be >= 1 and timeout_ms, max_batch_size, max_queue_size >= 0");
  }
  if (!InRange(kQueueTimeoutRule, batching.queue_timeout_ms)) {
    return InvalidArgumentError("queue_timeout must be " + std::string(kQueueTimeoutRule.expected) +
                                ", got " + std::to_string(batching.queue_timeout_ms));
  }
  if (!InRange(kPriorityLevelsRule, batching.priority_levels)) {
    return InvalidArgumentError("priority_levels must be " +
                                std::string(kPriorityLevelsRule.expected) + ", got " +
                                std::to_string(batching.priority_levels));
  }
  if (!InRange(kDefaultPriorityLevelRule, batching.default_priority_level) ||
      batching.default_priority_level > batching.priority_levels) {
    return InvalidArgumentError(
        "default_priority_level must be from 0 (the least urgent) to priority_levels (" +
        std::to_string(batching.priority_levels) + "), got " +
        std::to_string(batching.default_priority_level));
  }
  return OkStatus();
}

StatusOr<GpuSpec> ParseGpuSpec(std::string_view text) {
  const std::string gpus(TrimBlanks(text));
  GpuSpec spec;
  if (gpus.empty()) {
    return spec;
  }
  if (gpus == "all") {
    spec.kind = GpuSpec::Kind::kAll;
    return spec;
  }
  if (gpus.find(',') != std::string::npos) {
    spec.kind = GpuSpec::Kind::kList;
    spec.ids = SplitGpuList(gpus);
    if (spec.ids.empty()) {
      return InvalidArgumentError("gpus=\"" + gpus + "\" lists no GPU");
    }
    return spec;
  }
  double amount = 0;
  auto [end, ec] = std::from_chars(gpus.data(), gpus.data() + gpus.size(), amount);
  if (ec != std::errc() || end != gpus.data() + gpus.size() || !std::isfinite(amount) ||
      amount < 0) {
    return InvalidArgumentError("gpus=\"" + gpus +
                                "\": expected a number of GPUs per replica (1, 0.5), \"all\", "
                                "or a list of GPU indices or UUIDs (\"0,2\", \"3,\")");
  }
  spec.amount = amount;
  if (amount == 0) {
    spec.kind = GpuSpec::Kind::kNone;
  } else if (amount < 1) {
    spec.kind = GpuSpec::Kind::kFraction;
  } else if (amount != std::floor(amount)) {
    return InvalidArgumentError("gpus=" + gpus +
                                ": a replica takes whole GPUs or a fraction below 1, not both");
  } else {
    spec.kind = GpuSpec::Kind::kCount;
  }
  return spec;
}

Status CheckServedModel(const std::string& name, const std::string& endpoint) {
  if (name.empty() || name.size() > 256 || name.find_first_of(" \t\r\n") != std::string::npos) {
    return InvalidArgumentError("model name '" + name +
                                "' must be 1 to 256 characters without whitespace");
  }
  if (endpoint.size() < 2 || endpoint.front() != '/' || endpoint.size() > 256) {
    return InvalidArgumentError("model '" + name + "' maps to endpoint '" + endpoint +
                                "'; expected an executor endpoint such as /encode");
  }
  return OkStatus();
}

Status CheckServerTlsOptions(const ServerTlsOptions& tls) {
  if (tls.cert_file.empty() && tls.key_file.empty()) {
    if (!tls.client_ca_file.empty()) {
      return InvalidArgumentError(
          "ssl_client_cafile needs TLS: set ssl_certfile and ssl_keyfile too");
    }
    return OkStatus();
  }
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return InvalidArgumentError(
        "TLS needs both a certificate (ssl_certfile) and its private key (ssl_keyfile); got " +
        std::string(tls.cert_file.empty() ? "only ssl_keyfile" : "only ssl_certfile"));
  }
  return OkStatus();
}

Status CheckRestartBackoff(std::int64_t initial_ms, std::int64_t max_ms) {
  if (max_ms < initial_ms) {
    return InvalidArgumentError("restart_backoff_max (" + std::to_string(max_ms) +
                                " ms) is below restart_backoff_initial (" +
                                std::to_string(initial_ms) + " ms)");
  }
  return OkStatus();
}

Status CheckTracesExporterHost(std::string_view host) {
  const std::string quoted = "'" + std::string(host.substr(0, 200)) + "'";
  for (std::string_view scheme : {std::string_view("http://"), std::string_view("https://")}) {
    if (host.starts_with(scheme)) {
      host.remove_prefix(scheme.size());
    }
  }
  if (host.empty() || host.size() > 253) {
    return InvalidArgumentError(quoted + " is not a host name or address");
  }
  for (char c : host) {
    const bool printable = c > ' ' && c < 127;
    if (!printable || c == '/' || c == '?' || c == '#' || c == '@') {
      return InvalidArgumentError(quoted +
                                  " is not a host name or address (give the port as "
                                  "traces_exporter_port; no path, user or spaces)");
    }
  }
  // "host:port" is refused; a bare IPv6 address ("::1") or one in brackets is not.
  if (const auto colon = host.find(':');
      colon != std::string_view::npos && host.find(':', colon + 1) == std::string_view::npos) {
    return InvalidArgumentError(quoted +
                                " has a port: give the host alone and the port as "
                                "traces_exporter_port");
  }
  return OkStatus();
}

Status ValidateDeploymentOptions(const DeploymentOptions& options) {
  const std::string where = "deployment '" + options.name + "'";
  if (options.uses.empty()) {
    return InvalidArgumentError(where + ": `uses` is empty; name an executor type or a YAML file");
  }
  const std::string prefix = where + ": ";
  for (const Status& s :
       {CheckIntOption(kReplicasRule, "replicas", options.replicas),
        CheckIntOption(kPortRule, "port", options.port),
        CheckIntOption(kPortRule, "port_monitoring", options.port_monitoring),
        CheckIntOption(kMaxMessageBytesRule, "max_message_bytes", options.max_message_bytes),
        CheckIntOption(kMaxConcurrentRequestsRule, "max_concurrent_requests",
                       options.max_concurrent_requests),
        CheckIntOption(kRestartBackoffRule, "restart_backoff_initial",
                       options.restart_backoff_initial.count()),
        CheckIntOption(kRestartBackoffRule, "restart_backoff_max",
                       options.restart_backoff_max.count()),
        CheckRestartBackoff(options.restart_backoff_initial.count(),
                            options.restart_backoff_max.count()),
        CheckIntOption(kMaxInitFailuresRule, "max_init_failures", options.max_init_failures),
        CheckIntOption(kMinReadyRule, "min_ready", options.min_ready),
        CheckIntOption(kLivenessMsRule, "liveness_period", options.liveness_period.count()),
        CheckIntOption(kLivenessMsRule, "liveness_timeout", options.liveness_timeout.count()),
        CheckIntOption(kLivenessFailureThresholdRule, "liveness_failure_threshold",
                       options.liveness_failure_threshold),
        CheckIntOption(kTimeoutDrainRule, "timeout_drain", options.timeout_drain.count()),
        CheckIntOption(kTimeoutSendRule, "timeout_send", options.timeout_send.count()),
        CheckIntOption(kTracesExporterPortRule, "traces_exporter_port",
                       options.traces_exporter_port)}) {
    if (!s.ok()) {
      return InvalidArgumentError(prefix + s.message());
    }
  }
  // Fixed ports must differ: the second server could not listen (or, before
  // gRPC's SO_REUSEPORT was turned off, would share the first's clients).
  const std::pair<const char*, int> ports[] = {
      {"port", options.port},
      {"http_port", options.http_port},
      {"port_monitoring", options.monitoring ? options.port_monitoring : 0}};
  for (std::size_t i = 0; i < std::size(ports); ++i) {
    for (std::size_t j = i + 1; j < std::size(ports); ++j) {
      if (ports[i].second > 0 && ports[i].second == ports[j].second) {
        return InvalidArgumentError(prefix + ports[i].first + " and " + ports[j].first +
                                    " are both " + std::to_string(ports[i].second) +
                                    "; each server needs a port of its own");
      }
    }
  }
  if (options.min_ready > options.replicas) {
    return InvalidArgumentError(prefix + "min_ready " + std::to_string(options.min_ready) +
                                " is more than replicas (" + std::to_string(options.replicas) +
                                ")");
  }
  GANTRY_RETURN_IF_ERROR(CheckDeploymentName(options.name));
  for (const auto& [name, endpoint] : options.models) {
    if (Status s = CheckServedModel(name, endpoint); !s.ok()) {
      return InvalidArgumentError(prefix + "models: " + s.message());
    }
  }
  if (Status s = CheckServerTlsOptions(options.tls); !s.ok()) {
    return InvalidArgumentError(prefix + s.message());
  }
  if (Status s = CheckTracesExporterHost(options.traces_exporter_host); !s.ok()) {
    return InvalidArgumentError(prefix + "traces_exporter_host: " + s.message());
  }
  // Any level the logger knows ("trace", "warn", "off" too), as options
  // built in C++ always could; files keep to CheckLogLevel's four.
  GANTRY_RETURN_IF_ERROR(ValidateLogLevel(options.log_level));
  if (!options.log_format.empty()) {
    if (Status s = CheckLogFormat(options.log_format); !s.ok()) {
      return InvalidArgumentError(prefix + "log_format: " + s.message());
    }
  }
  return OkStatus();
}

Status CheckVolumeSpec(std::string_view volume) {
  constexpr std::size_t kMaxVolumeSpec = 4096;
  const std::string quoted = "\"" + std::string(volume.substr(0, 200)) + "\"";
  if (volume.size() > kMaxVolumeSpec) {
    return InvalidArgumentError("volume " + quoted + "... is longer than 4096 characters");
  }
  if (volume.find('\0') != std::string_view::npos || volume.find('\n') != std::string_view::npos) {
    return InvalidArgumentError("volume " + quoted + " has a control character");
  }
  std::size_t first = volume.find(':');
  if (first == std::string_view::npos || first == 0) {
    return InvalidArgumentError("volume " + quoted +
                                ": expected SOURCE:TARGET[:MODE], e.g. ./models:/models:ro");
  }
  std::string_view rest = volume.substr(first + 1);
  std::size_t second = rest.find(':');
  std::string_view target = rest.substr(0, second);
  if (target.empty() || target.front() != '/') {
    return InvalidArgumentError("volume " + quoted + ": the container path \"" +
                                std::string(target) + "\" must be absolute");
  }
  if (second != std::string_view::npos) {
    std::string_view mode = rest.substr(second + 1);
    if (mode != "ro" && mode != "rw" && mode != "ro,z" && mode != "ro,Z" && mode != "z" &&
        mode != "Z") {
      return InvalidArgumentError("volume " + quoted + ": mode \"" + std::string(mode) +
                                  "\" is not ro, rw, z or Z");
    }
  }
  return OkStatus();
}

std::string AbsoluteVolumeSpec(std::string_view volume, const std::string& base) {
  std::size_t colon = volume.find(':');
  std::string_view source = volume.substr(0, colon);
  // A bare name ("cache") is a named volume; a path starts with '.' or '/'
  // or has a '/' in it.
  bool is_path = source.starts_with('.') || source.find('/') != std::string_view::npos;
  if (!is_path || source.starts_with('/')) {
    return std::string(volume);
  }
  std::filesystem::path absolute =
      (std::filesystem::path(base.empty() ? std::filesystem::current_path().string() : base) /
       std::string(source))
          .lexically_normal();
  std::string text = absolute.string();
  if (text.size() > 1 && text.back() == '/') {
    text.pop_back();
  }
  return text + std::string(volume.substr(colon));
}

Status ValidateExecutorOptions(const DeploymentOptions& options) {
  const std::string where = "deployment '" + options.name + "'";
  for (const auto& [key, batching] : options.uses_dynamic_batching) {
    const std::string path = where + ": uses_dynamic_batching['" + key + "']";
    if (key.empty()) {
      return InvalidArgumentError(path + ": the key must name an endpoint or a handler");
    }
    GANTRY_RETURN_IF_ERROR(CheckDynamicBatching(batching).WithPrefix(path));
  }
  if (auto it = options.uses_with.find("device"); it != options.uses_with.end()) {
    if (Status s = CheckDeviceValue(it->second); !s.ok()) {
      if (it->second.AsText() == nullptr) {
        return InvalidArgumentError(where +
                                    ": uses_with.device must be a string such as \"cuda:0\"");
      }
      return s.WithPrefix(where + ": uses_with.device");
    }
  }
  return OkStatus();
}

}  // namespace gantry::internal
