#include "gateway/openai_embeddings.h"

#include <absl/strings/escaping.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>

#include "core/doc_proto.h"
#include "docarray/docarray.pb.h"
#include "gateway/reply_docs.h"

namespace gantry::internal {
namespace {

using nlohmann::json;

OpenAiError Invalid(std::string message, std::string param) {
  return OpenAiError::Invalid(std::move(message), std::move(param));
}

OpenAiError ServerError(std::string message) {
  return OpenAiError::WithStatus(500, std::move(message));
}

std::string ServedNames(const std::map<std::string, std::string>& served) {
  std::string names;
  for (const auto& [name, endpoint] : served) {
    names += (names.empty() ? "'" : ", '") + name + "'";
  }
  return names;
}

// float32 in little-endian byte order, what the openai client decodes.
std::string Base64OfFloats(const std::vector<float>& values) {
  static_assert(std::endian::native == std::endian::little, "Gantry runs on little-endian hosts");
  return absl::Base64Escape(absl::string_view(reinterpret_cast<const char*>(values.data()),
                                              values.size() * sizeof(float)));
}

}  // namespace

OpenAiError OpenAiError::Invalid(std::string message, std::string param) {
  OpenAiError error;
  error.message = std::move(message);
  error.param = std::move(param);
  return error;
}

OpenAiError OpenAiError::WithStatus(int http_status, std::string message, std::string code) {
  OpenAiError error;
  error.http_status = http_status;
  error.message = std::move(message);
  error.type = http_status >= 500 ? "server_error" : "invalid_request_error";
  error.code = std::move(code);
  return error;
}

json OpenAiError::ToJson() const {
  return json{{"error",
               {{"message", message},
                {"type", type},
                {"param", param.empty() ? json(nullptr) : json(param)},
                {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

std::optional<TextInputsProblem> ReadTextInputs(json value, std::string_view field,
                                                std::size_t max_items,
                                                std::vector<std::string>& texts) {
  auto add_text = [&](json& item, const std::string& where) -> std::optional<TextInputsProblem> {
    if (!item.is_string()) {
      if (item.is_number_integer() || item.is_array()) {
        return TextInputsProblem{.message =
                                     where + ": token-id inputs are not supported; send text"};
      }
      return TextInputsProblem{.message = where + ": expected a string, got " +
                                          std::string(item.type_name())};
    }
    if (item.get_ref<const std::string&>().empty()) {
      return TextInputsProblem{.message = where + ": an input must not be empty"};
    }
    texts.push_back(std::move(item.get_ref<std::string&>()));
    return std::nullopt;
  };
  const std::string name(field);
  if (!value.is_array()) {
    return add_text(value, name);
  }
  if (value.empty()) {
    return TextInputsProblem{.message =
                                 "'" + name + "' is an empty list; send at least one string"};
  }
  if (value.size() > max_items) {
    return TextInputsProblem{.message = "'" + name + "' has " + std::to_string(value.size()) +
                                        " items; at most " + std::to_string(max_items) +
                                        " per request",
                             .too_many = true};
  }
  texts.reserve(texts.size() + value.size());
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (auto problem = add_text(value[i], name + "[" + std::to_string(i) + "]")) {
      return problem;
    }
  }
  return std::nullopt;
}

std::variant<OpenAiEmbeddingsRequest, OpenAiError> ParseOpenAiEmbeddingsRequest(
    json body, const std::map<std::string, std::string>& served, std::size_t max_inputs) {
  if (!body.is_object()) {
    return Invalid("request body must be a JSON object", "");
  }
  OpenAiEmbeddingsRequest request;
  auto model = body.find("model");
  if (model == body.end() || !model->is_string() || model->get_ref<const std::string&>().empty()) {
    return Invalid("'model' is required: a model name (served: " + ServedNames(served) + ")",
                   "model");
  }
  request.model = model->get<std::string>();
  if (!served.contains(request.model)) {
    OpenAiError error = OpenAiError::WithStatus(404,
                                                "The model '" + request.model +
                                                    "' does not exist; this deployment serves " +
                                                    ServedNames(served),
                                                "model_not_found");
    error.param = "model";
    return error;
  }

  auto input = body.find("input");
  if (input == body.end() || input->is_null()) {
    return Invalid("'input' is required: a string or a list of strings", "input");
  }
  if (auto problem = ReadTextInputs(std::move(*input), "input",
                                    std::min(max_inputs, kMaxOpenAiInputs), request.inputs)) {
    return Invalid(problem->message, "input");
  }

  if (auto format = body.find("encoding_format"); format != body.end() && !format->is_null()) {
    if (!format->is_string() || (*format != "float" && *format != "base64")) {
      return Invalid("'encoding_format' must be \"float\" or \"base64\", got " + format->dump(),
                     "encoding_format");
    }
    request.base64 = *format == "base64";
  }
  if (auto dimensions = body.find("dimensions");
      dimensions != body.end() && !dimensions->is_null()) {
    if (!dimensions->is_number_integer() || dimensions->get<std::int64_t>() < 1) {
      return Invalid("'dimensions' must be a positive integer, got " + dimensions->dump(),
                     "dimensions");
    }
    request.dimensions = dimensions->get<std::int64_t>();
  }
  if (auto user = body.find("user"); user != body.end() && !user->is_null() && !user->is_string()) {
    return Invalid("'user' must be a string", "user");
  }
  return request;
}

jina::DataRequestProto MakeOpenAiDataRequest(OpenAiEmbeddingsRequest& request,
                                             const std::string& endpoint,
                                             const std::string& request_id) {
  jina::DataRequestProto proto;
  proto.mutable_header()->set_request_id(request_id);
  proto.mutable_header()->set_exec_endpoint(endpoint);
  (*proto.mutable_parameters()->mutable_fields())["return_token_counts"].set_bool_value(true);
  DocList docs;
  docs.reserve(request.inputs.size());
  for (std::string& text : request.inputs) {
    docs.emplace_back(std::exchange(text, std::string()));
  }
  DocListToProto(docs, proto.mutable_data()->mutable_docs());
  return proto;
}

std::variant<json, OpenAiError> MakeOpenAiEmbeddingsResponse(const OpenAiEmbeddingsRequest& request,
                                                             jina::DataRequestProto reply,
                                                             std::uint64_t max_tensor_bytes) {
  const DecodeLimits limits{.max_tensor_bytes = max_tensor_bytes};
  StatusOr<DocList> docs = !reply.data().has_docs() && reply.data().docs_bytes().empty()
                               ? InvalidArgumentError("the reply carries no documents")
                               : ReplyDocs(&reply, limits);
  if (!docs.ok()) {
    return ServerError("the executor's reply does not decode: " +
                       std::string(docs.status().message()));
  }
  if (docs->size() != request.inputs.size()) {
    return ServerError("the executor returned " + std::to_string(docs->size()) + " documents for " +
                       std::to_string(request.inputs.size()) + " inputs");
  }
  json data = json::array();
  std::int64_t tokens = 0;
  for (std::size_t i = 0; i < docs->size(); ++i) {
    const Doc& doc = (*docs)[i];
    const std::string where = "document " + std::to_string(i);
    const Tensor* embedding = doc.embedding();
    if (embedding == nullptr) {
      return ServerError(where + ": the executor returned no embedding");
    }
    if (embedding->shape().size() != 1) {
      return ServerError(where + ": the embedding has shape " + embedding->ShapeString() +
                         "; /v1/embeddings needs a vector");
    }
    std::vector<float> values;
    if (embedding->dtype() == DTypeOf<float>()) {
      auto span = embedding->Values<float>();
      values.assign(span.begin(), span.end());
    } else if (embedding->dtype() == DTypeOf<double>()) {
      for (double v : embedding->Values<double>()) {
        values.push_back(static_cast<float>(v));
      }
    } else {
      return ServerError(where + ": the embedding's dtype is " + embedding->dtype() +
                         "; /v1/embeddings serves float32 (<f4) or float64 (<f8) embeddings");
    }
    if (request.dimensions > 0) {
      if (static_cast<std::size_t>(request.dimensions) > values.size()) {
        return Invalid("'dimensions' is " + std::to_string(request.dimensions) + " but model '" +
                           request.model + "' makes " + std::to_string(values.size()) +
                           "-dimensional embeddings",
                       "dimensions");
      }
      double full_norm = 0;
      for (float v : values) {
        full_norm += static_cast<double>(v) * v;
      }
      values.resize(static_cast<std::size_t>(request.dimensions));
      if (std::abs(std::sqrt(full_norm) - 1.0) < 1e-3) {
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
    }
    double count = 0;
    if (auto tag = doc.tags().find("num_tokens");
        tag != doc.tags().end() && tag->second.ToNumber(&count) && count >= 0 && count < 1e15) {
      tokens += static_cast<std::int64_t>(count);
    }
    json item{{"object", "embedding"}, {"index", i}};
    if (request.base64) {
      item["embedding"] = Base64OfFloats(values);
    } else {
      item["embedding"] = std::move(values);
    }
    data.push_back(std::move(item));
  }
  return json{{"object", "list"},
              {"data", std::move(data)},
              {"model", request.model},
              {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
}

json OpenAiModelList(const std::map<std::string, std::string>& served, std::int64_t created) {
  json data = json::array();
  for (const auto& [name, endpoint] : served) {
    data.push_back(
        json{{"id", name}, {"object", "model"}, {"created", created}, {"owned_by", "gantry"}});
  }
  return json{{"object", "list"}, {"data", std::move(data)}};
}

}  // namespace gantry::internal
