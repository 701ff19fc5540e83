#include "sentence_encoder.h"

#include <ATen/core/Tensor.h>
#include <gantry/torch_cuda.h>

#include <algorithm>
#include <any>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "option_readers.h"
#include "sentence_embedder.h"
#include "tei_info.h"
#include "token_tags.h"

namespace gantry {

SentenceEncoder::SentenceEncoder(const ExecutorContext& context) {
  // `device` is read by the worker (it becomes context.device), but users
  // pass it under `with:` like every other constructor argument.
  const sentence_encoder::WithReader with(
      context, "SentenceEncoder",
      {"model_path", "batch_size", "max_seq_length", "max_batch_tokens", "dtype", "auto_truncate",
       "cuda_graphs", "device"});
  sentence_encoder::EmbedderOptions options;
  options.model_path = with.Text("model_path", "");
  options.batch_size = with.PositiveInt("batch_size", 0);  // 0: the device's default
  options.max_seq_length = with.PositiveInt("max_seq_length", 0);
  options.max_batch_tokens = with.PositiveInt("max_batch_tokens", 0);
  options.dtype = with.Text("dtype", "float32");
  auto_truncate_ = with.Bool("auto_truncate").value_or(true);
  max_message_bytes_ = context.max_message_bytes;
  options.cuda_graphs = with.Bool("cuda_graphs").value_or(false);
  options.device = context.device;
  StatusOr<std::unique_ptr<sentence_encoder::SentenceEmbedder>> embedder =
      sentence_encoder::SentenceEmbedder::Load(options);
  if (!embedder.ok()) {
    throw std::runtime_error(with.LoadError(std::string(embedder.status().message())));
  }
  embedder_ = std::move(embedder).value();
  device_check_ = RegisterTensorsForDeviceCheck(
      "SentenceEncoder", [embedder = embedder_.get()] { return embedder->NamedParameters(); });
}

SentenceEncoder::~SentenceEncoder() = default;

std::optional<DynamicBatching> SentenceEncoder::DefaultBatching(
    std::string_view method_name) const {
  if (method_name != "Encode" || !embedder_->amx_bfloat16()) {
    return std::nullopt;
  }
  return DynamicBatching{.preferred_batch_size = static_cast<int>(embedder_->batch_size()),
                         .timeout_ms = 0};
}

std::string SentenceEncoder::Prompt(const Parameters& parameters) const {
  // sentence-transformers' encode(prompt=..., prompt_name=...): a prompt
  // given as text wins over a name; without either, the folder's default.
  if (const Value* prompt = parameters.Find("prompt"); prompt != nullptr && !prompt->is_none()) {
    const std::string* text = prompt->AsText();
    if (text == nullptr) {
      throw std::invalid_argument("parameter prompt: expected a string, got " +
                                  prompt->DebugString());
    }
    return *text;
  }
  std::string name = embedder_->pipeline().default_prompt_name;
  if (const Value* given = parameters.Find("prompt_name"); given != nullptr && !given->is_none()) {
    const std::string* text = given->AsText();
    if (text == nullptr) {
      throw std::invalid_argument("parameter prompt_name: expected a string, got " +
                                  given->DebugString());
    }
    name = *text;
    if (embedder_->FindPrompt(name) == nullptr) {
      std::string known;
      for (const auto& [prompt_name, prompt_text] : embedder_->pipeline().prompts) {
        known += (known.empty() ? "" : ", ") + prompt_name;
      }
      throw std::invalid_argument("parameter prompt_name: '" + name +
                                  "' is not one of this model's prompts (" +
                                  (known.empty() ? std::string("it has none") : known) + ")");
    }
  }
  const std::string* text = name.empty() ? nullptr : embedder_->FindPrompt(name);
  return text == nullptr ? std::string() : *text;
}

namespace {

// What PrepareEncode leaves with a document: its token ids, as Encode would
// compute them for the request's parameters.
using PreparedIds = std::vector<std::int64_t>;

}  // namespace

Status SentenceEncoder::ValidateTexts(const DocList& docs, const Parameters& /*parameters*/) const {
  GANTRY_RETURN_IF_ERROR(sentence_encoder::CheckTexts(docs));
  return sentence_encoder::CheckReplyFits(docs, embedder_->dimension(), max_message_bytes_);
}

Status SentenceEncoder::PrepareEncode(DocList& docs, const Parameters& parameters) const {
  // Requests it leaves unprepared go to Encode as before, which tokenizes
  // them one call at a time: requests Encode refuses, and texts so long that
  // tokenizing them on every receiving thread at once could hold gigabytes.
  std::vector<std::vector<std::int64_t>> prepared;
  try {
    const std::string prompt = Prompt(parameters);
    const sentence_encoder::Truncation truncation =
        sentence_encoder::ReadTruncation(parameters, auto_truncate_);
    const auto limit = static_cast<std::size_t>(embedder_->max_seq_length());
    prepared.reserve(docs.size());
    for (const Doc& doc : docs) {
      if (doc.text().size() + prompt.size() > sentence_encoder::kMaxPreparedTextBytes) {
        return OkStatus();
      }
      std::vector<std::vector<std::int64_t>> ids =
          embedder_->Tokenize({doc.text()}, prompt, truncation);
      if (truncation == sentence_encoder::Truncation::kNone && ids[0].size() > limit) {
        return OkStatus();  // over the limit, uncut: Encode refuses it, naming the document
      }
      prepared.push_back(std::move(ids[0]));
    }
  } catch (const std::exception&) {
    return OkStatus();  // Encode tokenizes again and throws, naming the document
  }
  for (std::size_t i = 0; i < docs.size(); ++i) {
    docs[i].set_prepared(PreparedIds(std::move(prepared[i])));
  }
  return OkStatus();
}

void SentenceEncoder::Encode(DocList& docs, const Parameters& parameters) {
  // Documents without text come back as they came, as Jina's encoders leave
  // them; among others they run as "" (a row of two tokens), so that every
  // document keeps its index in errors and passes.
  if (std::none_of(docs.begin(), docs.end(), sentence_encoder::HasText)) {
    return;
  }
  const std::string prompt = Prompt(parameters);
  const sentence_encoder::Truncation truncation =
      sentence_encoder::ReadTruncation(parameters, auto_truncate_);
  std::vector<std::vector<std::int64_t>> ids = TakePrepared<PreparedIds>(docs);
  if (ids.empty()) {
    ids = embedder_->Tokenize(docs.texts(), prompt, truncation);
  }
  if (truncation == sentence_encoder::Truncation::kNone) {
    const auto limit = static_cast<std::size_t>(embedder_->max_seq_length());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i].size() > limit) {
        throw std::length_error("document " + std::to_string(i) + " (id " + docs[i].id() +
                                ") has " + std::to_string(ids[i].size()) +
                                " tokens, over the model's limit of " + std::to_string(limit) +
                                " (max_seq_length, [CLS] and [SEP] included); send truncate: "
                                "true to cut it");
      }
    }
  }
  // TEI's rule: an input that does not fit one forward pass is refused.
  if (const std::int64_t budget = embedder_->max_batch_tokens(); budget > 0) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (static_cast<std::int64_t>(ids[i].size()) > budget) {
        throw std::length_error("document " + std::to_string(i) + " (id " + docs[i].id() +
                                ") has " + std::to_string(ids[i].size()) +
                                " tokens, over max_batch_tokens " + std::to_string(budget) +
                                " (the most one forward pass holds)");
      }
    }
  }
  // Tokens the model saw ([CLS] and [SEP] included, after truncation), for
  // callers that bill or report usage (the gateway's OpenAI API asks).
  if (sentence_encoder::ReadBoolParameter(parameters, "return_token_counts").value_or(false)) {
    for (std::size_t i = 0; i < docs.size(); ++i) {
      if (sentence_encoder::HasText(docs[i])) {
        docs[i].mutable_tags()["num_tokens"] = Value(static_cast<std::int64_t>(ids[i].size()));
      }
    }
  }
  // TEI's `normalize`: whether vectors come back unit length, whatever the
  // folder's modules say.
  const std::optional<bool> normalize =
      sentence_encoder::ReadBoolParameter(parameters, "normalize");
  const at::Tensor embeddings =
      embedder_->EncodeIds(ids, embedder_->PoolingSkip(prompt), normalize);
  const std::int64_t dim = embedder_->dimension();
  const float* data = embeddings.data_ptr<float>();
  for (std::size_t i = 0; i < docs.size(); ++i) {
    if (!sentence_encoder::HasText(docs[i])) {
      continue;
    }
    docs[i].set_embedding(Tensor::FromValues<float>(
        {dim}, std::span<const float>(data + static_cast<std::int64_t>(i) * dim,
                                      static_cast<std::size_t>(dim))));
  }
}

