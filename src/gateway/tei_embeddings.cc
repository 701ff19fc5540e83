#include "gateway/tei_embeddings.h"

#include <cmath>
#include <cstdint>

#include "gateway/openai_embeddings.h"

namespace gantry::internal {
namespace {

using nlohmann::json;

// gRPC codes, as in grpcpp's StatusCode (not included here).
constexpr int kDeadlineExceeded = 4;
constexpr int kResourceExhausted = 8;
constexpr int kUnavailable = 14;

TeiError Invalid(std::string message) {
  return TeiError{.http_status = 422, .message = std::move(message), .type = "Validation"};
}

std::string ServedNames(const std::map<std::string, std::string>& served) {
  std::string names;
  for (const auto& [name, endpoint] : served) {
    names += (names.empty() ? "'" : ", '") + name + "'";
  }
  return names;
}

}  // namespace

TeiError TeiError::FromGrpc(int grpc_code, std::string message) {
  switch (grpc_code) {
    case kResourceExhausted:
      return TeiError{.http_status = 429, .message = std::move(message), .type = "Overloaded"};
    case kUnavailable:
      return TeiError{.http_status = 503, .message = std::move(message), .type = "Unhealthy"};
    case kDeadlineExceeded:
      return TeiError{.http_status = 504, .message = std::move(message), .type = "Backend"};
    default:
      return TeiError{.http_status = 424, .message = std::move(message), .type = "Backend"};
  }
}

json TeiError::ToJson() const { return json{{"error", message}, {"error_type", type}}; }

std::variant<TeiEmbedRequest, TeiError> ParseTeiEmbedRequest(
    const json& body, const std::map<std::string, std::string>& served, std::size_t max_inputs) {
  if (!body.is_object()) {
    return Invalid("request body must be a JSON object");
  }
  TeiEmbedRequest request;
  if (auto model = body.find("model"); model != body.end() && !model->is_null()) {
    if (!model->is_string() || !served.contains(model->get<std::string>())) {
      return TeiError{.http_status = 404,
                      .message = "model " + model->dump() +
                                 " is not served (served: " + ServedNames(served) + ")",
                      .type = "Validation"};
    }
    request.model = model->get<std::string>();
  } else if (served.size() == 1) {
    request.model = served.begin()->first;
  } else {
    return Invalid("this gateway serves several models (" + ServedNames(served) +
                   "): name one in \"model\"");
  }

  auto inputs = body.find("inputs");
  if (inputs == body.end() || inputs->is_null()) {
    return Invalid("\"inputs\" is required: a string or a list of strings");
  }
  if (auto problem = ReadTextInputs(*inputs, "inputs", max_inputs, request.inputs)) {
    if (problem->too_many) {
      // TEI's own wording for its max_client_batch_size.
      return TeiError{.http_status = 413,
                      .message = "batch size " + std::to_string(inputs->size()) +
                                 " > maximum allowed batch size " + std::to_string(max_inputs),
                      .type = "Validation"};
    }
    return Invalid(problem->message);
  }

  if (auto normalize = body.find("normalize"); normalize != body.end() && !normalize->is_null()) {
    if (!normalize->is_boolean()) {
      return Invalid("\"normalize\" must be true or false, got " + normalize->dump());
    }
    request.normalize = normalize->get<bool>();
  }
  if (auto truncate = body.find("truncate"); truncate != body.end() && !truncate->is_null()) {
    if (!truncate->is_boolean()) {
      return Invalid("\"truncate\" must be true or false, got " + truncate->dump());
    }
    request.truncate = truncate->get<bool>();
  }
  if (auto direction = body.find("truncation_direction");
      direction != body.end() && !direction->is_null()) {
    if (*direction == "Right" || *direction == "right") {
      request.truncation_direction = "right";
    } else if (*direction == "Left" || *direction == "left") {
      request.truncation_direction = "left";
    } else {
      return Invalid("\"truncation_direction\" must be \"Right\" or \"Left\", got " +
                     direction->dump());
    }
  }
  if (auto prompt = body.find("prompt_name"); prompt != body.end() && !prompt->is_null()) {
    if (!prompt->is_string()) {
      return Invalid("\"prompt_name\" must be a string, got " + prompt->dump());
    }
    request.prompt_name = prompt->get<std::string>();
  }
  return request;
}

jina::DataRequestProto MakeTeiDataRequest(const TeiEmbedRequest& request,
                                          const std::string& endpoint,
                                          const std::string& request_id) {
  // The documents as OpenAI's route makes them; TEI's fields as parameters.
  OpenAiEmbeddingsRequest as_openai;
  as_openai.inputs = request.inputs;
  jina::DataRequestProto proto = MakeOpenAiDataRequest(as_openai, endpoint, request_id);
  auto& parameters = *proto.mutable_parameters()->mutable_fields();
  parameters.clear();
  if (!request.normalize) {
    parameters["normalize"].set_bool_value(false);
  }
  if (request.truncate) {
    parameters["truncate"].set_bool_value(*request.truncate);
  }
  if (!request.truncation_direction.empty()) {
    parameters["truncation_direction"].set_string_value(request.truncation_direction);
  }
  if (!request.prompt_name.empty()) {
    parameters["prompt_name"].set_string_value(request.prompt_name);
  }
  return proto;
}

std::variant<json, TeiError> MakeTeiEmbedResponse(const TeiEmbedRequest& request,
                                                  const jina::DataRequestProto& reply,
                                                  std::uint64_t max_tensor_bytes) {
  // The documents are read as OpenAI's route reads them (one float vector
  // per input, named when not); only the shape of the answer differs.
  OpenAiEmbeddingsRequest as_openai;
  as_openai.model = request.model;
  as_openai.inputs = request.inputs;
  auto decoded = MakeOpenAiEmbeddingsResponse(as_openai, reply, max_tensor_bytes);
  if (const auto* error = std::get_if<OpenAiError>(&decoded)) {
    return TeiError{.http_status = 424, .message = error->message, .type = "Backend"};
  }
  json out = json::array();
  for (json& item : std::get<json>(decoded)["data"]) {
    std::vector<float> values = item["embedding"].get<std::vector<float>>();
    if (request.normalize) {
      double norm = 0;
      for (float v : values) {
        norm += static_cast<double>(v) * v;
      }
      if (norm > 0) {
        const double scale = 1.0 / std::sqrt(norm);
        for (float& v : values) {
          v = static_cast<float>(v * scale);
        }
      }
    }
    out.push_back(std::move(values));
  }
  return out;
}

}  // namespace gantry::internal
