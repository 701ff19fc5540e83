// File: gantry/deployment.h
//
// A Deployment runs `replicas` copies of one executor, each in its own worker
// process serving gRPC on 127.0.0.1, behind a gateway that speaks Jina's
// protocol on `host:port`. It is started by the constructor and stopped by
// the destructor, in this order: the gateway stops accepting (new requests
// get UNAVAILABLE), requests in flight finish within `timeout_drain`, then
// workers get SIGTERM (they drain their own queues), SIGKILL after a grace
// period, and are always reaped. Workers also exit on their own when this
// process dies, even by SIGKILL.
//
// A replica whose process dies is started again with the same name, device
// and placement, after a delay that doubles on each restart from
// `restart_backoff_initial` up to `restart_backoff_max`; it rejoins the
// gateway's rotation once its health check passes. A replica that fails to
// start `max_init_failures` times in a row is given up: replicas() reports
// it failed and why, the error is logged, and the Deployment serves on with
// the replicas it has (a request finding none left fails with UNAVAILABLE
// naming why). A replica that is alive but stops answering its health
// checks is killed and started again the same way (`liveness_*` below).
// The first start is retried the same way when the process
// dies or hangs before it is ready; an exception from the executor's
// constructor on the first start fails the Deployment at once.
//
//   gantry::Deployment dep({.uses = "MyExec", .uses_with = {{"device", "cpu"}}, .replicas = 2});
//   if (!dep.ok()) { ... dep.status() ... }
//   gantry::StatusOr<gantry::DocList> out = dep.Post("/encode", docs, {.request_size = 32});
//
// Worker processes need the executor type: a program that defines its own
// executors calls gantry::Init(argc, argv) first thing in main() (see
// gantry/init.h) and is re-executed in worker mode; types it does not
// register are served by the `gantry-worker` program.
//
// Thread safety: safe for concurrent use (Post, Stop, Block and the accessors
// from any threads at once; a Post that overlaps Stop fails cleanly), except
// the destructor, which must not overlap any other call.
#ifndef GANTRY_DEPLOYMENT_H_
#define GANTRY_DEPLOYMENT_H_

#include <gantry/batching.h>
#include <gantry/client.h>
#include <gantry/document.h>
#include <gantry/status.h>
#include <gantry/tls.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gantry {

