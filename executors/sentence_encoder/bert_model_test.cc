// A tiny randomly initialised BERT, written to safetensors by the test
// itself, checked against a plain-ATen reference of Hugging Face's BertModel.
#include "bert_model.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "safetensors.h"
#include "sentence_embedder.h"
#include "sentence_encoder.h"
#include "sentence_pipeline.h"

namespace gantry::sentence_encoder {
namespace {

namespace fs = std::filesystem;

BertConfig TinyConfig() {
  BertConfig c;
  c.vocab_size = 40;
  c.hidden_size = 8;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 16;
  c.max_position_embeddings = 16;
  c.type_vocab_size = 2;
  c.layer_norm_eps = 1e-12;
  return c;
}

const char kTinyConfigJson[] = R"({"architectures": ["BertModel"], "hidden_act": "gelu",
  "hidden_size": 8, "intermediate_size": 16, "layer_norm_eps": 1e-12,
  "max_position_embeddings": 16, "model_type": "bert", "num_attention_heads": 2,
  "num_hidden_layers": 2, "pad_token_id": 0, "position_embedding_type": "absolute",
  "type_vocab_size": 2, "vocab_size": 40})";

using Weights = std::map<std::string, at::Tensor>;

// all-MiniLM-L6-v2's pooling: mean over the tokens, then L2 normalised.
at::Tensor MeanPoolNormalize(const at::Tensor& hidden, const at::Tensor& mask) {
  return Pool(hidden, mask, {PoolingMode::kMean}, /*normalize=*/true);
}

Weights RandomWeights(const BertConfig& config) {
  at::manual_seed(1234);
  Weights w;
  for (const auto& [name, tensor] : BertModel(config).NamedParameters()) {
    const bool is_ln_weight = name.find("LayerNorm.weight") != std::string::npos;
    w[name] = is_ln_weight ? 1 + 0.1 * at::randn(tensor.sizes()) : 0.5 * at::randn(tensor.sizes());
  }
  return w;
}

std::string Bytes(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  std::string bytes(c.nbytes(), '\0');
  std::memcpy(bytes.data(), c.data_ptr(), bytes.size());
  return bytes;
}

// Serializes `w` like a torch checkpoint: position_ids first, then F32 by name.
std::string ToSafetensors(const Weights& w, std::int64_t max_positions,
                          bool with_position_ids = true) {
  std::vector<SafetensorsEntry> entries;
  std::vector<std::string> data;
  if (with_position_ids) {
    entries.push_back({"embeddings.position_ids", "I64", {1, max_positions}, 0, 0});
    data.push_back(Bytes(at::arange(max_positions, at::kLong)));
  }
  for (const auto& [name, tensor] : w) {
    entries.push_back({name, "F32", tensor.sizes().vec(), 0, 0});
    data.push_back(Bytes(tensor));
  }
  return WriteSafetensors(entries, data, {{"format", "pt"}});
}

StatusOr<SafetensorsFile> ParseBytes(std::string bytes) {
  return SafetensorsFile::Parse(std::move(bytes), "tiny/model.safetensors");
}

Status LoadInto(BertModel& model, const Weights& w, bool with_position_ids = true) {
  StatusOr<SafetensorsFile> file =
      ParseBytes(ToSafetensors(w, model.config().max_position_embeddings, with_position_ids));
  if (!file.ok()) {
    return file.status();
  }
  return model.LoadWeights(*file);
}

// Hugging Face BertModel (eager attention) + mean pooling + Normalize.
at::Tensor LayerNormRef(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, double eps) {
  const at::Tensor mean = x.mean(-1, true);
  const at::Tensor var = (x - mean).pow(2).mean(-1, true);
  return (x - mean) / at::sqrt(var + eps) * w + b;
}

at::Tensor ReferenceEmbedding(const Weights& w, const BertConfig& c, const at::Tensor& ids,
                              const at::Tensor& mask) {
  const std::int64_t batch = ids.size(0), length = ids.size(1), heads = c.num_attention_heads;
  const std::int64_t head_dim = c.hidden_size / heads;
  auto linear = [&](const at::Tensor& x, const std::string& p) {
    return at::matmul(x, w.at(p + ".weight").t()) + w.at(p + ".bias");
  };
  at::Tensor x = w.at("embeddings.word_embeddings.weight")
                     .index_select(0, ids.flatten())
                     .view({batch, length, c.hidden_size}) +
                 w.at("embeddings.position_embeddings.weight").slice(0, 0, length) +
                 w.at("embeddings.token_type_embeddings.weight")[0];
  x = LayerNormRef(x, w.at("embeddings.LayerNorm.weight"), w.at("embeddings.LayerNorm.bias"),
                   c.layer_norm_eps);
  const at::Tensor additive =
      (1 - mask.to(at::kFloat)).view({batch, 1, 1, length}) * std::numeric_limits<float>::lowest();
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    auto heads_of = [&](const at::Tensor& t) {
      return t.view({batch, length, heads, head_dim}).permute({0, 2, 1, 3});
    };
    const at::Tensor q = heads_of(linear(x, p + "attention.self.query"));
    const at::Tensor k = heads_of(linear(x, p + "attention.self.key"));
    const at::Tensor v = heads_of(linear(x, p + "attention.self.value"));
    const at::Tensor scores =
        at::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(head_dim)) + additive;
    const at::Tensor ctx = at::matmul(at::softmax(scores, -1), v)
                               .permute({0, 2, 1, 3})
                               .reshape({batch, length, c.hidden_size});
    const at::Tensor a =
        LayerNormRef(linear(ctx, p + "attention.output.dense") + x,
                     w.at(p + "attention.output.LayerNorm.weight"),
                     w.at(p + "attention.output.LayerNorm.bias"), c.layer_norm_eps);
    const at::Tensor pre = linear(a, p + "intermediate.dense");
    const at::Tensor gelu = 0.5 * pre * (1 + at::erf(pre / std::sqrt(2.0)));
    x = LayerNormRef(linear(gelu, p + "output.dense") + a, w.at(p + "output.LayerNorm.weight"),
                     w.at(p + "output.LayerNorm.bias"), c.layer_norm_eps);
  }
  const at::Tensor m = mask.to(at::kFloat).unsqueeze(-1);
  const at::Tensor pooled = (x * m).sum(1) / m.sum(1).clamp_min(1e-9);
  return pooled / pooled.norm(2, {1}, true).clamp_min(1e-12);
}

