#include "tei_info.h"

#include <utility>

namespace gantry::sentence_encoder {

Value::Dict EmbeddingModelType(const std::string& pooling) {
  return Value::Dict{{"embedding", Value(Value::Dict{{"pooling", Value(pooling)}})}};
}

Value::Dict RerankerModelType(const std::vector<std::string>& labels) {
  Value::Dict id2label;
  Value::Dict label2id;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    id2label[std::to_string(i)] = Value(labels[i]);
    label2id[labels[i]] = Value(static_cast<std::int64_t>(i));
  }
  return Value::Dict{{"reranker", Value(Value::Dict{{"id2label", Value(std::move(id2label))},
                                                    {"label2id", Value(std::move(label2id))}})}};
}

void SetTeiInfo(DocList& docs, const TeiModelInfo& info) {
  Value::Dict fields{
      {"model_dtype", Value(info.dtype)},
      {"model_type", Value(info.model_type)},
      {"max_input_length", Value(info.max_input_length)},
      {"auto_truncate", Value(info.auto_truncate)},
      {"max_batch_requests", Value(info.batch_size)},
      {"max_batch_tokens",
       Value(info.max_batch_tokens > 0 ? info.max_batch_tokens
                                       : info.batch_size * info.max_input_length)},
  };
  Doc doc;
  doc.mutable_tags()["tei_info"] = Value(std::move(fields));
  docs.clear();
  docs.push_back(std::move(doc));
}

}  // namespace gantry::sentence_encoder
