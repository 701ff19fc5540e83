// Where a gateway sends its data requests: a Deployment's gateway to its
// replica pool (gateway/replica_pool.h), a Flow's to the Flow's router
// (gateway/flow_router.h), which walks them through the steps.
// Requests and replies are serialized DataRequestProtos.
#ifndef GANTRY_GATEWAY_UPSTREAM_H_
#define GANTRY_GATEWAY_UPSTREAM_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace gantry::internal {

struct ForwardResult {
  grpc::Status status;
  grpc::ByteBuffer reply;
  // The reply carries an executor error (Jina's trailing `is-error: true`).
  bool is_error = false;
  // On a transport failure, the server the try reached ("ipv4:10.0.0.5:8081"),
  // when known: one name (dns:///) may stand for several.
  std::string peer;
};
using ForwardDone = std::function<void(ForwardResult)>;

// One forwarded request. Thread safety: Cancel may be called from any thread.
class ForwardHandle {
 public:
  virtual ~ForwardHandle() = default;
  // Stops the request: `done` then runs with CANCELLED, unless it ran already.
  virtual void Cancel() = 0;
};

// Thread safety: implementations are safe for concurrent use.
class Upstream {
 public:
  virtual ~Upstream() = default;
  // Sends `request`; `done` runs exactly once, on a gRPC thread or (for a
  // request that fails before any call) on the caller's. `deadline` is the
  // client's, time_point::max() for none.
  virtual std::shared_ptr<ForwardHandle> Forward(const grpc::ByteBuffer& request,
                                                 std::chrono::system_clock::time_point deadline,
                                                 ForwardDone done) = 0;
  // Whether a request could be served now (the gateway's readiness).
  virtual bool Available() const = 0;
  // While not Available(): why, for the gateway's log.
  virtual std::string WhyUnavailable() const = 0;
};

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_UPSTREAM_H_
