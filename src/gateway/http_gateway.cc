#include "gateway/http_gateway.h"

#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <variant>
#include <vector>

#include "common/http_server.h"
#include "common/tracing.h"
#include "core/limits.h"
#include "core/value_json.h"
#include "gateway/api_key.h"
#include "gateway/http_route.h"
#include "gateway/json_docs.h"
#include "gateway/kserve.h"
#include "gateway/kserve_http.h"
#include "gateway/openai_embeddings.h"
#include "gateway/openapi.h"
#include "gateway/reply_docs.h"
#include "gateway/swagger_ui.h"
#include "gateway/tei_embeddings.h"
#include "jina/jina.pb.h"

namespace gantry::internal {
namespace {

using nlohmann::json;

// grpc::StatusCode numbers, without including gRPC here.
constexpr int kInvalidArgument = 3;
constexpr int kDeadlineExceeded = 4;
constexpr int kNotFound = 5;
constexpr int kResourceExhausted = 8;
constexpr int kUnavailable = 14;

std::string RandomRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kHex[] = "0123456789abcdef";
  std::string id(32, '0');
  for (char& c : id) {
    c = kHex[rng() & 15];
  }
  return id;
}

// A request's id: the client's X-Request-Id when it is 1 to 128 printable
// ASCII characters (what proxies and tracing middleware send), else a new
// one; it reaches the replicas and the logs (core/logging.h).
std::string RequestIdOf(const HttpRequest& request) {
  constexpr std::size_t kMaxRequestIdBytes = 128;
  const std::string_view given = request.Header("X-Request-Id");
  const bool usable =
      !given.empty() && given.size() <= kMaxRequestIdBytes &&
      std::all_of(given.begin(), given.end(), [](char c) { return c > 0x20 && c < 0x7f; });
  return usable ? std::string(given) : RandomRequestId();
}

json MessageToJson(const google::protobuf::Message& message) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = false;  // camelCase, as Jina's HTTP gateway
  if (!google::protobuf::util::MessageToJsonString(message, &text, options).ok()) {
    return json::object();
  }
  return json::parse(text, nullptr, false);
}

HttpResponse JsonResponse(int http_status, const json& body) {
  HttpResponse out;
  out.status = http_status;
  out.content_type = "application/json";
  out.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return out;
}

HttpResponse DetailResponse(int http_status, const std::string& detail) {
  return JsonResponse(http_status, json{{"detail", detail}});
}

HttpResponse EmptyResponse(int http_status) {
  HttpResponse out;
  out.status = http_status;
  return out;
}

// How a forwarded request's gRPC failure reads over HTTP. A worker's
// INVALID_ARGUMENT is about the request: 400. Size was checked before
// forwarding, so RESOURCE_EXHAUSTED is a full queue or a busy replica: 429,
// which clients back off and retry on.
int HttpStatusOfGrpc(int grpc_code) {
  switch (grpc_code) {
    case kUnavailable:
    case kNotFound:
      return 503;
    case kDeadlineExceeded:
      return 504;
    case kInvalidArgument:
      return 400;
    case kResourceExhausted:
      return 429;
    default:
      return 500;
  }
}

// How an executor's error reply reads over HTTP: a request its batching
// queue refused as the matching overload or timeout (429, 504), an input
// too large for the model 413, one it refused as invalid 400, anything
// else the executor's fault, 500.
int HttpStatusOfExecutorError(const jina::StatusProto& status) {
  if (const std::optional<int> refused = QueueRefusalCode(status)) {
    return HttpStatusOfGrpc(*refused);
  }
  return IsInputTooLarge(status) ? 413 : IsInvalidInput(status) ? 400 : 500;
}

// The media type of a Content-Type value, lower case, without parameters.
std::string MediaType(std::string_view content_type) {
  std::string out;
  for (char c : content_type.substr(0, content_type.find(';'))) {
    if (c != ' ' && c != '\t') {
      out.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c);
    }
  }
  return out;
}

// /v2/models/NAME[/versions/VERSION][SUFFIX], NAME and VERSION without a
// slash; SUFFIX is the rest ("/infer", "/ready", "", ...).
struct ModelPath {
  std::string name;
  std::string version;
  std::string suffix;
};
std::optional<ModelPath> ParseModelPath(std::string_view path) {
  constexpr std::string_view kModels = "/v2/models/";
  constexpr std::string_view kVersions = "/versions/";
  if (!path.starts_with(kModels)) {
    return std::nullopt;
  }
  path.remove_prefix(kModels.size());
  ModelPath out;
  std::size_t slash = path.find('/');
  out.name = std::string(path.substr(0, slash));
  if (out.name.empty()) {
    return std::nullopt;
  }
  path = slash == std::string_view::npos ? std::string_view() : path.substr(slash);
  if (path.starts_with(kVersions)) {
    path.remove_prefix(kVersions.size());
    slash = path.find('/');
    out.version = std::string(path.substr(0, slash));
    if (out.version.empty()) {
      return std::nullopt;
    }
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash);
  }
  out.suffix = std::string(path);
  return out;
}

// The header that carries an HTTP client's deadline to the replica.
constexpr std::string_view kTimeoutHeader = "Gantry-Timeout-Ms";
constexpr std::int64_t kMaxTimeoutMs = 24LL * 3600 * 1000;

}  // namespace

class HttpGateway::Impl {
 public:
  Impl(HttpGatewayOptions options, HttpForwardFn forward)
      : options_(std::move(options)),
        forward_(std::move(forward)),
        started_at_(std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count()),
        max_message_bytes_(options_.max_message_bytes > 0
                               ? static_cast<std::uint64_t>(options_.max_message_bytes)
                               : static_cast<std::uint64_t>(kDefaultMaxMessageBytes)) {
    if (!options_.ready) {
      options_.ready = [] { return true; };
    }
    if (options_.signature) {
      signature_ = std::make_shared<const TensorSignature>(*options_.signature);
    }
    routes_ = MakeRoutes();
    std::vector<HttpRoute> described;
    described.reserve(routes_.size());
    for (const RegisteredRoute& registered : routes_) {
      described.push_back(registered.route);
    }
    openapi_json_ = OpenApiDocument(described, {.version = GANTRY_VERSION,
                                                .api_key = !options_.api_key.empty()})
                        .dump();
    if (!swagger_ui_.ok()) {
      spdlog::debug("{}: GET /docs is off: {}", "HTTP gateway", swagger_ui_.status().message());
    }
  }

