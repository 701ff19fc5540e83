#include "sentence_pipeline.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/where.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace gantry::sentence_encoder {
namespace {

namespace fs = std::filesystem;

constexpr std::pair<PoolingMode, std::string_view> kModeNames[] = {
    {PoolingMode::kCls, "cls"},
    {PoolingMode::kMax, "max"},
    {PoolingMode::kMean, "mean"},
    {PoolingMode::kMeanSqrtLen, "mean_sqrt_len_tokens"},
    {PoolingMode::kWeightedMean, "weightedmean"},
    {PoolingMode::kLastToken, "lasttoken"},
};

// The flags older sentence-transformers wrote, in their concatenation order.
constexpr std::pair<std::string_view, PoolingMode> kLegacyFlags[] = {
    {"pooling_mode_cls_token", PoolingMode::kCls},
    {"pooling_mode_max_tokens", PoolingMode::kMax},
    {"pooling_mode_mean_tokens", PoolingMode::kMean},
    {"pooling_mode_mean_sqrt_len_tokens", PoolingMode::kMeanSqrtLen},
    {"pooling_mode_weightedmean_tokens", PoolingMode::kWeightedMean},
    {"pooling_mode_lasttoken", PoolingMode::kLastToken},
};

std::string AllModeNames() {
  std::string out;
  for (const auto& [mode, name] : kModeNames) {
    out += (out.empty() ? "" : ", ") + std::string(name);
  }
  return out;
}

// The class a modules.json "type" names, when it is one of
// sentence-transformers' own ("sentence_transformers.models.Pooling" in
// older folders, "sentence_transformers.sentence_transformer.modules.
// pooling.Pooling" in newer ones); empty otherwise.
std::string_view SentenceTransformersClass(std::string_view type) {
  constexpr std::string_view kPrefix = "sentence_transformers.";
  if (type.substr(0, kPrefix.size()) != kPrefix) {
    return {};
  }
  return type.substr(type.rfind('.') + 1);
}

StatusOr<std::vector<PoolingMode>> ReadPoolingModes(const std::string& path,
                                                    const nlohmann::json& config) {
  std::vector<PoolingMode> modes;
  if (config.contains("pooling_mode")) {
    const nlohmann::json& value = config["pooling_mode"];
    std::vector<nlohmann::json> names;
    if (value.is_string()) {
      names.push_back(value);
    } else if (value.is_array() && !value.empty()) {
      names.assign(value.begin(), value.end());
    } else {
      return InvalidArgumentError(path + ": pooling_mode must be a mode name or a non-empty list");
    }
    for (const nlohmann::json& name : names) {
      const std::optional<PoolingMode> mode =
          name.is_string() ? ParsePoolingMode(name.get<std::string>()) : std::nullopt;
      if (!mode) {
        return InvalidArgumentError(path + ": pooling_mode " + name.dump() + " is not supported (" +
                                    AllModeNames() + ")");
      }
      modes.push_back(*mode);
    }
    return modes;
  }
  for (const auto& [key, mode] : kLegacyFlags) {
    const auto it = config.find(key);
    if (it == config.end()) {
      continue;
    }
    if (!it->is_boolean()) {
      return InvalidArgumentError(path + ": " + std::string(key) + " must be true or false");
    }
    if (it->get<bool>()) {
      modes.push_back(mode);
    }
  }
  if (modes.empty()) {
    modes.push_back(PoolingMode::kMean);  // what sentence-transformers does with no flag set
  }
  return modes;
}

Status ReadPooling(const fs::path& path, std::int64_t hidden, SentencePipeline* pipeline) {
  GANTRY_ASSIGN_OR_RETURN(nlohmann::json config, ReadJsonFile(path.string()));
  if (!config.is_object()) {
    return InvalidArgumentError(path.string() + ": not a JSON object");
  }
  GANTRY_ASSIGN_OR_RETURN(pipeline->pooling, ReadPoolingModes(path.string(), config));
  for (const char* key : {"embedding_dimension", "word_embedding_dimension"}) {
    const auto it = config.find(key);
    if (it == config.end()) {
      continue;
    }
    if (!it->is_number_integer() || it->get<std::int64_t>() != hidden) {
      return InvalidArgumentError(path.string() + ": " + key + " " + it->dump() +
                                  " differs from hidden_size " + std::to_string(hidden) +
                                  " in config.json");
    }
  }
  if (const auto it = config.find("include_prompt"); it != config.end()) {
    if (!it->is_boolean()) {
      return InvalidArgumentError(path.string() + ": include_prompt must be true or false");
    }
    pipeline->include_prompt = it->get<bool>();
  }
  return OkStatus();
}

Status ReadPrompts(const fs::path& path, SentencePipeline* pipeline) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return OkStatus();
  }
  GANTRY_ASSIGN_OR_RETURN(nlohmann::json config, ReadJsonFile(path.string()));
  if (!config.is_object()) {
    return InvalidArgumentError(path.string() + ": not a JSON object");
  }
  if (const auto it = config.find("prompts"); it != config.end() && !it->is_null()) {
    if (!it->is_object()) {
      return InvalidArgumentError(path.string() + ": prompts must map names to strings");
    }
    for (const auto& [name, text] : it->items()) {
      if (!text.is_string()) {
        return InvalidArgumentError(path.string() + ": prompts." + name + " must be a string");
      }
      pipeline->prompts[name] = text.get<std::string>();
    }
  }
  if (const auto it = config.find("default_prompt_name"); it != config.end() && !it->is_null()) {
    if (!it->is_string() || !pipeline->prompts.contains(it->get<std::string>())) {
      return InvalidArgumentError(path.string() + ": default_prompt_name " + it->dump() +
                                  " is not one of its prompts");
    }
    pipeline->default_prompt_name = it->get<std::string>();
  }
  return OkStatus();
}

}  // namespace

