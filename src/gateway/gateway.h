// The gateway: Jina's gateway services on one gRPC port, forwarding each
// data request to one replica of a deployment. Documents are never decoded:
// requests travel as the bytes the client sent (Jina's own gateway leaves
// field 4 opaque too), so the gateway costs a few copies of pointers.
//
// Served: /jina.JinaRPC/Call (bidi; up to `prefetch` requests per stream in
// flight or answered and not yet written, replies as they complete unless
// the client sent metadata
// `__results_in_order__: true`), /jina.JinaSingleDataRequestRPC/
// process_single_data (unary; trailing `is-error: true` on executor errors),
// /jina.JinaGatewayDryRunRPC/dry_run, /jina.JinaInfoRPC/_status,
// grpc.health.v1.Health and v1alpha server reflection listing all of these
// (so that grpcurl can list, describe and call them). With `http_port` set,
// an HTTP/JSON gateway (gateway/http_gateway.h) forwards on the same path.
//
// Data requests go to an Upstream (gateway/upstream.h): for a Deployment
// the gateway's own replica pool (gateway/replica_pool.h says how replicas
// are picked, retried, health-checked and restarted), for a Flow the Flow's
// router. The gateway's health answers NOT_SERVING while its upstream can
// take no request; a request then fails fast with UNAVAILABLE.
//
// Shutdown drains: new calls (and new requests on open Call streams) are
// refused with UNAVAILABLE and health answers NOT_SERVING, requests in
// flight finish and their replies are written within the grace period, then
// what is left is cancelled.
//
// Deadlines and cancellation: each worker call carries the client's
// deadline (or `timeout_send`, when sooner); a client that cancels, or whose
// Call stream fails, cancels its requests in flight on the workers.
//
// Thread safety: safe for concurrent use.
#ifndef GANTRY_GATEWAY_GATEWAY_H_
#define GANTRY_GATEWAY_GATEWAY_H_

#include <gantry/deployment.h>
#include <gantry/status.h>
#include <gantry/tensor_signature.h>
#include <gantry/tls.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/tracing.h"
#include "core/limits.h"
#include "gateway/replica_pool.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace gantry::internal {

class Upstream;

struct GatewayOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  // The deployment's name, for error messages ("executor").
  std::string deployment_name = "executor";
  // One "host:port" per replica, and their runtime names for messages.
  std::vector<std::string> replica_addresses;
  std::vector<std::string> replica_names;
  // Default requests in flight per Call stream (`__prefetch__` overrides);
  // both are bounded to [1, kMaxPrefetch].
  int prefetch = kMaxPrefetch;
  // A request's whole time at the gateway, retries included; zero means none
  // (Jina's timeout_send).
  std::chrono::milliseconds timeout_send{0};
  // Cap on one request or reply message, to clients and to workers.
  std::int64_t max_message_bytes = kDefaultMaxMessageBytes;
  // Data requests forwarded at once, from every client and protocol, until
  // each is answered; the next is refused with RESOURCE_EXHAUSTED. 0: no
  // bound of its own.
  int max_concurrent_requests = 0;
  // Inputs one OpenAI or TEI request may carry.
  int max_client_batch_size = 2048;
  // HTTP/JSON port next to the gRPC one: -1 for none, 0 for any free port.
  int http_port = -1;
  // Model names -> executor endpoints, for the OpenAI API (HTTP port) and
  // KServe v2 (gRPC port). Empty: `deployment_name` serves "/encode".
  std::map<std::string, std::string> models;
  // The executor's declared inputs and outputs, which KServe v2 reports and
  // maps tensors by (gateway/kserve.h); unset: the text-embedding signature.
  std::optional<TensorSignature> signature;
  // TLS on the gRPC and HTTP ports (gantry/tls.h); replicas stay plaintext.
  ServerTlsOptions tls{};
  // Non-empty: data requests want `authorization: Bearer <api_key>`
  // (gRPC metadata, else UNAUTHENTICATED; HTTP header, else 401).
  std::string api_key;
  // CORS on the HTTP port (Jina's `cors`).
  bool cors = false;
  // One info line per forwarded request (core/logging.h LogAccess).
  bool access_log = false;
  // OpenTelemetry spans of each request (common/tracing.h).
  TracingOptions tracing{};
  // Liveness checks of the replicas (gateway/replica_pool.h); a threshold of
  // 0 turns them off.
  std::chrono::milliseconds liveness_period{1000};
  std::chrono::milliseconds liveness_timeout{1000};
  int liveness_failure_threshold = 3;
  // How long a request waits for a replica coming back when none is in
  // rotation (gateway/replica_pool.h); zero: it fails at once. Set by a
  // Deployment, whose supervisor restarts its replicas.
  std::chrono::milliseconds hold_while_restarting{0};
  // Prometheus metrics (gateway/gateway_metrics.h) on this HTTP port of
  // `host`: -1 for none, 0 for any free port.
  int monitoring_port = -1;
  // When set, data requests go to it instead of to a pool of
  // `replica_addresses` (a Flow's router); those may then be empty.
  std::shared_ptr<Upstream> upstream;
};

