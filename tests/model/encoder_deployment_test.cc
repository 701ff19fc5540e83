// SentenceEncoder through the whole process/socket path (worker processes,
// gateway, gRPC client) must give the bare model's embeddings, in input
// order. Needs the real model: $GANTRY_MODEL_PATH (with_model.sh sets it).
#include <ATen/core/Tensor.h>
#include <gantry/deployment.h>
#include <gantry/init.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <any>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "int8_linear.h"
#include "sentence_embedder.h"
#include "sentence_encoder.h"
#include "tokenizer.h"

namespace gantry {
namespace {

constexpr std::int64_t kDimension = 384;
// Few enough for < 60 s on a loaded 2-core machine; not a multiple of 32 so
// the last request is a short one.
constexpr int kNumDocs = 200;

// Distinct texts of varied length (1 to ~300 tokens, so some are truncated
// at max_seq_length), ASCII and not: identical texts could not reveal
// embeddings given back to the wrong document.
std::vector<std::string> MakeTexts() {
  const std::vector<std::string> bases = {
      "Using a GPU allows you to significantly speed up encoding.",
      "A man is eating food.",
      "The quick brown fox jumps over the lazy dog",
      "Héllo wörld, ça va? Naïve café résumé.",
      "東京は日本の首都です。",
      "Привет, как дела?",
      "gRPC streams carry requests of thirty-two documents each",
      "",
      "unbelievably-long_hyphenated/and\\slashed tokens: 3.14159, $100, 50%!",
      "Emoji 🙂 and symbols ∑ ∞ ≠ are split or mapped to [UNK].",
  };
  std::vector<std::string> texts;
  texts.reserve(kNumDocs);
  for (int i = 0; i < kNumDocs; ++i) {
    std::string text = "#" + std::to_string(i);
    const std::string& base = bases[static_cast<std::size_t>(i) % bases.size()];
    // 1 to 12 repeats: the longest bases go past the 256-token limit.
    const int repeats = 1 + (i * 7) % 12;
    for (int r = 0; r < repeats; ++r) {
      text += " " + base;
    }
    texts.push_back(std::move(text));
  }
  return texts;
}

double Cosine(std::span<const float> a, const float* b) {
  double dot = 0;
  double na = 0;
  double nb = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    dot += static_cast<double>(a[k]) * b[k];
    na += static_cast<double>(a[k]) * a[k];
    nb += static_cast<double>(b[k]) * b[k];
  }
  return dot / std::sqrt(na * nb);
}

// `texts` through a Deployment of SentenceEncoder with `uses_with` (plus
// model_path), in requests of `request_size`.
StatusOr<DocList> EncodeThroughDeployment(const std::string& model_path,
                                          const std::vector<std::string>& texts, int replicas,
                                          const std::map<std::string, Value>& uses_with,
                                          int request_size) {
  DeploymentOptions options{.uses = "SentenceEncoder", .name = "encoder", .replicas = replicas};
  options.uses_with.insert_or_assign("model_path", Value(model_path));
  for (const auto& [key, value] : uses_with) {
    options.uses_with.insert_or_assign(key, value);
  }
  Deployment dep(std::move(options));
  if (!dep.ok()) {
    return dep.status();
  }
  DocList docs;
  for (const std::string& text : texts) {
    docs.emplace_back(text);
  }
  StatusOr<DocList> result = dep.Post(
      "/encode", docs, {.request_size = request_size, .timeout = std::chrono::seconds(50)});
  if (result.ok() && result->size() != docs.size()) {
    return InternalError(std::to_string(result->size()) + " documents back for " +
                         std::to_string(docs.size()));
  }
  return result;
}

class EncoderDeploymentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* model = std::getenv("GANTRY_MODEL_PATH");
    if (model == nullptr || !std::ifstream(std::string(model) + "/model.safetensors")) {
      GTEST_SKIP() << "model missing: set GANTRY_MODEL_PATH (run scripts/fetch_model.sh)";
    }
    model_path_ = model;
  }

  // The model without the framework, in `dtype`, as the reference.
  StatusOr<std::unique_ptr<sentence_encoder::SentenceEmbedder>> LoadBare(
      const std::string& dtype = "float32") const {
    sentence_encoder::EmbedderOptions options;
    options.model_path = model_path_;
    options.dtype = dtype;
    return sentence_encoder::SentenceEmbedder::Load(options);
  }

  std::string model_path_;
};

