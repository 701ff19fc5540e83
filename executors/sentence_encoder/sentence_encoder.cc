#include "sentence_encoder.h"

#include <ATen/core/Tensor.h>
#include <gantry/torch_cuda.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sentence_embedder.h"

namespace gantry {
namespace {

// `device` is read by the worker (it becomes context.device), but users pass
// it under `with:` like every other constructor argument.
constexpr std::string_view kKeys[] = {"model_path", "batch_size",    "max_seq_length",
                                      "dtype",      "auto_truncate", "device"};

std::string WithError(const ExecutorContext& context, std::string_view key,
                      const std::string& what) {
  return "executor '" + context.name + "' (SentenceEncoder): with." + std::string(key) + ": " +
         what;
}

std::string GetText(const ExecutorContext& context, std::string_view key, std::string fallback) {
  const Value* value = context.with.Find(key);
  if (value == nullptr || value->is_none()) {
    return fallback;
  }
  const std::string* text = value->AsText();
  if (text == nullptr) {
    throw std::runtime_error(
        WithError(context, key, "expected a string, got " + value->DebugString()));
  }
  return *text;
}

std::int64_t GetInt(const ExecutorContext& context, std::string_view key, std::int64_t fallback) {
  const Value* value = context.with.Find(key);
  if (value == nullptr || value->is_none()) {
    return fallback;
  }
  double number = 0;
  if (!value->ToNumber(&number) || number != std::floor(number) || number < 1 || number > 1e9) {
    throw std::runtime_error(
        WithError(context, key, "expected a positive integer, got " + value->DebugString()));
  }
  return static_cast<std::int64_t>(number);
}

}  // namespace

SentenceEncoder::SentenceEncoder(const ExecutorContext& context) {
  for (const auto& [key, value] : context.with.values()) {
    bool known = false;
    for (std::string_view k : kKeys) {
      known = known || key == k;
    }
    if (!known) {
      throw std::runtime_error(WithError(
          context, key,
          "unknown key (allowed: model_path, batch_size, max_seq_length, dtype, auto_truncate, "
          "device)"));
    }
  }
  sentence_encoder::EmbedderOptions options;
  options.model_path = GetText(context, "model_path", "");
  options.batch_size = GetInt(context, "batch_size", 0);  // 0: the device's default
  options.max_seq_length = GetInt(context, "max_seq_length", 0);
  options.dtype = GetText(context, "dtype", "float32");
  if (const Value* value = context.with.Find("auto_truncate");
      value != nullptr && !value->is_none()) {
    const bool* flag = value->AsBool();
    if (flag == nullptr) {
      throw std::runtime_error(WithError(context, "auto_truncate",
                                         "expected true or false, got " + value->DebugString()));
    }
    auto_truncate_ = *flag;
  }
  options.device = context.device;
  StatusOr<std::unique_ptr<sentence_encoder::SentenceEmbedder>> embedder =
      sentence_encoder::SentenceEmbedder::Load(options);
  if (!embedder.ok()) {
    throw std::runtime_error("executor '" + context.name + "' (SentenceEncoder) on " +
                             context.device.ToString() + ": " + embedder.status().message());
  }
  embedder_ = std::move(embedder).value();
  device_check_ = RegisterTensorsForDeviceCheck(
      "SentenceEncoder", [embedder = embedder_.get()] { return embedder->NamedParameters(); });
}

SentenceEncoder::~SentenceEncoder() = default;

sentence_encoder::Truncation SentenceEncoder::TruncationOf(const Parameters& parameters) const {
  bool truncate = auto_truncate_;
  if (const Value* given = parameters.Find("truncate"); given != nullptr && !given->is_none()) {
    const bool* flag = given->AsBool();
    if (flag == nullptr) {
      throw std::invalid_argument("parameter truncate: expected true or false, got " +
                                  given->DebugString());
    }
    truncate = *flag;
  }
  if (!truncate) {
    return sentence_encoder::Truncation::kNone;
  }
  const Value* direction = parameters.Find("truncation_direction");
  if (direction == nullptr || direction->is_none()) {
    return sentence_encoder::Truncation::kRight;
  }
  // TEI spells them "Right" and "Left".
  const std::string* text = direction->AsText();
  if (text != nullptr && (*text == "right" || *text == "Right")) {
    return sentence_encoder::Truncation::kRight;
  }
  if (text != nullptr && (*text == "left" || *text == "Left")) {
    return sentence_encoder::Truncation::kLeft;
  }
  throw std::invalid_argument(
      "parameter truncation_direction: expected \"right\" or \"left\", got " +
      direction->DebugString());
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

void SentenceEncoder::Encode(DocList& docs, const Parameters& parameters) {
  if (docs.empty()) {
    return;
  }
  std::vector<std::string_view> texts;
  texts.reserve(docs.size());
  for (const Doc& doc : docs) {
    texts.push_back(doc.text());
  }
  const std::string prompt = Prompt(parameters);
  const sentence_encoder::Truncation truncation = TruncationOf(parameters);
  const std::vector<std::vector<std::int64_t>> ids = embedder_->Tokenize(texts, prompt, truncation);
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
  // Tokens the model saw ([CLS] and [SEP] included, after truncation), for
  // callers that bill or report usage (the gateway's OpenAI API asks).
  if (parameters.GetBool("return_token_counts")) {
    for (std::size_t i = 0; i < docs.size(); ++i) {
      docs[i].mutable_tags()["num_tokens"] = Value(static_cast<std::int64_t>(ids[i].size()));
    }
  }
  // TEI's `normalize`: whether vectors come back unit length, whatever the
  // folder's modules say.
  std::optional<bool> normalize;
  if (const Value* given = parameters.Find("normalize"); given != nullptr && !given->is_none()) {
    const bool* flag = given->AsBool();
    if (flag == nullptr) {
      throw std::invalid_argument("parameter normalize: expected true or false, got " +
                                  given->DebugString());
    }
    normalize = *flag;
  }
  const at::Tensor embeddings =
      embedder_->EncodeIds(ids, embedder_->PoolingSkip(prompt), normalize);
  const std::int64_t dim = embedder_->dimension();
  const float* data = embeddings.data_ptr<float>();
  for (std::size_t i = 0; i < docs.size(); ++i) {
    docs[i].set_embedding(Tensor::FromValues<float>(
        {dim}, std::span<const float>(data + static_cast<std::int64_t>(i) * dim,
                                      static_cast<std::size_t>(dim))));
  }
}

}  // namespace gantry

using gantry::SentenceEncoder;
GANTRY_REGISTER_EXECUTOR(SentenceEncoder);
