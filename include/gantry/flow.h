// File: gantry/flow.h
//
// A Flow runs several executors as a pipeline or a DAG behind one gateway,
// as Jina's Flow does. Each step is a Deployment of its own (its replicas,
// device, GPUs and batching as in gantry/deployment.h), listening on
// 127.0.0.1; the Flow's gateway speaks Jina's protocol on `host:port` and
// passes each request from step to step itself, so the client sends one
// request and gets the last steps' answer.
//
// A step marked `external` is not started: the Flow's gateway calls the
// address it names (see FlowStep::external).
//
// Steps run in the order given unless `needs` says otherwise: a step with
// no `needs` takes the previous step's output (the client's request for the
// first step); `needs: {"gateway"}` takes the client's request; a step with
// several needs waits for all of them and gets their documents merged by id
// (docarray's update, as Jina does; see docs/flow.md for how tags,
// embeddings and lists merge). The steps that no other step needs are the
// Flow's ends; their outputs, merged the same way, are the reply.
//
// Started by the constructor (every step's options and the graph are
// checked before any process starts: a cycle, an unknown need or a
// duplicate name is InvalidArgument naming the step), stopped by the
// destructor or Stop(): the gateway stops accepting, requests in flight
// finish within `timeout_drain`, then each step's Deployment stops.
//
//   gantry::Flow flow({.executors = {{.deployment = {.uses = "Tokenizer", .name = "tok"}},
//                                    {.deployment = {.uses = "Encoder", .name = "enc"}}}});
//   if (!flow.ok()) { ... flow.status() ... }
//   gantry::StatusOr<gantry::DocList> out = flow.Post("/encode", docs);
//
// Thread safety: safe for concurrent use (Post, Stop, Block and the accessors
// from any threads at once), except the destructor, which must not overlap
// any other call.
#ifndef GANTRY_FLOW_H_
#define GANTRY_FLOW_H_

#include <gantry/client.h>
#include <gantry/deployment.h>
#include <gantry/document.h>
#include <gantry/status.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gantry {

struct FlowStep {
  // The step's Deployment; its `name` is the step's name (unique in the
  // Flow, not "gateway"). Its host is always 127.0.0.1; `port` 0 (the
  // default) picks a free one.
  DeploymentOptions deployment{};
  // Names of the steps whose output this step takes, or "gateway" for the
  // client's request. Empty: the previous step (the gateway for the first).
  std::vector<std::string> needs{};
  // Jina's `external: true`: the step already runs elsewhere, at
  // `deployment.host`:`deployment.port` (executor workers or a gateway that
  // serve Jina's process_single_data), and the Flow starts nothing for it;
  // the rest of `deployment` is not used. A name that resolves to several
  // addresses (a headless Kubernetes Service, a scaled compose service) is
  // spread over with gRPC's round_robin. replicas() of such a step is empty.
  bool external = false;
};

struct FlowOptions {
  // For messages and logs.
  std::string name = "flow";
  std::vector<FlowStep> executors{};
  // The Flow gateway's port; 0 picks a free one (read it back with port()).
  int port = 0;
  std::string host = "127.0.0.1";
  // HTTP/JSON gateway port next to the gRPC one: -1 for none, 0 for any.
  int http_port = -1;
  // Cap on one request or reply at the Flow's gateway and Post()'s client.
  std::int64_t max_message_bytes = std::int64_t{64} << 20;
  // Requests the Flow's gateway forwards at once (see DeploymentOptions);
  // 0: no bound of its own.
  int max_concurrent_requests = 0;
  // Inputs one OpenAI or TEI request may carry (see DeploymentOptions).
  int max_client_batch_size = 2048;
  // The gateway's API key and CORS, as DeploymentOptions has them.
  // A request's whole time at the gateway, as DeploymentOptions has it.
  std::chrono::milliseconds timeout_send{0};
  std::string api_key{};
  bool cors = false;
  // One info line per request at the Flow's gateway (see DeploymentOptions).
  bool access_log = false;
  // On Stop: how long requests in flight may take to finish (>= 0).
  std::chrono::milliseconds timeout_drain{10000};
  // Prometheus metrics (docs/metrics.md), as Jina's Flow-level
  // `monitoring`/`port_monitoring`: the Flow's gateway on `port_monitoring`
  // (0: any free port, see monitoring_port()), and every step's gateway and
  // replicas as if each step had `monitoring: true`.
  bool monitoring = false;
  int port_monitoring = 0;
  // OpenTelemetry spans (docs/tracing.md) of the Flow's gateway and of
  // every step's replicas, all sent to one collector (see
  // DeploymentOptions).
  bool tracing = false;
  std::string traces_exporter_host = "localhost";
  int traces_exporter_port = 4317;
};

class Flow {
 public:
  // Validates `options`, starts every step (in order) and the gateway, and
  // waits until all are ready. Failures are reported by status(); nothing
  // keeps running after a failed start.
  explicit Flow(FlowOptions options);
  ~Flow();
  Flow(const Flow&) = delete;
  Flow& operator=(const Flow&) = delete;

  const Status& status() const;
  bool ok() const { return status().ok(); }

  // The gateway's port and "host:port"; 0 and "" after a failed start.
  int port() const;
  std::string address() const;
  // The HTTP gateway's port; -1 when none was asked for.
  int http_port() const;
  // The Flow gateway's metrics port; -1 without monitoring. Each step's
  // own are in its replicas() and its Deployment's metrics port.
  int monitoring_port() const;
  // The step names, in the order they were given.
  std::vector<std::string> steps() const;
  // The replicas of step `step`; empty for an unknown name.
  std::vector<ReplicaInfo> replicas(std::string_view step) const;

  // Posts through the gateway with a Client (see gantry/client.h).
  StatusOr<DocList> Post(std::string_view endpoint, const DocList& docs,
                         const PostOptions& options = {});

  // Rolls every local step's replicas over to `options` one step after the
  // other, each as Deployment::RollingRestart does (one replica at a time,
  // no request lost). The Flow's own `with:` and its steps (names, needs,
  // where external ones are) must stay as they are; a step's own settings
  // follow Deployment::RollingRestart's rules. A refusal names the step and
  // key. `gantry flow` does this on SIGHUP.
  Status RollingRestart(FlowOptions options);

  // Blocks until SIGINT or SIGTERM arrives or Stop() is called. After such a
  // signal, further SIGINT and SIGTERM are ignored (a line on stderr says so)
  // until this object is destroyed, so that they cannot end the process in
  // the middle of its Stop(); SIGKILL still does.
  void Block();
  // Stops the gateway, lets requests in flight finish within
  // `timeout_drain`, then stops every step; idempotent.
  void Stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry

#endif  // GANTRY_FLOW_H_