TEST_F(EncoderDeploymentTest, EmbeddingsEqualBareModelInInputOrder) {
  const std::vector<std::string> texts = MakeTexts();

  StatusOr<std::unique_ptr<sentence_encoder::SentenceEmbedder>> bare = LoadBare();
  ASSERT_TRUE(bare.ok()) << bare.status();
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  const at::Tensor expected = (*bare)->Encode(views).contiguous();
  ASSERT_EQ(expected.size(0), kNumDocs);
  ASSERT_EQ(expected.size(1), kDimension);
  const float* expected_data = expected.data_ptr<float>();

  // Two replicas: requests are spread over both, and the answers must
  // still come back in input order.
  DeploymentOptions options{.uses = "SentenceEncoder", .name = "encoder", .replicas = 2};
  options.uses_with.insert_or_assign("model_path", Value(model_path_));
  Deployment dep(std::move(options));
  ASSERT_TRUE(dep.ok()) << dep.status();

  DocList docs;
  for (const std::string& text : texts) {
    docs.emplace_back(text);
  }
  StatusOr<DocList> result =
      dep.Post("/encode", docs, {.request_size = 32, .timeout = std::chrono::seconds(50)});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->size(), docs.size());

  int mismatches = 0;
  double worst = 1.0;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const Doc& doc = (*result)[i];
    ASSERT_EQ(doc.id(), docs[i].id()) << "document " << i;
    ASSERT_EQ(doc.text(), texts[i]) << "document " << i;
    const Tensor* embedding = doc.embedding();
    ASSERT_NE(embedding, nullptr) << "document " << i << " has no embedding";
    ASSERT_EQ(embedding->shape(), std::vector<std::int64_t>{kDimension}) << "document " << i;
    const double cosine = Cosine(embedding->Values<float>(),
                                 expected_data + static_cast<std::int64_t>(i) * kDimension);
    worst = std::min(worst, std::isfinite(cosine) ? cosine : -1.0);
    if (!(cosine >= 0.99999) && ++mismatches <= 10) {
      ADD_FAILURE() << "document " << i << ": cosine with the bare model " << cosine;
    }
  }
  std::uint64_t served_by_all = 0;
  for (const ReplicaInfo& replica : dep.replicas()) {
    served_by_all += replica.requests;
  }
  std::printf("%zu documents through 2 replicas (%llu requests): worst cosine %.8f\n", docs.size(),
              static_cast<unsigned long long>(served_by_all), worst);
  EXPECT_EQ(mismatches, 0);
}