  Status Start() {
    HttpServerOptions server;
    server.host = options_.host;
    server.port = options_.port;
    server.name = options_.tls.enabled() ? "HTTPS gateway" : "HTTP gateway";
    server.tls = options_.tls;
    server.max_body_bytes = max_message_bytes_;
    const bool cors = options_.cors;
    server.error_response = [this, cors](int status, const std::string& detail) {
      HttpResponse out = DetailResponse(
          status, status == 413 ? "request body exceeds the " + std::to_string(max_message_bytes_) +
                                      "-byte message cap"
                                : detail);
      if (cors) {
        out.headers.emplace_back("Access-Control-Allow-Origin", "*");
      }
      return out;
    };
    auto started = HttpServer::Start(
        std::move(server),
        [this](HttpRequest request, const HttpRespond& respond) { Route(request, respond); });
    if (!started.ok()) {
      return started.status();
    }
    server_ = std::move(started).value();
    return OkStatus();
  }

  void Shutdown(std::chrono::milliseconds grace) {
    if (server_) {
      server_->Shutdown(grace);
    }
  }

  int port() const { return server_ ? server_->port() : -1; }
  Status ReloadTls() {
    return server_ ? server_->ReloadTls()
                   : FailedPreconditionError("the HTTP gateway is not serving");
  }

 private:
  // Every answer goes out through here, so CORS headers are never missed.
  // It also tells whom to stop when the client goes away before its answer.
  class Send {
   public:
    Send(std::function<void(HttpResponse)> send, HttpRespond respond)
        : send_(std::move(send)), respond_(std::move(respond)) {}
    void operator()(HttpResponse response) const { send_(std::move(response)); }
    // A forwarded request's cancel, run if the client closes its connection
    // first: it then stops holding a replica and a concurrency slot.
    void OnClientGone(HttpForwardCancel cancel) const { respond_.OnClientGone(std::move(cancel)); }

   private:
    std::function<void(HttpResponse)> send_;
    HttpRespond respond_;
  };

  // Within the gateway's own bound whatever the options say.
  std::size_t MaxClientBatchSize() const {
    return static_cast<std::size_t>(
        std::clamp(options_.max_client_batch_size, 1, static_cast<int>(kMaxOpenAiInputs)));
  }

  // A registered route and what answers it; `route` is also what
  // /openapi.json says of it. A handler may take the request's body.
  using RouteHandler =
      std::function<void(HttpRequest& request, const std::string& request_id, const Send& send)>;
  struct RegisteredRoute {
    HttpRoute route;
    RouteHandler handle;
  };

  void Route(HttpRequest& request, const HttpRespond& respond) {
    const std::string request_id = RequestIdOf(request);
    // The client's X-Request-Id goes back as it came (a proxy's own
    // matching); one the gateway made up stays in the logs and the reply body.
    const bool echo_request_id = request_id == request.Header("X-Request-Id");
    Send send(
        [respond, cors = options_.cors, echo_request_id, request_id](HttpResponse response) {
          if (cors) {
            response.headers.emplace_back("Access-Control-Allow-Origin", "*");
          }
          if (echo_request_id) {
            response.headers.emplace_back("X-Request-Id", request_id);
          }
          respond(std::move(response));
        },
        respond);
    const std::string& path = request.path;
    if (request.method == "OPTIONS") {
      Preflight(request, send);
      return;
    }
    const bool post = request.method == "POST";
    if (!post && request.method != "GET") {
      send(DetailResponse(
          405, "HTTP 405: " + request.method + " " + path + " (the gateway answers GET and POST)"));
      return;
    }
    // Every POST wants the key, even one to a path that is not served.
    if (post && !Authorized(request, send)) {
      return;
    }
    for (const RegisteredRoute& registered : routes_) {
      const HttpRoute& route = registered.route;
      if (route.method == request.method && HttpRouteMatches(route, path)) {
        if (!post && route.needs_api_key && !Authorized(request, send)) {
          return;
        }
        // A W3C `traceparent` header makes the gateway's span its child
        // (the handler forwards on this thread).
        const TraceContextScope trace_scope(ParseTraceparent(request.Header(kTraceparentKey)));
        registered.handle(request, request_id, send);
        return;
      }
    }
    // Any other /v2 GET gets KServe's own answer when it has one.
    if (post || path.rfind("/v2", 0) != 0 || !KServeGet(path, send)) {
      send(DetailResponse(404, "HTTP 404 for " + request.method + " " + path));
    }
  }