TEST(BertModelTest, ParameterNamesAreCheckpointKeys) {
  const auto params = BertModel(TinyConfig()).NamedParameters();
  // No pooler: sentence-transformers does not use BERT's.
  ASSERT_EQ(params.size(), 5u + 16u * 2u);
  EXPECT_EQ(params[0].first, "embeddings.word_embeddings.weight");
  EXPECT_EQ(params[5].first, "encoder.layer.0.attention.self.query.weight");
  EXPECT_EQ(params.back().first, "encoder.layer.1.output.LayerNorm.bias");
}

void ExpectMatchesReference(const BertModel& model, const Weights& w, const BertConfig& config) {
  // Second row padded: exercises the attention mask and masked pooling.
  const at::Tensor ids = at::tensor({2, 7, 9, 11, 3, 2, 5, 3, 0, 0}, at::kLong).view({2, 5});
  const at::Tensor mask = at::tensor({1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, at::kLong).view({2, 5});
  const at::Tensor got = MeanPoolNormalize(model.Forward(ids, mask), mask);
  const at::Tensor want = ReferenceEmbedding(w, config, ids, mask);
  EXPECT_LT((got - want).abs().max().item<double>(), 1e-5) << got << want;
  // Unpadded row alone gives the same result as inside a padded batch.
  const at::Tensor alone = MeanPoolNormalize(
      model.Forward(ids.slice(0, 1, 2).slice(1, 0, 3), mask.slice(0, 1, 2).slice(1, 0, 3)),
      mask.slice(0, 1, 2).slice(1, 0, 3));
  EXPECT_LT((alone[0] - got[1]).abs().max().item<double>(), 1e-5);
  EXPECT_NEAR(got.norm(2, {1}).min().item<double>(), 1.0, 1e-6);
}

// The shapes a CUDA replica pads batches to (CudaBatchRows, CudaPaddedLength).
TEST(CudaShapesTest, RowsAndLengthsRoundUpToFewShapes) {
  EXPECT_EQ(CudaBatchRows(1, 256), 1);
  EXPECT_EQ(CudaBatchRows(3, 256), 4);
  EXPECT_EQ(CudaBatchRows(16, 256), 16);
  EXPECT_EQ(CudaBatchRows(17, 256), 32);
  EXPECT_EQ(CudaBatchRows(48, 256), 64);
  EXPECT_EQ(CudaBatchRows(250, 256), 256);
  EXPECT_EQ(CudaBatchRows(97, 100), 100);   // never wider than batch_size
  EXPECT_EQ(CudaBatchRows(300, 256), 300);  // not a batch EncodeIds makes
  EXPECT_EQ(CudaPaddedLength(14, 512), 16);
  EXPECT_EQ(CudaPaddedLength(16, 512), 16);
  EXPECT_EQ(CudaPaddedLength(509, 512), 512);
  EXPECT_EQ(CudaPaddedLength(509, 510), 509);  // no position past the model's
}

// The CUDA warm-up runs every shape a merged request can bring both
// unpadded and padded: a padded pass attends with a mask, another kernel in
// float16, and a merged request is padded (filler rows, shorter texts).
TEST(CudaShapesTest, TheWarmUpRunsEveryShapeUnpaddedAndPadded) {
  const std::vector<CudaWarmUpPass> passes = CudaWarmUpPasses(256, 256);
  std::set<std::int64_t> row_counts;
  for (std::int64_t count = 1; count <= 256; ++count) {
    row_counts.insert(CudaBatchRows(count, 256));
  }
  ASSERT_EQ(row_counts.size(), 13u);
  std::set<std::tuple<std::int64_t, std::int64_t, bool>> seen;
  for (const CudaWarmUpPass& pass : passes) {
    EXPECT_TRUE(row_counts.contains(pass.rows)) << pass.rows;
    EXPECT_TRUE(seen.insert({pass.rows, pass.length, pass.padded}).second)
        << pass.rows << "x" << pass.length << " twice";
  }
  for (const std::int64_t length : {8, 16, 32, 64, 128}) {
    for (const std::int64_t rows : row_counts) {
      EXPECT_TRUE(seen.contains({rows, length, false})) << rows << "x" << length;
      // One row of 13 tokens runs padded to 16.
      EXPECT_TRUE(seen.contains({rows, length, true})) << rows << "x" << length;
    }
  }
  EXPECT_EQ(passes.size(), 5u * 13u * 2u);
  // No length past what the model takes; a narrow batch_size, few rows.
  for (const CudaWarmUpPass& pass : CudaWarmUpPasses(8, 20)) {
    EXPECT_LE(pass.length, 16);
    EXPECT_LE(pass.rows, 8);
  }
  EXPECT_EQ(CudaWarmUpPasses(8, 20).size(), 2u * 4u * 2u);  // rows 1, 2, 4, 8
}

// The row counts the CPU's fused products run a pass as (CpuProductRows):
// never fewer than the tokens, at most a sixteenth more beyond 64, and few.
TEST(CpuProductRowsTest, RoundsUpToFewRowCounts) {
  EXPECT_EQ(CpuProductRows(0), 0);
  EXPECT_EQ(CpuProductRows(1), 16);
  EXPECT_EQ(CpuProductRows(14), 16);
  EXPECT_EQ(CpuProductRows(64), 64);
  EXPECT_EQ(CpuProductRows(65), 68);
  EXPECT_EQ(CpuProductRows(448), 448);    // 32 seed documents of 14 tokens
  EXPECT_EQ(CpuProductRows(3584), 3584);  // 256 of them
  EXPECT_EQ(CpuProductRows(3585), 3712);
  EXPECT_EQ(CpuProductRows(4420), 4608);
  EXPECT_EQ(CpuProductRows(65536), 65536);  // 256 rows of 256 tokens
  std::set<std::int64_t> counts;
  for (std::int64_t tokens = 1; tokens <= 65536; ++tokens) {
    const std::int64_t rows = CpuProductRows(tokens);
    ASSERT_GE(rows, tokens);
    if (tokens > 64) {
      ASSERT_LE(rows * 16, tokens * 17) << tokens;
    }
    counts.insert(rows);
  }
  // 4 up to 64, then 16 for each of the 10 doublings up to 65,536.
  EXPECT_EQ(counts.size(), 4U + 16U * 10U);
}

// The tiny model on random weights, and two rows of five tokens of which
// the second ends in two pads.
struct TinyPaddedBatch {
  BertConfig config = TinyConfig();
  Weights weights = RandomWeights(config);
  BertModel model{config};
  at::Tensor ids = at::tensor({2, 7, 9, 11, 3, 2, 5, 3, 0, 0}, at::kLong).view({2, 5});
  at::Tensor mask = at::tensor({1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, at::kLong).view({2, 5});
  Status Load() { return LoadInto(model, weights); }
};

// What that padding relies on, checked on the CPU: extra pad tokens and
// filler rows (one attended pad token each) leave the real rows unchanged.
TEST(CudaShapesTest, FillerRowsAndPaddedTokensLeaveTheRealRowsUnchanged) {
  TinyPaddedBatch batch;
  ASSERT_TRUE(batch.Load().ok());
  const BertModel& model = batch.model;
  const at::Tensor& ids = batch.ids;
  const at::Tensor& mask = batch.mask;
  const at::Tensor want = MeanPoolNormalize(model.Forward(ids, mask), mask);
  // Two rows as four, five tokens as eight.
  at::Tensor padded_ids = at::zeros({4, 8}, at::kLong);
  at::Tensor padded_mask = at::zeros({4, 8}, at::kLong);
  padded_ids.slice(0, 0, 2).slice(1, 0, 5).copy_(ids);
  padded_mask.slice(0, 0, 2).slice(1, 0, 5).copy_(mask);
  padded_mask.slice(0, 2, 4).select(1, 0).fill_(1);
  const at::Tensor got = MeanPoolNormalize(model.Forward(padded_ids, padded_mask), padded_mask);
  EXPECT_TRUE(at::isfinite(got).all().item<bool>());
  EXPECT_LT((got.slice(0, 0, 2) - want).abs().max().item<double>(), 1e-5);
}

// The caller's `padded` hint stands in for reading the mask (a device sync
// on CUDA): right hints give what the mask gives, and a wrong one is obeyed.
TEST(BertModelTest, PaddedHintReplacesReadingTheMask) {
  TinyPaddedBatch batch;
  ASSERT_TRUE(batch.Load().ok());
  const BertModel& model = batch.model;
  const at::Tensor& ids = batch.ids;
  const at::Tensor& mask = batch.mask;
  const at::Tensor full = at::ones({2, 5}, at::kLong);
  auto max_diff = [](const at::Tensor& a, const at::Tensor& b) {
    return (a - b).abs().max().item<double>();
  };
  EXPECT_EQ(max_diff(model.Forward(ids, mask, true), model.Forward(ids, mask)), 0.0);
  EXPECT_EQ(max_diff(model.Forward(ids, full, false), model.Forward(ids, full)), 0.0);
  // "Not padded" for a padded batch lets the second row attend to its pads.
  EXPECT_GT(
      max_diff(model.Forward(ids, mask, false).select(0, 1), model.Forward(ids, mask).select(0, 1)),
      1e-4);
}

TEST(BertModelTest, MatchesPlainAtenReference) {
  const BertConfig config = TinyConfig();
  const Weights w = RandomWeights(config);
  BertModel model(config);
  ASSERT_TRUE(LoadInto(model, w).ok());
  ASSERT_FALSE(model.fused_cpu_linear());  // only To() picks oneDNN
  ExpectMatchesReference(model, w, config);
}

// After To(cpu, float32) the linear layers run through oneDNN with GELU and
// the residual adds fused (wherever libtorch has oneDNN, as the PyPI wheel
// does); the numbers must not change.
TEST(BertModelTest, FusedOneDnnLinearMatchesPlainAtenReference) {
  const BertConfig config = TinyConfig();
  const Weights w = RandomWeights(config);
  BertModel model(config);
  ASSERT_TRUE(LoadInto(model, w).ok());
  model.To(at::Device(at::kCPU), at::kFloat);
  EXPECT_EQ(model.fused_cpu_linear(), at::hasMKLDNN());
  EXPECT_EQ(model.prepacked_cpu_linear(), at::hasMKLDNN());
  ExpectMatchesReference(model, w, config);
}

// The prepacked weights are copies made by To(), which then hands the plain
// weights' pages back to the kernel. Here they lie in a mapped weight file,
// with linear weights of several pages each: moving the model again (to
// bfloat16 and back) reads them again and packs anew, and the parameters a
// caller sees stay plain tensors.
TEST(BertModelTest, ToAgainRepacksFromThePlainWeightsOfAMappedFile) {
  BertConfig config = TinyConfig();
  config.hidden_size = 64;
  config.num_attention_heads = 4;
  config.intermediate_size = 256;  // 64 KiB float32 weights
  const Weights w = RandomWeights(config);
  const fs::path path =
      fs::temp_directory_path() / ("gantry_prepack_" + std::to_string(::getpid()) + ".safetensors");
  {
    std::ofstream out(path, std::ios::binary);
    out << ToSafetensors(w, config.max_position_embeddings);
  }
  StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path.string());
  ASSERT_TRUE(file.ok()) << file.status();
  BertModel model(config);
  ASSERT_TRUE(model.LoadWeights(*file).ok());
  fs::remove(path);  // the mapping stays valid

  const at::Tensor ids = at::randint(1, config.vocab_size, {2, 5}, at::kLong);
  const at::Tensor mask = at::ones({2, 5}, at::kLong);
  const at::Tensor want = ReferenceEmbedding(w, config, ids, mask);
  model.To(at::Device(at::kCPU), at::kFloat);
  EXPECT_EQ(model.prepacked_cpu_linear(), at::hasMKLDNN());
  const at::Tensor first = MeanPoolNormalize(model.Forward(ids, mask), mask);
  EXPECT_LT((first - want).abs().max().item<double>(), 1e-5);

  model.To(at::Device(at::kCPU), at::kBFloat16);
  model.To(at::Device(at::kCPU), at::kFloat);
  EXPECT_EQ(model.prepacked_cpu_linear(), at::hasMKLDNN());
  for (const auto& [name, tensor] : model.NamedParameters()) {
    EXPECT_FALSE(tensor.is_mkldnn()) << name;
    EXPECT_EQ(tensor.scalar_type(), at::kFloat) << name;
  }
  // Within bfloat16's rounding of the weights it went through.
  const at::Tensor again = MeanPoolNormalize(model.Forward(ids, mask), mask);
  EXPECT_GT(at::cosine_similarity(again, want, 1).min().item<double>(), 0.999);
}

// ExplicitAttention against ATen's SDPA on the same inputs: strided q, k, v
// as Forward makes them (heads split out of [B, L, hidden]), a padded row
// and a row with every key masked (SDPA gives NaN there, so it is compared
// with the mean of v, which a softmax over equal scores gives).
TEST(BertModelTest, ExplicitAttentionMatchesSdpa) {
  const std::int64_t batch = 3, length = 14, heads = 4, head_dim = 8;
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    at::manual_seed(7);
    auto heads_of = [&](const at::Tensor& t) {
      return t.view({batch, length, heads, head_dim}).transpose(1, 2);
    };
    const at::Tensor q = heads_of(at::randn({batch, length, heads * head_dim}).to(dtype));
    const at::Tensor k = heads_of(at::randn({batch, length, heads * head_dim}).to(dtype));
    const at::Tensor v = heads_of(at::randn({batch, length, heads * head_dim}).to(dtype));
    at::Tensor keep = at::ones({batch, 1, 1, length}, at::kBool);
    keep[1].slice(-1, 9).fill_(false);  // row 1: 9 tokens, then padding
    keep[2].fill_(false);               // row 2: nothing to attend to
    const at::Tensor additive =
        at::zeros({batch, 1, 1, length}, at::kFloat)
            .masked_fill_(keep.logical_not(), std::numeric_limits<float>::lowest());
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    const at::Tensor got = ExplicitAttention(q, k, v, additive, scale).to(at::kFloat);
    // The reference: SDPA in float32 on the same (rounded) inputs.
    const at::Tensor want = at::scaled_dot_product_attention(
        q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), keep, 0.0, false, scale);
    const double tolerance = dtype == at::kFloat ? 1e-5 : 2e-2;
    EXPECT_LT((got.slice(0, 0, 2) - want.slice(0, 0, 2)).abs().max().item<double>(), tolerance)
        << dtype;
    const at::Tensor mean_v = v[2].to(at::kFloat).mean(1, /*keepdim=*/true).expand_as(got[2]);
    EXPECT_LT((got[2] - mean_v).abs().max().item<double>(), tolerance) << dtype;
    EXPECT_TRUE(at::isfinite(got).all().item<bool>()) << dtype;
  }
}