// Each request is tokenized on the worker thread that received it
// (SentenceEncoder's preparer), and requests merged by dynamic batching
// carry their own documents' tokens into one call: embeddings still equal
// the bare model's, document by document, with a prompt and without.
TEST_F(EncoderDeploymentTest, MergedRequestsEncodeTheTokensPreparedForEachDocument) {
  std::vector<std::string> texts = MakeTexts();
  texts.resize(96);
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  StatusOr<std::unique_ptr<sentence_encoder::SentenceEmbedder>> bare = LoadBare();
  ASSERT_TRUE(bare.ok()) << bare.status();

  DeploymentOptions options{.uses = "SentenceEncoder", .name = "encoder", .replicas = 1};
  options.uses_with.insert_or_assign("model_path", Value(model_path_));
  options.uses_dynamic_batching = {{"/encode", {.preferred_batch_size = 32, .timeout_ms = 200}}};
  Deployment dep(std::move(options));
  ASSERT_TRUE(dep.ok()) << dep.status();
  DocList docs;
  for (const std::string& text : texts) {
    docs.emplace_back(text);
  }
  for (const std::string prompt : {"", "query: "}) {
    Parameters parameters;
    if (!prompt.empty()) {
      parameters.mutable_values().insert_or_assign("prompt", Value(prompt));
    }
    const at::Tensor expected = (*bare)->Encode(views, prompt).contiguous();
    StatusOr<DocList> result = dep.Post(
        "/encode", docs,
        {.request_size = 4, .parameters = parameters, .timeout = std::chrono::seconds(50)});
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->size(), docs.size());
    double worst = 1.0;
    for (std::size_t i = 0; i < docs.size(); ++i) {
      ASSERT_EQ((*result)[i].id(), docs[i].id()) << "document " << i;
      const Tensor* embedding = (*result)[i].embedding();
      ASSERT_NE(embedding, nullptr) << "document " << i;
      const double cosine =
          Cosine(embedding->Values<float>(),
                 expected.data_ptr<float>() + static_cast<std::int64_t>(i) * kDimension);
      worst = std::min(worst, std::isfinite(cosine) ? cosine : -1.0);
    }
    std::printf("prompt '%s': %zu documents in requests of 4, merged: worst cosine %.8f\n",
                prompt.c_str(), docs.size(), worst);
    EXPECT_GE(worst, 0.99999) << "prompt '" << prompt << "'";
  }
}

// What the preparer leaves is what Encode embeds: swapped between two
// documents, their embeddings swap; a text it cannot tokenize is left for
// Encode, which refuses it as before.
TEST_F(EncoderDeploymentTest, EncodeEmbedsTheTokenIdsItsPreparerLeft) {
  ExecutorContext context;
  context.with.mutable_values().insert_or_assign("model_path", Value(model_path_));
  SentenceEncoder encoder(context);
  const Parameters none;
  DocList plain = {Doc("A man is eating food."), Doc("Stock markets fell sharply on Monday")};
  encoder.Encode(plain, none);
  DocList prepared = {Doc("A man is eating food."), Doc("Stock markets fell sharply on Monday")};
  ASSERT_TRUE(encoder.PrepareEncode(prepared, none).ok());
  for (const Doc& doc : prepared) {
    ASSERT_NE(std::any_cast<std::vector<std::int64_t>>(&doc.prepared()), nullptr);
  }
  std::swap(prepared[0].mutable_prepared(), prepared[1].mutable_prepared());
  encoder.Encode(prepared, none);
  for (std::size_t i = 0; i < 2; ++i) {
    ASSERT_NE(prepared[i].embedding(), nullptr);
    EXPECT_GE(Cosine(prepared[i].embedding()->Values<float>(),
                     plain[1 - i].embedding()->Values<float>().data()),
              0.99999)
        << "document " << i << " was not embedded from the tokens prepared for it";
    EXPECT_FALSE(prepared[i].prepared().has_value()) << "Encode keeps what it used";
  }

  DocList bad = {Doc("fine"), Doc(std::string("not \xff UTF-8"))};
  EXPECT_TRUE(encoder.PrepareEncode(bad, none).ok());
  EXPECT_FALSE(bad[0].prepared().has_value());
  EXPECT_THROW(encoder.Encode(bad, none), std::invalid_argument);

  // Left to Encode too, so that receiving threads never hold a long text's
  // tokens all at once: a text over kMaxPreparedTextBytes, and one that
  // Encode will refuse uncut.
  std::string words;
  while (words.size() <= sentence_encoder::kMaxPreparedTextBytes) {
    words += "word ";
  }
  DocList long_text = {Doc("fine"), Doc(words)};
  EXPECT_TRUE(encoder.PrepareEncode(long_text, none).ok());
  EXPECT_FALSE(long_text[0].prepared().has_value());
  encoder.Encode(long_text, none);  // cut to max_seq_length, as before
  ASSERT_NE(long_text[1].embedding(), nullptr);
  Parameters uncut;
  uncut.mutable_values().insert_or_assign("truncate", Value(false));
  DocList over = {Doc("fine"), Doc(words.substr(0, std::size_t{5} * 300))};  // 302 tokens
  EXPECT_TRUE(encoder.PrepareEncode(over, uncut).ok());
  EXPECT_FALSE(over[0].prepared().has_value());
  EXPECT_THROW(encoder.Encode(over, uncut), std::length_error);
}