  // Every route the gateway serves with these options, in the order they
  // are tried: exact paths and templates first, Jina's POST /<endpoint>
  // last. Routes of the OpenAI and TEI APIs exist only with `models:`.
  std::vector<RegisteredRoute> MakeRoutes() {
    std::vector<RegisteredRoute> routes;
    const bool models = !options_.models.empty();
    const auto add = [&routes](HttpRoute route, RouteHandler handle) {
      routes.push_back({std::move(route), std::move(handle)});
    };
    const std::vector<int> jina_errors = {400, 413, 415, 500, 503, 504};
    const std::vector<int> tei_errors = {400, 413, 415, 422, 424, 429, 503, 504};
    const std::vector<int> kserve_errors = {400, 404, 413, 429, 500, 503, 504};

    // Jina's routes (docarray-v2's FastAPI app).
    add({.method = "GET",
         .path = "/",
         .operation_id = "health",
         .tag = "Jina",
         .summary = "Health: 200 once the gateway serves",
         .reply_schema = "Empty"},
        [](const HttpRequest&, const std::string&, const Send& send) {
          send(JsonResponse(200, json::object()));
        });
    add({.method = "GET",
         .path = "/status",
         .operation_id = "status",
         .tag = "Jina",
         .summary = "The gateway's version and protocol",
         .reply_schema = "JinaStatus"},
        [this](const HttpRequest&, const std::string&, const Send& send) {
          send(JsonResponse(200, json{{"jina", options_.info}, {"envs", json::object()}}));
        });
    add({.method = "GET",
         .path = "/dry_run",
         .operation_id = "dry_run",
         .tag = "Jina",
         .summary = "Whether a replica answers an empty request",
         .reply_schema = "DryRunStatus",
         .error_statuses = {400},
         .error_schema = "JinaError",
         .needs_api_key = true,
         .takes_deadline = true},
        [this](const HttpRequest& request, const std::string&, const Send& send) {
          DryRun(Deadline(request, send), send);
        });
    if (models) {
      add({.method = "GET",
           .path = "/v1/models",
           .operation_id = "openai_models",
           .tag = "OpenAI",
           .summary = "The model names POST /v1/embeddings serves",
           .reply_schema = "OpenAiModelList"},
          [this](const HttpRequest&, const std::string&, const Send& send) {
            send(JsonResponse(200, OpenAiModelList(options_.models, started_at_)));
          });
      add({.method = "GET",
           .path = "/info",
           .operation_id = "tei_info",
           .tag = "TEI",
           .summary = "The model: name, dtype, input and batch limits",
           .description = "`?model=NAME` picks one when several are served.",
           .reply_schema = "TeiInfo",
           .error_statuses = {404, 424, 503},
           .error_schema = "TeiError",
           .needs_api_key = true},
          [this](const HttpRequest& request, const std::string&, const Send& send) {
            TeiInfo(request.query, Deadline(request, send), send);
          });
      add({.method = "GET",
           .path = "/health",
           .operation_id = "tei_health",
           .tag = "TEI",
           .summary = "200 when a replica can answer, else 503",
           .error_statuses = {503},
           .error_schema = "TeiError"},
          [this](const HttpRequest&, const std::string&, const Send& send) {
            // TEI's: 200 when a replica can answer, else 503 in its error shape.
            send(options_.ready() ? EmptyResponse(200)
                                  : JsonResponse(503, TeiError{.http_status = 503,
                                                               .message = "no replica is ready",
                                                               .type = "Unhealthy"}
                                                          .ToJson()));
          });
    }

    // KServe v2 (Open Inference Protocol) over HTTP.
    const RouteHandler kserve_get = [this](const HttpRequest& request, const std::string&,
                                           const Send& send) {
      if (!KServeGet(request.path, send)) {
        send(DetailResponse(404, "HTTP 404 for GET " + request.path));
      }
    };
    add({.method = "GET",
         .path = "/v2",
         .operation_id = "kserve_server_metadata",
         .tag = "KServe v2",
         .summary = "Server metadata",
         .reply_schema = "KServeServerMetadata"},
        kserve_get);
    add({.method = "GET",
         .path = "/v2/health/live",
         .operation_id = "kserve_live",
         .tag = "KServe v2",
         .summary = "Liveness: 200 while the gateway serves"},
        kserve_get);
    add({.method = "GET",
         .path = "/v2/health/ready",
         .operation_id = "kserve_ready",
         .tag = "KServe v2",
         .summary = "Readiness: 200 when a replica can answer, else 400",
         .error_statuses = {400}},
        kserve_get);
    for (const bool versioned : {false, true}) {
      const std::string base = versioned ? "/v2/models/{model_name}/versions/{model_version}"
                                         : "/v2/models/{model_name}";
      const std::string id_suffix = versioned ? "_version" : "";
      add({.method = "GET",
           .path = base,
           .operation_id = "kserve_model_metadata" + id_suffix,
           .tag = "KServe v2",
           .summary = "A model's inputs and outputs",
           .reply_schema = "KServeModelMetadata",
           .error_statuses = {404},
           .error_schema = "KServeError"},
          kserve_get);
      add({.method = "GET",
           .path = base + "/ready",
           .operation_id = "kserve_model_ready" + id_suffix,
           .tag = "KServe v2",
           .summary = "A model's readiness: 200 when a replica can answer, else 400",
           .error_statuses = {400, 404},
           .error_schema = "KServeError"},
          kserve_get);
      add({.method = "GET",
           .path = base + "/config",
           .operation_id = "kserve_model_config" + id_suffix,
           .tag = "KServe v2",
           .summary = "A model's configuration, as Triton's",
           .reply_schema = "KServeModelConfig",
           .error_statuses = {404},
           .error_schema = "KServeError"},
          kserve_get);
      add({.method = "POST",
           .path = base + "/infer",
           .operation_id = "kserve_infer" + id_suffix,
           .tag = "KServe v2",
           .summary = "Inference on a model",
           .description = "JSON tensors, or the binary tensor extension "
                          "(Inference-Header-Content-Length); any Content-Type, as Triton.",
           .request_schema = "KServeInferRequest",
           .reply_schema = "KServeInferReply",
           .error_statuses = kserve_errors,
           .error_schema = "KServeError",
           .needs_api_key = true,
           .takes_deadline = true},
          [this](HttpRequest& request, const std::string& request_id, const Send& send) {
            const std::optional<ModelPath> model = ParseModelPath(request.path);
            const auto deadline = Deadline(request, send);
            if (model && deadline) {
              KServeInfer(request, model->name, model->version, request_id, *deadline, send);
            }
          });
    }

    if (models) {
      add({.method = "POST",
           .path = "/v1/embeddings",
           .operation_id = "openai_embeddings",
           .tag = "OpenAI",
           .summary = "Embeddings, as OpenAI's API",
           .request_schema = "OpenAiEmbeddingsRequest",
           .reply_schema = "OpenAiEmbeddingsReply",
           .error_statuses = {400, 404, 413, 415, 429, 500, 503, 504},
           .error_schema = "OpenAiError",
           .needs_api_key = true,
           .takes_deadline = true},
          [this](HttpRequest& request, const std::string& request_id, const Send& send) {
            if (!JsonBody(request, /*openai=*/true, send)) {
              return;
            }
            if (const auto deadline = Deadline(request, send)) {
              HandleOpenAiEmbeddings(std::move(request.body), request_id, *deadline, send);
            }
          });
      // TEI's POST routes: the body parsed by `parse`, or Jina's for the
      // executor's own endpoint of that name (HandleTeiRoute). A route whose
      // TEI body has a "parameters" key of its own says so.
      enum class Parameters { kJina, kTei };
      const auto add_tei = [&](const std::string& path, const std::string& operation_id,
                               const std::string& summary, const std::string& description,
                               const std::string& schema, auto parse,
                               Parameters parameters = Parameters::kJina) {
        add({.method = "POST",
             .path = path,
             .operation_id = operation_id,
             .tag = "TEI",
             .summary = summary,
             .description = description,
             .request_schema = schema + "Request",
             .reply_schema = schema + "Reply",
             .error_statuses = tei_errors,
             .error_schema = "TeiError",
             .needs_api_key = true,
             .takes_deadline = true},
            [this, parse, parameters_are_tei = parameters == Parameters::kTei](
                HttpRequest& request, const std::string& request_id, const Send& send) {
              HandleTeiRoute(request, request_id, send, parameters_are_tei,
                             [this, parse](json body) {
                               return parse(std::move(body), options_.models, MaxClientBatchSize());
                             });
            });
      };
      add_tei("/embed", "tei_embed", "Embeddings, as text-embeddings-inference",
              "A body in Jina's shape ({\"data\": ...}) goes to the executor's own /embed "
              "endpoint instead.",
              "TeiEmbed", ParseTeiEmbedRequest);
      add_tei("/similarity", "tei_similarity",
              "Cosine similarity of sentences to a source sentence", "", "TeiSimilarity",
              ParseTeiSimilarityRequest, Parameters::kTei);
      add_tei("/rerank", "tei_rerank",
              "Scores of texts against a query, best first (a cross-encoder)", "", "TeiRerank",
              ParseTeiRerankRequest);
      add_tei("/tokenize", "tei_tokenize",
              "The model's tokens of each input, with UTF-8 byte offsets", "", "TeiTokenize",
              ParseTeiTokenizeRequest);
    }

    add({.method = "POST",
         .path = "/post",
         .operation_id = "post",
         .tag = "Jina",
         .summary = "Documents to the endpoint the body names (execEndpoint)",
         .request_schema = "JinaPostRequest",
         .reply_schema = "JinaDataReply",
         .error_statuses = jina_errors,
         .error_schema = "JinaError",
         .needs_api_key = true,
         .takes_deadline = true},
        [this](HttpRequest& request, const std::string& request_id, const Send& send) {
          HandleDataRoute(request, "", request_id, send);
        });
    add({.method = "POST",
         .path = "/{endpoint}",
         .operation_id = "endpoint",
         .tag = "Jina",
         .summary = "Documents to an executor endpoint (e.g. /encode)",
         .description = "Any endpoint the executor binds; an unbound one reaches its /default "
                        "handler. A single document in `data` comes back as one.",
         .request_schema = "JinaDataRequest",
         .reply_schema = "JinaDataReply",
         .error_statuses = jina_errors,
         .error_schema = "JinaError",
         .needs_api_key = true,
         .takes_deadline = true,
         .catch_all = true},
        [this](HttpRequest& request, const std::string& request_id, const Send& send) {
          HandleDataRoute(request, request.path, request_id, send);
        });

    // The document and its page, outside the document.
    add({.method = "GET", .path = "/openapi.json", .in_schema = false},
        [this](const HttpRequest&, const std::string&, const Send& send) {
          HttpResponse out;
          out.status = 200;
          out.content_type = "application/json";
          out.body = openapi_json_;
          send(std::move(out));
        });
    add({.method = "GET", .path = "/docs", .in_schema = false},
        [this](const HttpRequest&, const std::string&, const Send& send) {
          if (!swagger_ui_.ok()) {
            send(DetailResponse(404, std::string(swagger_ui_.status().message())));
            return;
          }
          HttpResponse out;
          out.status = 200;
          out.content_type = "text/html; charset=utf-8";
          out.body = SwaggerUi::Page("Gantry gateway");
          send(std::move(out));
        });
    add({.method = "GET", .path = "/docs/{asset}", .in_schema = false},
        [this](const HttpRequest& request, const std::string&, const Send& send) {
          const std::string_view name = std::string_view(request.path).substr(6);
          const SwaggerUi::Asset* asset = swagger_ui_.ok() ? swagger_ui_->Find(name) : nullptr;
          if (asset == nullptr) {
            send(DetailResponse(404, "HTTP 404 for GET " + request.path));
            return;
          }
          HttpResponse out;
          out.status = 200;
          out.content_type = asset->content_type;
          out.body = asset->body;
          out.headers.emplace_back("Cache-Control", "public, max-age=86400");
          send(std::move(out));
        });
    return routes;
  }

