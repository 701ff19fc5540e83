// KServe v2 / Open Inference Protocol over HTTP (the REST face of
// gateway/kserve.h), as tritonclient.http and perf_analyzer -i http call it:
// JSON tensors, and the binary tensor extension (a JSON header of
// `Inference-Header-Content-Length` bytes, then each binary tensor's bytes
// in input order, sized by its `binary_data_size` parameter). A request is
// parsed into the gRPC form (inference::ModelInferRequest, every input as
// raw contents) so both faces share one conversion to documents.
//
// Thread safety: free functions without shared state.
#ifndef GANTRY_GATEWAY_KSERVE_HTTP_H_
#define GANTRY_GATEWAY_KSERVE_HTTP_H_

#include <gantry/status.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kserve/grpc_predict_v2.pb.h"

namespace gantry::internal {

// POST /v2/models/{model}[/versions/{version}]/infer. `json_length` is the
// Inference-Header-Content-Length header's value, or -1 when the whole body
// is JSON. Malformed JSON, shapes, data and binary sizes are InvalidArgument
// naming the input.
StatusOr<inference::ModelInferRequest> ParseKServeHttpInfer(std::string_view body,
                                                            std::int64_t json_length,
                                                            const std::string& model,
                                                            const std::string& version,
                                                            std::uint64_t max_bytes);

struct KServeHttpReply {
  std::string body;
  // Inference-Header-Content-Length, or -1 when the body is JSON only.
  std::int64_t json_length = -1;
};

// The reply to `request`: each output as binary data when the request asked
// for it (its `binary_data` parameter, or `binary_data_output` on the
// request), else as a JSON `data` list.
StatusOr<KServeHttpReply> RenderKServeHttpInfer(const inference::ModelInferRequest& request,
                                                const inference::ModelInferResponse& response);

// GET /v2/models/{model}: {"name", "versions", "platform", "inputs",
// "outputs"} with numeric shapes.
nlohmann::json KServeMetadataJson(const inference::ModelMetadataResponse& metadata);
// GET /v2/models/{model}/config: Triton's configuration JSON.
nlohmann::json KServeConfigJson(const inference::ModelConfig& config);

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_KSERVE_HTTP_H_