std::string_view PoolingModeName(PoolingMode mode) {
  for (const auto& [m, name] : kModeNames) {
    if (m == mode) {
      return name;
    }
  }
  return "?";
}

std::optional<PoolingMode> ParsePoolingMode(std::string_view name) {
  for (const auto& [mode, n] : kModeNames) {
    if (n == name) {
      return mode;
    }
  }
  return std::nullopt;
}

StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return NotFoundError(path + ": cannot open file");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return InvalidArgumentError(path + ": not valid JSON");
  }
  return j;
}

StatusOr<SentencePipeline> ReadSentencePipeline(const std::string& folder_name,
                                                std::int64_t hidden) {
  const fs::path folder(folder_name);
  SentencePipeline pipeline;
  GANTRY_RETURN_IF_ERROR(ReadPrompts(folder / "config_sentence_transformers.json", &pipeline));
  const fs::path modules_path = folder / "modules.json";
  std::error_code ec;
  if (!fs::exists(modules_path, ec)) {
    return pipeline;
  }
  const std::string where = modules_path.string();
  GANTRY_ASSIGN_OR_RETURN(nlohmann::json modules, ReadJsonFile(where));
  if (!modules.is_array()) {
    return InvalidArgumentError(where + ": expected a JSON array of modules");
  }
  // Transformer first, then Pooling, then optionally Normalize: the only
  // order in which each of them means what we compute.
  enum class Stage { kTransformer, kPooling, kNormalize, kEnd };
  Stage expected = Stage::kTransformer;
  for (std::size_t index = 0; index < modules.size(); ++index) {
    const nlohmann::json& module = modules[index];
    const std::string type =
        module.is_object() && module.value("type", nlohmann::json()).is_string()
            ? module["type"].get<std::string>()
            : std::string();
    const std::string path =
        module.is_object() && module.value("path", nlohmann::json()).is_string()
            ? module["path"].get<std::string>()
            : std::string();
    const std::string_view name = SentenceTransformersClass(type);
    const std::string at = where + ": module " + std::to_string(index) + " ('" + type + "')";
    if (name == "Transformer" && expected == Stage::kTransformer) {
      if (!path.empty()) {
        return InvalidArgumentError(at + " lives in '" + path +
                                    "'; only a transformer at the folder's top is served");
      }
      expected = Stage::kPooling;
    } else if (name == "Pooling" && expected == Stage::kPooling) {
      if (path.empty() || path.find("..") != std::string::npos) {
        return InvalidArgumentError(at + ": path must name its folder");
      }
      GANTRY_RETURN_IF_ERROR(ReadPooling(folder / path / "config.json", hidden, &pipeline));
      expected = Stage::kNormalize;
    } else if (name == "Normalize" && expected == Stage::kNormalize) {
      pipeline.normalize = true;
      expected = Stage::kEnd;
    } else {
      return InvalidArgumentError(
          at +
          " is not supported here: a folder is served when it is a Transformer, then a "
          "Pooling, then optionally a Normalize module");
    }
  }
  if (expected == Stage::kTransformer) {
    return InvalidArgumentError(where + ": lists no Transformer module");
  }
  // A Transformer alone gives token embeddings, no sentence embedding:
  // sentence-transformers cannot encode with such a folder either.
  if (expected == Stage::kPooling) {
    return InvalidArgumentError(where + ": lists no Pooling module after the Transformer");
  }
  return pipeline;
}