// On CPU in float32 and bfloat16 (with oneDNN) query, key and value are
// one product, sequences up to 64 tokens take attention_rows' attention and
// longer ones ATen's SDPA on views of that product; both must stay within
// the dtype's rounding of the float32 reference, with a padded row, on
// either side of the bound.
TEST(BertModelTest, BothAttentionPathsMatchTheReference) {
  BertConfig config = TinyConfig();
  config.max_position_embeddings = 80;
  const Weights w = RandomWeights(config);
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    BertModel model(config);
    ASSERT_TRUE(LoadInto(model, w).ok());
    model.To(at::Device(at::kCPU), dtype);
    EXPECT_EQ(model.fused_cpu_qkv(), model.fused_cpu_linear()) << dtype;
    for (const std::int64_t length : {3, 64, 65, 80}) {
      at::manual_seed(length);
      at::Tensor ids = at::randint(1, config.vocab_size, {3, length}, at::kLong);
      at::Tensor mask = at::ones({3, length}, at::kLong);
      mask[1].slice(0, (length + 1) / 2).fill_(0);  // the second row is half padding
      ids.masked_fill_(mask == 0, 0);
      const at::Tensor got =
          MeanPoolNormalize(model.Forward(ids, mask).to(at::kFloat), mask).to(at::kDouble);
      const at::Tensor want = ReferenceEmbedding(w, config, ids, mask).to(at::kDouble);
      const at::Tensor cosine = (got * want).sum(1);  // both are unit vectors
      EXPECT_GT(cosine.min().item<double>(), dtype == at::kFloat ? 0.999999 : 0.999)
          << dtype << ", length " << length << ": " << cosine;
    }
  }
}

