// Parity with sentence-transformers: token ids and embeddings of a corpus
// written by scripts/parity_expectations.py. Needs the real model
// (GANTRY_MODEL_PATH) and the expectations (GANTRY_PARITY_JSON); skips with
// the reason when either is missing. GANTRY_PARITY_DEVICE (default cpu) runs
// the model elsewhere, e.g. cuda.
#include <ATen/core/Tensor.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "int8_linear.h"
#include "safetensors.h"
#include "sentence_embedder.h"

namespace gantry::sentence_encoder {
namespace {

struct Case {
  std::string text;
  std::vector<std::int64_t> ids;
  std::vector<float> embedding;
  // [id, start byte, stop byte, special] of every token, uncut.
  std::vector<std::vector<std::int64_t>> tokens;
};

class ParityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* model = std::getenv("GANTRY_MODEL_PATH");
    const char* json = std::getenv("GANTRY_PARITY_JSON");
    if (model == nullptr || !std::ifstream(std::string(model) + "/model.safetensors")) {
      GTEST_SKIP() << "model missing: set GANTRY_MODEL_PATH (run scripts/fetch_model.sh)";
    }
    if (json == nullptr || !std::ifstream(json)) {
      GTEST_SKIP() << "expectations missing: set GANTRY_PARITY_JSON (run "
                      "scripts/parity_setup.sh, then scripts/parity_expectations.py)";
    }
    std::ifstream in(json);
    const nlohmann::json doc = nlohmann::json::parse(in);
    for (const nlohmann::json& c : doc.at("cases")) {
      cases_.push_back({c.at("text").get<std::string>(),
                        c.at("ids").get<std::vector<std::int64_t>>(),
                        c.at("embedding").get<std::vector<float>>(),
                        c.at("tokens").get<std::vector<std::vector<std::int64_t>>>()});
    }
    options_.model_path = model;
    if (const char* device = std::getenv("GANTRY_PARITY_DEVICE"); device != nullptr) {
      StatusOr<Device> parsed = Device::Parse(device);
      ASSERT_TRUE(parsed.ok()) << "GANTRY_PARITY_DEVICE: " << parsed.status();
      options_.device = *parsed;
    }
    StatusOr<std::unique_ptr<SentenceEmbedder>> e = SentenceEmbedder::Load(options_);
    ASSERT_TRUE(e.ok()) << e.status();
    embedder_ = std::move(e).value();
  }

  std::vector<std::string_view> Texts() const {
    std::vector<std::string_view> texts;
    for (const Case& c : cases_) {
      texts.push_back(c.text);
    }
    return texts;
  }

  // Cosine between row i of `got` (rows in case order) and expectation i.
  std::vector<double> Cosines(const at::Tensor& got) const {
    const std::int64_t dim = got.size(1);
    const float* data = got.data_ptr<float>();
    std::vector<double> cosines;
    for (std::size_t i = 0; i < cases_.size(); ++i) {
      double dot = 0, na = 0, nb = 0;
      for (std::int64_t d = 0; d < dim; ++d) {
        const double a = data[static_cast<std::int64_t>(i) * dim + d];
        const double b = cases_[i].embedding[static_cast<std::size_t>(d)];
        dot += a * b;
        na += a * a;
        nb += b * b;
      }
      cosines.push_back(dot / std::sqrt(na * nb));
    }
    return cosines;
  }

  // Unit rows, one per case: `got`'s, or the expectations' (undefined `got`).
  std::vector<std::vector<double>> UnitRows(const at::Tensor& got) const {
    std::vector<std::vector<double>> rows;
    for (std::size_t i = 0; i < cases_.size(); ++i) {
      std::vector<double> row;
      for (std::size_t d = 0; d < cases_[i].embedding.size(); ++d) {
        row.push_back(got.defined() ? static_cast<double>(
                                          got.data_ptr<float>()[i * cases_[i].embedding.size() + d])
                                    : cases_[i].embedding[d]);
      }
      double norm = 0;
      for (double v : row) {
        norm += v * v;
      }
      for (double& v : row) {
        v /= std::sqrt(norm);
      }
      rows.push_back(std::move(row));
    }
    return rows;
  }

