// Everything a worker process needs to start, passed on its command line as
// JSON so that a worker never reads the parent's YAML files.
#ifndef GANTRY_WORKER_WORKER_SPEC_H_
#define GANTRY_WORKER_WORKER_SPEC_H_

#include <gantry/batching.h>
#include <gantry/document.h>
#include <gantry/status.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/limits.h"
#include "core/worker_mode.h"  // kWorkerFlag

namespace gantry::internal {

struct WorkerSpec {
  std::string jtype;
  Value::Dict with;
  Value::Dict metas;
  // Executor name (metas.name) and this replica's runtime name.
  std::string executor_name = "executor";
  std::string runtime_name = "executor/rep-0";
  int replica_id = 0;
  int replicas = 1;
  // ExecutorContext::config_dir: where relative `with:` paths resolve.
  std::string config_dir;
  // Used when `with` has no "device" key.
  std::string device = "cpu";
  std::string host = "127.0.0.1";
  int port = 0;
  std::string log_level;
  // "text" or "json" (core/logging.h); empty: $GANTRY_LOG_FORMAT, else text.
  std::string log_format;
  // Written with the bound port once ready (for `gantry executor`).
  std::string port_file;
  // uses_dynamic_batching / YAML dynamic_batching, by endpoint or handler.
  std::map<std::string, DynamicBatching> dynamic_batching;
  // Cap on one request received or reply sent (1 to 2^31-1).
  std::int64_t max_message_bytes = kDefaultMaxMessageBytes;
  // Prometheus metrics on this port of `host`: -1 for none, 0 for any free
  // port (the worker reports it: "READY <port> <metrics port>").
  int monitoring_port = -1;
  // After this many seconds a client connection is asked to reconnect
  // (gRPC's max connection age: GOAWAY, calls in flight finish), so that a
  // gateway reaching the replicas through one DNS name resolves it again and
  // finds replicas started since. 0: never (replicas of a local Deployment).
  int max_connection_age_seconds = 0;
  // OpenTelemetry spans of each request (common/tracing.h), sent to the
  // OTLP collector at traces_exporter_host:traces_exporter_port.
  bool tracing = false;
  std::string traces_exporter_host = "localhost";
  int traces_exporter_port = 4317;
};

std::string WorkerSpecToJson(const WorkerSpec& spec);
StatusOr<WorkerSpec> WorkerSpecFromJson(std::string_view json);

// Command line for a worker: [kWorkerFlag, "--spec", json, ...extra].
std::vector<std::string> WorkerArguments(const WorkerSpec& spec);

}  // namespace gantry::internal

#endif  // GANTRY_WORKER_WORKER_SPEC_H_
