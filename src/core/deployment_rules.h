// The rules that decide what a valid deployment is, in one place: ranges of
// the numeric options, device strings, deployment names, log levels,
// environment variable names, dynamic batching values and the `gpus` spec.
// The YAML loader (core/config.cc), the Deployment (options built in C++,
// deployment/deployment.cc), its placement planner, the CLI and the worker
// all ask these functions, so a rule changes in one place.
//
// Words may differ by caller, as they did before this module existed: the
// YAML loader reports "<file>:<line>:<col>: <key.path>: expected an integer
// >= 1, got 0" (IntRule::expected), options built in C++ read "deployment
// '<name>': replicas 0 is outside 1..1024" (CheckIntOption). Both come from
// the same bounds.
//
// Thread safety: pure functions and constants, safe from any thread.
#ifndef GANTRY_CORE_DEPLOYMENT_RULES_H_
#define GANTRY_CORE_DEPLOYMENT_RULES_H_

#include <gantry/batching.h>
#include <gantry/config.h>
#include <gantry/deployment.h>
#include <gantry/document.h>
#include <gantry/status.h>
#include <gantry/tls.h>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace gantry::internal {

// An integer option's bounds and how a YAML message describes them.
struct IntRule {
  std::int64_t min;
  std::int64_t max;
  // "an integer >= 1": completes "expected ..., got 0".
  std::string_view expected;
  // False when `max` is only the C++ type's limit: messages then name the
  // minimum alone ("must be >= 1") rather than the range ("0..65535").
  bool bounded_above;
};

inline constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

// `replicas`: each is a process on this machine (or a pod, exported), and a
// typo of a few digits must not fork thousands of them.
inline constexpr IntRule kReplicasRule{1, 1024, "an integer from 1 to 1024", true};
// `port`, and `http_port` as written in YAML (-1, no HTTP, is only a default).
inline constexpr IntRule kPortRule{0, 65535, "an integer from 0 to 65535", true};
// `traces_exporter_port`: where the OTLP collector listens.
inline constexpr IntRule kTracesExporterPortRule{1, 65535, "an integer from 1 to 65535", true};
// `max_message_bytes`: gRPC takes an int.
inline constexpr IntRule kMaxMessageBytesRule{1, std::numeric_limits<std::int32_t>::max(),
                                              "a size in bytes from 1 to 2147483647 (gRPC's limit)",
                                              true};
// `max_concurrent_requests`: requests a gateway forwards at once (0: no
// bound of its own; the byte budget and each replica's 1,024 calls remain).
inline constexpr IntRule kMaxConcurrentRequestsRule{0, kIntMax, "an integer >= 0 (0: no limit)",
                                                    false};
// Inputs in one OpenAI or TEI request; 2048 is also the gateway's own
// bound on a client's list (OpenAI's limit).
inline constexpr IntRule kMaxClientBatchSizeRule{1, 2048, "an integer from 1 to 2048", true};
// `timeout_ready` in YAML, in milliseconds.
inline constexpr IntRule kTimeoutReadyRule{-1, std::numeric_limits<std::int64_t>::max(),
                                           "milliseconds >= 0, or -1 to wait forever", false};
// Respawning: restart_backoff_initial and restart_backoff_max (ms), and
// max_init_failures (failed starts in a row before a replica is given up).
inline constexpr IntRule kRestartBackoffRule{1, std::numeric_limits<std::int64_t>::max(),
                                             "milliseconds >= 1", false};
inline constexpr IntRule kMaxInitFailuresRule{1, kIntMax, "an integer >= 1", false};
// `gantry executor --max-connection-age`, in seconds (0: no limit; at most
// a day, which keeps the milliseconds gRPC takes within an int).
inline constexpr IntRule kMaxConnectionAgeRule{0, 86400, "seconds from 0 to 86400 (0: no limit)",
                                               true};
// `min_ready`: replicas the Deployment waits for (0: all; at most replicas).
inline constexpr IntRule kMinReadyRule{0, kIntMax, "an integer >= 0 (0: all replicas)", false};
// Liveness checks: liveness_period and liveness_timeout (ms), and
// liveness_failure_threshold (checks in a row; 0 turns them off).
inline constexpr IntRule kLivenessMsRule{1, std::numeric_limits<std::int64_t>::max(),
                                         "milliseconds >= 1", false};
