// File: executors/sentence_encoder/tei_info.h
//
// What text-embeddings-inference's GET /info says about a served model,
// answered by an executor's "/info" endpoint as one document whose tag
// `tei_info` holds TEI's model fields: model_dtype, model_type,
// max_input_length, auto_truncate, max_batch_requests (documents per forward
// pass) and max_batch_tokens (the most tokens one forward pass holds). The gateway adds the fields
// it owns.
//
// Thread safety: free functions without shared state.
#ifndef GANTRY_EXECUTORS_SENTENCE_ENCODER_TEI_INFO_H_
#define GANTRY_EXECUTORS_SENTENCE_ENCODER_TEI_INFO_H_

#include <gantry/document.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gantry::sentence_encoder {

struct TeiModelInfo {
  std::string dtype;
  std::int64_t max_input_length = 0;
  bool auto_truncate = true;
  std::int64_t batch_size = 0;
  // 0: batch_size rows of max_input_length.
  std::int64_t max_batch_tokens = 0;
  // TEI's model_type: EmbeddingModelType or RerankerModelType.
  Value::Dict model_type;
};

// {"embedding": {"pooling": pooling}}.
Value::Dict EmbeddingModelType(const std::string& pooling);
// {"reranker": {"id2label": {"0": labels[0], ...}, "label2id": {...}}}.
Value::Dict RerankerModelType(const std::vector<std::string>& labels);

// Replaces `docs` by the one document carrying `info`.
void SetTeiInfo(DocList& docs, const TeiModelInfo& info);

}  // namespace gantry::sentence_encoder

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_TEI_INFO_H_