struct DeploymentOptions {
  // Executor type name (YAML `jtype:`), or the path of an executor YAML file
  // (ending in .yml or .yaml), or "docker://IMAGE": each replica is then a
  // container of that local image (nothing is pulled) running the executor
  // the image's GANTRY_EXECUTOR names (a type, or a YAML path in the image;
  // `env` may set it), with `uses_with` over its `with:`. Containers share
  // the host's network, get their GPUs from `gpus` through `docker run
  // --gpus`, and are removed on every exit path of this process, SIGKILL
  // included (docs/containers.md).
  std::string uses{};
  // Constructor arguments; override the YAML's `with:`.
  Value::Dict uses_with{};
  // Override the YAML's `metas:`.
  Value::Dict uses_metas{};
  // The folder relative paths in `uses_with` resolve against (the
  // executor's ExecutorContext::config_dir). The YAML loader sets it to the
  // folder of the executor file `uses` names, else of the Deployment file;
  // empty: the working directory. Not passed to container replicas.
  std::string config_dir{};
  // Deployment name: replicas log as "<name>/rep-<i>".
  std::string name = "executor";
  int replicas = 1;
  // Gateway port; 0 picks a free one (read it back with port()).
  int port = 0;
  // Gateway address to bind. Workers always bind 127.0.0.1.
  std::string host = "127.0.0.1";
  // Extra environment for every worker.
  std::map<std::string, std::string> env{};
  // Container replicas only: bind mounts and volumes, "SOURCE:TARGET[:MODE]"
  // as `docker run -v` takes them (relative SOURCE paths are made absolute
  // against the current directory; the YAML loader resolves them against
  // the file's folder). Empty for process replicas.
  std::vector<std::string> volumes{};
  // How long a replica may take to construct its executor.
  std::chrono::milliseconds timeout_ready{600000};
  // Program run for each worker. Empty: this program when it registers the
  // executor type, else $GANTRY_WORKER_PROGRAM, else `gantry-worker` next to
  // this program (or in ../bin), else on $PATH.
  std::string worker_program{};
  // Workers' log level: "debug", "info", "warning", "error".
  std::string log_level = "info";
  // Log lines of the workers (and of this process, when it has not set up
  // logging itself): "text" (Jina-style lines) or "json" (one object per
  // line with timestamp, level, role, replica and request id). Empty:
  // $GANTRY_LOG_FORMAT, else "text".
  std::string log_format{};
  // One info line per request at the gateway: request id, endpoint, status,
  // duration and size (docs/logging.md).
  bool access_log = false;
  // OpenTelemetry spans of every request from the gateway and each replica
  // (docs/tracing.md), sent over OTLP/gRPC to the collector at
  // traces_exporter_host:traces_exporter_port (Jina's names). The host may
  // start with "http://" (plain gRPC) or "https://" (TLS).
  bool tracing = false;
  std::string traces_exporter_host = "localhost";
  int traces_exporter_port = 4317;
  // HTTP/JSON gateway port next to the gRPC one: -1 for none, 0 for any free
  // port (Jina's multi-protocol gateway).
  int http_port = -1;
  // Model names for the OpenAI embeddings API on the HTTP port (POST
  // /v1/embeddings, GET /v1/models) and the KServe v2 inference protocol on
  // the gRPC port: name -> the executor endpoint that serves it. Empty: the
  // deployment's `name` serves "/encode".
  std::map<std::string, std::string> models{};
  // TLS on the gateway's gRPC and HTTP ports (gantry/tls.h); off when no
  // certificate is set. Workers stay plaintext on 127.0.0.1. Post() reaches
  // the gateway in-process then, so it needs no CA or client certificate.
  ServerTlsOptions tls{};
  // GPUs per replica: "" (not managed: the executor's `device` is used as
  // given), "0" (none: GPUs are hidden from the workers), a whole number
  // ("2"), a fraction ("0.5": two replicas share one GPU), "all" (one
  // replica sees every GPU), or a list of GPU indices or UUIDs ("0,2", or
  // "3," for one) that replicas take round-robin. Each placed replica gets
  // its own CUDA_VISIBLE_DEVICES and, unless `uses_with` names a device,
  // device "cuda:0". Jina's env CUDA_VISIBLE_DEVICES=RR[...] also works.
  // A request that the visible GPUs cannot meet fails before any worker
  // starts. GANTRY_FAKE_GPUS="name,name" stands in for the driver in tests.
  std::string gpus{};
  // Dynamic batching per endpoint ("/encode") or handler name ("Encode");
  // overrides the executor's GANTRY_DYNAMIC_BATCHING and YAML.
  std::map<std::string, DynamicBatching> uses_dynamic_batching{};
  // Cap on one request or reply message, in bytes (1 to 2^31-1), for the
  // gateway, its calls to the workers, the workers and Post()'s client. A
  // larger request is refused with RESOURCE_EXHAUSTED before it is read
  // whole. Default: 64 MiB.
  std::int64_t max_message_bytes = std::int64_t{64} << 20;
  // Requests the gateway forwards at once, over every protocol, as TEI's
  // --max-concurrent-requests: the next one is refused with
  // RESOURCE_EXHAUSTED (HTTP 429) rather than left to wait. 0: no bound of
  // its own (its byte budget and each replica's 1,024 calls still hold).
  int max_concurrent_requests = 0;
  // Inputs one OpenAI /v1/embeddings or TEI /embed, /tokenize or /rerank
  // request may carry (TEI's --max-client-batch-size), 1 to 2048; more are
  // refused (HTTP 413 for TEI, 400 for OpenAI) naming both numbers.
  int max_client_batch_size = 2048;
  // Non-empty: the gateway's data routes want this key, as gRPC metadata
  // `authorization: Bearer <key>` (else UNAUTHENTICATED) and as the HTTP
  // header `Authorization: Bearer <key>` (else 401). Health, readiness,
  // metrics and server metadata stay open (docs/security.md). The `gantry`
  // command reads $GANTRY_API_KEY when neither YAML nor --api-key sets it.
  std::string api_key{};
  // Answer CORS preflights on the HTTP port and allow any origin (Jina's
  // `cors`); off, browsers on other origins cannot read its replies.
  bool cors = false;
  // Respawning a replica whose process died: the first restart waits
  // `restart_backoff_initial`, each further one twice as long as the one
  // before, at most `restart_backoff_max` (>= initial, both >= 1 ms). The
  // doubling starts over once a replica has served for
  // `restart_backoff_max` without dying.
  std::chrono::milliseconds restart_backoff_initial{100};
  std::chrono::milliseconds restart_backoff_max{30000};
  // A replica that fails to start (its executor's constructor throws, or
  // its process dies or hangs past timeout_ready before it is ready) this
  // many times in a row is not started again (>= 1). While the Deployment
  // is built, reaching it fails the Deployment.
  int max_init_failures = 5;
  // The Deployment is ready (its constructor returns) once this many
  // replicas are; the others join the gateway's rotation as each becomes
  // ready, and a failed start of theirs is retried as a restart is (given up
  // after max_init_failures) instead of failing the Deployment. A required
  // replica's constructor error still fails it at once. 0: all replicas
  // (at most `replicas`).
  int min_ready = 0;
  // Hung replicas (alive, not answering), as Kubernetes' liveness probe
  // (periodSeconds, timeoutSeconds, failureThreshold): the gateway checks
  // each replica's gRPC health every `liveness_period`, each check bounded
  // by `liveness_timeout` (both >= 1 ms); a replica that answers none of
  // `liveness_failure_threshold` checks in a row leaves rotation, is killed
  // (SIGKILL) and is started again like one that died. Its requests in
  // flight are retried on another replica (gateway/replica_pool.h). Any
  // answer counts, so a replica busy in its handler is not hung. 0 turns
  // the checks off.
  std::chrono::milliseconds liveness_period{1000};
  std::chrono::milliseconds liveness_timeout{1000};
  int liveness_failure_threshold = 3;
  // On Stop, the destructor, or SIGINT/SIGTERM in Block(): how long requests
  // already in flight may take to finish after the gateway stops accepting
  // new ones (>= 0); whatever is left is then cancelled.
  std::chrono::milliseconds timeout_drain{10000};
  // The longest a request may take at the gateway, retries included, over
  // every protocol (Jina's `timeout_send`): past it the client gets
  // DEADLINE_EXCEEDED (HTTP 504) and the replica's call is cancelled. A
  // client's own deadline, when sooner, wins. 0: no bound of its own.
  std::chrono::milliseconds timeout_send{0};
  // Prometheus metrics (Jina's `monitoring`/`port_monitoring`, docs/metrics.md):
  // the gateway serves GET /metrics on `port_monitoring` of `host` (0: any
  // free port, read it back with monitoring_port()), and each replica on a
  // free port of 127.0.0.1 (ReplicaInfo::monitoring_port).
  bool monitoring = false;
  int port_monitoring = 0;
  // With monitoring: every scrape target (gateway and replicas, with
  // deployment, replica and role labels) written to this file in
  // Prometheus's file_sd JSON format, and rewritten when a replica restarts
  // on new ports, so that `file_sd_configs` follows them. Empty: not written.
  std::string monitoring_targets_file{};
};

