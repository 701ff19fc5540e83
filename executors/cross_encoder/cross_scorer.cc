#include "cross_scorer.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros.h>
#include <gantry/torch_cuda.h>
#include <gantry/torch_tensor.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "safetensors.h"
#include "sentence_pipeline.h"

namespace gantry::cross_encoder {
namespace {

namespace fs = std::filesystem;
using sentence_encoder::PairIds;

constexpr char kPoolerWeight[] = "bert.pooler.dense.weight";
constexpr char kPoolerBias[] = "bert.pooler.dense.bias";
constexpr char kClassifierWeight[] = "classifier.weight";
constexpr char kClassifierBias[] = "classifier.bias";

// config.json's architectures and sentence-transformers' activation_fn
// (`has_activation` false when the folder names none).
Status ReadHead(const std::string& config_path, Activation* activation, bool* has_activation) {
  GANTRY_ASSIGN_OR_RETURN(const nlohmann::json config, sentence_encoder::ReadJsonFile(config_path));
  if (const auto it = config.find("architectures"); it != config.end()) {
    const bool classifier =
        it->is_array() && std::any_of(it->begin(), it->end(), [](const nlohmann::json& name) {
          return name == "BertForSequenceClassification";
        });
    if (!classifier) {
      return InvalidArgumentError(config_path + ": architectures " + it->dump() +
                                  " is not supported (a cross-encoder is "
                                  "BertForSequenceClassification)");
    }
  }
  // sentence-transformers 4 and later; before, a key of its own.
  const nlohmann::json* name = nullptr;
  std::string key = "sentence_transformers.activation_fn";
  if (const auto st = config.find("sentence_transformers");
      st != config.end() && st->is_object() && st->contains("activation_fn")) {
    name = &(*st)["activation_fn"];
  } else if (const auto legacy = config.find("sbert_ce_default_activation_function");
             legacy != config.end() && !legacy->is_null()) {
    name = &*legacy;
    key = "sbert_ce_default_activation_function";
  }
  *has_activation = name != nullptr;
  if (name == nullptr) {
    return OkStatus();
  }
  if (*name == "torch.nn.modules.activation.Sigmoid") {
    *activation = Activation::kSigmoid;
  } else if (*name == "torch.nn.modules.linear.Identity") {
    *activation = Activation::kIdentity;
  } else {
    return InvalidArgumentError(config_path + ": " + key + " " + name->dump() +
                                " is not supported (torch.nn.modules.activation.Sigmoid or "
                                "torch.nn.modules.linear.Identity)");
  }
  return OkStatus();
}

// config.json's id2label for `num_labels` labels; "LABEL_i" where it says
// nothing, as transformers names them.
std::vector<std::string> ReadLabels(const std::string& config_path, std::int64_t num_labels) {
  std::vector<std::string> labels;
  for (std::int64_t i = 0; i < num_labels; ++i) {
    labels.push_back("LABEL_" + std::to_string(i));
  }
  std::ifstream in(config_path);
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (const auto id2label = config.find("id2label");
      config.is_object() && id2label != config.end() && id2label->is_object()) {
    for (std::int64_t i = 0; i < num_labels; ++i) {
      if (const auto name = id2label->find(std::to_string(i));
          name != id2label->end() && name->is_string()) {
        labels[static_cast<std::size_t>(i)] = name->get<std::string>();
      }
    }
  }
  return labels;
}

}  // namespace

StatusOr<std::unique_ptr<CrossScorer>> CrossScorer::Load(const ScorerOptions& options) {
  if (options.model_path.empty()) {
    return InvalidArgumentError("model_path is required (a BertForSequenceClassification folder)");
  }
  GANTRY_ASSIGN_OR_RETURN(const sentence_encoder::RunSettings run,
                          sentence_encoder::ResolveRunSettings(options.model_path, options.device,
                                                               options.batch_size, options.dtype));
  if (run.dtype_name == "int8") {
    return InvalidArgumentError(
        "dtype int8 is for SentenceEncoder only; a cross-encoder runs in float32, float16 or "
        "bfloat16");
  }
  const fs::path folder(options.model_path);
  const Device& device = run.device;
  const at::ScalarType dtype = run.dtype;
  const std::string config_path = (folder / "config.json").string();
  GANTRY_ASSIGN_OR_RETURN(sentence_encoder::BertConfig config,
                          sentence_encoder::BertConfig::Load(config_path));
  Activation activation = Activation::kSigmoid;
  bool has_activation = false;
  GANTRY_RETURN_IF_ERROR(ReadHead(config_path, &activation, &has_activation));
  GANTRY_ASSIGN_OR_RETURN(
      const std::int64_t max_seq_length,
      sentence_encoder::ReadMaxSeqLength(folder.string(), config, options.max_seq_length));
  if (max_seq_length < 4) {
    return InvalidArgumentError("max_seq_length " + std::to_string(max_seq_length) +
                                " is too short for a pair ([CLS] and two [SEP] take 3)");
  }
  GANTRY_ASSIGN_OR_RETURN(sentence_encoder::WordPieceTokenizer tokenizer,
                          sentence_encoder::WordPieceTokenizer::LoadFromFolder(folder.string()));
  if (static_cast<std::int64_t>(tokenizer.vocab_size()) > config.vocab_size) {
    return InvalidArgumentError(
        folder.string() + ": tokenizer has " + std::to_string(tokenizer.vocab_size()) +
        " tokens but config.json vocab_size is " + std::to_string(config.vocab_size));
  }
  GANTRY_ASSIGN_OR_RETURN(
      sentence_encoder::SafetensorsFile weights,
      sentence_encoder::SafetensorsFile::Open((folder / "model.safetensors").string()));
  const sentence_encoder::SafetensorsEntry* classifier = weights.Find(kClassifierWeight);
  if (classifier == nullptr || classifier->shape.size() != 2) {
    return InvalidArgumentError(weights.path() + ": no 2-D tensor '" + kClassifierWeight +
                                "' (a cross-encoder is BertForSequenceClassification)");
  }
  const std::int64_t num_labels = classifier->shape[0];
  const std::int64_t hidden = config.hidden_size;
  sentence_encoder::BertModel model(config);
  GANTRY_RETURN_IF_ERROR(model.LoadWeights(
      weights, "bert.", {kPoolerWeight, kPoolerBias, kClassifierWeight, kClassifierBias}));

  std::unique_ptr<CrossScorer> scorer(new CrossScorer(std::move(tokenizer), std::move(model)));
  const at::Device torch_device = gantry::ToTorchDevice(device);
  const auto head = [&](const char* name,
                        const std::vector<std::int64_t>& shape) -> StatusOr<at::Tensor> {
    GANTRY_ASSIGN_OR_RETURN(at::Tensor tensor,
                            sentence_encoder::ReadSafetensor(weights, name, shape));
    return tensor.to(torch_device, dtype);
  };
  GANTRY_ASSIGN_OR_RETURN(scorer->pooler_w_, head(kPoolerWeight, {hidden, hidden}));
  GANTRY_ASSIGN_OR_RETURN(scorer->pooler_b_, head(kPoolerBias, {hidden}));
  GANTRY_ASSIGN_OR_RETURN(scorer->classifier_w_, head(kClassifierWeight, {num_labels, hidden}));
  GANTRY_ASSIGN_OR_RETURN(scorer->classifier_b_, head(kClassifierBias, {num_labels}));
  // sentence-transformers' default when the folder does not name one.
  scorer->activation_ = has_activation
                            ? activation
                            : (num_labels == 1 ? Activation::kSigmoid : Activation::kIdentity);
  scorer->num_labels_ = num_labels;
  scorer->labels_ = ReadLabels(config_path, num_labels);
  scorer->max_seq_length_ = max_seq_length;
  scorer->batch_size_ = run.batch_size;
  scorer->dtype_ = run.dtype_name;
  scorer->device_ = device;
  scorer->max_positions_ = config.max_position_embeddings;
  scorer->model_.To(torch_device, dtype);
  if (options.warm_up) {
    scorer->WarmUp();
  }
  return scorer;
}

void CrossScorer::WarmUp() const {
  Logits(Tokenize("Warm-up", {"so that the first request does not pay for it"},
                  sentence_encoder::Truncation::kRight));
  if (!device_.is_cuda()) {
    return;
  }
  // One pair of real tokens as long as a pair may be, cut to each length:
  // only the shapes matter.
  std::string text;
  while (text.size() < 4096) {
    text += "Warm-up pass so that the first request does not pay for it. ";
  }
  const PairIds pair =
      tokenizer_.JoinPair(tokenizer_.Pieces("warm-up query"), tokenizer_.Pieces(text),
                          static_cast<std::size_t>(max_seq_length_), /*from_left=*/false);
  for (const sentence_encoder::CudaWarmUpPass& pass : sentence_encoder::CudaWarmUpPasses(
           batch_size_, static_cast<std::int64_t>(pair.ids.size()))) {
    PairIds cut;
    cut.ids.assign(pair.ids.begin(), pair.ids.begin() + pass.length);
    cut.token_types.assign(pair.token_types.begin(), pair.token_types.begin() + pass.length);
    std::vector<PairIds> pairs(static_cast<std::size_t>(pass.rows), cut);
    if (pass.padded) {
      pairs.back().ids.pop_back();
      pairs.back().token_types.pop_back();
    }
    Logits(pairs);
  }
}

std::vector<PairIds> CrossScorer::Tokenize(std::string_view query,
                                           const std::vector<std::string_view>& texts,
                                           sentence_encoder::Truncation truncation) const {
  std::vector<PairIds> pairs;
  pairs.reserve(texts.size());
  const std::size_t limit = truncation == sentence_encoder::Truncation::kNone
                                ? 0
                                : static_cast<std::size_t>(max_seq_length_);
  // With truncation, neither text keeps more pieces than a pair holds
  // (JoinPair cuts the longer first, to at most that), so only those are
  // held, however long the text. Which text is longer still decides the
  // split when both are cut, so then the text's pieces are counted to its
  // end; when the query is not cut, a cut text's count does not matter.
  const bool from_left = truncation == sentence_encoder::Truncation::kLeft;
  const std::size_t most = limit == 0 ? std::numeric_limits<std::size_t>::max() : limit - 3;
  std::size_t query_total = 0;
  // The query once, however many texts it is paired with.
  const std::vector<std::int64_t> query_pieces =
      tokenizer_.Pieces(query, most, /*keep_last=*/from_left, &query_total);
  const bool count_texts = query_total > most;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    std::size_t text_total = 0;
    const std::vector<std::int64_t> text_pieces = tokenizer_.Pieces(
        texts[i], most, /*keep_last=*/from_left, count_texts ? &text_total : nullptr);
    if (!count_texts) {
      text_total = text_pieces.size();
    }
    // Refused before the pair is built: a long query kept whole in every
    // pair would cost memory per text.
    const std::size_t length = query_pieces.size() + text_pieces.size() + 3;
    if (limit == 0 && length > static_cast<std::size_t>(max_seq_length_)) {
      throw std::length_error("document " + std::to_string(i) + " has " + std::to_string(length) +
                              " tokens with the query, over the model's limit of " +
                              std::to_string(max_seq_length_) +
                              " (max_seq_length, [CLS] and both [SEP] included); send truncate: "
                              "true to cut it");
    }
    pairs.push_back(tokenizer_.JoinCutPair(query_pieces, query_total, text_pieces, text_total,
                                           limit, from_left));
  }
  return pairs;
}