// A padded batch runs its real tokens only: texts over 64 tokens as one
// block padded to the longest of them, the rest each on its own. Texts of
// every kind, in no order, must match the reference, and the rows of the
// padding come back zero. A mask that is not right padding (a hole) runs
// padded, as before, and matches too.
TEST(BertModelTest, PackedBatchesOfMixedLengthsMatchTheReference) {
  BertConfig config = TinyConfig();
  config.max_position_embeddings = 96;
  const Weights w = RandomWeights(config);
  const std::vector<std::vector<std::int64_t>> cases = {
      {3, 90, 64, 70, 1, 65, 90, 17},  // a long block with its own padding
      {80, 12, 80, 5},                 // long texts of one length: no mask in the block
      {40, 7, 64, 2, 33},              // short texts only
      {90, 90, 90}};                   // no padding at all
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    BertModel model(config);
    ASSERT_TRUE(LoadInto(model, w).ok());
    model.To(at::Device(at::kCPU), dtype);
    for (const std::vector<std::int64_t>& lengths : cases) {
      const auto batch = static_cast<std::int64_t>(lengths.size());
      const std::int64_t length = *std::max_element(lengths.begin(), lengths.end());
      at::manual_seed(batch * 100 + length);
      at::Tensor ids = at::randint(1, config.vocab_size, {batch, length}, at::kLong);
      at::Tensor mask = at::zeros({batch, length}, at::kLong);
      for (std::int64_t b = 0; b < batch; ++b) {
        mask[b].slice(0, 0, lengths[static_cast<std::size_t>(b)]).fill_(1);
      }
      ids.masked_fill_(mask == 0, 0);
      const at::Tensor hidden = model.Forward(ids, mask).to(at::kFloat);
      const at::Tensor got = MeanPoolNormalize(hidden, mask).to(at::kDouble);
      const at::Tensor want = ReferenceEmbedding(w, config, ids, mask).to(at::kDouble);
      const at::Tensor cosine = (got * want).sum(1);
      EXPECT_GT(cosine.min().item<double>(), dtype == at::kFloat ? 0.999999 : 0.999)
          << dtype << ", lengths " << at::tensor(lengths) << ": " << cosine;
      for (std::int64_t b = 0; b < batch; ++b) {
        const std::int64_t n = lengths[static_cast<std::size_t>(b)];
        if (n <= 64 && n < length) {
          EXPECT_EQ(hidden[b].slice(0, n).abs().max().item<float>(), 0.0F)
              << dtype << ", text " << b << " of " << n << " tokens";
        }
      }
    }
    // A hole in a row's mask: not right padding.
    at::manual_seed(5);
    at::Tensor ids = at::randint(1, config.vocab_size, {2, 20}, at::kLong);
    at::Tensor mask = at::ones({2, 20}, at::kLong);
    mask[0].slice(0, 5, 8).fill_(0);
    mask[1].slice(0, 12).fill_(0);
    const at::Tensor got =
        MeanPoolNormalize(model.Forward(ids, mask).to(at::kFloat), mask).to(at::kDouble);
    const at::Tensor want = ReferenceEmbedding(w, config, ids, mask).to(at::kDouble);
    EXPECT_GT((got * want).sum(1).min().item<double>(), dtype == at::kFloat ? 0.999999 : 0.999)
        << dtype;
  }
}