inline constexpr IntRule kLivenessFailureThresholdRule{
    0, kIntMax, "an integer >= 0 (0: no liveness checks)", false};
// `timeout_drain` (ms): how long requests in flight may finish on shutdown.
inline constexpr IntRule kTimeoutDrainRule{0, std::numeric_limits<std::int64_t>::max(),
                                           "milliseconds >= 0", false};
// `timeout_send`: a request's whole time at the gateway (0: unbounded).
inline constexpr IntRule kTimeoutSendRule{0, std::numeric_limits<std::int64_t>::max(),
                                          "milliseconds >= 0", false};
// Dynamic batching: preferred_batch_size, timeout (ms), and the caps
// max_batch_size and max_queue_size.
inline constexpr IntRule kPreferredBatchSizeRule{1, kIntMax, "an integer >= 1", false};
inline constexpr IntRule kBatchTimeoutRule{0, kIntMax, "milliseconds >= 0", false};
inline constexpr IntRule kBatchLimitRule{0, kIntMax, "an integer >= 0 (0: no limit)", false};
inline constexpr IntRule kQueueTimeoutRule{0, kIntMax, "milliseconds >= 0 (0: no limit)", false};
// A level is a queue of its own: bounded so that YAML cannot ask for a
// million (Triton allows any number; 100 is far beyond any use seen).
inline constexpr IntRule kPriorityLevelsRule{0, 100, "an integer from 0 (none) to 100", false};
inline constexpr IntRule kDefaultPriorityLevelRule{
    0, 100, "an integer from 0 (the least urgent) to 100", false};

// Whether `value` lies within the rule's bounds.
bool InRange(const IntRule& rule, std::int64_t value);

// The YAML loader's words: "expected <rule.expected>, got <got>".
std::string ExpectedGot(const IntRule& rule, std::string_view got);

// The C++ API's and the worker's words for an option outside `rule`:
// InvalidArgument "<key> must be >= <min>, got <value>", or
// "<key> <value> is outside <min>..<max>" for a rule bounded above.
Status CheckIntOption(const IntRule& rule, std::string_view key, std::int64_t value);

// A `device` under `with:`/`uses_with:`: a string that Device::Parse takes.
// The message is the YAML loader's; other callers word a non-string their
// own way.
Status CheckDeviceValue(const Value& device);

// A log level as configuration files spell it: debug, info, warning, error.
// (Options built in C++ take whatever the logger knows,
// core/logging.h ValidateLogLevel, as they always have.)
Status CheckLogLevel(std::string_view level);

// "text" or "json" (core/logging.h).
Status CheckLogFormat(std::string_view format);

// An environment variable name in `env:`: non-empty, no '=' and no NUL.
Status CheckEnvName(std::string_view name);

// A deployment name: non-empty and without '/' (replicas are named
// "<name>/rep-<i>"). The message names the deployment itself.
Status CheckDeploymentName(std::string_view name);

// One endpoint's dynamic batching as built in C++: preferred_batch_size
// within kPreferredBatchSizeRule, timeout_ms within kBatchTimeoutRule, the
// caps within kBatchLimitRule; one message for any of them. Then the queue
// policy: queue_timeout_ms, priority_levels and default_priority_level in
// their rules, the default level no higher than priority_levels.
Status CheckDynamicBatching(const DynamicBatching& batching);

// `gpus` (DeploymentOptions::gpus), parsed: what a replica asks for.
struct GpuSpec {
  enum class Kind {
    kUnmanaged,  // "": the executor's device is used as given
    kNone,       // "0": no GPU, and none visible
    kAll,        // "all": one replica sees every GPU
    kCount,      // "2": whole GPUs per replica
    kFraction,   // "0.5": a share of one GPU
    kList,       // "0,2" / "3,": GPU indices or UUIDs, taken round-robin
  };
  Kind kind = Kind::kUnmanaged;
  // kCount, kFraction: GPUs per replica.
  double amount = 0;
  // kList: the entries, in order (core/gpu_inventory.h SplitGpuList).
  std::vector<std::string> ids;
};