  // A JSON route's Content-Type check: 415 (in OpenAI's error shape on its
  // route) for anything but application/json, which a browser cannot send
  // cross-origin without asking first.
  static bool JsonBody(const HttpRequest& request, bool openai, const Send& send) {
    const std::string type = MediaType(request.Header("Content-Type"));
    if (type == "application/json") {
      return true;
    }
    const std::string why =
        "POST " + request.path + " takes a JSON body sent as Content-Type: application/json, not " +
        (type.empty() ? std::string("a body without a Content-Type") : "'" + type + "'");
    send(openai ? JsonResponse(415, OpenAiError::WithStatus(415, why).ToJson())
                : DetailResponse(415, why));
    return false;
  }

  void HandleDataRoute(HttpRequest& request, const std::string& endpoint,
                       const std::string& request_id, const Send& send) {
    if (!JsonBody(request, /*openai=*/false, send)) {
      return;
    }
    if (const auto deadline = Deadline(request, send)) {
      HandleData(std::move(request.body), endpoint, request_id, *deadline, send);
    }
  }

  // POST /embed, /rerank, /tokenize or /similarity with `models:`: TEI's
  // body parsed by `parse`, or a Jina body ({"data": ...} or
  // {"parameters": ...}) for the executor's own endpoint of that name
  // (where TEI's body has "parameters" too, as /similarity's, only "data"
  // makes it Jina's).
  template <typename Parse>
  void HandleTeiRoute(HttpRequest& request, const std::string& request_id, const Send& send,
                      bool parameters_are_tei, Parse parse) {
    if (!JsonBody(request, /*openai=*/false, send)) {
      return;
    }
    const auto deadline = Deadline(request, send);
    if (!deadline) {
      return;
    }
    StatusOr<json> body = ParseJsonBounded(request.body);
    if (!body.ok()) {
      // As TEI (axum): a body that is not JSON is 400, one of the wrong
      // shape 422.
      send(JsonResponse(400, TeiError{.http_status = 400,
                                      .message = "the body is not JSON: " + body.status().message(),
                                      .type = "Validation"}
                                 .ToJson()));
      return;
    }
    if (body->is_object() &&
        (body->contains("data") || (!parameters_are_tei && body->contains("parameters")))) {
      *body = json();
      HandleData(std::move(request.body), request.path, request_id, *deadline, send);
      return;
    }
    // The body's bytes and its JSON are let go of as soon as they are read:
    // a body of tens of MB is otherwise held several times over.
    std::string().swap(request.body);
    HandleTei(parse(std::move(body).value()), request_id, *deadline, send);
  }