  EmbedderOptions options_;
  std::vector<Case> cases_;
  std::unique_ptr<SentenceEmbedder> embedder_;
};

// A retrieval check over the parity strings: each string a query, the
// others its passages, ranked by cosine. `overlap`: the share of the
// reference (float32) top 10 that `got`'s top 10 holds; `ndcg`: nDCG@10 of
// `got`'s ranking, the reference cosines (at least 0) as graded relevance.
struct RetrievalAgreement {
  double overlap = 0;
  double ndcg = 0;
};
RetrievalAgreement CompareRetrieval(const std::vector<std::vector<double>>& got,
                                    const std::vector<std::vector<double>>& reference) {
  constexpr std::size_t kTop = 10;
  const std::size_t n = got.size();
  auto similarity = [](const std::vector<double>& a, const std::vector<double>& b) {
    double dot = 0;
    for (std::size_t d = 0; d < a.size(); ++d) {
      dot += a[d] * b[d];
    }
    return dot;
  };
  auto top = [&](const std::vector<std::vector<double>>& rows, std::size_t q) {
    std::vector<std::pair<double, std::size_t>> ranked;
    for (std::size_t j = 0; j < n; ++j) {
      if (j != q) {
        ranked.emplace_back(-similarity(rows[q], rows[j]), j);
      }
    }
    std::partial_sort(ranked.begin(), ranked.begin() + kTop, ranked.end());
    std::vector<std::size_t> ids;
    for (std::size_t r = 0; r < kTop; ++r) {
      ids.push_back(ranked[r].second);
    }
    return ids;
  };
  RetrievalAgreement total;
  for (std::size_t q = 0; q < n; ++q) {
    const std::vector<std::size_t> got_top = top(got, q);
    const std::vector<std::size_t> want_top = top(reference, q);
    double dcg = 0;
    double ideal = 0;
    std::size_t shared = 0;
    for (std::size_t r = 0; r < kTop; ++r) {
      shared += std::count(want_top.begin(), want_top.end(), got_top[r]);
      const double discount = 1.0 / std::log2(static_cast<double>(r) + 2.0);
      dcg += std::max(0.0, similarity(reference[q], reference[got_top[r]])) * discount;
      ideal += std::max(0.0, similarity(reference[q], reference[want_top[r]])) * discount;
    }
    total.overlap += static_cast<double>(shared) / kTop;
    total.ndcg += ideal > 0 ? dcg / ideal : 1.0;
  }
  total.overlap /= static_cast<double>(n);
  total.ndcg /= static_cast<double>(n);
  return total;
}

TEST_F(ParityTest, TokenIdsEqualFastTokenizer) {
  ASSERT_GE(cases_.size(), 300u);
  const auto ids = embedder_->Tokenize(Texts());
  int mismatches = 0;
  for (std::size_t i = 0; i < cases_.size(); ++i) {
    if (ids[i] != cases_[i].ids && ++mismatches <= 10) {
      ADD_FAILURE() << "case " << i << " text '" << cases_[i].text << "': ids differ ("
                    << ids[i].size() << " vs " << cases_[i].ids.size() << " tokens)";
    }
  }
  std::printf("parity ids: %zu strings, %d mismatches\n", cases_.size(), mismatches);
  EXPECT_EQ(mismatches, 0);
}

// The offsets TEI's /tokenize reports: Hugging Face's, in bytes, for every
// token of every string (accents, CJK, lowercasing that makes two chars of
// one, special tokens typed in the text, unknown words, long words).
TEST_F(ParityTest, TokenOffsetsEqualFastTokenizer) {
  int mismatches = 0;
  for (std::size_t i = 0; i < cases_.size(); ++i) {
    const std::vector<TokenSpan> got =
        embedder_->tokenizer().Tokenize(cases_[i].text, /*add_special_tokens=*/true);
    std::vector<std::vector<std::int64_t>> as_rows;
    for (const TokenSpan& token : got) {
      as_rows.push_back({token.id, static_cast<std::int64_t>(token.start),
                         static_cast<std::int64_t>(token.end), token.special ? 1 : 0});
    }
    if (as_rows != cases_[i].tokens && ++mismatches <= 10) {
      std::size_t first = 0;
      while (first < std::min(as_rows.size(), cases_[i].tokens.size()) &&
             as_rows[first] == cases_[i].tokens[first]) {
        ++first;
      }
      ADD_FAILURE() << "case " << i << " text '" << cases_[i].text << "': tokens differ from token "
                    << first << " (" << as_rows.size() << " vs " << cases_[i].tokens.size()
                    << " tokens)";
    }
  }
  std::printf("parity offsets: %zu strings, %d mismatches\n", cases_.size(), mismatches);
  EXPECT_EQ(mismatches, 0);
}