// Reduced precision through the whole path: each worker resolves its own
// dtype ("auto" follows the worker's CPU), and the embeddings stay within the
// parity bound of the float32 model.
TEST_F(EncoderDeploymentTest, ReducedPrecisionDTypesStayWithinCosine0999OfFloat32) {
  const std::vector<std::string> all_texts = MakeTexts();
  const std::vector<std::string> texts(all_texts.begin(), all_texts.begin() + 40);
  StatusOr<std::unique_ptr<sentence_encoder::SentenceEmbedder>> bare = LoadBare();
  ASSERT_TRUE(bare.ok()) << bare.status();
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  const at::Tensor expected = (*bare)->Encode(views).contiguous();
  const float* expected_data = expected.data_ptr<float>();

  for (const char* dtype : {"bfloat16", "float16", "auto"}) {
    SCOPED_TRACE(dtype);
    const StatusOr<DocList> result = EncodeThroughDeployment(
        model_path_, texts, /*replicas=*/1, {{"dtype", Value(std::string(dtype))}}, 16);
    ASSERT_TRUE(result.ok()) << result.status();
    double worst = 1.0;
    for (std::size_t i = 0; i < result->size(); ++i) {
      const Tensor* embedding = (*result)[i].embedding();
      ASSERT_NE(embedding, nullptr) << "document " << i;
      ASSERT_EQ(embedding->shape(), std::vector<std::int64_t>{kDimension}) << "document " << i;
      const double cosine = Cosine(embedding->Values<float>(),
                                   expected_data + static_cast<std::int64_t>(i) * kDimension);
      worst = std::min(worst, std::isfinite(cosine) ? cosine : -1.0);
    }
    std::printf("dtype %s through a Deployment: %zu documents, worst cosine to float32 %.6f\n",
                dtype, result->size(), worst);
    EXPECT_GE(worst, 0.999);
  }
}