  // CORS preflight: answered only with `cors` on (Jina's flag), for any
  // origin, the methods we serve and the headers asked for.
  void Preflight(const HttpRequest& request, const Send& send) {
    if (!options_.cors) {
      send(DetailResponse(405, "HTTP 405: OPTIONS " + request.path +
                                   " (cross-origin requests are off; `cors: true` allows them)"));
      return;
    }
    HttpResponse out = EmptyResponse(204);
    out.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    const std::string_view asked = request.Header("Access-Control-Request-Headers");
    out.headers.emplace_back(
        "Access-Control-Allow-Headers",
        asked.empty() ? std::string("Content-Type, Authorization") : std::string(asked));
    out.headers.emplace_back("Access-Control-Max-Age", "600");
    send(std::move(out));
  }

  // Data routes want the API key, when one is set: `Authorization: Bearer`.
  bool Authorized(const HttpRequest& request, const Send& send) {
    if (options_.api_key.empty()) {
      return true;
    }
    const std::string_view header = request.Header("Authorization");
    if (BearerKeyMatches(header, options_.api_key)) {
      return true;
    }
    HttpResponse out = DetailResponse(
        401, header.empty() ? "this gateway wants an API key: send Authorization: Bearer <key>"
                            : "the API key in Authorization is not this gateway's");
    out.headers.emplace_back("WWW-Authenticate", "Bearer");
    send(std::move(out));
    return false;
  }

