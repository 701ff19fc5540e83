// text-embeddings-inference's embedding and rerank routes on the HTTP gateway
// (POST /embed and POST /rerank, with `models:` set), in TEI's request and
// reply shapes. /embed: `inputs` a
// string or a list of them, `normalize` (default true), `truncate`,
// `truncation_direction` ("Right"/"Left"), `prompt_name`; the reply a list of
// float lists; errors {"error", "error_type"} with TEI's status codes (413
// Validation for sizes and inputs over the model's limit, 422 for a body that
// does not validate or that the executor rejects as invalid, 424 Backend
// for an executor's failure, 429 Overloaded).
//
// As for OpenAI's route, a request becomes the DataRequestProto a Jina
// client would send (one text document per input), posted to the endpoint
// its model maps to; TEI's fields travel as request parameters
// (`truncate`, `truncation_direction`, `prompt_name`, and `normalize: false`
// when vectors are asked for as pooled), which SentenceEncoder honours.
// Vectors asked for normalised are scaled to unit length here as well, so
// that any executor's reply keeps TEI's contract.
//
// /rerank: `query`, `texts` (a list), `raw_scores`, `return_text`,
// `truncate`, `truncation_direction`; the reply [{"index", "score",
// "text"?}] best first. The texts go as documents, the rest as parameters,
// which the CrossEncoder executor honours; each document must come back
// with the tag `relevance_score`.
//
// /tokenize: `inputs` a string or a list of them, `add_special_tokens`
// (default true), `prompt_name`; the texts go to the executor's /tokenize
// endpoint (SentenceEncoder and CrossEncoder bind it), which tags each
// document with `tokens`; the reply is TEI's [[{"id", "text", "special",
// "start", "stop"}, ...], ...], offsets in UTF-8 bytes.
//
// GET /info: the executor's "/info" endpoint describes the model (one
// document with tag `tei_info`: dtype, model type, input and batch limits);
// the gateway adds the model's name, its own limits and version.
//
// Thread safety: free functions without shared state.
#ifndef GANTRY_GATEWAY_TEI_EMBEDDINGS_H_
#define GANTRY_GATEWAY_TEI_EMBEDDINGS_H_

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

// TEI's error body: {"error": message, "error_type": type}.
struct TeiError {
  int http_status = 422;
  std::string message;
  // TEI's ErrorType: "Validation", "Tokenizer", "Backend", "Overloaded",
  // "Unhealthy".
  std::string type = "Validation";

  // The error for a failed forward: gRPC code `grpc_code` (422 Validation
  // for INVALID_ARGUMENT, an executor's validator refusing the request; 429
  // Overloaded for RESOURCE_EXHAUSTED, 503 Unhealthy for UNAVAILABLE, 504
  // for a deadline, 424 Backend otherwise).
  static TeiError FromGrpc(int grpc_code, std::string message);
  nlohmann::json ToJson() const;
};

struct TeiEmbedRequest {
  // The served model the request goes to (`models:` key).
  std::string model;
  std::vector<std::string> inputs;
  bool normalize = true;
  std::optional<bool> truncate;
  std::string truncation_direction;  // "right" or "left"; empty: not given
  std::string prompt_name;           // empty: not given
};

// Validates a POST /embed body. `served` maps model names to endpoints: with
// one model the request goes to it; with several the body must name one in
// `model` (our addition; TEI serves one model per process). 1 to
// `max_inputs` non-empty strings; token-id inputs are refused (send text).
std::variant<TeiEmbedRequest, TeiError> ParseTeiEmbedRequest(
    nlohmann::json body, const std::map<std::string, std::string>& served, std::size_t max_inputs);

// One text document per input, in order, and TEI's fields as parameters.
// The texts are moved into it, as MakeOpenAiDataRequest's.
jina::DataRequestProto MakeTeiDataRequest(TeiEmbedRequest& request, const std::string& endpoint,
                                          const std::string& request_id);

// The reply as TEI's [[float, ...], ...], one vector per input, scaled to
// unit length when `normalize`. An executor error is 424 Backend (413
// Validation when it was std::length_error); a reply without one float
// vector per input is 424 naming the document.
std::variant<nlohmann::json, TeiError> MakeTeiEmbedResponse(const TeiEmbedRequest& request,
                                                            jina::DataRequestProto reply,
                                                            std::uint64_t max_tensor_bytes);

