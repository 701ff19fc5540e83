// File: executors/cross_encoder/cross_scorer.h
//
// The bare cross-encoder (sentence-transformers' CrossEncoder: a Hugging
// Face BertForSequenceClassification folder such as ms-marco-MiniLM): reads
// the folder, tokenizes (query, text) pairs with truncation "longest_first"
// as the fast tokenizer does, runs BertModel with token types, BERT's pooler
// (tanh of a dense layer over [CLS]) and the classifier, and gives one logit
// per label. The activation sentence-transformers puts after them comes from
// the folder (config.json's sentence_transformers.activation_fn, else
// Sigmoid for one label and Identity for more).
//
// Thread safety: immutable after Load; Tokenize and Logits are safe for
// concurrent use.
#ifndef GANTRY_EXECUTORS_CROSS_ENCODER_CROSS_SCORER_H_
#define GANTRY_EXECUTORS_CROSS_ENCODER_CROSS_SCORER_H_

#include <ATen/core/Tensor.h>
#include <gantry/device.h>
#include <gantry/status.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bert_model.h"
#include "sentence_embedder.h"
#include "tokenizer.h"

namespace gantry::cross_encoder {

struct ScorerOptions {
  // A Hugging Face BertForSequenceClassification folder (required).
  std::string model_path;
  // Pairs per forward pass; 0 = the device's default (32 on a CPU, 256 on
  // CUDA).
  std::int64_t batch_size = 0;
  // Tokens of a pair, [CLS] and both [SEP] included; 0 = the folder's (as
  // sentence_encoder::ReadMaxSeqLength reads it).
  std::int64_t max_seq_length = 0;
  // "float32", "float16", "bfloat16" or "auto" (sentence_encoder::ResolveDType).
  std::string dtype = "float32";
  Device device = Device::Cpu();
  bool warm_up = true;
};

// What turns a logit into a score: sentence-transformers' activation_fn.
enum class Activation { kIdentity, kSigmoid };

// One forward pass's inputs, on the CPU, each [rows, length] int64.
struct PairBatch {
  at::Tensor ids;
  at::Tensor mask;
  at::Tensor token_types;
  // Some row attends to fewer than `length` tokens (Forward's hint).
  bool padded = false;
};
// pairs[order[0]], pairs[order[1]], ... as the first rows of a batch of
// `rows` x `length` (rows >= order.size(), length >= the longest of them),
// right-padded with `pad_id`. Rows past them are filler: one attended pad
// token each, so that they stay finite; their logits are to be dropped.
PairBatch BuildPairBatch(const std::vector<sentence_encoder::PairIds>& pairs,
                         std::span<const std::int64_t> order, std::int64_t rows,
                         std::int64_t length, std::int64_t pad_id);

class CrossScorer {
 public:
  // Every error names the file and key at fault.
  static StatusOr<std::unique_ptr<CrossScorer>> Load(const ScorerOptions& options);

  // (query, text) for every text, cut to max_seq_length as `truncation`
  // says. With kNone a pair over it throws std::length_error naming the
  // document's index and its token count. Throws std::invalid_argument for
  // invalid UTF-8.
  std::vector<sentence_encoder::PairIds> Tokenize(std::string_view query,
                                                  const std::vector<std::string_view>& texts,
                                                  sentence_encoder::Truncation truncation) const;
  // float32 CPU [N, num_labels()]: the classifier's logits per pair. Throws
  // std::length_error for a pair over max_seq_length.
  at::Tensor Logits(const std::vector<sentence_encoder::PairIds>& pairs) const;
  // `logits` with the folder's activation applied.
  at::Tensor Scores(const at::Tensor& logits) const;
  // The shape {rows, length} a pass of `count` pairs, the longest `longest`
  // tokens, runs as: on CUDA, sentence_encoder::CudaBatchRows and
  // CudaPaddedLength (few shapes, the common ones warmed up at load, since
  // a new shape there can load kernels on first use); elsewhere as they are.
  std::pair<std::int64_t, std::int64_t> PassShape(std::int64_t count, std::int64_t longest) const;
  // float32 CPU [rows, num_labels()]: the logits of every row of `batch`,
  // filler rows included. Logits runs its passes through this.
  at::Tensor PassLogits(const PairBatch& batch) const;

  const sentence_encoder::WordPieceTokenizer& tokenizer() const { return tokenizer_; }
  Activation activation() const { return activation_; }
  std::int64_t num_labels() const { return num_labels_; }
  // Label i's name: config.json's id2label, else "LABEL_i" (as transformers).
  const std::vector<std::string>& labels() const { return labels_; }
  std::int64_t batch_size() const { return batch_size_; }
  std::int64_t max_seq_length() const { return max_seq_length_; }
  const std::string& dtype() const { return dtype_; }
  const Device& device() const { return device_; }
  // Every parameter by checkpoint key, for the worker's device check.
  std::vector<std::pair<std::string, at::Tensor>> NamedParameters() const;

 private:
  CrossScorer(sentence_encoder::WordPieceTokenizer tokenizer, sentence_encoder::BertModel model)
      : tokenizer_(std::move(tokenizer)), model_(std::move(model)) {}

  // One pass on a short pair; on CUDA also one per shape of
  // sentence_encoder::CudaWarmUpPasses, as SentenceEncoder warms up.
  void WarmUp() const;

  sentence_encoder::WordPieceTokenizer tokenizer_;
  sentence_encoder::BertModel model_;
  at::Tensor pooler_w_, pooler_b_, classifier_w_, classifier_b_;
  Activation activation_ = Activation::kSigmoid;
  std::int64_t num_labels_ = 1;
  std::vector<std::string> labels_;
  std::int64_t max_seq_length_ = 512;
  std::int64_t max_positions_ = 512;
  std::int64_t batch_size_ = 32;
  std::string dtype_ = "float32";
  Device device_;
};

}  // namespace gantry::cross_encoder

#endif  // GANTRY_EXECUTORS_CROSS_ENCODER_CROSS_SCORER_H_