// A gateway's settings as Deployment, Flow (core/option_table.h
// DeploymentOptionsOfFlow) and `gantry gateway` all derive them: listen
// address and ports, name, message cap, admission bound, TLS and metrics
// port. Replicas, models, signature and upstream are the caller's.
GatewayOptions GatewayOptionsOf(const DeploymentOptions& options);

// A client's `__prefetch__` metadata as a bound on requests in flight:
// `fallback` when it is not a decimal number, kMaxPrefetch for 0 and less
// (Jina's "no limit") and above kMaxPrefetch, else the number.
int ParsePrefetch(std::string_view text, int fallback);

class Gateway {
 public:
  static StatusOr<std::unique_ptr<Gateway>> Start(GatewayOptions options);
  ~Gateway();

  int port() const;
  // The HTTP port, or -1 when the gateway serves no HTTP.
  int http_port() const;
  // The metrics port, or -1 when the gateway exports no metrics.
  int monitoring_port() const;
  // A channel to this gateway inside the process, past TLS (for
  // Deployment::Post).
  std::shared_ptr<grpc::Channel> InProcessChannel() const;
  // One entry per replica, in the order of `replica_addresses`.
  std::vector<ReplicaState> ReplicaStates() const;
  // Stops accepting requests (UNAVAILABLE), waits up to `grace` for those
  // in flight to be answered, then cancels the rest. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);
  // Re-reads the TLS certificate, key and client CA from their paths (a
  // certificate renewed in place) for gRPC and HTTP alike: new connections
  // get them within ReloadableServerCredentials::kRefreshSeconds, open ones
  // keep theirs. On an error naming the file the old ones stay.
  // FAILED_PRECONDITION without TLS.
  Status ReloadTls();

  // From the Deployment's supervisor; `index` follows `replica_addresses`.
  // `restart_in`: when the supervisor starts it again (none: it does not
  // know yet, or will not).
  void ReplicaDown(std::size_t index, const std::string& why,
                   std::optional<std::chrono::milliseconds> restart_in = std::nullopt);
  // Its process is being started again (counted in the metrics).
  void ReplicaRestarting(std::size_t index);
  void ReplicaRestarted(std::size_t index, const std::string& address);
  void ReplicaGivenUp(std::size_t index, const std::string& why);
  // A rolling restart put a new replica, ready, at `address` in its place:
  // in rotation at once; calls in flight to the old one finish there.
  // Returns the old replica's link (ReplicaPool::ReplicaReplaced), null
  // without a pool.
  std::shared_ptr<const ReplicaLink> ReplicaReplaced(std::size_t index, const std::string& address);
  // Replicas that failed their liveness checks since the last call, each
  // once (ReplicaPool::TakeUnresponsive); empty for a Flow's gateway.
  std::vector<UnresponsiveReplica> TakeUnresponsive();

  class Impl;

 private:
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_GATEWAY_H_
