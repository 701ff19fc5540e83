// The gateway's Prometheus metrics (common/metrics_server.h serves them):
// per executor endpoint, requests that succeeded and failed (by gRPC code,
// EXECUTOR_ERROR for an error reply), their time from the gateway's view
// (retries included) and those in flight; per replica, its restarts and
// whether it was given up.
// docs/metrics.md lists every name and its Triton and Jina counterpart.
//
// The endpoint comes from the request's header, which a client writes: a
// label is kept only for printable ASCII of at most kMaxEndpointLabelBytes,
// and at most kMaxEndpointLabels of them, so a client cannot grow the
// registry (or break the exposition with bad UTF-8); the rest count under
// "(other)".
//
// Thread safety: safe for concurrent use.
#ifndef GANTRY_GATEWAY_GATEWAY_METRICS_H_
#define GANTRY_GATEWAY_GATEWAY_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace grpc {
class ByteBuffer;
}  // namespace grpc

namespace gantry::internal {

inline constexpr std::size_t kMaxEndpointLabels = 64;
inline constexpr std::size_t kMaxEndpointLabelBytes = 128;

// Header fields of a serialised jina.DataRequestProto, read without
// parsing its documents; empty when it has none or does not parse.
struct RequestHeaderFields {
  std::string exec_endpoint;
  std::string request_id;
};
RequestHeaderFields HeaderFieldsOf(const grpc::ByteBuffer& request);

// HeaderFieldsOf(request).exec_endpoint.
std::string ExecEndpointOf(const grpc::ByteBuffer& request);

class GatewayMetrics {
 private:
  struct Endpoint;

 public:
  GatewayMetrics(const std::string& deployment, const std::vector<std::string>& replica_names);
  ~GatewayMetrics();
  GatewayMetrics(const GatewayMetrics&) = delete;
  GatewayMetrics& operator=(const GatewayMetrics&) = delete;

  // One forwarded request: Begin when it arrives, End once with its result.
  class Request {
   private:
    friend class GatewayMetrics;
    Endpoint* endpoint_ = nullptr;
    std::chrono::steady_clock::time_point start_{};
  };
  Request Begin(std::string_view endpoint);
  // `code` is the gRPC status code's number (0: OK); `is_error` an OK
  // reply that carries an executor error.
  void End(const Request& request, int code, bool is_error);

  void ReplicaRestarted(std::size_t index);
  // The replica failed its liveness checks (gateway/replica_pool.h).
  void ReplicaUnresponsive(std::size_t index);
  // The replica failed max_init_failures starts in a row and is not started
  // again (gantry_replica_given_up becomes 1).
  void ReplicaGivenUp(std::size_t index);

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  Endpoint& EndpointFor(std::string_view endpoint);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& success_;
  prometheus::Family<prometheus::Counter>& failure_;
  prometheus::Family<prometheus::Histogram>& duration_;
  prometheus::Family<prometheus::Gauge>& pending_;
  // One per replica, fixed at construction.
  std::vector<prometheus::Counter*> restarts_;
  std::vector<prometheus::Counter*> unresponsive_;
  std::vector<prometheus::Gauge*> given_up_;

  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Endpoint>, std::less<>> endpoints_;  // guarded by mutex_
};

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_GATEWAY_METRICS_H_