// int8 through the whole path: the worker quantises at load and stays
// within the int8 quality gate's bound of float32. It is not the bare int8
// model's output to the bit: another batching pads texts to other lengths,
// which moves the attention's last bits, and a row's quantisation turns
// that into a rounding step here and there (cosine 0.996-0.9999 to the
// same model batched otherwise, as the distance to float32 itself).
TEST_F(EncoderDeploymentTest, Int8ThroughTheWholePathStaysNearFloat32) {
  if (const Status available = sentence_encoder::Int8Linear::Available(); !available.ok()) {
    // A CPU without VNNI refuses int8: the Deployment must fail to start,
    // its replica saying why, not serve wrong embeddings.
    DeploymentOptions options{.uses = "SentenceEncoder", .name = "encoder", .replicas = 1};
    options.uses_with.insert_or_assign("model_path", Value(model_path_));
    options.uses_with.insert_or_assign("dtype", Value(std::string("int8")));
    Deployment dep(std::move(options));
    ASSERT_FALSE(dep.ok());
    EXPECT_NE(dep.status().message().find("VNNI"), std::string::npos) << dep.status();
    std::printf("dtype int8 through a Deployment: refused on this CPU, as it must be: %s\n",
                dep.status().ToString().c_str());
    return;
  }
  const std::vector<std::string> all_texts = MakeTexts();
  const std::vector<std::string> texts(all_texts.begin(), all_texts.begin() + 60);
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  StatusOr<std::unique_ptr<sentence_encoder::SentenceEmbedder>> float32 = LoadBare();
  ASSERT_TRUE(float32.ok()) << float32.status();
  StatusOr<std::unique_ptr<sentence_encoder::SentenceEmbedder>> int8 = LoadBare("int8");
  ASSERT_TRUE(int8.ok()) << int8.status();
  EXPECT_EQ((*int8)->dtype(), "int8");
  const at::Tensor want_float32 = (*float32)->Encode(views).contiguous();
  const at::Tensor want_int8 = (*int8)->Encode(views).contiguous();

  const StatusOr<DocList> result = EncodeThroughDeployment(
      model_path_, texts, /*replicas=*/2, {{"dtype", Value(std::string("int8"))}}, 16);
  ASSERT_TRUE(result.ok()) << result.status();
  double worst_to_int8 = 1.0;
  double worst_to_float32 = 1.0;
  double mean_to_float32 = 0.0;
  for (std::size_t i = 0; i < result->size(); ++i) {
    const Tensor* embedding = (*result)[i].embedding();
    ASSERT_NE(embedding, nullptr) << "document " << i;
    ASSERT_EQ(embedding->shape(), std::vector<std::int64_t>{kDimension}) << "document " << i;
    const auto row = static_cast<std::int64_t>(i) * kDimension;
    const double to_int8 = Cosine(embedding->Values<float>(), want_int8.data_ptr<float>() + row);
    worst_to_int8 = std::min(worst_to_int8, std::isfinite(to_int8) ? to_int8 : -1.0);
    const double to_float32 =
        Cosine(embedding->Values<float>(), want_float32.data_ptr<float>() + row);
    worst_to_float32 = std::min(worst_to_float32, std::isfinite(to_float32) ? to_float32 : -1.0);
    mean_to_float32 += to_float32 / static_cast<double>(result->size());
  }
  std::printf(
      "dtype int8 through a Deployment: %zu documents, cosine to float32 mean %.5f worst %.5f, "
      "worst to the bare int8 model %.5f\n",
      result->size(), mean_to_float32, worst_to_float32, worst_to_int8);
  EXPECT_GE(mean_to_float32, 0.995);
  EXPECT_GE(worst_to_float32, 0.98);
  EXPECT_LT(mean_to_float32, 0.99999) << "the replicas did not run in int8";
  EXPECT_GE(worst_to_int8, 0.98);
}

// With truncation off, an input over max_seq_length is refused over Jina's
// gRPC protocol as INVALID_ARGUMENT naming the document and its token count;
// the same deployment keeps serving, and truncates when not told otherwise.
TEST_F(EncoderDeploymentTest, AnInputOverTheLimitWithTruncationOffIsInvalidArgument) {
  DeploymentOptions options{.uses = "SentenceEncoder", .name = "encoder", .replicas = 1};
  options.uses_with.insert_or_assign("model_path", Value(model_path_));
  Deployment dep(std::move(options));
  ASSERT_TRUE(dep.ok()) << dep.status();
  std::string long_text;
  for (int i = 0; i < 300; ++i) {
    long_text += "word ";  // one token each: 302 with [CLS] and [SEP]
  }
  const DocList docs = {Doc("a dog"), Doc(long_text)};
  Parameters strict;
  strict.mutable_values().insert_or_assign("truncate", Value(false));
  StatusOr<DocList> refused =
      dep.Post("/encode", docs, {.parameters = strict, .timeout = std::chrono::seconds(50)});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find("document 1"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find("has 302 tokens, over the model's limit of 256"),
            std::string::npos)
      << refused.status();
  StatusOr<DocList> served = dep.Post("/encode", docs, {.timeout = std::chrono::seconds(50)});
  ASSERT_TRUE(served.ok()) << served.status();
  ASSERT_EQ(served->size(), 2U);
  ASSERT_NE((*served)[1].embedding(), nullptr);
}

