#include "cross_encoder.h"

#include <ATen/core/Tensor.h>
#include <gantry/torch_cuda.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cross_scorer.h"
#include "option_readers.h"
#include "tei_info.h"
#include "token_tags.h"

namespace gantry {

CrossEncoder::CrossEncoder(const ExecutorContext& context) {
  const sentence_encoder::WithReader with(
      context, "CrossEncoder",
      {"model_path", "batch_size", "max_seq_length", "dtype", "auto_truncate", "device"});
  cross_encoder::ScorerOptions options;
  options.model_path = with.Text("model_path", "");
  if (options.model_path.empty()) {
    throw std::runtime_error(
        with.Error("model_path", "required (a BertForSequenceClassification folder)"));
  }
  options.batch_size = with.PositiveInt("batch_size", 0);
  options.max_seq_length = with.PositiveInt("max_seq_length", 0);
  options.dtype = with.Text("dtype", "float32");
  auto_truncate_ = with.Bool("auto_truncate").value_or(true);
  options.device = context.device;
  StatusOr<std::unique_ptr<cross_encoder::CrossScorer>> scorer =
      cross_encoder::CrossScorer::Load(options);
  if (!scorer.ok()) {
    throw std::runtime_error(with.LoadError(std::string(scorer.status().message())));
  }
  scorer_ = std::move(scorer).value();
  device_check_ = RegisterTensorsForDeviceCheck(
      "CrossEncoder", [scorer = scorer_.get()] { return scorer->NamedParameters(); });
}

CrossEncoder::~CrossEncoder() = default;

Status CrossEncoder::ValidateTexts(const DocList& docs, const Parameters& /*parameters*/) const {
  return sentence_encoder::CheckTexts(docs);
}

Status CrossEncoder::PrepareRerank(DocList& docs, const Parameters& parameters) const {
  const Value* query = parameters.Find("query");
  const std::string* query_text = query == nullptr ? nullptr : query->AsText();
  if (query_text == nullptr) {
    return OkStatus();  // Rerank refuses it, naming the parameter
  }
  // Long texts are left to Rerank, as in SentenceEncoder::PrepareEncode.
  for (const Doc& doc : docs) {
    if (query_text->size() + doc.text().size() > sentence_encoder::kMaxPreparedTextBytes) {
      return OkStatus();
    }
  }
  std::vector<sentence_encoder::PairIds> pairs;
  try {
    pairs = scorer_->Tokenize(*query_text, docs.texts(),
                              sentence_encoder::ReadTruncation(parameters, auto_truncate_));
  } catch (const std::exception&) {
    return OkStatus();  // Rerank tokenizes again and throws, naming the document
  }
  for (std::size_t i = 0; i < docs.size(); ++i) {
    docs[i].set_prepared(std::move(pairs[i]));
  }
  return OkStatus();
}

void CrossEncoder::Rerank(DocList& docs, const Parameters& parameters) {
  const Value* query = parameters.Find("query");
  const std::string* query_text = query == nullptr ? nullptr : query->AsText();
  if (query_text == nullptr) {
    throw std::invalid_argument(
        "parameter query: expected the text to score documents against, got " +
        (query == nullptr ? std::string("nothing") : query->DebugString()) +
        " (a reranker scores (query, text) pairs; it makes no embeddings)");
  }
  // Documents without text come back as they came (as SentenceEncoder's).
  if (std::none_of(docs.begin(), docs.end(), sentence_encoder::HasText)) {
    return;
  }
  const sentence_encoder::Truncation truncation =
      sentence_encoder::ReadTruncation(parameters, auto_truncate_);
  std::vector<sentence_encoder::PairIds> pairs = TakePrepared<sentence_encoder::PairIds>(docs);
  if (pairs.empty()) {
    pairs = scorer_->Tokenize(*query_text, docs.texts(), truncation);
  }
  const bool raw = sentence_encoder::ReadBoolParameter(parameters, "raw_scores").value_or(false);
  const bool token_counts =
      sentence_encoder::ReadBoolParameter(parameters, "return_token_counts").value_or(false);
  const at::Tensor logits = scorer_->Logits(pairs);
  const at::Tensor scores = raw ? logits : scorer_->Scores(logits).contiguous();
  const std::int64_t labels = scorer_->num_labels();
  const float* data = scores.data_ptr<float>();
  for (std::size_t i = 0; i < docs.size(); ++i) {
    if (!sentence_encoder::HasText(docs[i])) {
      continue;
    }
    const float* row = data + static_cast<std::int64_t>(i) * labels;
    docs[i].set_embedding(Tensor::FromValues<float>({labels}, std::span<const float>(row, labels)));
    if (labels == 1) {
      docs[i].mutable_tags()["relevance_score"] = Value(static_cast<double>(row[0]));
    }
    if (token_counts) {
      docs[i].mutable_tags()["num_tokens"] = Value(static_cast<std::int64_t>(pairs[i].ids.size()));
    }
  }
}

void CrossEncoder::Tokenize(DocList& docs, const Parameters& parameters) {
  sentence_encoder::TagTokens(
      docs, scorer_->tokenizer(), /*prompt=*/"",
      sentence_encoder::ReadBoolParameter(parameters, "add_special_tokens").value_or(true));
}

void CrossEncoder::Info(DocList& docs) {
  sentence_encoder::SetTeiInfo(
      docs, {.dtype = scorer_->dtype(),
             .max_input_length = scorer_->max_seq_length(),
             .auto_truncate = auto_truncate_,
             .batch_size = scorer_->batch_size(),
             .model_type = sentence_encoder::RerankerModelType(scorer_->labels())});
}

}  // namespace gantry

using gantry::CrossEncoder;
GANTRY_REGISTER_EXECUTOR(CrossEncoder);