struct ReplicaInfo {
  std::string name;  // "executor/rep-0"
  pid_t pid = 0;
  std::string address;  // "127.0.0.1:PORT"
  std::string device;   // "cpu", "cuda:0", ...
  // Requests the gateway forwarded to this replica and got an answer for.
  std::uint64_t requests = 0;
  // Requests forwarded to it and not yet answered, failed or cancelled.
  int in_flight = 0;
  // False while the gateway keeps it out of rotation: it failed at the
  // transport level (crashed, unreachable) and its health check has not
  // passed since.
  bool available = true;
  // The replica's CUDA_VISIBLE_DEVICES when Gantry placed it on GPUs, and
  // what the placement was ("GPU 1 (NVIDIA H100 80GB) x0.5"); else empty.
  std::string cuda_visible_devices{};
  std::string placement{};
  // Times this replica's process was started again after it died.
  int restarts = 0;
  // Its Prometheus metrics port on 127.0.0.1; -1 without monitoring.
  int monitoring_port = -1;
  // The container's name for a container replica (uses: docker://IMAGE);
  // `pid` is then its `docker run` client's. Empty for a process replica.
  std::string container{};
  // True while it is being started (a first start past min_ready, or a
  // restart) and has not reported ready yet; `available` is then false.
  bool starting = false;
  // True once the replica was given up (max_init_failures failed starts in
  // a row); `error` then says why (the last start's error). While it waits
  // to be restarted, `error` says how its process ended.
  bool failed = false;
  std::string error{};
};

