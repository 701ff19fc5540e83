// KServe v2 / Open Inference Protocol <-> Jina documents, for the gateway's
// inference.GRPCInferenceService. An inference request becomes the
// DataRequestProto a Jina client would send to the model's executor
// endpoint, so handlers, batching and errors are the Jina path's:
//
//   inputs   every input's first dimension is the batch N (all equal): N
//            documents. A BYTES input of shape [N] or [N, 1] sets each
//            document's `text`; a numeric input of shape [N, d...] sets the
//            tensor field of the input's name to row i (shape [d...]).
//   outputs  each requested output (default: "embedding") is the tensor
//            field of that name, stacked over the documents: [N, d...].
//            Every document must have it, with one dtype and shape.
//   parameters  request parameters become Jina `parameters`.
// Limits: at most kMaxKServeInputs inputs, shapes of at most
// kMaxKServeRank dimensions, and sizes checked without overflow against the
// message cap; every mistake is InvalidArgument naming the input and field.
//
// Thread safety: free functions without shared state.
#ifndef GANTRY_GATEWAY_KSERVE_H_
#define GANTRY_GATEWAY_KSERVE_H_

#include <gantry/status.h>
#include <gantry/tensor_signature.h>

#include <cstdint>
#include <string>

#include "jina/jina.pb.h"
#include "kserve/grpc_predict_v2.pb.h"

namespace gantry::internal {

inline constexpr int kMaxKServeInputs = 64;
inline constexpr int kMaxKServeRank = 8;
// Documents in one inference request (tritonclient batches are far smaller).
inline constexpr std::int64_t kMaxKServeBatch = 65536;
// What ModelConfig reports as max_batch_size: the first dimension of every
// input is the batch, up to this many documents.
inline constexpr int kKServeMaxBatchSize = 1024;
// The version every model reports: Gantry serves one version of each.
inline constexpr char kKServeModelVersion[] = "1";

// The model's signature: the executor's declared inputs and outputs
// (`signature`, gantry/tensor_signature.h), each [-1] + its shape, or,
// without one, the text-embedding signature: input "text" (BYTES [-1, 1])
// and output "embedding" (FP32 [-1, -1]). Tensor inputs and outputs of
// other names are accepted too (see above).
inference::ModelMetadataResponse KServeModelMetadata(const std::string& name,
                                                     const TensorSignature* signature = nullptr);
// Triton's model configuration for the same signature (perf_analyzer reads
// it): max_batch_size kKServeMaxBatchSize, dims without the batch.
inference::ModelConfig KServeModelConfig(const std::string& name,
                                         const TensorSignature* signature = nullptr);

// The Jina request for `request`, posted to `endpoint`. With a signature,
// an input it declares fills that input's document field.
StatusOr<jina::DataRequestProto> KServeToDataRequest(const inference::ModelInferRequest& request,
                                                     const std::string& endpoint,
                                                     const std::string& request_id,
                                                     std::uint64_t max_bytes,
                                                     const TensorSignature* signature = nullptr);

// The inference response for the executor's `reply` to `request`: raw output
// contents, one buffer per output, as tritonclient reads them.
// InvalidArgument when a requested output is missing from a document, and
// Internal when the reply is malformed. With a signature, an output it
// declares is read from that output's field, and a request that names no
// outputs gets every declared one (as Triton answers).
StatusOr<inference::ModelInferResponse> DataReplyToKServe(
    const inference::ModelInferRequest& request, jina::DataRequestProto reply,
    std::uint64_t max_bytes, const TensorSignature* signature = nullptr);

// The KServe datatype ("FP32") of a numpy dtype string ("<f4"), or "" when
// KServe has none.
std::string KServeDatatypeOf(const std::string& numpy_dtype);

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_KSERVE_H_
