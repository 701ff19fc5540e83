// inference.GRPCInferenceService (KServe v2 / Open Inference Protocol, as
// tritonclient.grpc and perf_analyzer call it) on the gateway's gRPC port:
// ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata,
// ModelInfer and Triton's ModelConfig. Requests become Jina documents
// (gateway/kserve.h) and go down the same replica-forwarding path as Jina
// clients' requests. Each served model name maps to an executor endpoint.
//
// Thread safety: handlers run on gRPC's threads concurrently; the service
// holds only immutable state, the thread-safe forwarding functions and an
// atomic count of ModelInfer calls (at most kMaxKServeCallsInFlight).
#ifndef GANTRY_GATEWAY_KSERVE_SERVICE_H_
#define GANTRY_GATEWAY_KSERVE_SERVICE_H_

#include <gantry/tensor_signature.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "gateway/http_gateway.h"
#include "kserve/grpc_predict_v2.grpc.pb.h"

namespace gantry::internal {

// Sends a serialized DataRequestProto to a replica, taking the string, and
// blocks for the answer or the deadline.
using DeadlineForwardFn = std::function<HttpForwardResult(
    std::string request, std::chrono::system_clock::time_point deadline)>;

class KServeService final : public inference::GRPCInferenceService::Service {
 public:
  // `signature`, when set, is what every served model reports and how
  // tensors map to document fields (gateway/kserve.h).
  KServeService(std::map<std::string, std::string> models, DeadlineForwardFn forward,
                std::function<bool()> ready, std::uint64_t max_message_bytes,
                std::optional<TensorSignature> signature = std::nullopt, std::string api_key = "");

  grpc::Status ServerLive(grpc::ServerContext* context, const inference::ServerLiveRequest* request,
                          inference::ServerLiveResponse* response) override;
  grpc::Status ServerReady(grpc::ServerContext* context,
                           const inference::ServerReadyRequest* request,
                           inference::ServerReadyResponse* response) override;
  grpc::Status ModelReady(grpc::ServerContext* context, const inference::ModelReadyRequest* request,
                          inference::ModelReadyResponse* response) override;
  grpc::Status ServerMetadata(grpc::ServerContext* context,
                              const inference::ServerMetadataRequest* request,
                              inference::ServerMetadataResponse* response) override;
  grpc::Status ModelMetadata(grpc::ServerContext* context,
                             const inference::ModelMetadataRequest* request,
                             inference::ModelMetadataResponse* response) override;
  grpc::Status ModelConfig(grpc::ServerContext* context,
                           const inference::ModelConfigRequest* request,
                           inference::ModelConfigResponse* response) override;
  grpc::Status ModelInfer(grpc::ServerContext* context, const inference::ModelInferRequest* request,
                          inference::ModelInferResponse* response) override;

 private:
  // NOT_FOUND naming the served models, for a name or version not served.
  grpc::Status CheckModel(const std::string& name, const std::string& version) const;

  const std::map<std::string, std::string> models_;
  const std::optional<TensorSignature> signature_;
  const DeadlineForwardFn forward_;
  const std::function<bool()> ready_;
  const std::uint64_t max_message_bytes_;
  const std::string api_key_;  // empty: none wanted (gateway/api_key.h)
  std::atomic<int> infer_calls_in_flight_{0};
};

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_KSERVE_SERVICE_H_