TEST(BertModelTest, PositionIdsAreOptional) {
  BertModel model(TinyConfig());
  EXPECT_TRUE(LoadInto(model, RandomWeights(TinyConfig()), /*with_position_ids=*/false).ok());
}

TEST(BertModelTest, MissingKeyIsNamed) {
  Weights w = RandomWeights(TinyConfig());
  w.erase("encoder.layer.1.output.dense.bias");
  BertModel model(TinyConfig());
  const Status s = LoadInto(model, w);
  EXPECT_EQ(s.message(),
            "tiny/model.safetensors: missing tensor 'encoder.layer.1.output.dense.bias'");
}

TEST(BertModelTest, UnexpectedKeyIsNamed) {
  Weights w = RandomWeights(TinyConfig());
  w["encoder.layer.2.output.dense.bias"] = at::zeros({8});
  BertModel model(TinyConfig());
  const Status s = LoadInto(model, w);
  EXPECT_EQ(s.message(),
            "tiny/model.safetensors: unexpected tensor 'encoder.layer.2.output.dense.bias' (not "
            "a parameter of BertModel)");
}

TEST(BertModelTest, MisShapedKeyIsNamed) {
  Weights w = RandomWeights(TinyConfig());
  w["encoder.layer.0.attention.self.query.weight"] = at::zeros({8, 4});
  BertModel model(TinyConfig());
  const Status s = LoadInto(model, w);
  EXPECT_EQ(s.message(),
            "tiny/model.safetensors: tensor 'encoder.layer.0.attention.self.query.weight' has "
            "shape [8, 4], expected [8, 8] (from config.json)");
}