at::Tensor CrossScorer::Logits(const std::vector<PairIds>& pairs) const {
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    if (static_cast<std::int64_t>(pairs[i].ids.size()) > max_seq_length_) {
      throw std::length_error("pair " + std::to_string(i) + " has " +
                              std::to_string(pairs[i].ids.size()) +
                              " tokens, over max_seq_length " + std::to_string(max_seq_length_));
    }
  }
  InferenceScope scope(device_);
  const auto n = static_cast<std::int64_t>(pairs.size());
  at::Tensor out = at::empty({n, num_labels_}, at::TensorOptions().dtype(at::kFloat));
  if (n == 0) {
    return out;
  }
  // Longest first, so each batch pads only to similar lengths.
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&pairs](std::int64_t a, std::int64_t b) {
    return pairs[static_cast<std::size_t>(a)].ids.size() >
           pairs[static_cast<std::size_t>(b)].ids.size();
  });
  for (std::int64_t start = 0; start < n; start += batch_size_) {
    const std::int64_t count = std::min(batch_size_, n - start);
    const auto longest =
        static_cast<std::int64_t>(pairs[static_cast<std::size_t>(order[start])].ids.size());
    const auto [rows, length] = PassShape(count, longest);
    const std::span<const std::int64_t> pass_order(order.data() + start,
                                                   static_cast<std::size_t>(count));
    const at::Tensor logits =
        PassLogits(BuildPairBatch(pairs, pass_order, rows, length, tokenizer_.pad_id()));
    const float* src = logits.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    for (std::int64_t row = 0; row < count; ++row) {
      std::copy_n(src + row * num_labels_, num_labels_, dst + order[start + row] * num_labels_);
    }
  }
  return out;
}

