#include "core/option_table.h"

#include <array>
#include <cstdint>
#include <vector>

namespace gantry::internal {
namespace {

// The conversions between an options struct's field and an OptionValue,
// by the field's type.
OptionValue ToValue(int v) { return std::int64_t{v}; }
OptionValue ToValue(std::int64_t v) { return v; }
OptionValue ToValue(bool v) { return v; }
OptionValue ToValue(const std::string& v) { return v; }
OptionValue ToValue(std::chrono::milliseconds v) {
  return std::int64_t{v >= kWaitForever ? -1 : v.count()};
}

void FromValue(const OptionValue& value, int& out) {
  out = static_cast<int>(std::get<std::int64_t>(value));
}
void FromValue(const OptionValue& value, std::int64_t& out) { out = std::get<std::int64_t>(value); }
void FromValue(const OptionValue& value, bool& out) { out = std::get<bool>(value); }
void FromValue(const OptionValue& value, std::string& out) { out = std::get<std::string>(value); }
// -1 is "forever" (timeout_ready); the rules refuse it elsewhere.
void FromValue(const OptionValue& value, std::chrono::milliseconds& out) {
  std::int64_t ms = std::get<std::int64_t>(value);
  out = ms < 0 ? kWaitForever : std::chrono::milliseconds(ms);
}

template <typename Class, typename T>
Class ClassOf(T Class::*);

// The field `Member` (&DeploymentOptions::port) as an OptionField.
template <auto Member>
constexpr OptionField<decltype(ClassOf(Member))> Field() {
  using Options = decltype(ClassOf(Member));
  return {+[](Options& options, const OptionValue& value) { FromValue(value, options.*Member); },
          +[](const Options& options) { return ToValue(options.*Member); }};
}

// The TLS files sit in a struct of their own.
template <typename Options, std::string ServerTlsOptions::*Member>
constexpr OptionField<Options> TlsField() {
  return {
      +[](Options& options, const OptionValue& value) { FromValue(value, options.tls.*Member); },
      +[](const Options& options) { return ToValue(options.tls.*Member); }};
}

using D = DeploymentOptions;
using F = FlowOptions;

const OptionRow kRows[] = {
    {.key = "uses"},
    {.key = "uses_with"},
    {.key = "uses_metas"},
    {.key = "name",
     .type = OptionType::kName,
     .deployment = Field<&D::name>(),
     .flow = Field<&F::name>()},
    {.key = "replicas",
     .type = OptionType::kInt,
     .rule = &kReplicasRule,
     .deployment = Field<&D::replicas>()},
    {.key = "port",
     .type = OptionType::kInt,
     .rule = &kPortRule,
     .flag = "--port",
     .help = "gateway port (0 = any free)",
     .deployment = Field<&D::port>(),
     .flow = Field<&F::port>(),
     .gateway_flag = true},
    // A Flow's gateway speaks gRPC (HTTP has a port of its own).
    {.key = "protocol", .flow = {}},
    {.key = "host",
     .type = OptionType::kName,
     .flag = "--host",
     .help = "address the gateway listens on (default $GANTRY_HOST, else 127.0.0.1)",
     .deployment = Field<&D::host>(),
     .flow = Field<&F::host>()},
    {.key = "env"},
    {.key = "timeout_ready",
     .type = OptionType::kMilliseconds,
     .rule = &kTimeoutReadyRule,
     .deployment = Field<&D::timeout_ready>()},
    {.key = "log_level", .type = OptionType::kLogLevel, .deployment = Field<&D::log_level>()},
    {.key = "log_format", .type = OptionType::kLogFormat, .deployment = Field<&D::log_format>()},
    {.key = "access_log",
     .type = OptionType::kBool,
     .flag = "--access-log",
     .help = "log one line per request at the gateway (request id, endpoint, status, duration)",
     .deployment = Field<&D::access_log>(),
     .flow = Field<&F::access_log>(),
     .gateway_flag = true},
    {.key = "gpus"},
    {.key = "uses_dynamic_batching"},
    // A second gateway port serving HTTP/JSON, as Jina's multi-protocol gateway.
    {.key = "http_port",
     .type = OptionType::kInt,
     .rule = &kPortRule,
     .flag = "--http-port",
     .help = "also serve HTTP/JSON on this port (0 = any free; default: no HTTP)",
     .deployment = Field<&D::http_port>(),
     .flow = Field<&F::http_port>(),
     .gateway_flag = true},
    {.key = "max_message_bytes",
     .type = OptionType::kInt,
     .rule = &kMaxMessageBytesRule,
     .flag = "--max-message-bytes",
     .help = "cap on one request or reply in bytes, 1 to 2147483647 (default 64 MiB)",
     .deployment = Field<&D::max_message_bytes>(),
     .flow = Field<&F::max_message_bytes>(),
     .gateway_flag = true},
    {.key = "max_concurrent_requests",
     .type = OptionType::kInt,
     .rule = &kMaxConcurrentRequestsRule,
     .flag = "--max-concurrent-requests",
     .help = "requests the gateway forwards at once; the next gets RESOURCE_EXHAUSTED / HTTP 429 "
             "(default 0: no bound of its own)",
     .deployment = Field<&D::max_concurrent_requests>(),
     .flow = Field<&F::max_concurrent_requests>(),
     .gateway_flag = true},
    {.key = "max_client_batch_size",
     .type = OptionType::kInt,
     .rule = &kMaxClientBatchSizeRule,
     .flag = "--max-client-batch-size",
     .help = "inputs one OpenAI or TEI request may carry, 1 to 2048 (default 2048)",
     .deployment = Field<&D::max_client_batch_size>(),
     .flow = Field<&F::max_client_batch_size>(),
     .gateway_flag = true},
    {.key = "models"},
    // Not a gateway_flag: `gantry export` would write the key into
    // manifests; an exported gateway reads $GANTRY_API_KEY instead.
    {.key = "api_key",
     .type = OptionType::kName,
     .flag = "--api-key",
     .help = "require 'Authorization: Bearer KEY' on data requests (default: $GANTRY_API_KEY, "
             "else none)",
     .deployment = Field<&D::api_key>(),
     .flow = Field<&F::api_key>()},
    {.key = "cors",
     .type = OptionType::kBool,
     .flag = "--cors",
     .help = "answer CORS preflights and allow any origin on the HTTP port",
     .deployment = Field<&D::cors>(),
     .flow = Field<&F::cors>(),
     .gateway_flag = true},
    {.key = "ssl_certfile",
     .type = OptionType::kPath,
     .flag = "--ssl-certfile",
     .help = "serve TLS with this PEM certificate chain (needs --ssl-keyfile)",
     .deployment = TlsField<D, &ServerTlsOptions::cert_file>(),
     .gateway_flag = true,
     .flag_group = "tls"},
    {.key = "ssl_keyfile",
     .type = OptionType::kPath,
     .flag = "--ssl-keyfile",
     .help = "the certificate's PEM private key",
     .deployment = TlsField<D, &ServerTlsOptions::key_file>(),
     .gateway_flag = true,
     .flag_group = "tls"},
    {.key = "ssl_client_cafile",
     .type = OptionType::kPath,
     .flag = "--ssl-client-cafile",
     .help = "require client certificates signed by these PEM CA certificates",
     .deployment = TlsField<D, &ServerTlsOptions::client_ca_file>(),
     .gateway_flag = true,
     .flag_group = "tls"},
    {.key = "restart_backoff_initial",
     .type = OptionType::kMilliseconds,
     .rule = &kRestartBackoffRule,
     .flag = "--restart-backoff-initial",
     .help = "ms before a dead replica's first restart; doubles on each further one (default 100)",
     .deployment = Field<&D::restart_backoff_initial>()},
    {.key = "restart_backoff_max",
     .type = OptionType::kMilliseconds,
     .rule = &kRestartBackoffRule,
     .flag = "--restart-backoff-max",
     .help = "longest wait before a restart, in ms (default 30000)",
     .deployment = Field<&D::restart_backoff_max>()},
    {.key = "max_init_failures",
     .type = OptionType::kInt,
     .rule = &kMaxInitFailuresRule,
     .flag = "--max-init-failures",
     .help = "failed starts in a row before a replica is given up (default 5)",
     .deployment = Field<&D::max_init_failures>()},
    {.key = "min_ready",
     .type = OptionType::kInt,
     .rule = &kMinReadyRule,
     .flag = "--min-ready",
     .help = "replicas that must be ready before the deployment serves; the rest join as they "
             "come up (default 0: all)",
     .deployment = Field<&D::min_ready>()},
    {.key = "liveness_period",
     .type = OptionType::kMilliseconds,
     .rule = &kLivenessMsRule,
     .flag = "--liveness-period",
     .help = "ms between liveness checks of each replica's health (default 1000)",
     .deployment = Field<&D::liveness_period>()},
    {.key = "liveness_timeout",
     .type = OptionType::kMilliseconds,
     .rule = &kLivenessMsRule,
     .flag = "--liveness-timeout",
     .help = "ms a liveness check may take before it counts as missed (default 1000)",
     .deployment = Field<&D::liveness_timeout>()},
    {.key = "liveness_failure_threshold",
     .type = OptionType::kInt,
     .rule = &kLivenessFailureThresholdRule,
     .flag = "--liveness-failure-threshold",
     .help = "missed liveness checks in a row before a hung replica is killed and restarted "
             "(default 3; 0: never)",
     .deployment = Field<&D::liveness_failure_threshold>()},
    {.key = "timeout_drain",
     .type = OptionType::kMilliseconds,
     .rule = &kTimeoutDrainRule,
     .flag = "--timeout-drain",
     .help = "on SIGTERM/SIGINT, ms that requests in flight may take to finish once new ones are "
             "refused (default 10000)",
     .deployment = Field<&D::timeout_drain>(),
     .flow = Field<&F::timeout_drain>(),
     .gateway_flag = true},
    {.key = "timeout_send",
     .type = OptionType::kMilliseconds,
     .rule = &kTimeoutSendRule,
     .flag = "--timeout-send",
     .help = "ms a request may take at the gateway, retries included; then DEADLINE_EXCEEDED / "
             "HTTP 504 (default 0: no bound)",
     .deployment = Field<&D::timeout_send>(),
     .flow = Field<&F::timeout_send>(),
     .gateway_flag = true},
    {.key = "monitoring",
     .type = OptionType::kBool,
     .flag = "--monitoring",
     .help = "serve Prometheus metrics at /metrics (docs/metrics.md)",
     .deployment = Field<&D::monitoring>(),
     .flow = Field<&F::monitoring>(),
     .gateway_flag = true},
    {.key = "port_monitoring",
     .type = OptionType::kInt,
     .rule = &kPortRule,
     .flag = "--port-monitoring",
     .help = "metrics port (0 = any free; implies --monitoring)",
     .deployment = Field<&D::port_monitoring>(),
     .flow = Field<&F::port_monitoring>(),
     .gateway_flag = true,
     .flag_implies = "monitoring"},
    {.key = "monitoring_targets_file",
     .type = OptionType::kPath,
     .flag = "--monitoring-targets-file",
     .help = "write every metrics endpoint here for Prometheus's file_sd_configs (implies "
             "--monitoring)",
     .deployment = Field<&D::monitoring_targets_file>(),
     .flag_implies = "monitoring"},
    {.key = "tracing",
     .type = OptionType::kBool,
     .flag = "--tracing",
     .help = "send OpenTelemetry spans of every request over OTLP/gRPC (docs/tracing.md)",
     .deployment = Field<&D::tracing>(),
     .flow = Field<&F::tracing>(),
     .gateway_flag = true},
    {.key = "traces_exporter_host",
     .type = OptionType::kName,
     .flag = "--traces-exporter-host",
     .help = "the OTLP collector's host, optionally after http:// or https:// (default localhost)",
     .deployment = Field<&D::traces_exporter_host>(),
     .flow = Field<&F::traces_exporter_host>(),
     .gateway_flag = true,
     .check = &CheckTracesExporterHost},
    {.key = "traces_exporter_port",
     .type = OptionType::kInt,
     .rule = &kTracesExporterPortRule,
     .flag = "--traces-exporter-port",
     .help = "the OTLP collector's gRPC port (default 4317)",
     .deployment = Field<&D::traces_exporter_port>(),
     .flow = Field<&F::traces_exporter_port>(),
     .gateway_flag = true},
    {.key = "volumes"},
};

// Which rows belong to a Deployment's `with:` and which to a Flow's: a
// kOwnReader row by name, the others by their fields.
constexpr std::string_view kDeploymentOwnKeys[] = {
    "uses", "uses_with", "uses_metas", "env", "gpus", "uses_dynamic_batching", "models", "volumes"};
constexpr std::string_view kFlowOwnKeys[] = {"protocol", "env"};

template <std::size_t N>
bool Contains(const std::string_view (&keys)[N], std::string_view key) {
  for (std::string_view k : keys) {
    if (k == key) {
      return true;
    }
  }
  return false;
}

std::vector<std::string_view> KeysWhere(bool (*belongs)(const OptionRow&)) {
  std::vector<std::string_view> keys;
  for (const OptionRow& row : kRows) {
    if (belongs(row)) {
      keys.push_back(row.key);
    }
  }
  return keys;
}

}  // namespace

std::span<const OptionRow> OptionTable() { return kRows; }

const OptionRow* FindOption(std::string_view key) {
  for (const OptionRow& row : kRows) {
    if (row.key == key) {
      return &row;
    }
  }
  return nullptr;
}

std::span<const std::string_view> DeploymentWithKeys() {
  static const std::vector<std::string_view> keys = KeysWhere([](const OptionRow& row) {
    return row.type == OptionType::kOwnReader ? Contains(kDeploymentOwnKeys, row.key)
                                              : row.deployment.present();
  });
  return keys;
}

std::span<const std::string_view> FlowWithKeys() {
  static const std::vector<std::string_view> keys = KeysWhere([](const OptionRow& row) {
    return row.type == OptionType::kOwnReader ? Contains(kFlowOwnKeys, row.key)
                                              : row.flow.present();
  });
  return keys;
}

DeploymentOptions DeploymentOptionsOfFlow(const FlowOptions& flow) {
  DeploymentOptions options;
  for (const OptionRow& row : kRows) {
    if (row.flow.present() && row.deployment.present()) {
      row.deployment.set(options, row.flow.get(flow));
    }
  }
  return options;
}

std::string OptionText(const OptionValue& value) {
  if (const auto* n = std::get_if<std::int64_t>(&value)) {
    return std::to_string(*n);
  }
  if (const auto* b = std::get_if<bool>(&value)) {
    return *b ? "true" : "false";
  }
  return std::get<std::string>(value);
}

}  // namespace gantry::internal