// Parses `gpus`; surrounding blanks are ignored. Refuses what no machine
// could place: not a number, "all" or a list; a negative or non-finite
// number; whole GPUs and a fraction at once (1.5); a list naming no GPU.
// Messages start with "gpus=...". Whether this machine has the GPUs is the
// placement's business (deployment/placement.h), not a rule of the spec.
StatusOr<GpuSpec> ParseGpuSpec(std::string_view gpus);

// One `models` entry: a model name of 1 to 256 characters without
// whitespace, mapped to an executor endpoint ("/encode").
Status CheckServedModel(const std::string& name, const std::string& endpoint);

// A gateway's TLS files as given (not yet read): a certificate and a key,
// both or neither; a client CA only with them. Messages name the YAML keys
// (ssl_certfile, ssl_keyfile, ssl_client_cafile). Reading and checking the
// files is common/tls.h's business, at start.
Status CheckServerTlsOptions(const ServerTlsOptions& tls);

// `traces_exporter_host`: a host name or address of at most 253
// characters, optionally after "http://" or "https://", without a port,
// path, user or whitespace (the port is `traces_exporter_port`).
Status CheckTracesExporterHost(std::string_view host);

// restart_backoff_max must not be below restart_backoff_initial (each is
// checked against kRestartBackoffRule on its own). InvalidArgument
// "restart_backoff_max (<max> ms) is below restart_backoff_initial
// (<initial> ms)".
Status CheckRestartBackoff(std::int64_t initial_ms, std::int64_t max_ms);

// `uses: docker://IMAGE`: replicas are containers of IMAGE
// (deployment/container_replica.h).
inline constexpr std::string_view kDockerScheme = "docker://";
inline bool IsDockerUses(std::string_view uses) { return uses.starts_with(kDockerScheme); }
// "gantry:cpu" of "docker://gantry:cpu"; empty for other `uses`.
inline std::string_view DockerImageOf(std::string_view uses) {
  return IsDockerUses(uses) ? uses.substr(kDockerScheme.size()) : std::string_view();
}

// What a Deployment's `uses` names: a container image ("docker://IMAGE"),
// an executor YAML file (ends in .yml or .yaml; an image whose tag does so
// is still an image), or else an executor type registered by name.
enum class UsesKind { kExecutorType, kExecutorFile, kImage };
UsesKind KindOfUses(std::string_view uses);

// Joins an executor file's config to `options` (`uses: exec.yml`): its
// jtype becomes `uses`; its with, metas and dynamic_batching fill in what
// the options do not set; its folder becomes config_dir unless the
// options name one.
void MergeExecutorConfig(ExecutorConfig config, DeploymentOptions& options);

// Volumes one container replica may mount.
inline constexpr std::size_t kMaxVolumes = 64;
// A container replica's volume (`docker run -v`): "SOURCE:TARGET" or
// "SOURCE:TARGET:MODE", TARGET absolute, MODE ro/rw/z/Z; SOURCE a path or a
// named volume. At most 4096 characters.
Status CheckVolumeSpec(std::string_view volume);
// `volume` with a relative SOURCE path ("./models", "data/x") made absolute
// against `base` (the current directory when empty); a bare name
// ("cache") is a named volume and stays as it is.
std::string AbsoluteVolumeSpec(std::string_view volume, const std::string& base);

// The rules for a Deployment's own options built in C++: `uses` given,
// replicas, port, max_message_bytes, restart_backoff_initial and _max,
// max_init_failures, min_ready, liveness_*, timeout_drain, name and log level. Messages start
// with "deployment '<name>': " (or name the bad name). The YAML loader
// checks the same rules, with its own words, as it reads a file.
Status ValidateDeploymentOptions(const DeploymentOptions& options);

// The rules for what the executor gets: every uses_dynamic_batching entry
// (a non-empty key, CheckDynamicBatching) and uses_with.device. Checked
// once a `uses` YAML file's own dynamic_batching and `with:` have joined
// the options.
Status ValidateExecutorOptions(const DeploymentOptions& options);

}  // namespace gantry::internal

#endif  // GANTRY_CORE_DEPLOYMENT_RULES_H_
