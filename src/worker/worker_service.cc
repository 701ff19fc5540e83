#include "worker/worker_service.h"

#include <grpcpp/health_check_service_interface.h>

#include "common/grpc_options.h"
#include "jina/jina.grpc.pb.h"
#include "worker/reflection_service.h"

namespace gantry::internal {
namespace {

class SingleDataService final : public jina::JinaSingleDataRequestRPC::Service {
 public:
  explicit SingleDataService(RequestHandler* handler) : handler_(handler) {}
  grpc::Status process_single_data(grpc::ServerContext* context,
                                   const jina::DataRequestProto* request,
                                   jina::DataRequestProto* reply) override {
    // A request its caller gave up on (cancelled, or past the deadline the
    // gateway passed on) does not run the handler, also after waiting for it.
    auto abandoned = [context] {
      return context->IsCancelled() || context->deadline() <= std::chrono::system_clock::now();
    };
    if (abandoned()) {
      return grpc::Status(grpc::StatusCode::CANCELLED,
                          "request " + request->header().request_id() +
                              " was cancelled or past its deadline before it started");
    }
    // The reply is the request, processed in place. gRPC's sync handler owns
    // a non-const request object that it only destroys after this returns, so
    // taking its contents (instead of a deep copy of every document) is safe.
    reply->Swap(const_cast<jina::DataRequestProto*>(request));
    if (handler_->Handle(reply, abandoned)) {
      context->AddTrailingMetadata("is-error", "true");
    }
    return grpc::Status::OK;
  }

 private:
  RequestHandler* handler_;
};

class DataListService final : public jina::JinaDataRequestRPC::Service {
 public:
  explicit DataListService(RequestHandler* handler) : handler_(handler) {}
  // Jina merges the requests of a list into the first one before the call.
  grpc::Status process_data(grpc::ServerContext* context, const jina::DataRequestListProto* request,
                            jina::DataRequestProto* reply) override {
    if (request->requests_size() == 0) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "process_data got no requests");
    }
    *reply = request->requests(0);
    for (int i = 1; i < request->requests_size(); ++i) {
      const auto& other = request->requests(i);
      if (other.data().has_docs()) {
        reply->mutable_data()->mutable_docs()->MergeFrom(other.data().docs());
      }
    }
    if (handler_->Handle(reply)) {
      context->AddTrailingMetadata("is-error", "true");
    }
    return grpc::Status::OK;
  }

 private:
  RequestHandler* handler_;
};

class StreamService final : public jina::JinaRPC::Service {
 public:
  explicit StreamService(RequestHandler* handler) : handler_(handler) {}
  // Requests of one stream are processed in order, as Jina's worker does.
  grpc::Status Call(
      grpc::ServerContext* /*context*/,
      grpc::ServerReaderWriter<jina::DataRequestProto, jina::DataRequestProto>* stream) override {
    jina::DataRequestProto request;
    while (stream->Read(&request)) {
      handler_->Handle(&request);
      if (!stream->Write(request)) {
        break;
      }
    }
    return grpc::Status::OK;
  }

 private:
  RequestHandler* handler_;
};

class DiscoveryService final : public jina::JinaDiscoverEndpointsRPC::Service {
 public:
  explicit DiscoveryService(RequestHandler* handler) : handler_(handler) {}
  grpc::Status endpoint_discovery(grpc::ServerContext* /*context*/,
                                  const google::protobuf::Empty* /*request*/,
                                  jina::EndpointsProto* reply) override {
    handler_->FillEndpoints(reply);
    return grpc::Status::OK;
  }

 private:
  RequestHandler* handler_;
};

class InfoService final : public jina::JinaInfoRPC::Service {
 public:
  explicit InfoService(RequestHandler* handler) : handler_(handler) {}
  grpc::Status _status(grpc::ServerContext* /*context*/, const google::protobuf::Empty* /*request*/,
                       jina::JinaInfoProto* reply) override {
    (*reply->mutable_jina())["gantry"] = GANTRY_VERSION;
    (*reply->mutable_jina())["executor"] = handler_->jtype();
    (*reply->mutable_jina())["name"] = handler_->executor_name();
    for (const auto& [key, value] : handler_->DeviceInfo()) {
      (*reply->mutable_jina())[key] = value;
    }
    return grpc::Status::OK;
  }

 private:
  RequestHandler* handler_;
};

}  // namespace

struct WorkerServer::Services {
  explicit Services(RequestHandler* handler)
      : single(handler),
        list(handler),
        stream(handler),
        discovery(handler),
        info(handler),
        reflection(WorkerReflectionServices()) {}
  SingleDataService single;
  DataListService list;
  StreamService stream;
  DiscoveryService discovery;
  InfoService info;
  // Jina's gateway discovers a worker's services by v1alpha reflection.
  ReflectionService reflection;
};

StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(RequestHandler* handler,
                                                            const std::string& host, int port,
                                                            std::int64_t max_message_bytes) {
  std::unique_ptr<WorkerServer> server(new WorkerServer());
  server->services_ = std::make_unique<Services>(handler);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(builder, max_message_bytes);
  std::string address = JoinHostPort(host, port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(&server->services_->single);
  builder.RegisterService(&server->services_->list);
  builder.RegisterService(&server->services_->stream);
  builder.RegisterService(&server->services_->discovery);
  builder.RegisterService(&server->services_->info);
  builder.RegisterService(&server->services_->reflection);
  server->server_ = builder.BuildAndStart();
  if (!server->server_ || server->port_ == 0) {
    return UnavailableError("cannot listen on " + address +
                            " (port in use or address not available)");
  }
  return server;
}

WorkerServer::~WorkerServer() { Shutdown(std::chrono::milliseconds(0)); }

void WorkerServer::Shutdown(std::chrono::milliseconds grace) {
  std::call_once(shutdown_once_, [&] {
    if (!server_) {
      return;
    }
    if (auto* health = server_->GetHealthCheckService()) {
      health->Shutdown();
    }
    server_->Shutdown(std::chrono::system_clock::now() + grace);
  });
}

void WorkerServer::Wait() {
  if (server_) {
    server_->Wait();
  }
}

}  // namespace gantry::internal
