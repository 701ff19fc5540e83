#include "gateway/http_gateway.h"

#include <google/protobuf/util/json_util.h>
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "common/tls.h"
#include "gateway/json_docs.h"
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
       std::int64_t max_message_bytes)
      : forward_(std::move(forward)),
        info_(std::move(info)),
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
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    return OkStatus();
  }

  void Shutdown() {
    if (!server_) {
      return;
    }
    server_->stop();
    if (thread_.joinable()) {
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
      // errors found here.
      int status = result.grpc_code == kUnavailable || result.grpc_code == kNotFound ? 503
                   : result.grpc_code == kDeadlineExceeded                           ? 504
                   : result.grpc_code == kInvalidArgument                            ? 400
                   : result.grpc_code == kResourceExhausted                          ? 413
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
    json out_docs = json::array();
    if (reply.data().has_docs()) {
      for (const auto& doc : reply.data().docs().docs()) {
        out_docs.push_back(DocProtoToJson(doc));
      }
    } else if (!reply.data().docs_bytes().empty()) {
      docarray::DocListProto list;
      list.ParseFromString(reply.data().docs_bytes());
      for (const auto& doc : list.docs()) {
        out_docs.push_back(DocProtoToJson(doc));
      }
    }
    json out{{"header", MessageToJson(reply.header())},
             {"parameters", StructToJson(reply.parameters())}};
    out["data"] = single && out_docs.size() == 1 ? out_docs[0] : out_docs;
    Reply(res, 200, out);
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
  std::map<std::string, std::string> info_;
  std::uint64_t max_message_bytes_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

HttpGateway::HttpGateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpGateway::~HttpGateway() { Shutdown(); }

StatusOr<std::unique_ptr<HttpGateway>> HttpGateway::Start(const std::string& host, int port,
                                                          HttpForwardFn forward,
                                                          std::map<std::string, std::string> info,
                                                          std::int64_t max_message_bytes,
                                                          const ServerTlsOptions& tls) {
  auto impl = std::make_unique<Impl>(std::move(forward), std::move(info), max_message_bytes);
  GANTRY_RETURN_IF_ERROR(impl->Start(host, port, tls));
  return std::unique_ptr<HttpGateway>(new HttpGateway(std::move(impl)));
}

int HttpGateway::port() const { return impl_->port(); }

void HttpGateway::Shutdown() { impl_->Shutdown(); }

}  // namespace gantry::internal
