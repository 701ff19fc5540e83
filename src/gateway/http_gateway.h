// The HTTP face of the gateway, next to its gRPC port (Jina's multi-protocol
// gateway): docarray-v2 style JSON turned into DataRequestProtos and sent
// down the same replica-forwarding path as gRPC requests.
//
//   POST /<endpoint>   {"data": [doc, ...] | doc, "parameters": {...},
//                       "header": {"requestId"?, "targetExecutor"?}}
//   POST /post         {"execEndpoint": "/x", "data": [...], "parameters": {...}}
//   GET  /dry_run      StatusProto as JSON ({"code": 0} when the executor answers)
//   GET  /status       {"jina": {...}, "envs": {}}
//   GET  /             {} (health)
//   /v2/...            KServe v2 inference over HTTP (gateway/kserve_http.h)
//                      for the same model names
//   POST /v1/embeddings, GET /v1/models: the OpenAI embeddings API
//                      (gateway/openai_embeddings.h), for the model names
//                      `models` maps to executor endpoints
// Replies are {"data": [...], "parameters": {...}, "header": {...}}. Errors are
// JSON {"detail": "...", "header": {...}} with 400 (bad request body), 500
// (executor error, with the status in header.status), 503 (replicas
// unavailable) or 504 (deadline exceeded), as Jina's FastAPI app answers.
// Client mistakes are 400 with a message: an empty body, a body that is not
// JSON or not an object, nesting past kMaxNestingDepth, bad documents (the
// gateway's checks or the worker's INVALID_ARGUMENT); a body over the
// message cap is 413. A 500 is our bug or the executor's error.
//
// Thread safety: requests are served on cpp-httplib's thread pool.
#ifndef GANTRY_GATEWAY_HTTP_GATEWAY_H_
#define GANTRY_GATEWAY_HTTP_GATEWAY_H_

#include <gantry/status.h>
#include <gantry/tensor_signature.h>
#include <gantry/tls.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/limits.h"

namespace gantry::internal {

// What the gRPC side answered for one forwarded request.
struct HttpForwardResult {
  // A grpc::StatusCode number; 0 when a replica answered.
  int grpc_code = 0;
  std::string grpc_message;
  // A serialized DataRequestProto (when grpc_code is 0).
  std::string reply;
  // The replica flagged the reply as an executor error (`is-error`).
  bool is_error = false;
};
// Sends a serialized DataRequestProto to a replica and blocks for the answer.
using HttpForwardFn = std::function<HttpForwardResult(const std::string& request)>;

class HttpGateway {
 public:
  // Binds host:port (0 picks a free port) and serves on a thread of its own.
  // `info` is reported by GET /status under "jina". Bodies over
  // `max_message_bytes` get 413, as do requests that would exceed it once
  // converted to protobuf. With `tls` enabled it serves HTTPS (OpenSSL
  // through cpp-httplib's SSLServer, TLS 1.2 or later), and with a client CA
  // it requires client certificates signed by it; bad files are an error
  // naming the file. `models` maps model names to the executor endpoints
  // that serve them (none: no /v1 routes); `ready` answers
  // /v2/health/ready (null: always ready); `signature`, when set, is the
  // models' KServe v2 signature (gateway/kserve.h).
  static StatusOr<std::unique_ptr<HttpGateway>> Start(
      const std::string& host, int port, HttpForwardFn forward,
      std::map<std::string, std::string> info,
      std::int64_t max_message_bytes = kDefaultMaxMessageBytes, const ServerTlsOptions& tls = {},
      std::map<std::string, std::string> models = {}, std::function<bool()> ready = nullptr,
      std::optional<TensorSignature> signature = std::nullopt);
  ~HttpGateway();
  HttpGateway(const HttpGateway&) = delete;
  HttpGateway& operator=(const HttpGateway&) = delete;

  int port() const;
  // Stops listening and waits for the server thread. Idempotent.
  void Shutdown();

  class Impl;

 private:
  explicit HttpGateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_HTTP_GATEWAY_H_