// The default pass width: 256 documents in bfloat16 on a CPU with AMX, with
// long texts held to 32 rows' tokens (the memory a pass had at 32), and 32
// in every other case; a batch_size given is kept, without that hold.
TEST_F(EncoderDeploymentTest, DefaultPassWidthFollowsDTypeAndAmx) {
  const bool amx = sentence_encoder::CpuHasAmxBFloat16();
  auto load = [&](const char* dtype, std::int64_t batch_size) {
    sentence_encoder::EmbedderOptions options;
    options.model_path = model_path_;
    options.dtype = dtype;
    options.batch_size = batch_size;
    options.warm_up = false;
    options.weight_cache_dir = "";
    StatusOr<std::unique_ptr<sentence_encoder::SentenceEmbedder>> loaded =
        sentence_encoder::SentenceEmbedder::Load(options);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return std::move(loaded).value();
  };
  std::printf("this CPU %s AMX with bfloat16\n", amx ? "has" : "has no");
  const auto bfloat16 = load("bfloat16", 0);
  const std::int64_t longest = bfloat16->max_seq_length();
  EXPECT_EQ(bfloat16->amx_batch_size(), amx);
  EXPECT_EQ(bfloat16->batch_size(), amx ? 256 : 32);
  EXPECT_EQ(bfloat16->RowsPerPass(14, 1000), amx ? 256 : 32);
  // 32 rows of the longest input's tokens: 64 rows of half its length.
  EXPECT_EQ(bfloat16->RowsPerPass(longest / 2, 1000), amx ? 64 : 32);
  EXPECT_EQ(bfloat16->RowsPerPass(longest, 1000), 32);
  EXPECT_EQ(bfloat16->max_batch_tokens(), 32 * longest);
  const auto float32 = load("float32", 0);
  EXPECT_FALSE(float32->amx_batch_size());
  EXPECT_EQ(float32->RowsPerPass(14, 1000), 32);
  const auto given = load("bfloat16", 128);
  EXPECT_FALSE(given->amx_batch_size());
  EXPECT_EQ(given->RowsPerPass(longest, 1000), 128);
}

TEST_F(EncoderDeploymentTest, UnsupportedDTypeFailsTheDeploymentNamingIt) {
  DeploymentOptions options{.uses = "SentenceEncoder", .name = "encoder", .replicas = 1};
  options.uses_with.insert_or_assign("model_path", Value(model_path_));
  options.uses_with.insert_or_assign("dtype", Value(std::string("float64")));
  Deployment dep(std::move(options));
  ASSERT_FALSE(dep.ok());
  EXPECT_NE(dep.status().message().find("dtype 'float64' is not supported"), std::string::npos)
      << dep.status();
  EXPECT_NE(dep.status().message().find("SentenceEncoder"), std::string::npos) << dep.status();
}

// cuda_graphs is a CUDA option: a replica on the CPU starts, serves the same
// embeddings as without it, and says nothing is captured; a value that is
// not a boolean fails the start naming the key.
TEST_F(EncoderDeploymentTest, CudaGraphsOnACpuReplicaServeAndABadValueIsNamed) {
  const std::vector<std::string> texts = MakeTexts();
  StatusOr<std::unique_ptr<sentence_encoder::SentenceEmbedder>> bare = LoadBare();
  ASSERT_TRUE(bare.ok()) << bare.status();
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  const at::Tensor expected = (*bare)->Encode(views).contiguous();
  StatusOr<DocList> result = EncodeThroughDeployment(
      model_path_, texts, 1, {{"cuda_graphs", Value(true)}, {"device", Value(std::string("cpu"))}},
      16);
  ASSERT_TRUE(result.ok()) << result.status();
  double worst = 1.0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const Tensor* embedding = (*result)[i].embedding();
    ASSERT_NE(embedding, nullptr) << "document " << i;
    worst = std::min(
        worst, Cosine(embedding->Values<float>(),
                      expected.data_ptr<float>() + static_cast<std::int64_t>(i) * kDimension));
  }
  EXPECT_GE(worst, 0.99999);

  StatusOr<DocList> refused = EncodeThroughDeployment(
      model_path_, {texts.front()}, 1, {{"cuda_graphs", Value(std::string("yes"))}}, 16);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("cuda_graphs"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find("expected true or false"), std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace gantry

int main(int argc, char** argv) {
  // The Deployment re-executes this binary as its workers; Init runs them.
  gantry::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