TEST(BertModelTest, WrongDtypeIsNamed) {
  Weights w = RandomWeights(TinyConfig());
  w["encoder.layer.1.output.dense.bias"] = at::zeros({8}, at::kDouble);
  std::string bytes = ToSafetensors(w, 16);
  // ToSafetensors labels everything F32: relabel the double tensor as F64.
  const std::string from = R"("encoder.layer.1.output.dense.bias":{"dtype":"F32","shape":[8],)";
  const std::size_t at_pos = bytes.find(from);
  ASSERT_NE(at_pos, std::string::npos);
  bytes.replace(at_pos, from.size(),
                R"("encoder.layer.1.output.dense.bias":{"dtype":"F64","shape":[8],)");
  StatusOr<SafetensorsFile> file = ParseBytes(bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  BertModel model(TinyConfig());
  const Status s = model.LoadWeights(*file);
  EXPECT_NE(s.message().find(
                "'encoder.layer.1.output.dense.bias' has dtype F64, expected F32, F16 or BF16"),
            std::string::npos)
      << s;
}

TEST(BertModelTest, BadPositionIdsAreRejected) {
  BertModel model(TinyConfig());
  const Weights w = RandomWeights(TinyConfig());
  std::vector<SafetensorsEntry> entries = {{"embeddings.position_ids", "I64", {1, 16}, 0, 0}};
  std::vector<std::string> data = {Bytes(at::arange(16, at::kLong).flip(0))};
  for (const auto& [name, t] : w) {
    entries.push_back({name, "F32", t.sizes().vec(), 0, 0});
    data.push_back(Bytes(t));
  }
  StatusOr<SafetensorsFile> file = ParseBytes(WriteSafetensors(entries, data));
  ASSERT_TRUE(file.ok());
  EXPECT_NE(model.LoadWeights(*file).message().find("'embeddings.position_ids' is not arange"),
            std::string::npos);
}

TEST(BertConfigTest, RejectsTanhGeluAndNamesFile) {
  StatusOr<BertConfig> c = BertConfig::FromJson(
      R"({"vocab_size": 4, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
          "intermediate_size": 4, "max_position_embeddings": 8, "type_vocab_size": 2,
          "hidden_act": "gelu_new"})",
      "m/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("m/config.json: hidden_act 'gelu_new'"), std::string::npos);
  StatusOr<BertConfig> heads = BertConfig::FromJson(kTinyConfigJson, "m/config.json");
  ASSERT_TRUE(heads.ok()) << heads.status();
  EXPECT_EQ(heads->num_attention_heads, 2);
  EXPECT_FALSE(BertConfig::FromJson(R"({"hidden_size": 8})", "m/config.json").ok());
  StatusOr<BertConfig> roberta = BertConfig::FromJson(
      R"({"vocab_size": 4, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
          "intermediate_size": 4, "max_position_embeddings": 8, "type_vocab_size": 1,
          "model_type": "xlm-roberta"})",
      "m/config.json");
  ASSERT_FALSE(roberta.ok());
  EXPECT_NE(roberta.status().message().find("m/config.json: model_type 'xlm-roberta'"),
            std::string::npos);
}

// A whole sentence-transformers folder with the tiny model.
class TinyFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    dir_ = fs::temp_directory_path() /
           ("gantry_tiny_bert_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_ / "1_Pooling");
    Write("config.json", kTinyConfigJson);
    Write("sentence_bert_config.json", R"({"max_seq_length": 6, "do_lower_case": false})");
    Write(
        "modules.json",
        R"([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
              {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
              {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])");
    Write("1_Pooling/config.json",
          R"({"word_embedding_dimension": 8, "pooling_mode_cls_token": false,
              "pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": false})");
    std::string vocab = "[PAD]\n";
    for (int i = 1; i < 40; ++i) {
      vocab += i == 1   ? "[UNK]\n"
               : i == 2 ? "[CLS]\n"
               : i == 3 ? "[SEP]\n"
               : i == 4 ? "[MASK]\n"
                        : "w" + std::to_string(i) + "\n";
    }
    Write("vocab.txt", vocab);
    weights_ = RandomWeights(TinyConfig());
    Write("model.safetensors", ToSafetensors(weights_, 16));
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }

  fs::path dir_;
  Weights weights_;
};

