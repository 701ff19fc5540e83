// libFuzzer target: the gateway's other protocols, what their clients send.
// The first byte picks the parser:
//   0  KServe v2 REST infer body (gateway/kserve_http.cc); the next two
//      bytes, when bit 1 of the first is set, are Inference-Header-Content-
//      Length, so the binary tensor extension is reached too
//   1  a serialized inference.ModelInferRequest (gRPC ModelInfer)
//   2  an OpenAI embeddings body (gateway/openai_embeddings.cc), and the
//      same body as TEI's /embed (gateway/tei_embeddings.cc)
// A request that parses goes on to the documents a worker would get, and a
// KServe one is answered from its own documents (as if an executor had
// echoed them), through both the gRPC and the REST rendering. Every refusal
// must say why; nothing may crash, throw or allocate past the 1 MiB cap.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>

#include "core/value_json.h"
#include "gateway/kserve.h"
#include "gateway/kserve_http.h"
#include "gateway/openai_embeddings.h"
#include "gateway/tei_embeddings.h"
#include "jina/jina.pb.h"

namespace {

constexpr std::uint64_t kCap = std::uint64_t{1} << 20;

void RequireReason(const gantry::Status& status) {
  if (!status.ok() && status.message().empty()) {
    __builtin_trap();  // every refusal says why
  }
}

void ToDocumentsAndBack(const inference::ModelInferRequest& request) {
  gantry::StatusOr<jina::DataRequestProto> data =
      gantry::internal::KServeToDataRequest(request, "/encode", "fuzz", kCap);
  RequireReason(data.status());
  if (!data.ok()) {
    return;
  }
  gantry::StatusOr<inference::ModelInferResponse> response =
      gantry::internal::DataReplyToKServe(request, *data, kCap);
  RequireReason(response.status());
  if (response.ok()) {
    RequireReason(gantry::internal::RenderKServeHttpInfer(request, *response).status());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) {
    return 0;
  }
  const std::uint8_t mode = data[0] % 3;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (mode == 0) {
    std::int64_t json_length = -1;
    if ((data[0] & 8) != 0 && rest.size() >= 2) {
      json_length = static_cast<std::uint8_t>(rest[0]) | (static_cast<std::uint8_t>(rest[1]) << 8);
      rest.remove_prefix(2);
    }
    gantry::StatusOr<inference::ModelInferRequest> request =
        gantry::internal::ParseKServeHttpInfer(rest, json_length, "m", "", kCap);
    RequireReason(request.status());
    if (request.ok()) {
      ToDocumentsAndBack(*request);
    }
  } else if (mode == 1) {
    inference::ModelInferRequest request;
    if (request.ParseFromArray(rest.data(), static_cast<int>(rest.size()))) {
      ToDocumentsAndBack(request);
    }
  } else {
    gantry::StatusOr<nlohmann::json> body = gantry::internal::ParseJsonBounded(rest);
    if (!body.ok()) {
      return 0;
    }
    const std::map<std::string, std::string> served{{"m", "/encode"}};
    auto parsed = gantry::internal::ParseOpenAiEmbeddingsRequest(*body, served);
    if (auto* request = std::get_if<gantry::internal::OpenAiEmbeddingsRequest>(&parsed)) {
      (void)gantry::internal::MakeOpenAiDataRequest(*request, "/encode", "fuzz");
    } else if (std::get<gantry::internal::OpenAiError>(parsed).message.empty()) {
      __builtin_trap();
    }
    // The same body as text-embeddings-inference's /embed.
    auto tei = gantry::internal::ParseTeiEmbedRequest(*body, served, 2048);
    if (auto* request = std::get_if<gantry::internal::TeiEmbedRequest>(&tei)) {
      (void)gantry::internal::MakeTeiDataRequest(*request, "/encode", "fuzz");
    } else if (std::get<gantry::internal::TeiError>(tei).message.empty()) {
      __builtin_trap();
    }
  }
  return 0;
}