TEST_F(ParityTest, EmbeddingsMatchSentenceTransformers) {
  const at::Tensor got = embedder_->Encode(Texts());
  const std::int64_t dim = embedder_->dimension();
  ASSERT_EQ(got.size(0), static_cast<std::int64_t>(cases_.size()));
  const float* data = got.data_ptr<float>();
  double min_cosine = 1.0;
  double max_abs = 0.0;
  for (std::size_t i = 0; i < cases_.size(); ++i) {
    const std::vector<float>& want = cases_[i].embedding;
    ASSERT_EQ(static_cast<std::int64_t>(want.size()), dim);
    double dot = 0, na = 0, nb = 0, diff = 0;
    for (std::int64_t d = 0; d < dim; ++d) {
      const double a = data[static_cast<std::int64_t>(i) * dim + d];
      const double b = want[static_cast<std::size_t>(d)];
      dot += a * b;
      na += a * a;
      nb += b * b;
      diff = std::max(diff, std::abs(a - b));
    }
    const double cosine = dot / std::sqrt(na * nb);
    EXPECT_GE(cosine, 0.99999) << "case " << i << " '" << cases_[i].text << "'";
    EXPECT_LE(diff, 1e-5) << "case " << i << " '" << cases_[i].text << "'";
    min_cosine = std::min(min_cosine, cosine);
    max_abs = std::max(max_abs, diff);
  }
  std::printf("parity embeddings: %zu strings, min cosine %.9f, max abs diff %.3g\n", cases_.size(),
              min_cosine, max_abs);
}

// Reduced precision against the float32 reference of sentence-transformers:
// the bar issue 15 sets, cosine >= 0.999 on every parity string.
TEST_F(ParityTest, EachDTypeStaysWithinCosine0999OfFloat32) {
  for (const std::string dtype : {"float16", "bfloat16"}) {
    EmbedderOptions options = options_;
    options.dtype = dtype;
    StatusOr<std::unique_ptr<SentenceEmbedder>> e = SentenceEmbedder::Load(options);
    ASSERT_TRUE(e.ok()) << dtype << ": " << e.status();
    const at::Tensor got = (*e)->Encode(Texts());
    ASSERT_EQ(got.size(0), static_cast<std::int64_t>(cases_.size()));
    const std::vector<double> cosines = Cosines(got);
    const double min_cosine = *std::min_element(cosines.begin(), cosines.end());
    const double mean_cosine =
        std::accumulate(cosines.begin(), cosines.end(), 0.0) / static_cast<double>(cosines.size());
    std::printf("parity %s on %s: %zu strings, min cosine %.6f, mean %.7f\n", dtype.c_str(),
                (*e)->device().ToString().c_str(), cases_.size(), min_cosine, mean_cosine);
    EXPECT_GE(min_cosine, 0.999) << dtype;
  }
}

