#include "gateway/tei_embeddings.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <optional>

#include "core/doc_proto.h"
#include "gateway/openai_embeddings.h"
#include "gateway/reply_docs.h"

namespace gantry::internal {
namespace {

using nlohmann::json;

// gRPC codes, as in grpcpp's StatusCode (not included here).
constexpr int kInvalidArgument = 3;
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

// With one model served the request goes to it; with several the body must
// name one in `model` (our addition; TEI serves one model per process).
std::optional<TeiError> ChooseModel(const json& body,
                                    const std::map<std::string, std::string>& served,
                                    std::string& model_name) {
  if (auto model = body.find("model"); model != body.end() && !model->is_null()) {
    if (!model->is_string() || !served.contains(model->get<std::string>())) {
      return TeiError{.http_status = 404,
                      .message = "model " + model->dump() +
                                 " is not served (served: " + ServedNames(served) + ")",
                      .type = "Validation"};
    }
    model_name = model->get<std::string>();
  } else if (served.size() == 1) {
    model_name = served.begin()->first;
  } else {
    return Invalid("this gateway serves several models (" + ServedNames(served) +
                   "): name one in \"model\"");
  }
  return std::nullopt;
}

// `truncate` and `truncation_direction`, as /embed and /rerank share them.
std::optional<TeiError> ReadTruncation(const json& body, std::optional<bool>& truncate,
                                       std::string& direction_name) {
  if (auto given = body.find("truncate"); given != body.end() && !given->is_null()) {
    if (!given->is_boolean()) {
      return Invalid("\"truncate\" must be true or false, got " + given->dump());
    }
    truncate = given->get<bool>();
  }
  if (auto direction = body.find("truncation_direction");
      direction != body.end() && !direction->is_null()) {
    if (*direction == "Right" || *direction == "right") {
      direction_name = "right";
    } else if (*direction == "Left" || *direction == "left") {
      direction_name = "left";
    } else {
      return Invalid("\"truncation_direction\" must be \"Right\" or \"Left\", got " +
                     direction->dump());
    }
  }
  return std::nullopt;
}

// An optional boolean field of `body` into `out`.
std::optional<TeiError> ReadFlag(const json& body, const char* field, bool& out) {
  if (auto given = body.find(field); given != body.end() && !given->is_null()) {
    if (!given->is_boolean()) {
      return Invalid("\"" + std::string(field) + "\" must be true or false, got " + given->dump());
    }
    out = given->get<bool>();
  }
  return std::nullopt;
}

TeiError TooMany(std::size_t given, std::size_t most) {
  // TEI's own wording for its max_client_batch_size.
  return TeiError{.http_status = 413,
                  .message = "batch size " + std::to_string(given) +
                             " > maximum allowed batch size " + std::to_string(most),
                  .type = "Validation"};
}

// `inputs`, as /embed and /tokenize share it: a string or a list of 1 to
// `max_inputs` of them (413 past it, TEI's max_client_batch_size).
// The texts are moved out of `body`.
std::optional<TeiError> ReadInputs(json& body, std::size_t max_inputs,
                                   std::vector<std::string>& texts) {
  auto inputs = body.find("inputs");
  if (inputs == body.end() || inputs->is_null()) {
    return Invalid("\"inputs\" is required: a string or a list of strings");
  }
  const std::size_t count = inputs->size();
  if (auto problem = ReadTextInputs(std::move(*inputs), "inputs", max_inputs, texts)) {
    if (problem->too_many) {
      return TooMany(count, max_inputs);
    }
    return Invalid(problem->message);
  }
  return std::nullopt;
}

std::optional<TeiError> ReadPromptName(const json& body, std::string& prompt_name) {
  if (auto prompt = body.find("prompt_name"); prompt != body.end() && !prompt->is_null()) {
    if (!prompt->is_string()) {
      return Invalid("\"prompt_name\" must be a string, got " + prompt->dump());
    }
    prompt_name = prompt->get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

TeiError TeiError::FromGrpc(int grpc_code, std::string message) {
  switch (grpc_code) {
    case kInvalidArgument:
      // An executor's validator refused the request.
      return TeiError{.http_status = 422, .message = std::move(message), .type = "Validation"};
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
    json body, const std::map<std::string, std::string>& served, std::size_t max_inputs) {
  if (!body.is_object()) {
    return Invalid("request body must be a JSON object");
  }
  TeiEmbedRequest request;
  if (std::optional<TeiError> error = ChooseModel(body, served, request.model)) {
    return *error;
  }

  if (std::optional<TeiError> error = ReadInputs(body, max_inputs, request.inputs)) {
    return *error;
  }

  if (std::optional<TeiError> error = ReadFlag(body, "normalize", request.normalize)) {
    return *error;
  }
  if (std::optional<TeiError> error =
          ReadTruncation(body, request.truncate, request.truncation_direction)) {
    return *error;
  }
  if (std::optional<TeiError> error = ReadPromptName(body, request.prompt_name)) {
    return *error;
  }
  return request;
}

jina::DataRequestProto MakeTeiDataRequest(TeiEmbedRequest& request, const std::string& endpoint,
                                          const std::string& request_id) {
  // The documents as OpenAI's route makes them; TEI's fields as parameters.
  OpenAiEmbeddingsRequest as_openai;
  as_openai.inputs = std::move(request.inputs);
  jina::DataRequestProto proto = MakeOpenAiDataRequest(as_openai, endpoint, request_id);
  request.inputs = std::move(as_openai.inputs);
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
                                                  jina::DataRequestProto reply,
                                                  std::uint64_t max_tensor_bytes) {
  // The documents are read as OpenAI's route reads them (one float vector
  // per input, named when not); only the shape of the answer differs.
  OpenAiEmbeddingsRequest as_openai;
  as_openai.model = request.model;
  as_openai.inputs = request.inputs;
  auto decoded = MakeOpenAiEmbeddingsResponse(as_openai, std::move(reply), max_tensor_bytes);
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

std::variant<TeiSimilarityRequest, TeiError> ParseTeiSimilarityRequest(
    json body, const std::map<std::string, std::string>& served, std::size_t max_inputs) {
  if (!body.is_object()) {
    return Invalid("request body must be a JSON object");
  }
  TeiSimilarityRequest request;
  if (std::optional<TeiError> error = ChooseModel(body, served, request.model)) {
    return *error;
  }
  request.embed.model = request.model;
  auto inputs = body.find("inputs");
  if (inputs == body.end() || !inputs->is_object()) {
    return Invalid(
        "\"inputs\" is required: {\"source_sentence\": string, \"sentences\": [string, ...]}");
  }
  auto source = inputs->find("source_sentence");
  if (source == inputs->end() || !source->is_string() ||
      source->get_ref<const std::string&>().empty()) {
    return Invalid("\"inputs.source_sentence\" must be a non-empty string");
  }
  auto sentences = inputs->find("sentences");
  if (sentences == inputs->end() || !sentences->is_array() || sentences->empty()) {
    return Invalid("\"inputs.sentences\" must be a list of one or more strings");
  }
  if (sentences->size() + 1 > max_inputs) {
    return TooMany(sentences->size() + 1, max_inputs);
  }
  request.embed.inputs.push_back(std::move(source->get_ref<std::string&>()));
  if (auto problem = ReadTextInputs(std::move(*sentences), "inputs.sentences", max_inputs - 1,
                                    request.embed.inputs)) {
    return Invalid(problem->message);
  }
  if (auto parameters = body.find("parameters");
      parameters != body.end() && !parameters->is_null()) {
    if (!parameters->is_object()) {
      return Invalid("\"parameters\" must be an object, got " + parameters->dump());
    }
    if (std::optional<TeiError> error = ReadTruncation(*parameters, request.embed.truncate,
                                                       request.embed.truncation_direction)) {
      return *error;
    }
    if (std::optional<TeiError> error = ReadPromptName(*parameters, request.embed.prompt_name)) {
      return *error;
    }
  }
  return request;
}

std::variant<json, TeiError> MakeTeiSimilarityResponse(const TeiSimilarityRequest& request,
                                                       jina::DataRequestProto reply,
                                                       std::uint64_t max_tensor_bytes) {
  auto embedded = MakeTeiEmbedResponse(request.embed, std::move(reply), max_tensor_bytes);
  if (const auto* error = std::get_if<TeiError>(&embedded)) {
    return *error;
  }
  const json& vectors = std::get<json>(embedded);
  const auto source = vectors[0].get<std::vector<float>>();
  json out = json::array();
  for (std::size_t i = 1; i < vectors.size(); ++i) {
    const auto sentence = vectors[i].get<std::vector<float>>();
    if (sentence.size() != source.size()) {
      return TeiError{.http_status = 424,
                      .message = "sentence " + std::to_string(i - 1) + "'s embedding has " +
                                 std::to_string(sentence.size()) + " values, the source's " +
                                 std::to_string(source.size()),
                      .type = "Backend"};
    }
    double dot = 0;
    double source_norm = 0;
    double sentence_norm = 0;
    for (std::size_t k = 0; k < source.size(); ++k) {
      dot += static_cast<double>(source[k]) * sentence[k];
      source_norm += static_cast<double>(source[k]) * source[k];
      sentence_norm += static_cast<double>(sentence[k]) * sentence[k];
    }
    const double norms = std::sqrt(source_norm * sentence_norm);
    out.push_back(static_cast<float>(norms > 0 ? dot / norms : 0.0));
  }
  return out;
}

std::variant<TeiRerankRequest, TeiError> ParseTeiRerankRequest(
    json body, const std::map<std::string, std::string>& served, std::size_t max_texts) {
  if (!body.is_object()) {
    return Invalid("request body must be a JSON object");
  }
  TeiRerankRequest request;
  if (std::optional<TeiError> error = ChooseModel(body, served, request.model)) {
    return *error;
  }
  auto query = body.find("query");
  if (query == body.end() || !query->is_string()) {
    return Invalid("\"query\" is required: the string the texts are ranked against");
  }
  request.query = std::move(query->get_ref<std::string&>());
  auto texts = body.find("texts");
  if (texts == body.end() || !texts->is_array()) {
    return Invalid("\"texts\" is required: a list of strings");
  }
  if (texts->empty()) {
    return Invalid("\"texts\" cannot be empty");
  }
  const std::size_t count = texts->size();
  if (auto problem = ReadTextInputs(std::move(*texts), "texts", max_texts, request.texts)) {
    if (problem->too_many) {
      return TooMany(count, max_texts);
    }
    return Invalid(problem->message);
  }
  if (std::optional<TeiError> error = ReadFlag(body, "raw_scores", request.raw_scores)) {
    return *error;
  }
  if (std::optional<TeiError> error = ReadFlag(body, "return_text", request.return_text)) {
    return *error;
  }
  if (std::optional<TeiError> error =
          ReadTruncation(body, request.truncate, request.truncation_direction)) {
    return *error;
  }
  return request;
}

jina::DataRequestProto MakeTeiRerankDataRequest(const TeiRerankRequest& request,
                                                const std::string& endpoint,
                                                const std::string& request_id) {
  OpenAiEmbeddingsRequest as_openai;
  as_openai.inputs = request.texts;
  jina::DataRequestProto proto = MakeOpenAiDataRequest(as_openai, endpoint, request_id);
  auto& parameters = *proto.mutable_parameters()->mutable_fields();
  parameters.clear();
  parameters["query"].set_string_value(request.query);
  if (request.raw_scores) {
    parameters["raw_scores"].set_bool_value(true);
  }
  if (request.truncate) {
    parameters["truncate"].set_bool_value(*request.truncate);
  }
  if (!request.truncation_direction.empty()) {
    parameters["truncation_direction"].set_string_value(request.truncation_direction);
  }
  return proto;
}

namespace {

TeiError Backend(std::string message) {
  return TeiError{.http_status = 424, .message = std::move(message), .type = "Backend"};
}

// The reply's documents, one per text sent, or the 424 saying why not.
std::variant<DocList, TeiError> ReplyDocsFor(jina::DataRequestProto* reply, std::size_t texts,
                                             std::uint64_t max_tensor_bytes) {
  const DecodeLimits limits{.max_tensor_bytes = max_tensor_bytes};
  StatusOr<DocList> docs = !reply->data().has_docs() && reply->data().docs_bytes().empty()
                               ? InvalidArgumentError("the reply carries no documents")
                               : ReplyDocs(reply, limits);
  if (!docs.ok()) {
    return Backend("the executor's reply does not decode: " + std::string(docs.status().message()));
  }
  if (docs->size() != texts) {
    return Backend("the executor returned " + std::to_string(docs->size()) + " documents for " +
                   std::to_string(texts) + " texts");
  }
  return std::move(docs).value();
}

}  // namespace

std::variant<json, TeiError> MakeTeiRerankResponse(const TeiRerankRequest& request,
                                                   jina::DataRequestProto reply,
                                                   std::uint64_t max_tensor_bytes) {
  auto decoded = ReplyDocsFor(&reply, request.texts.size(), max_tensor_bytes);
  if (auto* error = std::get_if<TeiError>(&decoded)) {
    return std::move(*error);
  }
  const DocList& docs = std::get<DocList>(decoded);
  std::vector<double> scores;
  scores.reserve(docs.size());
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const Value::Dict& tags = docs[i].tags();
    const auto found = tags.find("relevance_score");
    const Value* score = found == tags.end() ? nullptr : &found->second;
    double number = 0;
    if (score == nullptr || !score->ToNumber(&number) || !std::isfinite(number)) {
      return Backend("document " + std::to_string(i) +
                     ": the executor gave no numeric tag relevance_score (a reranker such as "
                     "CrossEncoder with a one-label model sets it)");
    }
    scores.push_back(number);
  }
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&scores](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
  json out = json::array();
  for (std::size_t index : order) {
    json rank = {{"index", index}, {"score", scores[index]}};
    if (request.return_text) {
      rank["text"] = request.texts[index];
    }
    out.push_back(std::move(rank));
  }
  return out;
}

std::variant<TeiTokenizeRequest, TeiError> ParseTeiTokenizeRequest(
    json body, const std::map<std::string, std::string>& served, std::size_t max_inputs) {
  if (!body.is_object()) {
    return Invalid("request body must be a JSON object");
  }
  TeiTokenizeRequest request;
  if (std::optional<TeiError> error = ChooseModel(body, served, request.model)) {
    return *error;
  }
  if (std::optional<TeiError> error = ReadInputs(body, max_inputs, request.inputs)) {
    return *error;
  }
  if (std::optional<TeiError> error =
          ReadFlag(body, "add_special_tokens", request.add_special_tokens)) {
    return *error;
  }
  if (std::optional<TeiError> error = ReadPromptName(body, request.prompt_name)) {
    return *error;
  }
  return request;
}

jina::DataRequestProto MakeTeiTokenizeDataRequest(const TeiTokenizeRequest& request,
                                                  const std::string& request_id) {
  OpenAiEmbeddingsRequest as_openai;
  as_openai.inputs = request.inputs;
  jina::DataRequestProto proto = MakeOpenAiDataRequest(as_openai, kTeiTokenizeEndpoint, request_id);
  auto& parameters = *proto.mutable_parameters()->mutable_fields();
  parameters.clear();
  parameters["add_special_tokens"].set_bool_value(request.add_special_tokens);
  if (!request.prompt_name.empty()) {
    parameters["prompt_name"].set_string_value(request.prompt_name);
  }
  return proto;
}

std::variant<json, TeiError> MakeTeiTokenizeResponse(const TeiTokenizeRequest& request,
                                                     jina::DataRequestProto reply,
                                                     std::uint64_t max_tensor_bytes) {
  auto decoded = ReplyDocsFor(&reply, request.inputs.size(), max_tensor_bytes);
  if (auto* error = std::get_if<TeiError>(&decoded)) {
    return std::move(*error);
  }
  const DocList& docs = std::get<DocList>(decoded);
  json out = json::array();
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const auto malformed = [i](const std::string& what) {
      return Backend("document " + std::to_string(i) + ": " + what +
                     " (an executor with a /tokenize endpoint, such as SentenceEncoder, tags "
                     "each document with tokens)");
    };
    const Value::Dict& tags = docs[i].tags();
    const auto found = tags.find("tokens");
    const Value::List* tokens = found == tags.end() ? nullptr : found->second.AsList();
    if (tokens == nullptr) {
      return malformed("the executor gave no list tag tokens");
    }
    json row = json::array();
    for (std::size_t t = 0; t < tokens->size(); ++t) {
      const Value::Dict* token = (*tokens)[t].AsDict();
      const auto field = [token](const char* key) -> const Value* {
        const auto it = token->find(key);
        return it == token->end() ? nullptr : &it->second;
      };
      double id = 0;
      const Value* id_value = token == nullptr ? nullptr : field("id");
      const Value* text = token == nullptr ? nullptr : field("text");
      const Value* special = token == nullptr ? nullptr : field("special");
      if (id_value == nullptr || !id_value->ToNumber(&id) || id < 0 || id != std::floor(id) ||
          text == nullptr || text->AsText() == nullptr || special == nullptr ||
          special->AsBool() == nullptr) {
        return malformed("token " + std::to_string(t) + " is not {id, text, special, start, stop}");
      }
      json entry = {{"id", static_cast<std::int64_t>(id)},
                    {"text", *text->AsText()},
                    {"special", *special->AsBool()}};
      for (const char* key : {"start", "stop"}) {
        const Value* offset = field(key);
        double number = 0;
        if (offset == nullptr || offset->is_none()) {
          entry[key] = nullptr;
        } else if (offset->ToNumber(&number) && number >= 0 && number == std::floor(number)) {
          entry[key] = static_cast<std::int64_t>(number);
        } else {
          return malformed("token " + std::to_string(t) + " has a " + key +
                           " that is not a byte offset");
        }
      }
      row.push_back(std::move(entry));
    }
    out.push_back(std::move(row));
  }
  return out;
}

std::variant<std::string, TeiError> ChooseTeiInfoModel(
    std::string_view query, const std::map<std::string, std::string>& served) {
  json selector = json::object();
  for (std::size_t start = 0; start <= query.size();) {
    const std::size_t end = std::min(query.find('&', start), query.size());
    const std::string_view pair = query.substr(start, end - start);
    if (pair.substr(0, 6) == "model=") {
      selector["model"] = std::string(pair.substr(6));
    }
    start = end + 1;
  }
  std::string model;
  if (std::optional<TeiError> error = ChooseModel(selector, served, model)) {
    if (error->http_status == 422) {
      error->message += " (GET /info?model=NAME)";
    }
    return *error;
  }
  return model;
}

jina::DataRequestProto MakeTeiInfoDataRequest(const std::string& request_id) {
  jina::DataRequestProto proto;
  proto.mutable_header()->set_request_id(request_id);
  proto.mutable_header()->set_exec_endpoint(kTeiInfoEndpoint);
  proto.mutable_data()->mutable_docs();
  return proto;
}

namespace {

// A tag value as JSON, whole numbers as integers (tags travel as doubles).
json TagToJson(const Value& value) {
  if (const std::string* text = value.AsText()) {
    return *text;
  }
  if (const bool* flag = value.AsBool()) {
    return *flag;
  }
  if (double number = 0; value.ToNumber(&number)) {
    if (std::isfinite(number) && number == std::floor(number) && std::abs(number) < 9.0e15) {
      return static_cast<std::int64_t>(number);
    }
    return number;
  }
  if (const Value::List* list = value.AsList()) {
    json out = json::array();
    for (const Value& item : *list) {
      out.push_back(TagToJson(item));
    }
    return out;
  }
  if (const Value::Dict* dict = value.AsDict()) {
    json out = json::object();
    for (const auto& [key, item] : *dict) {
      out[key] = TagToJson(item);
    }
    return out;
  }
  return nullptr;
}

}  // namespace

std::variant<json, TeiError> MakeTeiInfoResponse(const TeiRouterInfo& router,
                                                 jina::DataRequestProto reply,
                                                 std::uint64_t max_tensor_bytes) {
  auto decoded = ReplyDocsFor(&reply, 1, max_tensor_bytes);
  if (auto* error = std::get_if<TeiError>(&decoded)) {
    return Backend("model '" + router.model_id +
                   "': the executor's /info endpoint gave no "
                   "description (" +
                   error->message + "; SentenceEncoder and CrossEncoder have one)");
  }
  const Value::Dict& tags = std::get<DocList>(decoded)[0].tags();
  const auto found = tags.find("tei_info");
  const Value::Dict* fields = found == tags.end() ? nullptr : found->second.AsDict();
  if (fields == nullptr) {
    return Backend("model '" + router.model_id +
                   "': the executor's /info reply has no tag tei_info (SentenceEncoder and "
                   "CrossEncoder set it)");
  }
  json info = TagToJson(Value(*fields));
  const auto is_count = [&info](const char* key) {
    return info.contains(key) && info[key].is_number_integer() &&
           info[key].get<std::int64_t>() >= 0;
  };
  if (!info.contains("model_dtype") || !info["model_dtype"].is_string() ||
      !info.contains("model_type") || !info["model_type"].is_object() ||
      !info.contains("auto_truncate") || !info["auto_truncate"].is_boolean() ||
      !is_count("max_input_length") || !is_count("max_batch_tokens")) {
    return Backend("model '" + router.model_id + "': the executor's tei_info " + info.dump() +
                   " lacks model_dtype, model_type, auto_truncate, max_input_length or "
                   "max_batch_tokens");
  }
  info["model_id"] = router.model_id;
  info["model_sha"] = nullptr;
  info["max_concurrent_requests"] = router.max_concurrent_requests;
  info["max_client_batch_size"] = router.max_client_batch_size;
  // Each replica tokenizes on the thread that runs its model.
  info["tokenization_workers"] = 1;
  info["version"] = router.version;
  return info;
}

}  // namespace gantry::internal
