#include "worker/worker_service.h"

#include <grpc/grpc.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "common/call_slot.h"
#include "common/grpc_options.h"
#include "common/tracing.h"
#include "core/limits.h"
#include "jina/jina.grpc.pb.h"
#include "worker/reflection_service.h"

namespace gantry::internal {
namespace {

// Request bytes that do not parse are the client's error. The streamed-unary
// form of a method lets us see that (the plain sync form answers INTERNAL
// before our code runs); on the wire it is the same unary RPC.
grpc::Status NotParsed(const char* method, const char* message_type) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      std::string(method) + ": the request is not a serialized " + message_type +
                          " (malformed, a string field such as a document's text that is not "
                          "valid UTF-8, or nested deeper than protobuf's 100-level limit)");
}

// A request that waited this long for the handler is asked whether its
// caller cancelled it before the handler runs; one that did not wait was
// just read, and a cancel that races its start is not caught either way.
constexpr std::chrono::milliseconds kAskCancelledAfterWaiting{1};

// RESOURCE_EXHAUSTED for a data call past kMaxWorkerCallsInFlight.
grpc::Status Busy(const char* method, const RequestHandler& handler) {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      std::string(method) + ": replica " + handler.runtime_name() +
                          " is busy: it already holds " + std::to_string(kMaxWorkerCallsInFlight) +
                          " calls, the most it takes at once; retry later");
}

// The caller's W3C trace context (the gateway's span), "" when none.
std::string_view TraceparentOf(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find(kTraceparentKey);
  return it == metadata.end() ? std::string_view()
                              : std::string_view(it->second.data(), it->second.size());
}

class SingleDataService final : public jina::JinaSingleDataRequestRPC::StreamedUnaryService {
 public:
  SingleDataService(RequestHandler* handler, std::int64_t max_message_bytes,
                    std::atomic<int>* calls_in_flight)
      : handler_(handler),
        max_message_bytes_(max_message_bytes),
        calls_in_flight_(calls_in_flight) {}
  grpc::Status Streamedprocess_single_data(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<jina::DataRequestProto, jina::DataRequestProto>* stream) override {
    CallSlot slot(*calls_in_flight_, kMaxWorkerCallsInFlight);
    if (!slot.admitted()) {
      return Busy("process_single_data", *handler_);
    }
    // A request its caller gave up on (cancelled, or past the deadline the
    // gateway passed on) does not run the handler, also after waiting for it.
    // The deadline is a clock read; whether a sync call was cancelled is
    // not: IsCancelled polls the call's completion queue, and on the
    // handler thread that poll took more than half of the handler thread's
    // time on the no-op path. It is asked only of requests that waited for
    // their turn.
    const auto arrived = std::chrono::steady_clock::now();
    auto abandoned = [context, arrived] {
      if (context->deadline() <= std::chrono::system_clock::now()) {
        return true;
      }
      return std::chrono::steady_clock::now() - arrived >= kAskCancelledAfterWaiting &&
             context->IsCancelled();
    };
    // The reply is the request, processed in place.
    jina::DataRequestProto request;
    if (!stream->Read(&request)) {
      return NotParsed("process_single_data", "jina.DataRequestProto");
    }
    if (abandoned()) {
      return grpc::Status(grpc::StatusCode::CANCELLED,
                          "request " + request.header().request_id() +
                              " was cancelled or past its deadline before it started");
    }
    RequestHandler::Result result =
        handler_->Handle(&request, max_message_bytes_, abandoned, TraceparentOf(*context));
    if (!result.status.ok()) {
      return ToGrpcStatus(result.status);
    }
    if (result.is_error) {
      context->AddTrailingMetadata("is-error", "true");
    }
    // Sent with the status, as the plain unary form does: one wait for
    // gRPC's poller a call instead of two.
    stream->WriteLast(request, grpc::WriteOptions());
    return grpc::Status::OK;
  }

 private:
  RequestHandler* handler_;
  std::int64_t max_message_bytes_;
  std::atomic<int>* calls_in_flight_;
};