StatusOr<BatchTokens> SentenceEncoder::CountTokens(const DocList& docs,
                                                   const Parameters& parameters) const {
  BatchTokens tokens;
  if (embedder_->max_batch_tokens_option() <= 0) {
    return tokens;
  }
  tokens.per_document.reserve(docs.size());
  for (const Doc& doc : docs) {
    if (const auto* prepared = std::any_cast<PreparedIds>(&doc.prepared()); prepared != nullptr) {
      tokens.per_document.push_back(static_cast<std::int64_t>(prepared->size()));
    }
  }
  if (tokens.per_document.size() != docs.size()) {  // PrepareEncode could not tokenize them
    tokens.per_document.clear();
    try {
      const std::vector<std::vector<std::int64_t>> ids =
          embedder_->Tokenize(docs.texts(), Prompt(parameters),
                              sentence_encoder::ReadTruncation(parameters, auto_truncate_));
      for (const std::vector<std::int64_t>& row : ids) {
        tokens.per_document.push_back(static_cast<std::int64_t>(row.size()));
      }
    } catch (const std::invalid_argument& e) {
      return InvalidArgumentError(e.what());
    }
  }
  tokens.budget = embedder_->max_batch_tokens();
  return tokens;
}

void SentenceEncoder::Tokenize(DocList& docs, const Parameters& parameters) {
  const std::optional<bool> add_special_tokens =
      sentence_encoder::ReadBoolParameter(parameters, "add_special_tokens");
  sentence_encoder::TagTokens(docs, embedder_->tokenizer(), Prompt(parameters),
                              add_special_tokens.value_or(true));
}

void SentenceEncoder::Info(DocList& docs) {
  std::string pooling;
  for (const sentence_encoder::PoolingMode mode : embedder_->pipeline().pooling) {
    pooling += (pooling.empty() ? "" : "+") + std::string(sentence_encoder::PoolingModeName(mode));
  }
  sentence_encoder::SetTeiInfo(docs, {.dtype = embedder_->dtype(),
                                      .max_input_length = embedder_->max_seq_length(),
                                      .auto_truncate = auto_truncate_,
                                      .batch_size = embedder_->batch_size(),
                                      .max_batch_tokens = embedder_->max_batch_tokens(),
                                      .model_type = sentence_encoder::EmbeddingModelType(pooling)});
}

}  // namespace gantry

using gantry::SentenceEncoder;
GANTRY_REGISTER_EXECUTOR(SentenceEncoder);
