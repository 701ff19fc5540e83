#include "gateway/http_gateway.h"

#include <google/protobuf/util/json_util.h>
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <variant>

#include "common/http_listen.h"
#include "common/tls.h"
#include "core/value_json.h"
#include "gateway/json_docs.h"
#include "gateway/kserve.h"
#include "gateway/kserve_http.h"
#include "gateway/openai_embeddings.h"
#include "gateway/reply_docs.h"
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

json MessageToJson(const google::protobuf::Message& message) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = false;  // camelCase, as Jina's HTTP gateway
  if (!google::protobuf::util::MessageToJsonString(message, &text, options).ok()) {
    return json::object();
  }
  return json::parse(text, nullptr, false);
}

void Reply(httplib::Response& res, int http_status, const json& body) {
  res.status = http_status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void ReplyError(httplib::Response& res, int http_status, const std::string& detail) {
  Reply(res, http_status, json{{"detail", detail}});
}

// cpp-httplib's SSLServer context: certificate chain, key, TLS 1.2 or
// later, and client certificates when a client CA is given. The files were
// checked by LoadServerTls; what OpenSSL still refuses lands in `error`.
bool ConfigureSslContext(SSL_CTX& ctx, const ServerTlsOptions& tls, std::string* error) {
  if (SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION) != 1 ||
      SSL_CTX_use_certificate_chain_file(&ctx, tls.cert_file.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(&ctx, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(&ctx) != 1) {
    *error = "OpenSSL refuses ssl_certfile '" + tls.cert_file + "' or ssl_keyfile '" +
             tls.key_file + "'";
    ERR_clear_error();
    return false;
  }
  if (!tls.client_ca_file.empty()) {
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(tls.client_ca_file.c_str());
    if (names == nullptr ||
        SSL_CTX_load_verify_locations(&ctx, tls.client_ca_file.c_str(), nullptr) != 1) {
      if (names != nullptr) {
        sk_X509_NAME_pop_free(names, X509_NAME_free);
      }
      *error = "OpenSSL refuses ssl_client_cafile '" + tls.client_ca_file + "'";
      ERR_clear_error();
      return false;
    }
    SSL_CTX_set_client_CA_list(&ctx, names);  // takes ownership
    SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return true;
}

}  // namespace

class HttpGateway::Impl {
 public:
  Impl(HttpForwardFn forward, std::map<std::string, std::string> info,
       std::int64_t max_message_bytes, std::map<std::string, std::string> models,
       std::function<bool()> ready, std::optional<TensorSignature> signature)
      : forward_(std::move(forward)),
        ready_(ready ? std::move(ready) : [] { return true; }),
        info_(std::move(info)),
        served_models_(std::move(models)),
        signature_(std::move(signature)),
        started_at_(std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count()),
        max_message_bytes_(max_message_bytes > 0
                               ? static_cast<std::uint64_t>(max_message_bytes)
                               : static_cast<std::uint64_t>(kDefaultMaxMessageBytes)) {}
  ~Impl() { Shutdown(); }

  Status Start(const std::string& host, int port, const ServerTlsOptions& tls) {
    if (tls.enabled()) {
      // The files are read and checked first, so that errors name them;
      // OpenSSL then loads the same files into cpp-httplib's context.
      GANTRY_RETURN_IF_ERROR(LoadServerTls(tls).status());
      std::string error;
      server_ = std::make_unique<httplib::SSLServer>(
          [&tls, &error](SSL_CTX& ctx) { return ConfigureSslContext(ctx, tls, &error); });
      if (!server_->is_valid()) {
        return InvalidArgumentError("HTTPS gateway: " +
                                    (error.empty() ? std::string("cannot set up TLS") : error));
      }
    } else {
      server_ = std::make_unique<httplib::Server>();
    }
    // Bodies over the cap are refused (413) before they are read whole.
    server_->set_payload_max_length(max_message_bytes_);
    // cpp-httplib writes headers and body apart; with Nagle on, a keep-alive
    // client's delayed ACK held every reply ~40 ms (KServe over HTTP: 36
    // requests/s at concurrency 1 before, bench/kserve/run.sh).
    server_->set_tcp_nodelay(true);
    UseExclusivePort(*server_);
    // Errors cpp-httplib answers itself (413, 400 for a malformed request,
    // 404) get a JSON detail like ours.
    server_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) {
        return;
      }
      std::string detail =
          res.status == 413
              ? "request body exceeds the " + std::to_string(max_message_bytes_) +
                    "-byte message cap"
              : "HTTP " + std::to_string(res.status) + " for " + req.method + " " + req.path;
      ReplyError(res, res.status, detail);
    });
    server_->Get("/", [](const httplib::Request&, httplib::Response& res) {
      Reply(res, 200, json::object());
    });
    server_->Get("/status", [this](const httplib::Request&, httplib::Response& res) {
      Reply(res, 200, json{{"jina", info_}, {"envs", json::object()}});
    });
    server_->Get("/dry_run",
                 [this](const httplib::Request&, httplib::Response& res) { DryRun(res); });
    RegisterKServeRoutes();
    if (!served_models_.empty()) {
      // Before the catch-all POST /<endpoint> below: cpp-httplib takes the
      // first route that matches.
      server_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
        Reply(res, 200, OpenAiModelList(served_models_, started_at_));
      });
      server_->Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) {
        HandleOpenAiEmbeddings(req.body, res);
      });
    }
    server_->Post("/post", [this](const httplib::Request& req, httplib::Response& res) {
      HandleData(req.body, "", res);
    });
    server_->Post(R"(/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      HandleData(req.body, "/" + req.matches[1].str(), res);
    });
    port_ = port == 0 ? server_->bind_to_any_port(host)
                      : (server_->bind_to_port(host, port) ? port : -1);
    if (port_ <= 0) {
      return UnavailableError("HTTP gateway cannot listen on " + host + ":" + std::to_string(port) +
                              " (port in use or address not available)");
    }
    thread_ = std::thread([this] {
      server_->listen_after_bind();
      listen_returned_.store(true);
    });
    // cpp-httplib's stop() does nothing until the listen loop runs, and the
    // loop then blocks in accept() for good: a gateway shut down right after
    // starting hung its destructor (seen under load in TlsTest). Start
    // returns once the loop runs, and Shutdown stops until it has returned.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!server_->is_running()) {
      if (std::chrono::steady_clock::now() > deadline) {
        return UnavailableError("HTTP gateway on " + host + ":" + std::to_string(port_) +
                                " did not start listening within 10 s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return OkStatus();
  }

  void Shutdown() {
    if (!server_) {
      return;
    }
    if (thread_.joinable()) {
      while (!listen_returned_.load()) {
        server_->stop();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      thread_.join();
    }
  }

  int port() const { return port_; }

 private:
  // `endpoint` empty: POST /post, whose body names it as execEndpoint.
  void HandleData(const std::string& text, std::string endpoint, httplib::Response& res) {
    // Client input: 400 with a message for anything malformed, never 500.
    jina::DataRequestProto request;
    bool single = false;
    if (Status s = ParseHttpDataRequest(text, endpoint, max_message_bytes_, &request, &single);
        !s.ok()) {
      ReplyError(res, s.code() == StatusCode::kResourceExhausted ? 413 : 400, s.message());
      return;
    }
    if (request.header().request_id().empty()) {
      request.mutable_header()->set_request_id(RandomRequestId());
    }
    endpoint = request.header().exec_endpoint();
    HttpForwardResult result = forward_(request.SerializeAsString());
    if (result.grpc_code != 0) {
      // A worker's INVALID_ARGUMENT is about the request: a 400, as for the
      // errors found here. Size was checked above, so a worker's
      // RESOURCE_EXHAUSTED is a full queue or a busy replica: 429, retry.
      int status = result.grpc_code == kUnavailable || result.grpc_code == kNotFound ? 503
                   : result.grpc_code == kDeadlineExceeded                           ? 504
                   : result.grpc_code == kInvalidArgument                            ? 400
                   : result.grpc_code == kResourceExhausted                          ? 429
                                                                                     : 500;
      ReplyError(res, status, result.grpc_message);
      return;
    }
    jina::DataRequestProto reply;
    if (!reply.ParseFromString(result.reply)) {
      ReplyError(res, 500, "gateway: the replica's reply to " + endpoint + " does not parse");
      return;
    }
    if (result.is_error || reply.header().status().code() == jina::StatusProto::ERROR) {
      Reply(res, 500,
            json{{"detail", reply.header().status().description()},
                 {"header", MessageToJson(reply.header())}});
      return;
    }
    StatusOr<docarray::DocListProto> list = ReplyDocProtos(reply);
    if (!list.ok()) {
      ReplyError(res, 500,
                 "gateway: the replica's reply to " + endpoint + ": " + list.status().message());
      return;
    }
    json out_docs = json::array();
    for (const auto& doc : list->docs()) {
      out_docs.push_back(DocProtoToJson(doc));
    }
    json out{{"header", MessageToJson(reply.header())},
             {"parameters", StructToJson(reply.parameters())}};
    out["data"] = single && out_docs.size() == 1 ? out_docs[0] : out_docs;
    Reply(res, 200, out);
  }

  void HandleOpenAiEmbeddings(const std::string& text, httplib::Response& res) {
    auto reply_error = [&res](const OpenAiError& error) {
      Reply(res, error.http_status, error.ToJson());
    };
    StatusOr<json> parsed =
        text.empty() ? InvalidArgumentError("the body is empty") : ParseJsonBounded(text);
    if (!parsed.ok()) {
      reply_error(OpenAiError::Invalid(
          "request body must be a JSON object: " + std::string(parsed.status().message()), ""));
      return;
    }
    auto request = ParseOpenAiEmbeddingsRequest(*parsed, served_models_);
    if (const auto* error = std::get_if<OpenAiError>(&request)) {
      reply_error(*error);
      return;
    }
    const auto& embeddings_request = std::get<OpenAiEmbeddingsRequest>(request);
    jina::DataRequestProto data_request = MakeOpenAiDataRequest(
        embeddings_request, served_models_.at(embeddings_request.model), RandomRequestId());
    if (std::size_t size = data_request.ByteSizeLong(); size > max_message_bytes_) {
      reply_error(OpenAiError::WithStatus(
          413, "request of " + std::to_string(size) + " bytes (as protobuf) exceeds the " +
                   std::to_string(max_message_bytes_) + "-byte message cap"));
      return;
    }
    HttpForwardResult result = forward_(data_request.SerializeAsString());
    if (result.grpc_code != 0) {
      // RESOURCE_EXHAUSTED is a full queue or an over-size message: 429
      // lets OpenAI clients back off and retry, as they do for TEI's.
      const int status = result.grpc_code == kInvalidArgument                                ? 400
                         : result.grpc_code == kResourceExhausted                            ? 429
                         : result.grpc_code == kDeadlineExceeded                             ? 504
                         : result.grpc_code == kUnavailable || result.grpc_code == kNotFound ? 503
                                                                                             : 500;
      reply_error(OpenAiError::WithStatus(status, result.grpc_message));
      return;
    }
    jina::DataRequestProto reply;
    if (!reply.ParseFromString(result.reply)) {
      reply_error(OpenAiError::WithStatus(500, "gateway: the replica's reply does not parse"));
      return;
    }
    if (result.is_error || reply.header().status().code() == jina::StatusProto::ERROR) {
      reply_error(
          OpenAiError::WithStatus(500, "executor error: " + reply.header().status().description()));
      return;
    }
    auto response = MakeOpenAiEmbeddingsResponse(embeddings_request, reply, max_message_bytes_);
    if (const auto* error = std::get_if<OpenAiError>(&response)) {
      reply_error(*error);
      return;
    }
    Reply(res, 200, std::get<json>(response));
  }

  // KServe v2 REST. Errors are {"error": "..."}: 400 for the request's
  // mistakes, 404 for a model not served, 5xx as the Jina routes map them.
  void RegisterKServeRoutes() {
    auto kserve_error = [](httplib::Response& res, int status, const std::string& message) {
      Reply(res, status, json{{"error", message}});
    };
    server_->Get("/v2", [](const httplib::Request&, httplib::Response& res) {
      Reply(res, 200,
            json{{"name", "gantry"},
                 {"version", GANTRY_VERSION},
                 {"extensions", {"model_configuration", "binary_tensor_data"}}});
    });
    server_->Get("/v2/health/live",
                 [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
    server_->Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& res) {
      res.status = ready_() ? 200 : 400;
    });
    // /v2/models/{model}[/versions/{version}][/ready|/config|/infer]
    const std::string model_path = R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)";
    auto model_of = [this, kserve_error](const httplib::Request& req, httplib::Response& res,
                                         std::string* endpoint) {
      const std::string name = req.matches[1].str();
      const std::string version = req.matches[2].str();
      auto it = served_models_.find(name);
      if (it == served_models_.end()) {
        std::string served;
        for (const auto& [served_name, e] : served_models_) {
          served += (served.empty() ? "'" : ", '") + served_name + "'";
        }
        kserve_error(res, 404,
                     "model '" + name + "' is not served here; this deployment serves " + served);
        return false;
      }
      if (!version.empty() && version != kKServeModelVersion) {
        kserve_error(res, 404, "model '" + name + "' has no version '" + version + "'");
        return false;
      }
      if (endpoint != nullptr) {
        *endpoint = it->second;
      }
      return true;
    };
    const TensorSignature* signature = signature_ ? &*signature_ : nullptr;
    server_->Get(model_path, [model_of, signature](const httplib::Request& req,
                                                   httplib::Response& res) {
      if (model_of(req, res, nullptr)) {
        Reply(res, 200, KServeMetadataJson(KServeModelMetadata(req.matches[1].str(), signature)));
      }
    });
    server_->Get(model_path + "/ready",
                 [this, model_of](const httplib::Request& req, httplib::Response& res) {
                   if (model_of(req, res, nullptr)) {
                     res.status = ready_() ? 200 : 400;
                   }
                 });
    server_->Get(model_path + "/config", [model_of, signature](const httplib::Request& req,
                                                               httplib::Response& res) {
      if (model_of(req, res, nullptr)) {
        Reply(res, 200, KServeConfigJson(KServeModelConfig(req.matches[1].str(), signature)));
      }
    });
    server_->Post(model_path + "/infer", [this, model_of, kserve_error, signature](
                                             const httplib::Request& req, httplib::Response& res) {
      std::string endpoint;
      if (!model_of(req, res, &endpoint)) {
        return;
      }
      std::int64_t json_length = -1;
      if (req.has_header("Inference-Header-Content-Length")) {
        const std::string text = req.get_header_value("Inference-Header-Content-Length");
        char* end = nullptr;
        json_length = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || end == nullptr || *end != '\0' || json_length < 0) {
          kserve_error(res, 400,
                       "Inference-Header-Content-Length '" + text + "' is not a byte count");
          return;
        }
      }
      StatusOr<inference::ModelInferRequest> request = ParseKServeHttpInfer(
          req.body, json_length, req.matches[1].str(), req.matches[2].str(), max_message_bytes_);
      StatusOr<jina::DataRequestProto> data_request =
          request.ok() ? KServeToDataRequest(*request, endpoint, RandomRequestId(),
                                             max_message_bytes_, signature)
                       : StatusOr<jina::DataRequestProto>(request.status());
      if (!data_request.ok()) {
        kserve_error(res, 400, std::string(data_request.status().message()));
        return;
      }
      HttpForwardResult result = forward_(data_request->SerializeAsString());
      if (result.grpc_code != 0) {
        const int status = result.grpc_code == kInvalidArgument     ? 400
                           : result.grpc_code == kResourceExhausted ? 429
                           : result.grpc_code == kDeadlineExceeded  ? 504
                           : result.grpc_code == kUnavailable || result.grpc_code == kNotFound
                               ? 503
                               : 500;
        kserve_error(res, status, result.grpc_message);
        return;
      }
      jina::DataRequestProto reply;
      if (!reply.ParseFromString(result.reply)) {
        kserve_error(res, 500, "gateway: the replica's reply does not parse");
        return;
      }
      if (result.is_error || reply.header().status().code() == jina::StatusProto::ERROR) {
        kserve_error(res, 500, "executor error: " + reply.header().status().description());
        return;
      }
      StatusOr<inference::ModelInferResponse> response =
          DataReplyToKServe(*request, reply, max_message_bytes_, signature);
      StatusOr<KServeHttpReply> rendered = response.ok()
                                               ? RenderKServeHttpInfer(*request, *response)
                                               : StatusOr<KServeHttpReply>(response.status());
      if (!rendered.ok()) {
        kserve_error(res, rendered.status().code() == StatusCode::kInvalidArgument ? 400 : 500,
                     std::string(rendered.status().message()));
        return;
      }
      res.status = 200;
      if (rendered->json_length >= 0) {
        res.set_header("Inference-Header-Content-Length", std::to_string(rendered->json_length));
        res.set_content(rendered->body, "application/octet-stream");
      } else {
        res.set_content(rendered->body, "application/json");
      }
    });
  }

  void DryRun(httplib::Response& res) {
    jina::DataRequestProto probe;
    probe.mutable_header()->set_request_id(RandomRequestId());
    probe.mutable_header()->set_exec_endpoint("_jina_dry_run_");
    probe.mutable_data()->mutable_docs()->add_docs();
    HttpForwardResult result = forward_(probe.SerializeAsString());
    jina::StatusProto status;
    if (result.grpc_code != 0) {
      status.set_code(jina::StatusProto::ERROR);
      status.set_description(result.grpc_message);
    } else if (result.is_error) {
      jina::DataRequestProto reply;
      reply.ParseFromString(result.reply);
      status = reply.header().status();
    }
    json out{{"code", static_cast<int>(status.code())}, {"description", status.description()}};
    if (status.has_exception()) {
      out["exception"] = MessageToJson(status.exception());
    }
    Reply(res, 200, out);
  }

  HttpForwardFn forward_;
  std::function<bool()> ready_;
  std::map<std::string, std::string> info_;
  std::map<std::string, std::string> served_models_;
  const std::optional<TensorSignature> signature_;  // set before serving
  std::int64_t started_at_;                         // Unix seconds, for /v1/models' `created`
  std::uint64_t max_message_bytes_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};
  int port_ = 0;
};

HttpGateway::HttpGateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpGateway::~HttpGateway() { Shutdown(); }

StatusOr<std::unique_ptr<HttpGateway>> HttpGateway::Start(
    const std::string& host, int port, HttpForwardFn forward,
    std::map<std::string, std::string> info, std::int64_t max_message_bytes,
    const ServerTlsOptions& tls, std::map<std::string, std::string> models,
    std::function<bool()> ready, std::optional<TensorSignature> signature) {
  auto impl = std::make_unique<Impl>(std::move(forward), std::move(info), max_message_bytes,
                                     std::move(models), std::move(ready), std::move(signature));
  GANTRY_RETURN_IF_ERROR(impl->Start(host, port, tls));
  return std::unique_ptr<HttpGateway>(new HttpGateway(std::move(impl)));
}

int HttpGateway::port() const { return impl_->port(); }

void HttpGateway::Shutdown() { impl_->Shutdown(); }

}  // namespace gantry::internal
