// File: executors/sentence_encoder/sentence_pipeline.h
//
// What a sentence-transformers folder puts after the transformer, read from
// its files instead of assumed: the Pooling module's modes (cls, max, mean,
// mean_sqrt_len_tokens, weightedmean, lasttoken; several are concatenated in
// the order given), whether a Normalize module follows, and the named
// prompts of config_sentence_transformers.json. Pool() computes the pooling
// as sentence-transformers does, in float32.
//
// A folder that holds anything we would not reproduce exactly (another
// module type, a pooling mode we do not know, modules in another order) is
// refused naming the file and the key, rather than served approximately.
//
// Thread safety: plain values and stateless functions.
#ifndef GANTRY_EXECUTORS_SENTENCE_ENCODER_SENTENCE_PIPELINE_H_
#define GANTRY_EXECUTORS_SENTENCE_ENCODER_SENTENCE_PIPELINE_H_

#include <ATen/core/Tensor.h>
#include <gantry/status.h>

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gantry::sentence_encoder {

enum class PoolingMode { kCls, kMax, kMean, kMeanSqrtLen, kWeightedMean, kLastToken };

// sentence-transformers' names: "cls", "max", "mean", "mean_sqrt_len_tokens",
// "weightedmean", "lasttoken".
std::string_view PoolingModeName(PoolingMode mode);
std::optional<PoolingMode> ParsePoolingMode(std::string_view name);

struct SentencePipeline {
  // In concatenation order. A folder without modules.json pools by mean, as
  // sentence-transformers does for a bare transformer.
  std::vector<PoolingMode> pooling{PoolingMode::kMean};
  bool normalize = false;
  // Whether a prompt's tokens count in the pooling; false (INSTRUCTOR-style
  // folders) leaves [CLS] and the prompt out of it, as sentence-transformers
  // does.
  bool include_prompt = true;
  // Name -> text put before every input that asks for it.
  std::map<std::string, std::string, std::less<>> prompts;
  // Applied when a request names none; empty = no prompt.
  std::string default_prompt_name;

  // The sentence embedding's size for a transformer of `hidden` units.
  std::int64_t Dimension(std::int64_t hidden) const {
    return hidden * static_cast<std::int64_t>(pooling.size());
  }
};

// Reads modules.json, the Pooling module's config.json (the legacy
// pooling_mode_* flags and the newer pooling_mode string or list), and
// config_sentence_transformers.json from `folder`, whose transformer has
// `hidden` units. Errors name the file and the key.
StatusOr<SentencePipeline> ReadSentencePipeline(const std::string& folder, std::int64_t hidden);

// A JSON file, parsed; NotFound or InvalidArgument naming the path.
StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);

// Token embeddings [B, T, H] (any float dtype) and their attention mask
// [B, T] (1 = token, padding on the right) to sentence embeddings
// [B, H * modes], float32, L2 normalised when `normalize`.
at::Tensor Pool(const at::Tensor& hidden, const at::Tensor& attention_mask,
                const std::vector<PoolingMode>& modes, bool normalize);
// Each row of [B, D] divided by its L2 norm (at least 1e-12), as
// sentence-transformers' Normalize module: what Pool does when `normalize`.
at::Tensor NormalizeRows(const at::Tensor& rows);

}  // namespace gantry::sentence_encoder

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_SENTENCE_PIPELINE_H_
