// CrossScorer on a tiny random BertForSequenceClassification folder the
// test writes itself: how pairs become forward passes (padded shapes,
// filler rows, passes of several pairs) and, with a CUDA device, the same
// logits there as on the CPU. Scores against sentence-transformers'
// CrossEncoder are checked through real processes by tests/model's
// rerank_parity.
#include "cross_scorer.h"

#include <ATen/ATen.h>
#include <gantry/torch_tensor.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "safetensors.h"
#include "sentence_embedder.h"

namespace gantry::cross_encoder {
namespace {

namespace fs = std::filesystem;
using sentence_encoder::PairIds;

constexpr std::int64_t kMaxPositions = 40;
const std::vector<std::string> kWords = {"how",    "many", "people", "live", "in",
                                         "berlin", "the",  "cat",    "sat",  "on",
                                         "mat",    "a",    "dog",    "runs", "fast"};

std::string Bytes(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  std::string bytes(c.nbytes(), '\0');
  std::memcpy(bytes.data(), c.data_ptr(), bytes.size());
  return bytes;
}

// A 2-layer BERT of width 8 with a pooler and a classifier of `num_labels`,
// random weights of a fixed seed, in Hugging Face's layout.
class TinyCrossEncoderFolder {
 public:
  explicit TinyCrossEncoderFolder(std::int64_t num_labels) {
    std::string pattern = (fs::path(::testing::TempDir()) / "cross_scorer_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("mkdtemp failed");
    }
    path_ = pattern;
    std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    vocab.insert(vocab.end(), kWords.begin(), kWords.end());
    for (char c = 'a'; c <= 'z'; ++c) {
      vocab.emplace_back(1, c);
      vocab.push_back(std::string("##") + c);
    }
    std::ofstream(path_ / "vocab.txt") << [&vocab] {
      std::string lines;
      for (const std::string& token : vocab) {
        lines += token + "\n";
      }
      return lines;
    }();
    sentence_encoder::BertConfig config;
    config.vocab_size = static_cast<std::int64_t>(vocab.size());
    config.hidden_size = 8;
    config.num_hidden_layers = 2;
    config.num_attention_heads = 2;
    config.intermediate_size = 16;
    config.max_position_embeddings = kMaxPositions;
    config.type_vocab_size = 2;
    config.layer_norm_eps = 1e-12;
    std::ofstream(path_ / "config.json")
        << R"({"architectures": ["BertForSequenceClassification"], "hidden_act": "gelu",
  "hidden_size": 8, "intermediate_size": 16, "layer_norm_eps": 1e-12,
  "max_position_embeddings": )"
        << kMaxPositions << R"(, "model_type": "bert", "num_attention_heads": 2,
  "num_hidden_layers": 2, "pad_token_id": 0, "type_vocab_size": 2, "vocab_size": )"
        << vocab.size() << "}";
    at::manual_seed(4321);
    std::vector<sentence_encoder::SafetensorsEntry> entries;
    std::vector<std::string> data;
    const auto add = [&](const std::string& name, const at::Tensor& tensor) {
      entries.push_back({name, "F32", tensor.sizes().vec(), 0, 0});
      data.push_back(Bytes(tensor));
    };
    for (const auto& [name, tensor] : sentence_encoder::BertModel(config).NamedParameters()) {
      const bool norm_weight = name.find("LayerNorm.weight") != std::string::npos;
      add("bert." + name,
          norm_weight ? 1 + 0.1 * at::randn(tensor.sizes()) : 0.5 * at::randn(tensor.sizes()));
    }
    add("bert.pooler.dense.weight", 0.5 * at::randn({8, 8}));
    add("bert.pooler.dense.bias", 0.5 * at::randn({8}));
    add("classifier.weight", at::randn({num_labels, 8}));
    add("classifier.bias", at::randn({num_labels}));
    std::ofstream(path_ / "model.safetensors", std::ios::binary)
        << sentence_encoder::WriteSafetensors(entries, data, {{"format", "pt"}});
  }
  ~TinyCrossEncoderFolder() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TinyCrossEncoderFolder(const TinyCrossEncoderFolder&) = delete;
  TinyCrossEncoderFolder& operator=(const TinyCrossEncoderFolder&) = delete;

  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

std::unique_ptr<CrossScorer> LoadScorer(const std::string& folder, const Device& device,
                                        std::int64_t batch_size, const std::string& dtype,
                                        bool warm_up) {
  ScorerOptions options;
  options.model_path = folder;
  options.device = device;
  options.batch_size = batch_size;
  options.dtype = dtype;
  options.warm_up = warm_up;
  StatusOr<std::unique_ptr<CrossScorer>> scorer = CrossScorer::Load(options);
  EXPECT_TRUE(scorer.ok()) << scorer.status().message();
  return scorer.ok() ? std::move(scorer).value() : nullptr;
}

// `count` texts of 1 to 13 words, so that passes mix lengths.
std::vector<std::string> Texts(std::size_t count) {
  std::vector<std::string> texts;
  for (std::size_t i = 0; i < count; ++i) {
    std::string text;
    for (std::size_t w = 0; w <= (i * 7) % 13; ++w) {
      text += (w == 0 ? "" : " ") + kWords[(i + w * 3) % kWords.size()];
    }
    texts.push_back(text);
  }
  return texts;
}

std::vector<PairIds> Pairs(const CrossScorer& scorer, const std::vector<std::string>& texts) {
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  return scorer.Tokenize("how many people live in berlin", views,
                         sentence_encoder::Truncation::kRight);
}

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// What CUDA's shapes rely on, run on the CPU: a pass padded to more rows
// (filler) and more tokens gives each pair the logits it has alone.
TEST(CrossScorerTest, PaddedPassShapesLeaveEachPairsLogitsUnchanged) {
  TinyCrossEncoderFolder folder(/*num_labels=*/1);
  const std::unique_ptr<CrossScorer> scorer =
      LoadScorer(folder.path(), Device::Cpu(), 8, "float32", /*warm_up=*/true);
  ASSERT_NE(scorer, nullptr);
  const std::vector<PairIds> pairs = Pairs(*scorer, Texts(5));
  std::vector<std::int64_t> order(pairs.size());
  std::iota(order.begin(), order.end(), 0);
  std::int64_t longest = 0;
  for (const PairIds& pair : pairs) {
    longest = std::max(longest, static_cast<std::int64_t>(pair.ids.size()));
  }
  const PairBatch exact = BuildPairBatch(pairs, order, 5, longest, 0);
  const std::int64_t rows = sentence_encoder::CudaBatchRows(5, 8);
  const std::int64_t length = sentence_encoder::CudaPaddedLength(longest, kMaxPositions);
  ASSERT_EQ(rows, 8);
  ASSERT_GT(length, longest);
  const PairBatch padded = BuildPairBatch(pairs, order, rows, length, 0);
  EXPECT_TRUE(padded.padded);
  // Filler rows attend to one pad token each.
  EXPECT_EQ(padded.mask.slice(0, 5).sum().item<std::int64_t>(), rows - 5);
  const at::Tensor want = scorer->PassLogits(exact);
  const at::Tensor got = scorer->PassLogits(padded);
  ASSERT_EQ(got.size(0), rows);
  EXPECT_TRUE(at::isfinite(got).all().item<bool>());
  EXPECT_LT(MaxAbsDiff(got.slice(0, 0, 5), want), 1e-5);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const std::int64_t one[] = {static_cast<std::int64_t>(i)};
    const auto tokens = static_cast<std::int64_t>(pairs[i].ids.size());
    const at::Tensor alone = scorer->PassLogits(BuildPairBatch(pairs, one, 1, tokens, 0));
    EXPECT_LT(MaxAbsDiff(alone[0], want[static_cast<std::int64_t>(i)]), 1e-5) << "pair " << i;
  }
  // On a CPU a pass runs as it comes.
  EXPECT_EQ(scorer->PassShape(5, longest), std::make_pair<std::int64_t>(5, longest));
}