TEST_F(TinyFolderTest, EncodesInInputOrderAndMatchesReference) {
  EmbedderOptions options;
  options.model_path = dir_.string();
  options.batch_size = 2;
  StatusOr<std::unique_ptr<SentenceEmbedder>> e = SentenceEmbedder::Load(options);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->max_seq_length(), 6);
  const std::vector<std::string_view> texts = {"w5", "w6 w7 w8 w9 w10 w11", "", "w12 w13",
                                               "W14 [SEP] w15"};
  const auto ids = (*e)->Tokenize(texts);
  EXPECT_EQ(ids[1], (std::vector<std::int64_t>{2, 6, 7, 8, 9, 3}));  // truncated to 6
  EXPECT_EQ(ids[4], (std::vector<std::int64_t>{2, 14, 3, 15, 3}));
  const at::Tensor got = (*e)->Encode(texts);
  ASSERT_EQ(got.sizes(), (std::vector<std::int64_t>{5, 8}));
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const at::Tensor row_ids = at::tensor(ids[i], at::kLong).unsqueeze(0);
    const at::Tensor want =
        ReferenceEmbedding(weights_, TinyConfig(), row_ids, at::ones_like(row_ids));
    EXPECT_LT((got[static_cast<std::int64_t>(i)] - want[0]).abs().max().item<double>(), 1e-5)
        << "text " << i;
  }
}

// Each dtype runs on the CPU too and stays within the bar the parity tests
// use for reduced precision (cosine >= 0.999 to float32).
TEST_F(TinyFolderTest, EachDTypeEncodesCloseToFloat32OnCpu) {
  EmbedderOptions options;
  options.model_path = dir_.string();
  StatusOr<std::unique_ptr<SentenceEmbedder>> reference = SentenceEmbedder::Load(options);
  ASSERT_TRUE(reference.ok()) << reference.status();
  const std::vector<std::string_view> texts = {"w5", "w6 w7 w8 w9 w10 w11", "w12 w13"};
  const at::Tensor want = (*reference)->Encode(texts);
  for (const std::string dtype : {"float16", "bfloat16", "auto"}) {
    options.dtype = dtype;
    StatusOr<std::unique_ptr<SentenceEmbedder>> e = SentenceEmbedder::Load(options);
    ASSERT_TRUE(e.ok()) << dtype << ": " << e.status();
    EXPECT_EQ((*e)->dtype(), *ResolveDType(dtype, Device::Cpu()));
    const at::Tensor got = (*e)->Encode(texts);
    ASSERT_EQ(got.scalar_type(), at::kFloat) << dtype;
    const at::Tensor cosine = at::cosine_similarity(got, want, 1);
    EXPECT_GE(cosine.min().item<double>(), 0.999) << dtype;
  }
}