  // The client's deadline from kTimeoutHeader; max() without one. A bad
  // value is answered 400 and gives nullopt.
  std::optional<std::chrono::system_clock::time_point> Deadline(const HttpRequest& request,
                                                                const Send& send) {
    const std::string_view text = request.Header(kTimeoutHeader);
    if (text.empty()) {
      return std::chrono::system_clock::time_point::max();
    }
    std::int64_t ms = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), ms);
    if (error != std::errc() || end != text.data() + text.size() || ms <= 0 || ms > kMaxTimeoutMs) {
      send(DetailResponse(400, std::string(kTimeoutHeader) + " '" + std::string(text) +
                                   "' is not a whole number of milliseconds from 1 to " +
                                   std::to_string(kMaxTimeoutMs)));
      return std::nullopt;
    }
    return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
  }

  // `endpoint` empty: POST /post, whose body names it as execEndpoint.
  // A body's own header.requestId (Jina's) wins over `request_id`.
  void HandleData(std::string text, std::string endpoint, const std::string& request_id,
                  std::chrono::system_clock::time_point deadline, const Send& send) {
    // Client input: 400 with a message for anything malformed, never 500.
    jina::DataRequestProto request;
    bool single = false;
    if (Status s = ParseHttpDataRequest(text, endpoint, max_message_bytes_, &request, &single);
        !s.ok()) {
      send(DetailResponse(s.code() == StatusCode::kResourceExhausted ? 413 : 400,
                          std::string(s.message())));
      return;
    }
    std::string().swap(text);
    if (request.header().request_id().empty()) {
      request.mutable_header()->set_request_id(request_id);
    }
    endpoint = request.header().exec_endpoint();
    send.OnClientGone(forward_(TakeSerialized(request), deadline,
                               [send, single, endpoint](HttpForwardResult result) {
                                 send(DataReply(std::move(result), single, endpoint));
                               }));
  }

  static HttpResponse DataReply(HttpForwardResult result, bool single,
                                const std::string& endpoint) {
    if (result.grpc_code != 0) {
      return DetailResponse(HttpStatusOfGrpc(result.grpc_code), result.grpc_message);
    }
    jina::DataRequestProto reply;
    if (!ParseReply(result, &reply)) {
      return DetailResponse(500, "gateway: the replica's reply to " + endpoint + " does not parse");
    }
    if (result.is_error || reply.header().status().code() == jina::StatusProto::ERROR) {
      return JsonResponse(HttpStatusOfExecutorError(reply.header().status()),
                          json{{"detail", reply.header().status().description()},
                               {"header", MessageToJson(reply.header())}});
    }
    StatusOr<docarray::DocListProto> list = ReplyDocProtos(&reply);
    if (!list.ok()) {
      return DetailResponse(
          500, "gateway: the replica's reply to " + endpoint + ": " + list.status().message());
    }
    json out_docs = json::array();
    for (auto& doc : *list->mutable_docs()) {
      out_docs.push_back(DocProtoToJson(std::move(doc)));
    }
    json out{{"header", MessageToJson(reply.header())},
             {"parameters", StructToJson(reply.parameters())}};
    out["data"] = single && out_docs.size() == 1 ? out_docs[0] : out_docs;
    return JsonResponse(200, out);
  }

  void HandleOpenAiEmbeddings(std::string text, const std::string& request_id,
                              std::chrono::system_clock::time_point deadline, const Send& send) {
    auto reply_error = [&send](const OpenAiError& error) {
      send(JsonResponse(error.http_status, error.ToJson()));
    };
    StatusOr<json> parsed =
        text.empty() ? InvalidArgumentError("the body is empty") : ParseJsonBounded(text);
    if (!parsed.ok()) {
      reply_error(OpenAiError::Invalid(
          "request body must be a JSON object: " + std::string(parsed.status().message()), ""));
      return;
    }
    // The body's bytes and its JSON are let go of as soon as they are read.
    std::string().swap(text);
    auto request = ParseOpenAiEmbeddingsRequest(std::move(parsed).value(), options_.models,
                                                MaxClientBatchSize());
    if (const auto* error = std::get_if<OpenAiError>(&request)) {
      reply_error(*error);
      return;
    }
    auto embeddings_request = std::make_shared<OpenAiEmbeddingsRequest>(
        std::move(std::get<OpenAiEmbeddingsRequest>(request)));
    jina::DataRequestProto data_request = MakeOpenAiDataRequest(
        *embeddings_request, options_.models.at(embeddings_request->model), request_id);
    if (std::size_t size = data_request.ByteSizeLong(); size > max_message_bytes_) {
      reply_error(OpenAiError::WithStatus(
          413, "request of " + std::to_string(size) + " bytes (as protobuf) exceeds the " +
                   std::to_string(max_message_bytes_) + "-byte message cap"));
      return;
    }
    send.OnClientGone(
        forward_(TakeSerialized(data_request), deadline,
                 [send, embeddings_request, cap = max_message_bytes_](HttpForwardResult result) {
                   send(OpenAiReply(std::move(result), *embeddings_request, cap));
                 }));
  }

  // TEI's POST /embed, /rerank and /tokenize: a validated body becomes the request a
  // Jina client would send to the model's endpoint; the reply comes back in
  // TEI's shape.
  template <typename Request>
  void HandleTei(std::variant<Request, TeiError> parsed, const std::string& request_id,
                 std::chrono::system_clock::time_point deadline, const Send& send) {
    auto reply_error = [&send](const TeiError& error) {
      send(JsonResponse(error.http_status, error.ToJson()));
    };
    if (const auto* error = std::get_if<TeiError>(&parsed)) {
      reply_error(*error);
      return;
    }
    auto request = std::make_shared<Request>(std::move(std::get<Request>(parsed)));
    jina::DataRequestProto data_request =
        MakeTeiRequest(*request, options_.models.at(request->model), request_id);
    if (std::size_t size = data_request.ByteSizeLong(); size > max_message_bytes_) {
      reply_error(TeiError{.http_status = 413,
                           .message = "request of " + std::to_string(size) +
                                      " bytes (as protobuf) exceeds the " +
                                      std::to_string(max_message_bytes_) + "-byte message cap"});
      return;
    }
    send.OnClientGone(forward_(TakeSerialized(data_request), deadline,
                               [send, request, cap = max_message_bytes_](HttpForwardResult result) {
                                 send(TeiReply(std::move(result), *request, cap));
                               }));
  }

  // The texts of embedding requests are moved into the request proto (their
  // replies need only how many there were); the others' replies need them.
  static jina::DataRequestProto MakeTeiRequest(TeiEmbedRequest& request,
                                               const std::string& endpoint,
                                               const std::string& request_id) {
    return MakeTeiDataRequest(request, endpoint, request_id);
  }
  static jina::DataRequestProto MakeTeiRequest(TeiSimilarityRequest& request,
                                               const std::string& endpoint,
                                               const std::string& request_id) {
    return MakeTeiDataRequest(request.embed, endpoint, request_id);
  }
  static jina::DataRequestProto MakeTeiRequest(const TeiRerankRequest& request,
                                               const std::string& endpoint,
                                               const std::string& request_id) {
    return MakeTeiRerankDataRequest(request, endpoint, request_id);
  }
  // Tokenizing is the executor's /tokenize whatever the model's endpoint.
  static jina::DataRequestProto MakeTeiRequest(const TeiTokenizeRequest& request,
                                               const std::string& /*endpoint*/,
                                               const std::string& request_id) {
    return MakeTeiTokenizeDataRequest(request, request_id);
  }
  static std::variant<json, TeiError> MakeTeiResponse(const TeiEmbedRequest& request,
                                                      jina::DataRequestProto reply,
                                                      std::uint64_t cap) {
    return MakeTeiEmbedResponse(request, std::move(reply), cap);
  }
  static std::variant<json, TeiError> MakeTeiResponse(const TeiSimilarityRequest& request,
                                                      jina::DataRequestProto reply,
                                                      std::uint64_t cap) {
    return MakeTeiSimilarityResponse(request, std::move(reply), cap);
  }
  static std::variant<json, TeiError> MakeTeiResponse(const TeiRerankRequest& request,
                                                      jina::DataRequestProto reply,
                                                      std::uint64_t cap) {
    return MakeTeiRerankResponse(request, std::move(reply), cap);
  }
  static std::variant<json, TeiError> MakeTeiResponse(const TeiTokenizeRequest& request,
                                                      jina::DataRequestProto reply,
                                                      std::uint64_t cap) {
    return MakeTeiTokenizeResponse(request, std::move(reply), cap);
  }

  template <typename Request>
  static HttpResponse TeiReply(HttpForwardResult result, const Request& request,
                               std::uint64_t cap) {
    auto error_response = [](const TeiError& error) {
      return JsonResponse(error.http_status, error.ToJson());
    };
    if (result.grpc_code != 0) {
      return error_response(TeiError::FromGrpc(result.grpc_code, result.grpc_message));
    }
    jina::DataRequestProto reply;
    if (!ParseReply(result, &reply)) {
      return error_response(TeiError{.http_status = 424,
                                     .message = "gateway: the replica's reply does not parse",
                                     .type = "Backend"});
    }
    if (result.is_error || reply.header().status().code() == jina::StatusProto::ERROR) {
      // The executor's verdict on the input (too long: 413; invalid, such as
      // a prompt_name the model lacks: 422) is the client's; the rest is 424.
      const jina::StatusProto& status = reply.header().status();
      if (const std::optional<int> refused = QueueRefusalCode(status)) {
        return error_response(TeiError::FromGrpc(*refused, status.description()));
      }
      const int http_status = IsInputTooLarge(status) ? 413 : IsInvalidInput(status) ? 422 : 424;
      return error_response(TeiError{.http_status = http_status,
                                     .message = status.description(),
                                     .type = http_status == 424 ? "Backend" : "Validation"});
    }
    auto response = MakeTeiResponse(request, std::move(reply), cap);
    if (const auto* error = std::get_if<TeiError>(&response)) {
      return error_response(*error);
    }
    return JsonResponse(200, std::get<json>(response));
  }

  static HttpResponse OpenAiReply(HttpForwardResult result, const OpenAiEmbeddingsRequest& request,
                                  std::uint64_t cap) {
    auto error_response = [](const OpenAiError& error) {
      return JsonResponse(error.http_status, error.ToJson());
    };
    if (result.grpc_code != 0) {
      // 429 lets OpenAI clients back off and retry, as they do for TEI's.
      return error_response(
          OpenAiError::WithStatus(HttpStatusOfGrpc(result.grpc_code), result.grpc_message));
    }
    jina::DataRequestProto reply;
    if (!ParseReply(result, &reply)) {
      return error_response(
          OpenAiError::WithStatus(500, "gateway: the replica's reply does not parse"));
    }
    if (result.is_error || reply.header().status().code() == jina::StatusProto::ERROR) {
      return error_response(
          OpenAiError::WithStatus(HttpStatusOfExecutorError(reply.header().status()),
                                  "executor error: " + reply.header().status().description()));
    }
    auto response = MakeOpenAiEmbeddingsResponse(request, std::move(reply), cap);
    if (const auto* error = std::get_if<OpenAiError>(&response)) {
      return error_response(*error);
    }
    return JsonResponse(200, std::get<json>(response));
  }

  static HttpResponse KServeError(int status, const std::string& message) {
    return JsonResponse(status, json{{"error", message}});
  }

  // The endpoint serving `name` (and `version`, when given), or nullopt
  // after answering 404.
  std::optional<std::string> ModelEndpoint(const std::string& name, const std::string& version,
                                           const Send& send) {
    auto it = options_.models.find(name);
    if (it == options_.models.end()) {
      std::string served;
      for (const auto& [served_name, e] : options_.models) {
        served += (served.empty() ? "'" : ", '") + served_name + "'";
      }
      send(KServeError(
          404, "model '" + name + "' is not served here; this deployment serves " + served));
      return std::nullopt;
    }
    if (!version.empty() && version != kKServeModelVersion) {
      send(KServeError(404, "model '" + name + "' has no version '" + version + "'"));
      return std::nullopt;
    }
    return it->second;
  }

  // KServe v2 REST reads: server metadata, health, model metadata, model
  // readiness and config. False when `path` is none of them.
  bool KServeGet(const std::string& path, const Send& send) {
    if (path == "/v2") {
      send(JsonResponse(200, json{{"name", "gantry"},
                                  {"version", GANTRY_VERSION},
                                  {"extensions", {"model_configuration", "binary_tensor_data"}}}));
      return true;
    }
    if (path == "/v2/health/live") {
      send(EmptyResponse(200));
      return true;
    }
    if (path == "/v2/health/ready") {
      send(EmptyResponse(options_.ready() ? 200 : 400));
      return true;
    }
    const std::optional<ModelPath> model = ParseModelPath(path);
    if (!model ||
        (!model->suffix.empty() && model->suffix != "/ready" && model->suffix != "/config")) {
      return false;
    }
    const std::string& name = model->name;
    if (!ModelEndpoint(name, model->version, send)) {
      return true;
    }
    const TensorSignature* signature = signature_.get();
    const std::string& what = model->suffix;
    if (what == "/ready") {
      send(EmptyResponse(options_.ready() ? 200 : 400));
    } else if (what == "/config") {
      send(JsonResponse(200, KServeConfigJson(KServeModelConfig(name, signature))));
    } else {
      send(JsonResponse(200, KServeMetadataJson(KServeModelMetadata(name, signature))));
    }
    return true;
  }

  // KServe v2 REST inference. Errors are {"error": "..."}: 400 for the
  // request's mistakes, 404 for a model not served, 5xx as the Jina routes
  // map them.
  void KServeInfer(HttpRequest& http_request, const std::string& name, const std::string& version,
                   const std::string& request_id, std::chrono::system_clock::time_point deadline,
                   const Send& send) {
    const std::optional<std::string> endpoint = ModelEndpoint(name, version, send);
    if (!endpoint) {
      return;
    }
    std::int64_t json_length = -1;
    if (http_request.HasHeader("Inference-Header-Content-Length")) {
      const std::string_view text = http_request.Header("Inference-Header-Content-Length");
      const auto [end, error] =
          std::from_chars(text.data(), text.data() + text.size(), json_length);
      if (text.empty() || error != std::errc() || end != text.data() + text.size() ||
          json_length < 0) {
        send(KServeError(400, "Inference-Header-Content-Length '" + std::string(text) +
                                  "' is not a byte count"));
        return;
      }
    }
    const TensorSignature* signature = signature_.get();
    StatusOr<inference::ModelInferRequest> request =
        ParseKServeHttpInfer(http_request.body, json_length, name, version, max_message_bytes_);
    StatusOr<jina::DataRequestProto> data_request =
        request.ok()
            ? KServeToDataRequest(*request, *endpoint, request_id, max_message_bytes_, signature)
            : StatusOr<jina::DataRequestProto>(request.status());
    if (!data_request.ok()) {
      send(KServeError(400, std::string(data_request.status().message())));
      return;
    }
    std::string().swap(http_request.body);
    auto infer_request = std::make_shared<inference::ModelInferRequest>(std::move(*request));
    send.OnClientGone(
        forward_(TakeSerialized(*data_request), deadline,
                 [send, infer_request, signature = signature_,
                  cap = max_message_bytes_](HttpForwardResult result) {
                   send(KServeInferReply(std::move(result), *infer_request, signature.get(), cap));
                 }));
  }

  static HttpResponse KServeInferReply(HttpForwardResult result,
                                       const inference::ModelInferRequest& request,
                                       const TensorSignature* signature, std::uint64_t cap) {
    if (result.grpc_code != 0) {
      return KServeError(HttpStatusOfGrpc(result.grpc_code), result.grpc_message);
    }
    jina::DataRequestProto reply;
    if (!ParseReply(result, &reply)) {
      return KServeError(500, "gateway: the replica's reply does not parse");
    }
    if (result.is_error || reply.header().status().code() == jina::StatusProto::ERROR) {
      return KServeError(HttpStatusOfExecutorError(reply.header().status()),
                         "executor error: " + reply.header().status().description());
    }
    StatusOr<inference::ModelInferResponse> response =
        DataReplyToKServe(request, std::move(reply), cap, signature);
    StatusOr<KServeHttpReply> rendered = response.ok()
                                             ? RenderKServeHttpInfer(request, *response)
                                             : StatusOr<KServeHttpReply>(response.status());
    if (!rendered.ok()) {
      return KServeError(rendered.status().code() == StatusCode::kInvalidArgument ? 400 : 500,
                         std::string(rendered.status().message()));
    }
    HttpResponse out;
    out.status = 200;
    out.body = std::move(rendered->body);
    if (rendered->json_length >= 0) {
      out.headers.emplace_back("Inference-Header-Content-Length",
                               std::to_string(rendered->json_length));
      out.content_type = "application/octet-stream";
    } else {
      out.content_type = "application/json";
    }
    return out;
  }

  // TEI's GET /info: the executor describes its model, the gateway adds
  // its own fields.
  void TeiInfo(const std::string& query,
               std::optional<std::chrono::system_clock::time_point> deadline, const Send& send) {
    if (!deadline) {
      return;
    }
    auto model = ChooseTeiInfoModel(query, options_.models);
    if (const auto* error = std::get_if<TeiError>(&model)) {
      send(JsonResponse(error->http_status, error->ToJson()));
      return;
    }
    TeiRouterInfo router{.model_id = std::get<std::string>(model),
                         .max_concurrent_requests = options_.max_concurrent_requests > 0
                                                        ? options_.max_concurrent_requests
                                                        : kMaxWorkerCallsInFlight,
                         .max_client_batch_size = static_cast<std::int64_t>(MaxClientBatchSize()),
                         .version = GANTRY_VERSION};
    send.OnClientGone(forward_(
        MakeTeiInfoDataRequest(RandomRequestId()).SerializeAsString(), *deadline,
        [send, router = std::move(router), cap = max_message_bytes_](HttpForwardResult result) {
          send(TeiReply(std::move(result), router, cap));
        }));
  }
  static std::variant<json, TeiError> MakeTeiResponse(const TeiRouterInfo& router,
                                                      jina::DataRequestProto reply,
                                                      std::uint64_t cap) {
    return MakeTeiInfoResponse(router, std::move(reply), cap);
  }

  void DryRun(std::optional<std::chrono::system_clock::time_point> deadline, const Send& send) {
    if (!deadline) {
      return;
    }
    jina::DataRequestProto probe;
    probe.mutable_header()->set_request_id(RandomRequestId());
    probe.mutable_header()->set_exec_endpoint("_jina_dry_run_");
    probe.mutable_data()->mutable_docs()->add_docs();
    send.OnClientGone(
        forward_(probe.SerializeAsString(), *deadline, [send](const HttpForwardResult& result) {
          jina::StatusProto status;
          if (result.grpc_code != 0) {
            status.set_code(jina::StatusProto::ERROR);
            status.set_description(result.grpc_message);
          } else if (result.is_error) {
            jina::DataRequestProto reply;
            reply.ParseFromString(result.reply);
            status = reply.header().status();
          }
          json out{{"code", static_cast<int>(status.code())},
                   {"description", status.description()}};
          if (status.has_exception()) {
            out["exception"] = MessageToJson(status.exception());
          }
          send(JsonResponse(200, out));
        }));
  }

  HttpGatewayOptions options_;
  // Shared with forwards still in flight, which may outlive the gateway.
  std::shared_ptr<const TensorSignature> signature_;
  HttpForwardFn forward_;
  std::int64_t started_at_;  // Unix seconds, for /v1/models' `created`
  std::uint64_t max_message_bytes_;
  // Built by the constructor, read-only after it.
  std::vector<RegisteredRoute> routes_;
  std::string openapi_json_;
  StatusOr<SwaggerUi> swagger_ui_ = SwaggerUi::Load();
  std::unique_ptr<HttpServer> server_;
};

std::string TakeSerialized(jina::DataRequestProto& request) {
  std::string bytes = request.SerializeAsString();
  jina::DataRequestProto().Swap(&request);  // the temporary takes the memory with it
  return bytes;
}

bool ParseReply(HttpForwardResult& result, jina::DataRequestProto* reply) {
  const bool parsed = reply->ParseFromString(result.reply);
  std::string().swap(result.reply);
  return parsed;
}

HttpGateway::HttpGateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpGateway::~HttpGateway() { Shutdown(); }

StatusOr<std::unique_ptr<HttpGateway>> HttpGateway::Start(HttpGatewayOptions options,
                                                          HttpForwardFn forward) {
  auto impl = std::make_unique<Impl>(std::move(options), std::move(forward));
  GANTRY_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<HttpGateway>(new HttpGateway(std::move(impl)));
}

int HttpGateway::port() const { return impl_->port(); }

void HttpGateway::Shutdown(std::chrono::milliseconds grace) { impl_->Shutdown(grace); }

Status HttpGateway::ReloadTls() { return impl_->ReloadTls(); }

}  // namespace gantry::internal