// cuda_graphs: on CUDA every pass's shape is captured once (the warm-up
// captures the likely ones) and replayed after; the embeddings must be the
// eager passes' for every request size, each size a padded shape of its
// own, and stay within the float32 reference's bar. Elsewhere the option is
// ignored, and the embeddings are the eager ones.
TEST_F(ParityTest, CudaGraphsGiveTheEagerPassesEmbeddings) {
  const bool cuda = options_.device.is_cuda();
  const std::vector<std::string> dtypes =
      cuda ? std::vector<std::string>{"float16", "float32"} : std::vector<std::string>{"float32"};
  const std::vector<std::size_t> request_sizes =
      cuda ? std::vector<std::size_t>{1, 5, 32, cases_.size()}
           : std::vector<std::size_t>{cases_.size()};
  const std::vector<std::string_view> texts = Texts();
  for (const std::string& dtype : dtypes) {
    EmbedderOptions eager_options = options_;
    eager_options.dtype = dtype;
    EmbedderOptions graph_options = eager_options;
    graph_options.cuda_graphs = true;
    StatusOr<std::unique_ptr<SentenceEmbedder>> eager = SentenceEmbedder::Load(eager_options);
    StatusOr<std::unique_ptr<SentenceEmbedder>> graphs = SentenceEmbedder::Load(graph_options);
    ASSERT_TRUE(eager.ok()) << dtype << ": " << eager.status();
    ASSERT_TRUE(graphs.ok()) << dtype << ": " << graphs.status();
    if (!cuda) {
      EXPECT_EQ((*graphs)->cuda_graphs(), nullptr) << "graphs on " << options_.device.ToString();
    } else {
      ASSERT_NE((*graphs)->cuda_graphs(), nullptr);
      EXPECT_GT((*graphs)->cuda_graphs()->size(), 0u) << "nothing captured at warm-up";
    }
    // Eager and graph embeddings agree to rounding: the graphs always apply
    // the attention mask, which may pick another attention kernel.
    const double bar = dtype == "float32" ? 0.99999 : 0.9999;
    for (const std::size_t size : request_sizes) {
      double worst = 1;
      double worst_reference = 1;
      for (std::size_t start = 0; start < texts.size(); start += size) {
        const std::vector<std::string_view> part(
            texts.begin() + static_cast<std::ptrdiff_t>(start),
            texts.begin() + static_cast<std::ptrdiff_t>(std::min(start + size, texts.size())));
        const at::Tensor want = (*eager)->Encode(part);
        const at::Tensor got = (*graphs)->Encode(part);
        ASSERT_EQ(got.sizes(), want.sizes());
        const std::int64_t dim = got.size(1);
        for (std::int64_t row = 0; row < got.size(0); ++row) {
          const float* a = got.data_ptr<float>() + row * dim;
          const float* b = want.data_ptr<float>() + row * dim;
          const std::vector<float>& reference =
              cases_[start + static_cast<std::size_t>(row)].embedding;
          double dot = 0, na = 0, nb = 0, dot_ref = 0, nr = 0;
          for (std::int64_t d = 0; d < dim; ++d) {
            dot += static_cast<double>(a[d]) * b[d];
            na += static_cast<double>(a[d]) * a[d];
            nb += static_cast<double>(b[d]) * b[d];
            dot_ref += static_cast<double>(a[d]) * reference[static_cast<std::size_t>(d)];
            nr += static_cast<double>(reference[static_cast<std::size_t>(d)]) *
                  reference[static_cast<std::size_t>(d)];
          }
          worst = std::min(worst, dot / std::sqrt(na * nb));
          worst_reference = std::min(worst_reference, dot_ref / std::sqrt(na * nr));
        }
      }
      std::printf(
          "parity cuda_graphs %s on %s, requests of %zu: worst cosine to eager %.7f, "
          "to the reference %.6f\n",
          dtype.c_str(), options_.device.ToString().c_str(), size, worst, worst_reference);
      EXPECT_GE(worst, bar) << dtype << ", requests of " << size;
      EXPECT_GE(worst_reference, 0.999) << dtype << ", requests of " << size;
    }
    if (cuda) {
      const CapturedGraphs* captured = (*graphs)->cuda_graphs();
      EXPECT_EQ(captured->failure(), "") << dtype;
      std::printf("parity cuda_graphs %s: %zu graphs captured\n", dtype.c_str(), captured->size());
    }
  }
}