// Both replicas of a bfloat16 model on CPU map one converted copy of the
// weights (weight_cache.h) and encode exactly as a model converted in memory.
TEST_F(TinyFolderTest, BFloat16WeightsComeFromOneSharedConvertedFile) {
  EmbedderOptions options;
  options.model_path = dir_.string();
  options.dtype = "bfloat16";
  options.weight_cache_dir = "";
  StatusOr<std::unique_ptr<SentenceEmbedder>> in_memory = SentenceEmbedder::Load(options);
  ASSERT_TRUE(in_memory.ok()) << in_memory.status();

  options.weight_cache_dir = (dir_ / "cache").string();
  StatusOr<std::unique_ptr<SentenceEmbedder>> first = SentenceEmbedder::Load(options);
  ASSERT_TRUE(first.ok()) << first.status();
  StatusOr<std::unique_ptr<SentenceEmbedder>> second = SentenceEmbedder::Load(options);
  ASSERT_TRUE(second.ok()) << second.status();
  std::vector<fs::path> cached;
  for (const auto& entry : fs::directory_iterator(dir_ / "cache")) {
    cached.push_back(entry.path());
  }
  ASSERT_EQ(cached.size(), 1u);

  // Both embedders' parameters lie in that file's mapping.
  std::ifstream maps("/proc/self/maps");
  const std::string text((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(cached[0].string()), std::string::npos) << "the converted file is not mapped";
  for (const auto* e : {first->get(), second->get()}) {
    for (const auto& [name, tensor] : e->NamedParameters()) {
      EXPECT_EQ(tensor.scalar_type(), at::kBFloat16) << name;
    }
  }

  const std::vector<std::string_view> texts = {"w5", "w6 w7 w8 w9 w10 w11", "w12 w13"};
  const at::Tensor want = (*in_memory)->Encode(texts);
  EXPECT_TRUE(at::equal((*first)->Encode(texts), want));
  EXPECT_TRUE(at::equal((*second)->Encode(texts), want));

  // A cache that cannot be written falls back to converting in memory.
  options.weight_cache_dir = (dir_ / "config.json" / "cache").string();
  StatusOr<std::unique_ptr<SentenceEmbedder>> fallback = SentenceEmbedder::Load(options);
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  EXPECT_TRUE(at::equal((*fallback)->Encode(texts), want));
}

TEST(ResolveDTypeTest, AutoIsFloat16OnCudaAndFollowsTheCpu) {
  EXPECT_EQ(*ResolveDType("auto", Device::Cuda(0)), "float16");
  const CpuMatmulSpeed& speed = MeasuredCpuMatmulSpeed();
  std::printf("[ measured ] matrix products: float32 %.1f GFLOP/s, bfloat16 %.1f GFLOP/s\n",
              speed.float32_gflops, speed.bfloat16_gflops);
  EXPECT_GT(speed.float32_gflops, 0.0);
  EXPECT_GE(speed.bfloat16_gflops, 0.0);
  EXPECT_EQ(&MeasuredCpuMatmulSpeed(), &speed);  // once per process
  EXPECT_EQ(*ResolveDType("auto", Device::Cpu()), FasterCpuDType(speed));
  EXPECT_EQ(*ResolveDType("bfloat16", Device::Cpu()), "bfloat16");
  EXPECT_EQ(*ResolveDType("float16", Device::Cuda(0)), "float16");
  EXPECT_EQ(ResolveDType("fp16", Device::Cpu()).status().code(), StatusCode::kInvalidArgument);
}

TEST(ResolveDTypeTest, AutoOnACpuTakesBFloat16OnlyWhereItsProductsAreClearlyFaster) {
  // Figures of the kind measured: an AMD Zen 4 (AVX512-BF16), a Xeon whose
  // AMX is hidden (AVX512-BF16 at half float32's speed), a CPU without
  // bfloat16 instructions, and a near tie.
  EXPECT_EQ(FasterCpuDType({.float32_gflops = 150, .bfloat16_gflops = 300}), "bfloat16");
  EXPECT_EQ(FasterCpuDType({.float32_gflops = 310, .bfloat16_gflops = 167}), "float32");
  EXPECT_EQ(FasterCpuDType({.float32_gflops = 90, .bfloat16_gflops = 0}), "float32");
  EXPECT_EQ(FasterCpuDType({.float32_gflops = 100, .bfloat16_gflops = 110}), "float32");
  EXPECT_EQ(FasterCpuDType({.float32_gflops = 100, .bfloat16_gflops = 120}), "bfloat16");
}

TEST_F(TinyFolderTest, LoadErrorsNameTheFile) {
  EmbedderOptions options;
  options.model_path = dir_.string();
  options.dtype = "float64";
  StatusOr<std::unique_ptr<SentenceEmbedder>> e = SentenceEmbedder::Load(options);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("dtype 'float64' is not supported (float32, float16, "
                                      "bfloat16, int8, auto)"),
            std::string::npos)
      << e.status();

  Write("1_Pooling/config.json", R"({"pooling_mode": "attention"})");
  options.dtype = "float32";
  e = SentenceEmbedder::Load(options);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("1_Pooling/config.json: pooling_mode \"attention\""),
            std::string::npos)
      << e.status();

  fs::remove(dir_ / "model.safetensors");
  e = SentenceEmbedder::Load(options);
  ASSERT_FALSE(e.ok());
}

TEST_F(TinyFolderTest, MissingWeightsFileIsNamed) {
  fs::remove(dir_ / "model.safetensors");
  EmbedderOptions options;
  options.model_path = dir_.string();
  StatusOr<std::unique_ptr<SentenceEmbedder>> e = SentenceEmbedder::Load(options);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("model.safetensors: cannot open"), std::string::npos)
      << e.status();
}

TEST_F(TinyFolderTest, ExecutorSetsEmbeddingsInOrder) {
  ExecutorContext context;
  context.with =
      Parameters(Value::Dict{{"model_path", Value(dir_.string())}, {"batch_size", Value(2.0)}});
  SentenceEncoder encoder(context);
  DocList docs{Doc("w5 w6"), Doc("w7"), Doc("w8 w9 w10"), Doc("")};
  encoder.Encode(docs, Parameters());
  EmbedderOptions options;
  options.model_path = dir_.string();
  const at::Tensor want =
      (*SentenceEmbedder::Load(options))->Encode({"w5 w6", "w7", "w8 w9 w10", ""});
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const Tensor* e = docs[i].embedding();
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->shape(), (std::vector<std::int64_t>{8}));
    EXPECT_EQ(e->dtype(), "<f4");
    for (std::int64_t d = 0; d < 8; ++d) {
      EXPECT_NEAR(e->Values<float>()[static_cast<std::size_t>(d)],
                  want[static_cast<std::int64_t>(i)][d].item<float>(), 1e-6);
    }
  }
}

TEST_F(TinyFolderTest, ExecutorErrorsNameKeyAndFile) {
  ExecutorContext context;
  context.name = "enc";
  context.with =
      Parameters(Value::Dict{{"model_path", Value(dir_.string())}, {"batch_sise", Value(2.0)}});
  try {
    SentenceEncoder encoder(context);
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("with.batch_sise: unknown key"), std::string::npos)
        << e.what();
  }
  context.with = Parameters(Value::Dict{{"model_path", Value("/nonexistent/model")}});
  try {
    SentenceEncoder encoder(context);
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gantry::sentence_encoder
