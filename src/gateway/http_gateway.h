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
//   POST /embed, GET /health: text-embeddings-inference's embedding route
//                      and health check (gateway/tei_embeddings.h) for the
//                      same model names; a /embed body in Jina's shape
//                      ({"data": ...}) still goes to an executor's own
//                      /embed endpoint
//   GET /openapi.json  an OpenAPI 3.1 document of the routes above, made from
//                      the table they are dispatched through (gateway/openapi.h)
//   GET /docs          Swagger UI over it (gateway/swagger_ui.h)
// Replies are {"data": [...], "parameters": {...}, "header": {...}}. Errors are
// JSON {"detail": "...", "header": {...}} with 400 (bad request body), 500
// (executor error, with the status in header.status; 413 when it threw
// std::length_error, an input too large for it), 503 (replicas
// unavailable) or 504 (deadline exceeded), as Jina's FastAPI app answers.
// Client mistakes are 400 with a message: an empty body, a body that is not
// JSON or not an object, nesting past kMaxNestingDepth, bad documents (the
// gateway's checks or the worker's INVALID_ARGUMENT); a body over the
// message cap is 413; a JSON route's body sent as anything but
// application/json is 415 (a browser posts text/plain or a form to any
// origin without asking first); a missing or wrong API key is 401. A 500 is
// our bug or the executor's error. A `Gantry-Timeout-Ms` header is the
// request's deadline, carried to the replica as a gRPC deadline.
//
// Thread safety: requests are read and parsed on common/http_server.h's I/O
// threads and answered from the thread that completes their forward; a
// request waiting on a replica holds no thread.
#ifndef GANTRY_GATEWAY_HTTP_GATEWAY_H_
#define GANTRY_GATEWAY_HTTP_GATEWAY_H_

#include <gantry/status.h>
#include <gantry/tensor_signature.h>
#include <gantry/tls.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/limits.h"

namespace jina {
class DataRequestProto;
}  // namespace jina

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
using HttpForwardDone = std::function<void(HttpForwardResult result)>;
// Stops a forwarded request (its client went away): `done` then runs with
// CANCELLED, unless it ran already. Callable from any thread; may be empty.
using HttpForwardCancel = std::function<void()>;
// Sends a serialized DataRequestProto to a replica, taking the string (it is
// the request's bytes on the wire, not a copy of them); `done` runs once, on
// any thread, with the answer. `deadline` is time_point::max() for none.
using HttpForwardFn = std::function<HttpForwardCancel(
    std::string request, std::chrono::system_clock::time_point deadline, HttpForwardDone done)>;

// `request`'s bytes, to forward; `request` is emptied and its memory freed
// first, so that a message of tens of MB is not held beside its bytes.
std::string TakeSerialized(jina::DataRequestProto& request);

// Parses `result.reply` into `reply` and frees the bytes, so that a reply of
// tens of MB is not held beside its message; false when they do not parse.
bool ParseReply(HttpForwardResult& result, jina::DataRequestProto* reply);

struct HttpGatewayOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  // Reported by GET /status under "jina".
  std::map<std::string, std::string> info;
  // Bodies over it get 413, as do requests that would exceed it once
  // converted to protobuf.
  std::int64_t max_message_bytes = kDefaultMaxMessageBytes;
  // HTTPS (TLS 1.2 or later), with client certificates when a CA is given;
  // bad files are an error naming the file.
  ServerTlsOptions tls;
  // Model names -> the executor endpoints that serve them (none: no /v1
  // routes).
  std::map<std::string, std::string> models;
  // Inputs one OpenAI or TEI request may carry (1 to kMaxOpenAiInputs).
  int max_client_batch_size = 2048;
  // Answers /v2/health/ready (null: always ready).
  std::function<bool()> ready;
  // The models' KServe v2 signature (gateway/kserve.h), when set.
  std::optional<TensorSignature> signature;
  // Non-empty: every data route wants `Authorization: Bearer <api_key>`
  // (401 otherwise); health, readiness and /status stay open.
  std::string api_key;
  // Answer CORS preflights and allow any origin (Jina's `cors`).
  bool cors = false;
  // The gateway's bound on requests in flight, as GET /info reports it (0:
  // none of its own, reported as a worker's own bound).
  int max_concurrent_requests = 0;
};

class HttpGateway {
 public:
  // Binds host:port and serves on threads of its own.
  static StatusOr<std::unique_ptr<HttpGateway>> Start(HttpGatewayOptions options,
                                                      HttpForwardFn forward);
  ~HttpGateway();
  HttpGateway(const HttpGateway&) = delete;
  HttpGateway& operator=(const HttpGateway&) = delete;

  int port() const;
  // Stops listening, waits up to `grace` for the requests being answered.
  // Idempotent.
  void Shutdown(std::chrono::milliseconds grace = std::chrono::seconds(30));
  // HttpServer::ReloadTls.
  Status ReloadTls();

  class Impl;

 private:
  explicit HttpGateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_HTTP_GATEWAY_H_