// POST /similarity: {"inputs": {"source_sentence", "sentences"},
// "parameters": {"truncate", "truncation_direction", "prompt_name"}}. The
// source and the sentences go to the model as one /embed request, the
// source first (and counted in max_client_batch_size, as TEI counts it).
struct TeiSimilarityRequest {
  std::string model;
  TeiEmbedRequest embed;  // inputs[0] is the source sentence
};

// Validates a POST /similarity body: the model as for /embed; a non-empty
// `source_sentence` and a list of 1 or more non-empty `sentences` (413 when
// they and the source are over `max_inputs`).
std::variant<TeiSimilarityRequest, TeiError> ParseTeiSimilarityRequest(
    nlohmann::json body, const std::map<std::string, std::string>& served, std::size_t max_inputs);

// TEI's [float, ...]: the cosine similarity of each sentence's embedding to
// the source's, in order (0 where a vector is all zeros). Errors as /embed's.
std::variant<nlohmann::json, TeiError> MakeTeiSimilarityResponse(
    const TeiSimilarityRequest& request, jina::DataRequestProto reply,
    std::uint64_t max_tensor_bytes);

struct TeiRerankRequest {
  std::string model;
  std::string query;
  std::vector<std::string> texts;
  bool raw_scores = false;
  bool return_text = false;
  std::optional<bool> truncate;
  std::string truncation_direction;  // "right" or "left"; empty: not given
};

// Validates a POST /rerank body: the model as for /embed; `query` a string;
// `texts` a list of 1 to `max_texts` non-empty strings (413 past it, as
// TEI's max_client_batch_size).
std::variant<TeiRerankRequest, TeiError> ParseTeiRerankRequest(
    nlohmann::json body, const std::map<std::string, std::string>& served, std::size_t max_texts);

// One text document per text, in order; query and flags as parameters.
jina::DataRequestProto MakeTeiRerankDataRequest(const TeiRerankRequest& request,
                                                const std::string& endpoint,
                                                const std::string& request_id);

// TEI's [{"index", "score", "text"?}, ...] sorted by score, highest first
// (ties keep input order). A reply without one document per text, or a
// document without a numeric `relevance_score` tag, is 424 naming it.
std::variant<nlohmann::json, TeiError> MakeTeiRerankResponse(const TeiRerankRequest& request,
                                                             jina::DataRequestProto reply,
                                                             std::uint64_t max_tensor_bytes);

struct TeiTokenizeRequest {
  std::string model;
  std::vector<std::string> inputs;
  bool add_special_tokens = true;
  std::string prompt_name;  // empty: not given
};

// The executor endpoint /tokenize goes to, whatever `models:` maps the name to.
inline constexpr const char* kTeiTokenizeEndpoint = "/tokenize";

// Validates a POST /tokenize body: the model and `inputs` as for /embed.
std::variant<TeiTokenizeRequest, TeiError> ParseTeiTokenizeRequest(
    nlohmann::json body, const std::map<std::string, std::string>& served, std::size_t max_inputs);

// One text document per input, in order; the flags as parameters.
jina::DataRequestProto MakeTeiTokenizeDataRequest(const TeiTokenizeRequest& request,
                                                  const std::string& request_id);

// TEI's [[SimpleToken, ...], ...] from each document's `tokens` tag. A reply
// without one document per input, or a tag that is not such a list, is 424
// naming the document.
std::variant<nlohmann::json, TeiError> MakeTeiTokenizeResponse(const TeiTokenizeRequest& request,
                                                               jina::DataRequestProto reply,
                                                               std::uint64_t max_tensor_bytes);

// The model GET /info describes: `model=NAME` in the query, else the one
// served (422 naming the served ones when there are several, 404 for a
// name not served).
std::variant<std::string, TeiError> ChooseTeiInfoModel(
    std::string_view query, const std::map<std::string, std::string>& served);

// The executor endpoint GET /info asks.
inline constexpr const char* kTeiInfoEndpoint = "/info";

// A request without documents to the executor's /info endpoint.
jina::DataRequestProto MakeTeiInfoDataRequest(const std::string& request_id);

// What the gateway itself knows for GET /info.
struct TeiRouterInfo {
  std::string model_id;
  std::int64_t max_concurrent_requests = 0;
  std::int64_t max_client_batch_size = 0;
  std::string version;
};

// TEI's Info from the router's fields and the executor's `tei_info` tag
// (424 naming what is missing when the executor has no /info endpoint).
std::variant<nlohmann::json, TeiError> MakeTeiInfoResponse(const TeiRouterInfo& router,
                                                           jina::DataRequestProto reply,
                                                           std::uint64_t max_tensor_bytes);

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_TEI_EMBEDDINGS_H_
