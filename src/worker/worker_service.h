// The worker's gRPC face: Jina's worker services over one RequestHandler,
// plus the standard health service.
#ifndef GANTRY_WORKER_WORKER_SERVICE_H_
#define GANTRY_WORKER_WORKER_SERVICE_H_

#include <gantry/status.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "worker/request_handler.h"

namespace gantry::internal {

class WorkerServer {
 public:
  // Binds host:port (0 picks a free port) and starts serving. `handler` must
  // outlive the server.
  // `max_message_bytes` caps requests received and replies sent; a
  // connection older than `max_connection_age` (zero: no limit) is asked to
  // reconnect, its calls in flight left to finish.
  static StatusOr<std::unique_ptr<WorkerServer>> Start(
      RequestHandler* handler, const std::string& host, int port, std::int64_t max_message_bytes,
      std::chrono::seconds max_connection_age = std::chrono::seconds(0));
  ~WorkerServer();

  int port() const { return port_; }
  // Marks health NOT_SERVING, stops accepting calls and waits up to `grace`
  // for calls in flight to finish. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);
  // Blocks until Shutdown has completed.
  void Wait();

 private:
  WorkerServer() = default;
  struct Services;
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::once_flag shutdown_once_;
};

}  // namespace gantry::internal

#endif  // GANTRY_WORKER_WORKER_SERVICE_H_
