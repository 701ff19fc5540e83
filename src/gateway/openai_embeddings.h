// The OpenAI embeddings API on the HTTP gateway (POST /v1/embeddings, GET
// /v1/models), as text-embeddings-inference, Infinity and vLLM serve it.
// A request becomes the same DataRequestProto a Jina client would send: one
// text document per input, posted to the executor endpoint the served model
// name maps to, so handlers, batching and errors are the Jina path's. The
// reply's document embeddings become `data[i].embedding` (a float list, or
// base64 of little-endian float32 as the openai client asks by default).
//
// Token usage: the request asks the executor for per-document token counts
// (parameter `return_token_counts: true`); an executor that reports them
// sets the number tag `num_tokens` on each document (SentenceEncoder does).
// Without those tags usage counts are 0.
//
// Thread safety: free functions without shared state.
#ifndef GANTRY_GATEWAY_OPENAI_EMBEDDINGS_H_
#define GANTRY_GATEWAY_OPENAI_EMBEDDINGS_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "jina/jina.pb.h"

namespace gantry::internal {

// OpenAI's limit on inputs in one request.
inline constexpr std::size_t kMaxOpenAiInputs = 2048;

// An error in OpenAI's shape: {"error": {message, type, param, code}}.
struct OpenAiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null

  // 400 invalid_request_error naming the request field `param`.
  static OpenAiError Invalid(std::string message, std::string param);
  // `http_status` (5xx, 404, 413, 429, ...) with type server_error, or
  // invalid_request_error for 4xx.
  static OpenAiError WithStatus(int http_status, std::string message, std::string code = "");

  nlohmann::json ToJson() const;
};

// What ReadTextInputs refused. `too_many`: the list is longer than allowed,
// which each protocol words and codes its own way (OpenAI 400, TEI 413).
struct TextInputsProblem {
  std::string message;
  bool too_many = false;
};

// Appends the texts of `value`, the request field `field` (as messages name
// it: its items are `field[i]`), to `texts`: one non-empty string, or a
// non-empty list of at most `max_items` of them. Token ids (numbers, nested
// lists) are refused: the gateway sends text. Shared by the OpenAI and TEI
// routes, which read the same shape from `input` and `inputs`. The texts are
// moved out of `value` (pass it moved: inputs are most of a body).
std::optional<TextInputsProblem> ReadTextInputs(nlohmann::json value, std::string_view field,
                                                std::size_t max_items,
                                                std::vector<std::string>& texts);

struct OpenAiEmbeddingsRequest {
  std::string model;
  std::vector<std::string> inputs;
  bool base64 = false;
  // 0: the embedding as the executor returns it.
  std::int64_t dimensions = 0;
};

// Validates a request body: `model` (a served name), `input` (a non-empty
// string, or 1 to `max_inputs` of them; token arrays are refused),
// `encoding_format` (float or base64), `dimensions` (a positive integer),
// `user` (ignored). `served` maps model names to executor endpoints; an
// unknown model is 404 model_not_found listing them. The texts are moved
// out of `body`.
std::variant<OpenAiEmbeddingsRequest, OpenAiError> ParseOpenAiEmbeddingsRequest(
    nlohmann::json body, const std::map<std::string, std::string>& served,
    std::size_t max_inputs = kMaxOpenAiInputs);

// The request the executor endpoint `endpoint` gets: one text document per
// input, in order, and `return_token_counts: true`. The texts are moved into
// it: `request.inputs` keeps their number, which is all the reply needs,
// and empty strings.
jina::DataRequestProto MakeOpenAiDataRequest(OpenAiEmbeddingsRequest& request,
                                             const std::string& endpoint,
                                             const std::string& request_id);

// The OpenAI response for the executor's reply: every input must have come
// back with a 1-d float32 or float64 embedding of at least `dimensions`
// values (cut to `dimensions`, then scaled to unit length again when the
// full vector had unit length, as Matryoshka truncation does). A reply that
// breaks this is a 500 naming the document; `dimensions` beyond the
// embedding's size is a 400.
std::variant<nlohmann::json, OpenAiError> MakeOpenAiEmbeddingsResponse(
    const OpenAiEmbeddingsRequest& request, jina::DataRequestProto reply,
    std::uint64_t max_tensor_bytes);

// GET /v1/models: {"object": "list", "data": [{"id", "object": "model",
// "created", "owned_by": "gantry"}]}.
nlohmann::json OpenAiModelList(const std::map<std::string, std::string>& served,
                               std::int64_t created);

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_OPENAI_EMBEDDINGS_H_
