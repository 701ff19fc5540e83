// The gateway: Jina's gateway services on one gRPC port, forwarding each
// data request to one replica of a deployment. Documents are never decoded:
// requests travel as the bytes the client sent (Jina's own gateway leaves
// field 4 opaque too), so the gateway costs a few copies of pointers.
//
// Served: /jina.JinaRPC/Call (bidi; up to `prefetch` requests in flight per
// stream, replies as they complete unless the client sent metadata
// `__results_in_order__: true`), /jina.JinaSingleDataRequestRPC/
// process_single_data (unary; trailing `is-error: true` on executor errors),
// /jina.JinaGatewayDryRunRPC/dry_run, /jina.JinaInfoRPC/_status,
// grpc.health.v1.Health and v1alpha server reflection listing all of these
// (so that grpcurl can list, describe and call them). With `http_port` set,
// an HTTP/JSON gateway (gateway/http_gateway.h) forwards on the same path.
//
// Replica choice: the replica with the fewest requests in flight, ties broken
// round-robin. A request that fails with UNAVAILABLE, DEADLINE_EXCEEDED or
// NOT_FOUND is retried on the next replica, max(3, replicas) + 1 tries in
// all (Jina's rule).
//
// Thread safety: safe for concurrent use.
#ifndef GANTRY_GATEWAY_GATEWAY_H_
#define GANTRY_GATEWAY_GATEWAY_H_

#include <gantry/status.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/limits.h"

namespace gantry::internal {

struct GatewayOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  // The deployment's name, for error messages ("executor").
  std::string deployment_name = "executor";
  // One "host:port" per replica, and their runtime names for messages.
  std::vector<std::string> replica_addresses;
  std::vector<std::string> replica_names;
  // Default requests in flight per Call stream (`__prefetch__` overrides).
  int prefetch = 1000;
  // Deadline for one forwarded request; zero means none (Jina's timeout_send).
  std::chrono::milliseconds timeout_send{0};
  // Cap on one request or reply message, to clients and to workers.
  std::int64_t max_message_bytes = kDefaultMaxMessageBytes;
  // HTTP/JSON port next to the gRPC one: -1 for none, 0 for any free port.
  int http_port = -1;
};

class Gateway {
 public:
  static StatusOr<std::unique_ptr<Gateway>> Start(GatewayOptions options);
  ~Gateway();

  int port() const;
  // The HTTP port, or -1 when the gateway serves no HTTP.
  int http_port() const;
  // Requests each replica answered (errors from the executor included).
  std::vector<std::uint64_t> ReplicaRequestCounts() const;
  // Stops accepting calls, waits up to `grace` for those in flight.
  void Shutdown(std::chrono::milliseconds grace);

  class Impl;

 private:
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_GATEWAY_H_