std::pair<std::int64_t, std::int64_t> CrossScorer::PassShape(std::int64_t count,
                                                             std::int64_t longest) const {
  if (!device_.is_cuda()) {
    return {count, longest};
  }
  return {sentence_encoder::CudaBatchRows(count, batch_size_),
          sentence_encoder::CudaPaddedLength(longest, max_positions_)};
}

at::Tensor CrossScorer::PassLogits(const PairBatch& batch) const {
  InferenceScope scope(device_);
  const at::Tensor hidden =
      model_.Forward(ToDeviceAsync(batch.ids, device_), ToDeviceAsync(batch.mask, device_),
                     batch.padded, ToDeviceAsync(batch.token_types, device_));
  // BertForSequenceClassification: pooler over [CLS], then the classifier
  // (dropout is off in eval).
  const at::Tensor pooled = at::tanh(at::linear(hidden.select(1, 0), pooler_w_, pooler_b_));
  return at::linear(pooled, classifier_w_, classifier_b_).to(at::kCPU, at::kFloat).contiguous();
}

PairBatch BuildPairBatch(const std::vector<PairIds>& pairs, std::span<const std::int64_t> order,
                         std::int64_t rows, std::int64_t length, std::int64_t pad_id) {
  const auto count = static_cast<std::int64_t>(order.size());
  if (rows < count) {
    throw std::invalid_argument("BuildPairBatch: " + std::to_string(rows) + " rows for " +
                                std::to_string(count) + " pairs");
  }
  const at::TensorOptions long_options = at::TensorOptions().dtype(at::kLong);
  PairBatch batch;
  batch.ids = at::full({rows, length}, pad_id, long_options);
  batch.mask = at::zeros({rows, length}, long_options);
  batch.token_types = at::zeros({rows, length}, long_options);
  auto* id_ptr = batch.ids.data_ptr<std::int64_t>();
  auto* mask_ptr = batch.mask.data_ptr<std::int64_t>();
  auto* type_ptr = batch.token_types.data_ptr<std::int64_t>();
  batch.padded = rows > count && length > 1;
  for (std::int64_t row = 0; row < count; ++row) {
    const PairIds& pair = pairs[static_cast<std::size_t>(order[static_cast<std::size_t>(row)])];
    const auto tokens = static_cast<std::int64_t>(pair.ids.size());
    if (tokens > length || pair.token_types.size() != pair.ids.size()) {
      throw std::invalid_argument("BuildPairBatch: a pair of " + std::to_string(tokens) +
                                  " tokens in a batch of " + std::to_string(length));
    }
    std::copy(pair.ids.begin(), pair.ids.end(), id_ptr + row * length);
    std::copy(pair.token_types.begin(), pair.token_types.end(), type_ptr + row * length);
    std::fill_n(mask_ptr + row * length, tokens, 1);
    batch.padded = batch.padded || tokens < length;
  }
  for (std::int64_t row = count; row < rows; ++row) {
    mask_ptr[row * length] = 1;
  }
  return batch;
}

at::Tensor CrossScorer::Scores(const at::Tensor& logits) const {
  return activation_ == Activation::kSigmoid ? at::sigmoid(logits) : logits;
}

std::vector<std::pair<std::string, at::Tensor>> CrossScorer::NamedParameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& [name, tensor] : model_.NamedParameters()) {
    out.emplace_back("bert." + name, tensor);
  }
  out.emplace_back(kPoolerWeight, pooler_w_);
  out.emplace_back(kPoolerBias, pooler_b_);
  out.emplace_back(kClassifierWeight, classifier_w_);
  out.emplace_back(kClassifierBias, classifier_b_);
  return out;
}

}  // namespace gantry::cross_encoder
