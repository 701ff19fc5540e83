// File: executors/sentence_encoder/sentence_encoder.h
//
// SentenceEncoder: sentence-transformers' all-MiniLM-L6-v2 (or another BERT
// WordPiece folder, pooled as its modules say) in libtorch, the C++
// counterpart of the Jina "GPU Executor" tutorial. Sets each document's
// `embedding` (float32 [384] for the default model) from its text on
// "/encode" and "/default". With the request parameter
// `return_token_counts: true` it also tags each document with `num_tokens`
// (tokens the model saw, [CLS]/[SEP] included), which the gateway's OpenAI
// API reports as usage. `prompt_name` (one of the folder's prompts, e.g.
// "query") or `prompt` (the text itself) put a prompt before every text, as
// sentence-transformers' encode() does; `normalize` (true/false) overrides
// whether the folder's vectors are scaled to unit length.
//
// "/tokenize" embeds nothing: it tags each document with `tokens`, every
// token of the prompt and text with its UTF-8 byte offsets (token_tags.h),
// as text-embeddings-inference's /tokenize reports them; parameter
// `add_special_tokens` (default true) says whether [CLS] and [SEP] are listed.
// "/info" answers one document describing the model for TEI's GET /info
// (tei_info.h).
//
// `with:` keys:
//   model_path      HF sentence-transformers folder (default: see
//                   FindDefaultModelPath in sentence_embedder.h)
//   batch_size      documents per forward pass (default 32 on a CPU, 128 in
//                   bfloat16 on a CPU with AMX, 256 on CUDA)
//   max_seq_length  tokens incl. [CLS]/[SEP] (default: the folder's, 256 for
//                   all-MiniLM-L6-v2)
//   max_batch_tokens  tokens one forward pass holds, padding included (TEI's
//                   name): long inputs go fewer to a pass, and an input over
//                   it is refused (std::length_error, HTTP 413) naming the
//                   document (default: batch_size rows of max_seq_length);
//                   with dynamic batching, requests are merged only while
//                   their padded tokens fit it
//   auto_truncate   cut inputs over max_seq_length when a request does not say
//                   (default true); request parameters `truncate` and
//                   `truncation_direction` ("right"/"left") override it, and an
//                   input over the limit with truncation off throws
//                   std::length_error (HTTP 413) naming the document
//   dtype           float32 (default), float16, bfloat16, int8, or auto:
//                   float16 on CUDA; on a CPU the faster of bfloat16 and
//                   float32, timed at start (MeasuredCpuMatmulSpeed)
// The device is context.device ("auto" resolves to cuda when visible).
//
// On a CUDA device /encode is dynamically batched by default: whatever
// requests wait while a call runs go through the next call together, up to
// 256 documents, with no added wait (timeout 0), as Triton's dynamic
// batcher and TEI do; on an H100 this took the seed job's warm posts from
// 0.44 s to 0.13-0.36 s (docs/benchmarks-encoder.md). `uses_dynamic_batching` in YAML
// overrides it (`Encode: {use_dynamic_batching: false}` turns it off). So it is in
// bfloat16 on a CPU with AMX, up to batch_size documents (128 there unless
// given): the seed job ran 1.2-1.33x faster a document. Other CPUs gained
// nothing from it, so there requests are not merged.
//
// Thread safety: the worker calls one handler at a time.
#ifndef GANTRY_EXECUTORS_SENTENCE_ENCODER_SENTENCE_ENCODER_H_
#define GANTRY_EXECUTORS_SENTENCE_ENCODER_SENTENCE_ENCODER_H_

#include <gantry/device_report.h>
#include <gantry/executor.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace gantry::sentence_encoder {
class SentenceEmbedder;
}  // namespace gantry::sentence_encoder

namespace gantry {

class SentenceEncoder final : public Executor {
  GANTRY_EXECUTOR(SentenceEncoder);

 public:
  // Loads the model onto context.device and runs a warm-up pass. Throws
  // std::runtime_error naming the file, key or device at fault.
  explicit SentenceEncoder(const ExecutorContext& context);
  ~SentenceEncoder() override;

  GANTRY_REQUESTS(Encode, "/encode", "/default");
  GANTRY_DYNAMIC_BATCHING_ON_GPU(Encode, {.preferred_batch_size = 256, .timeout_ms = 0});
  // Throws std::invalid_argument for texts that are not valid UTF-8 and for
  // a prompt the model does not have.
  void Encode(DocList& docs, const Parameters& parameters);

  GANTRY_VALIDATE(Encode, ValidateTexts);
  // INVALID_ARGUMENT naming a document without text (sentence_encoder::
  // CheckTexts), or for a request whose reply could only be over the message
  // cap (CheckReplyFits), for each request before requests are merged.
  Status ValidateTexts(const DocList& docs, const Parameters& parameters) const;

  GANTRY_PREPARE(Encode, PrepareEncode);
  // Tokenizes each text as Encode would, on the thread that received the
  // request, and leaves its token ids with the document: requests are then
  // tokenized concurrently while the model runs earlier ones, and Encode's
  // thread only runs the model. Always OK: a request Encode will refuse, or
  // with a text over kMaxPreparedTextBytes, is left unprepared, and Encode
  // tokenizes it as before.
  Status PrepareEncode(DocList& docs, const Parameters& parameters) const;

  GANTRY_BATCH_TOKENS(Encode, CountTokens);
  // With `max_batch_tokens` set: each text's tokens as Encode will count
  // them, and that budget, so that dynamically batched requests close by
  // tokens; without it, no budget and no tokenizing. INVALID_ARGUMENT where
  // Encode would throw std::invalid_argument.
  StatusOr<BatchTokens> CountTokens(const DocList& docs, const Parameters& parameters) const;

  // Encode's: batch_size documents with no added wait in bfloat16 on a CPU
  // with AMX, else the macro's.
  std::optional<DynamicBatching> DefaultBatching(std::string_view method_name) const override;

  GANTRY_REQUESTS(Tokenize, "/tokenize");
  // Throws std::invalid_argument as Encode, std::length_error past
  // kMaxTokensPerRequest tokens.
  void Tokenize(DocList& docs, const Parameters& parameters);

  GANTRY_REQUESTS(Info, "/info");
  void Info(DocList& docs);

 private:
  // The text the request's `prompt` / `prompt_name` parameters ask to put
  // before every document (the folder's default prompt when neither is given).
  std::string Prompt(const Parameters& parameters) const;

  std::unique_ptr<sentence_encoder::SentenceEmbedder> embedder_;
  // Whether inputs over max_seq_length are cut when a request does not say.
  bool auto_truncate_ = true;
  // The worker's message cap, which every reply must fit.
  std::int64_t max_message_bytes_ = 0;
  // Lets the worker verify, after construction, that every weight is on the
  // assigned device.
  DeviceCheckRegistration device_check_;
};

}  // namespace gantry

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_SENTENCE_ENCODER_H_