// Pairs sorted into passes of batch_size come back in the order given.
TEST(CrossScorerTest, LogitsOfManyPassesKeepTheInputOrder) {
  TinyCrossEncoderFolder folder(/*num_labels=*/3);
  const std::unique_ptr<CrossScorer> scorer =
      LoadScorer(folder.path(), Device::Cpu(), 4, "float32", /*warm_up=*/false);
  ASSERT_NE(scorer, nullptr);
  const std::vector<PairIds> pairs = Pairs(*scorer, Texts(11));
  const at::Tensor logits = scorer->Logits(pairs);
  ASSERT_EQ(logits.size(0), 11);
  ASSERT_EQ(logits.size(1), 3);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const at::Tensor alone = scorer->Logits({pairs[i]});
    EXPECT_LT(MaxAbsDiff(alone[0], logits[static_cast<std::int64_t>(i)]), 1e-5) << "pair " << i;
  }
  EXPECT_EQ(scorer->Logits({}).size(0), 0);
}

// Pairs are cut while tokenizing, each text to what a pair keeps; the split
// is still the one "longest_first" makes from the whole texts, ties and the
// odd piece of an odd budget included, from either end.
TEST(CrossScorerTest, PairsCutWhileTokenizingSplitAsTheWholeTextsWould) {
  TinyCrossEncoderFolder folder(/*num_labels=*/1);
  const std::unique_ptr<CrossScorer> scorer =
      LoadScorer(folder.path(), Device::Cpu(), 4, "float32", /*warm_up=*/false);
  ASSERT_NE(scorer, nullptr);
  const std::size_t limit = static_cast<std::size_t>(scorer->max_seq_length());
  ASSERT_EQ((limit - 3) % 2, 1u);  // an odd budget
  const auto words = [](std::size_t count, std::size_t shift) {
    std::string text;
    for (std::size_t w = 0; w < count; ++w) {
      text += (w == 0 ? "" : " ") + kWords[(w + shift) % kWords.size()];
    }
    return text;
  };
  for (const std::size_t query_words : {3, 20, 36, 37, 38, 45, 60}) {
    for (const std::size_t text_words : {1, 20, 36, 37, 38, 44, 45, 46, 70}) {
      const std::string query = words(query_words, 0);
      const std::string text = words(text_words, 5);
      for (const auto truncation :
           {sentence_encoder::Truncation::kRight, sentence_encoder::Truncation::kLeft}) {
        const bool left = truncation == sentence_encoder::Truncation::kLeft;
        const PairIds got = scorer->Tokenize(query, {text}, truncation)[0];
        const PairIds want = scorer->tokenizer().EncodePair(query, text, limit, left);
        EXPECT_EQ(got.ids, want.ids) << query_words << " + " << text_words << (left ? " left" : "");
        EXPECT_EQ(got.token_types, want.token_types) << query_words << " + " << text_words;
      }
    }
  }
}

