// File: executors/cross_encoder/cross_encoder.h
//
// CrossEncoder: a reranker. Scores how well each document's text answers
// the request's `query` with a cross-encoder folder (sentence-transformers'
// CrossEncoder, Hugging Face BertForSequenceClassification, e.g.
// ms-marco-MiniLM-L-6-v2), on "/rerank" and "/default". Each document gets
// the tag `relevance_score` (a number; models with one label) and its
// `embedding` set to the scores of every label (float32 [num_labels]).
//
// Request parameters:
//   query                  the text every document is scored against (required)
//   raw_scores             true: logits, without the folder's activation
//                          (Sigmoid for one label unless the folder says)
//   truncate, truncation_direction
//                          as SentenceEncoder: a pair over max_seq_length is
//                          cut (longest text first, as Hugging Face's
//                          "longest_first") or refused (HTTP 413) naming the
//                          document
//   return_token_counts    true: tag `num_tokens` (tokens of the pair the
//                          model saw)
//
// "/tokenize" tags each document with `tokens`, its text's tokens with their
// byte offsets (as SentenceEncoder's /tokenize; parameter
// `add_special_tokens`, default true).
//
// `with:` keys: model_path (required), batch_size, max_seq_length (tokens of
// a pair; default the folder's), dtype (float32, float16, bfloat16, auto),
// auto_truncate (default true), device.
//
// Thread safety: the worker calls one handler at a time.
#ifndef GANTRY_EXECUTORS_CROSS_ENCODER_CROSS_ENCODER_H_
#define GANTRY_EXECUTORS_CROSS_ENCODER_CROSS_ENCODER_H_

#include <gantry/device_report.h>
#include <gantry/executor.h>

#include <memory>

namespace gantry::cross_encoder {
class CrossScorer;
}  // namespace gantry::cross_encoder

namespace gantry {

class CrossEncoder final : public Executor {
  GANTRY_EXECUTOR(CrossEncoder);

 public:
  // Loads the model onto context.device. Throws std::runtime_error naming
  // the file, key or device at fault.
  explicit CrossEncoder(const ExecutorContext& context);
  ~CrossEncoder() override;

  GANTRY_REQUESTS(Rerank, "/rerank", "/default");
  // Throws std::invalid_argument for a missing query, bad parameters or
  // invalid UTF-8, std::length_error for a pair too long to keep whole.
  void Rerank(DocList& docs, const Parameters& parameters);

  GANTRY_VALIDATE(Rerank, ValidateTexts);
  // INVALID_ARGUMENT naming a document without text (sentence_encoder::
  // CheckTexts), for each request before requests are merged.
  Status ValidateTexts(const DocList& docs, const Parameters& parameters) const;

  GANTRY_PREPARE(Rerank, PrepareRerank);
  // Tokenizes each (query, text) pair as Rerank would, on the thread that
  // received the request, and leaves the pair's ids with the document, so
  // that Rerank's thread only runs the model. Always OK: a request Rerank
  // will refuse, or with a pair over kMaxPreparedTextBytes, is left
  // unprepared, and Rerank tokenizes it as before.
  Status PrepareRerank(DocList& docs, const Parameters& parameters) const;

  GANTRY_REQUESTS(Tokenize, "/tokenize");
  void Tokenize(DocList& docs, const Parameters& parameters);

  // One document describing the model for TEI's GET /info (tei_info.h).
  GANTRY_REQUESTS(Info, "/info");
  void Info(DocList& docs);

 private:
  std::unique_ptr<cross_encoder::CrossScorer> scorer_;
  bool auto_truncate_ = true;
  DeviceCheckRegistration device_check_;
};

}  // namespace gantry

#endif  // GANTRY_EXECUTORS_CROSS_ENCODER_CROSS_ENCODER_H_