class DataListService final : public jina::JinaDataRequestRPC::StreamedUnaryService {
 public:
  DataListService(RequestHandler* handler, std::int64_t max_message_bytes,
                  std::atomic<int>* calls_in_flight)
      : handler_(handler),
        max_message_bytes_(max_message_bytes),
        calls_in_flight_(calls_in_flight) {}
  // Jina merges the requests of a list into the first one before the call.
  grpc::Status Streamedprocess_data(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<jina::DataRequestListProto, jina::DataRequestProto>* stream)
      override {
    CallSlot slot(*calls_in_flight_, kMaxWorkerCallsInFlight);
    if (!slot.admitted()) {
      return Busy("process_data", *handler_);
    }
    jina::DataRequestListProto list;
    if (!stream->Read(&list)) {
      return NotParsed("process_data", "jina.DataRequestListProto");
    }
    if (list.requests_size() == 0) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "process_data got no requests");
    }
    jina::DataRequestProto reply = std::move(*list.mutable_requests(0));
    for (int i = 1; i < list.requests_size(); ++i) {
      const auto& other = list.requests(i);
      if (other.data().has_docs()) {
        reply.mutable_data()->mutable_docs()->MergeFrom(other.data().docs());
      }
    }
    RequestHandler::Result result =
        handler_->Handle(&reply, max_message_bytes_, {}, TraceparentOf(*context));
    if (!result.status.ok()) {
      return ToGrpcStatus(result.status);
    }
    if (result.is_error) {
      context->AddTrailingMetadata("is-error", "true");
    }
    stream->WriteLast(reply, grpc::WriteOptions());  // with the status, as above
    return grpc::Status::OK;
  }

 private:
  RequestHandler* handler_;
  std::int64_t max_message_bytes_;
  std::atomic<int>* calls_in_flight_;
};

class StreamService final : public jina::JinaRPC::Service {
 public:
  StreamService(RequestHandler* handler, std::int64_t max_message_bytes,
                std::atomic<int>* calls_in_flight)
      : handler_(handler),
        max_message_bytes_(max_message_bytes),
        calls_in_flight_(calls_in_flight) {}
  // Requests of one stream are processed in order, as Jina's worker does. A
  // malformed request ends the stream with INVALID_ARGUMENT: a stream has no
  // per-message status. An open stream holds its thread, so it counts as one
  // call for as long as it is open.
  grpc::Status Call(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<jina::DataRequestProto, jina::DataRequestProto>* stream) override {
    CallSlot slot(*calls_in_flight_, kMaxWorkerCallsInFlight);
    if (!slot.admitted()) {
      return Busy("Call", *handler_);
    }
    jina::DataRequestProto request;
    while (stream->Read(&request)) {
      RequestHandler::Result result =
          handler_->Handle(&request, max_message_bytes_, {}, TraceparentOf(*context));
      if (!result.status.ok()) {
        return ToGrpcStatus(result.status);
      }
      if (!stream->Write(request)) {
        break;
      }
    }
    return grpc::Status::OK;
  }

 private:
  RequestHandler* handler_;
  std::int64_t max_message_bytes_;
  std::atomic<int>* calls_in_flight_;
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
  Services(RequestHandler* handler, std::int64_t max_message_bytes)
      : single(handler, max_message_bytes, &calls_in_flight),
        list(handler, max_message_bytes, &calls_in_flight),
        stream(handler, max_message_bytes, &calls_in_flight),
        discovery(handler),
        info(handler),
        reflection(WorkerReflectionServices()) {}
  // Data calls held now, across the three data services.
  std::atomic<int> calls_in_flight{0};
  SingleDataService single;
  DataListService list;
  StreamService stream;
  DiscoveryService discovery;
  InfoService info;
  // Jina's gateway discovers a worker's services by v1alpha reflection.
  ReflectionService reflection;
};

StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(
    RequestHandler* handler, const std::string& host, int port, std::int64_t max_message_bytes,
    std::chrono::seconds max_connection_age) {
  std::unique_ptr<WorkerServer> server(new WorkerServer());
  server->services_ = std::make_unique<Services>(handler, max_message_bytes);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(builder, max_message_bytes);
  if (max_connection_age.count() > 0) {
    builder.AddChannelArgument(
        GRPC_ARG_MAX_CONNECTION_AGE_MS,
        static_cast<int>(std::chrono::milliseconds(max_connection_age).count()));
  }
  BoundSyncServerThreads(builder, "gantry-worker", kMaxWorkerCallsInFlight);
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
    // gRPC's Shutdown sends every client GOAWAY (they take new calls
    // elsewhere) and waits for the calls in flight, but also for every
    // connection to close, which a client that does not read its socket
    // while idle (a Python channel, a sync stub) never does: an idle worker
    // took the whole grace to stop. Once no data call is left (seen twice in
    // a row, so that one a server thread is just picking up counts), the
    // connections are cut.
    std::atomic<bool> stopped{false};
    std::thread stopper([this, grace, &stopped] {
      server_->Shutdown(std::chrono::system_clock::now() + grace);
      stopped.store(true);
    });
    auto pause = std::chrono::milliseconds(1);
    int idle_checks = 0;
    while (!stopped.load()) {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(20));
      idle_checks = services_->calls_in_flight.load() == 0 ? idle_checks + 1 : 0;
      if (idle_checks >= 2 && !stopped.load()) {
        grpc_server_cancel_all_calls(server_->c_server());
      }
    }
    stopper.join();
  });
}

void WorkerServer::Wait() {
  if (server_) {
    server_->Wait();
  }
}

}  // namespace gantry::internal
