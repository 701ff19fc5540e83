#include "sentence_encoder.h"

#include <ATen/core/Tensor.h>
#include <gantry/torch_cuda.h>

#include <cmath>
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
constexpr std::string_view kKeys[] = {"model_path", "batch_size", "max_seq_length", "dtype",
                                      "device"};

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
          "unknown key (allowed: model_path, batch_size, max_seq_length, dtype, device)"));
    }
  }
  sentence_encoder::EmbedderOptions options;
  options.model_path = GetText(context, "model_path", "");
  options.batch_size = GetInt(context, "batch_size", 0);  // 0: the device's default
  options.max_seq_length = GetInt(context, "max_seq_length", 0);
  options.dtype = GetText(context, "dtype", "float32");
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

void SentenceEncoder::Encode(DocList& docs, const Parameters& parameters) {
  if (docs.empty()) {
    return;
  }
  std::vector<std::string_view> texts;
  texts.reserve(docs.size());
  for (const Doc& doc : docs) {
    texts.push_back(doc.text());
  }
  const std::vector<std::vector<std::int64_t>> ids = embedder_->Tokenize(texts);
  // Tokens the model saw ([CLS] and [SEP] included, after truncation), for
  // callers that bill or report usage (the gateway's OpenAI API asks).
  if (parameters.GetBool("return_token_counts")) {
    for (std::size_t i = 0; i < docs.size(); ++i) {
      docs[i].mutable_tags()["num_tokens"] = Value(static_cast<std::int64_t>(ids[i].size()));
    }
  }
  const at::Tensor embeddings = embedder_->EncodeIds(ids);
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