// int8 against the float32 reference: what it costs, printed, and the gate
// it must pass (mean cosine >= 0.995, top-10 overlap >= 0.95). ONNX
// Runtime's dynamic int8 of the same weights gets 0.989 and 0.875 here.
TEST_F(ParityTest, Int8StaysWithinTheQualityGate) {
  if (!options_.device.is_cpu()) {
    GTEST_SKIP() << "int8 runs on a CPU only";
  }
  EmbedderOptions options = options_;
  options.dtype = "int8";
  if (const Status available = Int8Linear::Available(); !available.ok()) {
    // A CPU without VNNI refuses int8 (its products saturate): the load
    // must fail saying so, not serve wrong embeddings.
    StatusOr<std::unique_ptr<SentenceEmbedder>> refused = SentenceEmbedder::Load(options);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kUnimplemented) << refused.status();
    EXPECT_NE(refused.status().message().find("VNNI"), std::string::npos) << refused.status();
    std::printf("parity int8: refused on this CPU, as it must be: %s\n",
                refused.status().ToString().c_str());
    return;
  }
  StatusOr<std::unique_ptr<SentenceEmbedder>> e = SentenceEmbedder::Load(options);
  ASSERT_TRUE(e.ok()) << e.status();
  // The long texts' attention dtype follows the CPU's instructions, not a
  // timing, so that the figures below do not move with the machine's load.
  const at::ScalarType attention = (*e)->model().int8_attention_dtype();
  EXPECT_EQ(attention, CpuHasBFloat16Instructions() ? at::kBFloat16 : at::kFloat);
  const at::Tensor got = (*e)->Encode(Texts());
  ASSERT_EQ(got.size(0), static_cast<std::int64_t>(cases_.size()));
  const std::vector<double> cosines = Cosines(got);
  double mean = 0;
  for (double c : cosines) {
    mean += c / static_cast<double>(cosines.size());
  }
  const double min_cosine = *std::min_element(cosines.begin(), cosines.end());
  const RetrievalAgreement int8 = CompareRetrieval(UnitRows(got), UnitRows(at::Tensor()));
  // The same check of the float32 model, as the floor of what it can show.
  const RetrievalAgreement float32 =
      CompareRetrieval(UnitRows(embedder_->Encode(Texts())), UnitRows(at::Tensor()));
  std::printf(
      "parity int8 (long texts' attention in %s): %zu strings, cosine min %.5f mean %.5f; "
      "top-10 overlap %.4f, nDCG@10 %.5f (float32: %.4f, %.5f)\n",
      c10::toString(attention), cases_.size(), min_cosine, mean, int8.overlap, int8.ndcg,
      float32.overlap, float32.ndcg);
  EXPECT_GE(mean, 0.995);
  EXPECT_GE(min_cosine, 0.98);
  EXPECT_GE(int8.overlap, 0.95);
  EXPECT_GE(int8.ndcg, 0.99);
}

// The first six dimensions of two sentences' reference embeddings (from
// sentence-transformers, written down here) and the WordPiece ids of an
// accented CJK string: checks that do not depend on the Python run.
TEST_F(ParityTest, PublishedPrefixes) {
  // The values are those of the published float32 weights; a float16 copy
  // (what travels to a lent GPU machine) is off by up to 1e-4.
  StatusOr<SafetensorsFile> weights =
      SafetensorsFile::Open(options_.model_path + "/model.safetensors");
  ASSERT_TRUE(weights.ok()) << weights.status();
  for (const SafetensorsEntry& entry : weights->entries()) {
    if (entry.dtype == "F16" || entry.dtype == "BF16") {
      GTEST_SKIP() << "the published values are for float32 weights; '" << entry.name << "' is "
                   << entry.dtype;
    }
  }
  const std::vector<std::string_view> texts = {"This is an example sentence",
                                               "Each sentence is converted."};
  const std::vector<std::vector<float>> want = {
      {0.06765693f, 0.06349593f, 0.04871314f, 0.07930495f, 0.03744806f, 0.00265273f},
      {0.07853645f, 0.08856265f, -0.00209270f, -0.00717247f, -0.01252624f, 0.01881747f}};
  const at::Tensor got = embedder_->Encode(texts);
  for (std::size_t i = 0; i < texts.size(); ++i) {
    for (std::size_t d = 0; d < 6; ++d) {
      EXPECT_NEAR(got[static_cast<std::int64_t>(i)][static_cast<std::int64_t>(d)].item<float>(),
                  want[i][d], 1e-5);
    }
  }
  EXPECT_EQ(embedder_->Tokenize({"Café déjà vu — 東京"})[0],
            (std::vector<std::int64_t>{101, 7668, 2139, 3900, 24728, 1517, 1879, 1755, 102}));
}

}  // namespace
}  // namespace gantry::sentence_encoder