TEST(CrossScorerTest, BuildPairBatchRefusesPairsThatDoNotFit) {
  PairIds pair;
  pair.ids = {2, 5, 3, 6, 3};
  pair.token_types = {0, 0, 0, 1, 1};
  const std::vector<PairIds> pairs = {pair, pair};
  const std::int64_t both[] = {0, 1};
  EXPECT_THROW(BuildPairBatch(pairs, both, 1, 8, 0), std::invalid_argument);  // too few rows
  EXPECT_THROW(BuildPairBatch(pairs, both, 2, 4, 0), std::invalid_argument);  // too short
  const PairBatch batch = BuildPairBatch(pairs, both, 2, 5, 0);
  EXPECT_FALSE(batch.padded);
  EXPECT_EQ(batch.token_types.sum().item<std::int64_t>(), 4);
}

// With a CUDA device (ctest label `gpu`): loaded there, warmed up over every
// shape, passes of 1 to 40 pairs padded to CUDA's shapes give the CPU's
// logits, in float32 closely and in float16 within its precision.
TEST(CrossScorerTest, CudaLogitsMatchTheCpus) {
  if (!ResolveTorchDevice(Device::Auto()).is_cuda()) {
    GTEST_SKIP() << "no CUDA device visible";
  }
  TinyCrossEncoderFolder folder(/*num_labels=*/2);
  const std::unique_ptr<CrossScorer> cpu =
      LoadScorer(folder.path(), Device::Cpu(), 0, "float32", /*warm_up=*/false);
  ASSERT_NE(cpu, nullptr);
  for (const char* dtype : {"float32", "float16"}) {
    const std::unique_ptr<CrossScorer> cuda =
        LoadScorer(folder.path(), Device::Cuda(0), 0, dtype, /*warm_up=*/true);
    ASSERT_NE(cuda, nullptr);
    EXPECT_EQ(cuda->batch_size(), sentence_encoder::kGpuBatchSize);
    for (const std::size_t count : {1, 3, 17, 40}) {
      const std::vector<PairIds> pairs = Pairs(*cpu, Texts(count));
      const at::Tensor want = cpu->Logits(pairs);
      const at::Tensor got = cuda->Logits(pairs);
      const double scale = 1 + want.abs().max().item<double>();
      const double diff = MaxAbsDiff(got, want);
      std::printf("cuda %s, %zu pairs: max abs diff %.3g (logits up to %.3g)\n", dtype, count, diff,
                  scale - 1);
      EXPECT_LT(diff, (std::string(dtype) == "float32" ? 1e-4 : 2e-2) * scale)
          << dtype << ", " << count << " pairs";
    }
  }
}

}  // namespace
}  // namespace gantry::cross_encoder
