#include "gateway/kserve_service.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <utility>

#include "common/call_slot.h"
#include "common/tracing.h"
#include "core/limits.h"
#include "gateway/api_key.h"
#include "gateway/kserve.h"
#include "gateway/reply_docs.h"

namespace gantry::internal {
namespace {

grpc::Status ToGrpc(const Status& status) {
  return {static_cast<grpc::StatusCode>(status.code()), std::string(status.message())};
}

}  // namespace

KServeService::KServeService(std::map<std::string, std::string> models, DeadlineForwardFn forward,
                             std::function<bool()> ready, std::uint64_t max_message_bytes,
                             std::optional<TensorSignature> signature, std::string api_key)
    : models_(std::move(models)),
      signature_(std::move(signature)),
      forward_(std::move(forward)),
      ready_(std::move(ready)),
      max_message_bytes_(max_message_bytes),
      api_key_(std::move(api_key)) {}

grpc::Status KServeService::CheckModel(const std::string& name, const std::string& version) const {
  if (!models_.contains(name)) {
    std::string served;
    for (const auto& [served_name, endpoint] : models_) {
      served += (served.empty() ? "'" : ", '") + served_name + "'";
    }
    return {grpc::StatusCode::NOT_FOUND,
            "model '" + name + "' is not served here; this deployment serves " + served};
  }
  if (!version.empty() && version != kKServeModelVersion) {
    return {grpc::StatusCode::NOT_FOUND, "model '" + name + "' has no version '" + version +
                                             "' (Gantry serves version " + kKServeModelVersion +
                                             ")"};
  }
  return grpc::Status::OK;
}

grpc::Status KServeService::ServerLive(grpc::ServerContext* /*context*/,
                                       const inference::ServerLiveRequest* /*request*/,
                                       inference::ServerLiveResponse* response) {
  response->set_live(true);
  return grpc::Status::OK;
}

grpc::Status KServeService::ServerReady(grpc::ServerContext* /*context*/,
                                        const inference::ServerReadyRequest* /*request*/,
                                        inference::ServerReadyResponse* response) {
  response->set_ready(ready_());
  return grpc::Status::OK;
}

grpc::Status KServeService::ModelReady(grpc::ServerContext* /*context*/,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) {
  // A model not served here is simply not ready, as Triton answers, so
  // that clients' is_model_ready() gives false rather than raising.
  response->set_ready(CheckModel(request->name(), request->version()).ok() && ready_());
  return grpc::Status::OK;
}

grpc::Status KServeService::ServerMetadata(grpc::ServerContext* /*context*/,
                                           const inference::ServerMetadataRequest* /*request*/,
                                           inference::ServerMetadataResponse* response) {
  response->set_name("gantry");
  response->set_version(GANTRY_VERSION);
  response->add_extensions("model_configuration");
  return grpc::Status::OK;
}

grpc::Status KServeService::ModelMetadata(grpc::ServerContext* /*context*/,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) {
  if (grpc::Status s = CheckModel(request->name(), request->version()); !s.ok()) {
    return s;
  }
  *response = KServeModelMetadata(request->name(), signature_ ? &*signature_ : nullptr);
  return grpc::Status::OK;
}

grpc::Status KServeService::ModelConfig(grpc::ServerContext* /*context*/,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) {
  if (grpc::Status s = CheckModel(request->name(), request->version()); !s.ok()) {
    return s;
  }
  *response->mutable_config() =
      KServeModelConfig(request->name(), signature_ ? &*signature_ : nullptr);
  return grpc::Status::OK;
}

grpc::Status KServeService::ModelInfer(grpc::ServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) {
  if (grpc::Status s = CheckGrpcApiKey(*context, api_key_); !s.ok()) {
    return s;
  }
  CallSlot slot(infer_calls_in_flight_, kMaxKServeCallsInFlight);
  if (!slot.admitted()) {
    return {grpc::StatusCode::RESOURCE_EXHAUSTED,
            "ModelInfer: the gateway is busy: it already holds " +
                std::to_string(kMaxKServeCallsInFlight) +
                " ModelInfer calls, the most it takes at once; retry later"};
  }
  if (grpc::Status s = CheckModel(request->model_name(), request->model_version()); !s.ok()) {
    return s;
  }
  static std::atomic<std::uint64_t> next_id{0};
  const std::string request_id =
      request->id().empty() ? "kserve-" + std::to_string(next_id.fetch_add(1)) : request->id();
  StatusOr<jina::DataRequestProto> data_request =
      KServeToDataRequest(*request, models_.at(request->model_name()), request_id,
                          max_message_bytes_, signature_ ? &*signature_ : nullptr);
  if (!data_request.ok()) {
    return ToGrpc(data_request.status().WithPrefix("model '" + request->model_name() + "'"));
  }
  std::optional<TraceContext> trace;
  if (auto it = context->client_metadata().find(kTraceparentKey);
      it != context->client_metadata().end()) {
    trace = ParseTraceparent(std::string_view(it->second.data(), it->second.size()));
  }
  const TraceContextScope trace_scope(trace);
  HttpForwardResult result = forward_(TakeSerialized(*data_request), context->deadline());
  if (result.grpc_code != 0) {
    return {static_cast<grpc::StatusCode>(result.grpc_code), result.grpc_message};
  }
  jina::DataRequestProto reply;
  if (!ParseReply(result, &reply)) {
    return {grpc::StatusCode::INTERNAL, "gateway: the replica's reply does not parse"};
  }
  if (result.is_error || reply.header().status().code() == jina::StatusProto::ERROR) {
    const std::optional<int> refused = QueueRefusalCode(reply.header().status());
    const bool invalid =
        IsInputTooLarge(reply.header().status()) || IsInvalidInput(reply.header().status());
    return {refused   ? static_cast<grpc::StatusCode>(*refused)
            : invalid ? grpc::StatusCode::INVALID_ARGUMENT
                      : grpc::StatusCode::INTERNAL,
            "executor error: " + reply.header().status().description()};
  }
  StatusOr<inference::ModelInferResponse> out = DataReplyToKServe(
      *request, std::move(reply), max_message_bytes_, signature_ ? &*signature_ : nullptr);
  if (!out.ok()) {
    return ToGrpc(out.status().WithPrefix("model '" + request->model_name() + "'"));
  }
  *response = std::move(out).value();
  return grpc::Status::OK;
}

}  // namespace gantry::internal