at::Tensor Pool(const at::Tensor& hidden, const at::Tensor& attention_mask,
                const std::vector<PoolingMode>& modes, bool normalize) {
  const at::Tensor h = hidden.to(at::kFloat);
  const at::Tensor mask = attention_mask.to(at::kFloat);  // [B, T]
  const at::Tensor mask3 = mask.unsqueeze(-1);            // [B, T, 1]
  const std::int64_t length = h.size(1);
  const std::int64_t width = h.size(2);
  std::vector<at::Tensor> parts;
  parts.reserve(modes.size());
  for (const PoolingMode mode : modes) {
    switch (mode) {
      case PoolingMode::kCls: {
        // The first token the mask keeps ([CLS] unless a prompt is left out).
        const at::Tensor first = attention_mask.to(at::kInt).argmax(1);
        parts.push_back(h.gather(1, first.view({-1, 1, 1}).expand({-1, 1, width})).squeeze(1));
        break;
      }
      case PoolingMode::kMax:
        parts.push_back(h.masked_fill(mask3 == 0, -std::numeric_limits<float>::infinity()).amax(1));
        break;
      case PoolingMode::kMean:
      case PoolingMode::kMeanSqrtLen: {
        const at::Tensor summed = (h * mask3).sum(1);
        at::Tensor counts = mask3.sum(1).clamp_min(1e-9);
        if (mode == PoolingMode::kMeanSqrtLen) {
          counts = counts.sqrt();
        }
        parts.push_back(summed / counts);
        break;
      }
      case PoolingMode::kWeightedMean: {
        // Weights 1, 2, ... by position (our batches are padded on the right).
        const at::Tensor weights = at::arange(1, length + 1, h.options()).view({1, -1, 1}) * mask3;
        parts.push_back((h * weights).sum(1) / weights.sum(1).clamp_min(1e-9));
        break;
      }
      case PoolingMode::kLastToken: {
        // The last token the mask keeps ([SEP] for a BERT tokenizer).
        auto [values, from_end] = attention_mask.flip(1).max(1);
        from_end = at::where(values == 0, length - 1, from_end);
        const at::Tensor last = (length - 1) - from_end;
        parts.push_back(
            (h * mask3).gather(1, last.view({-1, 1, 1}).expand({-1, 1, width})).squeeze(1));
        break;
      }
    }
  }
  const at::Tensor pooled = parts.size() == 1 ? parts.front() : at::cat(parts, 1);
  return normalize ? NormalizeRows(pooled) : pooled;
}

at::Tensor NormalizeRows(const at::Tensor& rows) {
  return rows / rows.norm(2, {1}, /*keepdim=*/true).clamp_min(1e-12);
}

}  // namespace gantry::sentence_encoder