class Deployment {
 public:
  // Validates `options`, starts every replica and the gateway, and waits
  // until all are ready. Failures are reported by status(); nothing keeps
  // running after a failed start.
  explicit Deployment(DeploymentOptions options);
  ~Deployment();
  Deployment(const Deployment&) = delete;
  Deployment& operator=(const Deployment&) = delete;

  const Status& status() const;
  bool ok() const { return status().ok(); }

  // The gateway's port and "host:port"; 0 and "" after a failed start.
  int port() const;
  std::string address() const;
  // The HTTP gateway's port; -1 when none was asked for.
  int http_port() const;
  // The gateway's Prometheus metrics port; -1 without monitoring.
  int monitoring_port() const;
  std::vector<ReplicaInfo> replicas() const;

  // Posts through the gateway with a Client (see gantry/client.h).
  StatusOr<DocList> Post(std::string_view endpoint, const DocList& docs,
                         const PostOptions& options = {});

  // Replaces the replicas one at a time with replicas of `options`: starts
  // a new one, waits until it is ready, puts it in rotation in the old one's
  // place, then stops the old one, which first finishes the requests it
  // holds; requests keep being served throughout (with one replica too).
  // `options` may change what replicas are made of (uses, uses_with,
  // uses_metas, env, gpus, uses_dynamic_batching, volumes, log_level,
  // timeout_ready and the restart settings); any other change (ports, TLS,
  // models, the number of replicas, ...) is refused naming the key, as are
  // options that do not validate, and the running replicas stay. A new
  // replica that fails to start stops the rollout there: replicas before it
  // run the new settings, the rest the old (the message says so). Blocks
  // until done; one at a time (a second call meanwhile is refused); Stop()
  // ends one in progress. `gantry deployment` does this on SIGHUP.
  Status RollingRestart(DeploymentOptions options);

  // Re-reads the gateway's TLS certificate, key and client CA from the
  // paths in `tls` (a certificate renewed in place), for gRPC and HTTP:
  // connections made from about a second on get them, open ones keep
  // theirs. A file that does not load is an error naming it, and the
  // certificates in use stay. `gantry deployment` does this on SIGHUP,
  // before the rolling restart. FAILED_PRECONDITION without TLS.
  Status ReloadTls();

  // Blocks until SIGINT or SIGTERM arrives or Stop() is called. After such a
  // signal, further SIGINT and SIGTERM are ignored (a line on stderr says so)
  // until this object is destroyed, so that they cannot end the process in
  // the middle of its Stop(); SIGKILL still does.
  void Block();
  // Stops the gateway (new requests get UNAVAILABLE), lets requests in
  // flight finish within `timeout_drain`, then stops every replica;
  // idempotent, and a second call waits for the first.
  void Stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry

#endif  // GANTRY_DEPLOYMENT_H_
