// sentence_pipeline: what a folder's modules.json, Pooling config and
// config_sentence_transformers.json are read as, what is refused, and each
// pooling mode on small tensors worked out by hand. Parity with
// sentence-transformers itself is tests/model/test_encoder_folders.py.
#include "sentence_pipeline.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace gantry::sentence_encoder {
namespace {

namespace fs = std::filesystem;

class SentencePipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::temp_directory_path() /
              ("gantry-pipeline-" + std::to_string(::getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(folder_ / "1_Pooling");
  }
  void TearDown() override { fs::remove_all(folder_); }

  void Write(const std::string& name, const std::string& text) {
    std::ofstream(folder_ / name) << text;
  }
  // modules.json with these types (paths as sentence-transformers writes them).
  void WriteModules(const std::string& transformer, const std::string& pooling,
                    const std::string& normalize) {
    std::string modules = R"([{"idx": 0, "name": "0", "path": "", "type": ")" + transformer + "\"}";
    if (!pooling.empty()) {
      modules += R"(, {"idx": 1, "name": "1", "path": "1_Pooling", "type": ")" + pooling + "\"}";
    }
    if (!normalize.empty()) {
      modules +=
          R"(, {"idx": 2, "name": "2", "path": "2_Normalize", "type": ")" + normalize + "\"}";
    }
    Write("modules.json", modules + "]");
  }
  StatusOr<SentencePipeline> Read() const { return ReadSentencePipeline(folder_.string(), 4); }

  static constexpr const char* kTransformer =
      "sentence_transformers.base.modules.transformer.Transformer";
  static constexpr const char* kPooling =
      "sentence_transformers.sentence_transformer.modules.pooling.Pooling";
  static constexpr const char* kNormalize =
      "sentence_transformers.base.modules.normalize.Normalize";
  fs::path folder_;
};

TEST_F(SentencePipelineTest, ABareTransformerFolderPoolsByMeanWithoutNormalize) {
  const auto pipeline = Read();
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  EXPECT_EQ(pipeline->pooling, std::vector<PoolingMode>{PoolingMode::kMean});
  EXPECT_FALSE(pipeline->normalize);
  EXPECT_EQ(pipeline->Dimension(4), 4);
}

TEST_F(SentencePipelineTest, LegacyFlagsAndModuleNamesAreRead) {
  WriteModules("sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
               "sentence_transformers.models.Normalize");
  Write("1_Pooling/config.json",
        R"({"word_embedding_dimension": 4, "pooling_mode_cls_token": false,
            "pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": true,
            "pooling_mode_lasttoken": false})");
  const auto pipeline = Read();
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  // Concatenated in sentence-transformers' fixed order: max before mean.
  EXPECT_EQ(pipeline->pooling, (std::vector<PoolingMode>{PoolingMode::kMax, PoolingMode::kMean}));
  EXPECT_TRUE(pipeline->normalize);
  EXPECT_EQ(pipeline->Dimension(4), 8);
}

TEST_F(SentencePipelineTest, NewerModuleNamesWithNormalizeAreRead) {
  WriteModules(kTransformer, kPooling, kNormalize);
  Write("1_Pooling/config.json", R"({"embedding_dimension": 4, "pooling_mode": "cls"})");
  const auto pipeline = Read();
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  EXPECT_EQ(pipeline->pooling, std::vector<PoolingMode>{PoolingMode::kCls});
  EXPECT_TRUE(pipeline->normalize);
  EXPECT_TRUE(pipeline->include_prompt);
}

TEST_F(SentencePipelineTest, ModeNamesListsAndPromptsAreRead) {
  WriteModules(kTransformer, kPooling, "");
  Write("1_Pooling/config.json",
        R"({"embedding_dimension": 4, "pooling_mode": ["lasttoken", "cls"],
            "include_prompt": false})");
  Write("config_sentence_transformers.json",
        R"({"prompts": {"query": "query: ", "document": ""}, "default_prompt_name": "query"})");
  const auto pipeline = Read();
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  EXPECT_EQ(pipeline->pooling,
            (std::vector<PoolingMode>{PoolingMode::kLastToken, PoolingMode::kCls}));
  EXPECT_FALSE(pipeline->normalize);
  EXPECT_FALSE(pipeline->include_prompt);
  EXPECT_EQ(pipeline->prompts.at("query"), "query: ");
  EXPECT_EQ(pipeline->default_prompt_name, "query");
}

TEST_F(SentencePipelineTest, WhatWouldNotBeReproducedExactlyIsRefusedNamingIt) {
  struct Case {
    std::string modules;
    std::string pooling;
    std::string prompts;
    std::string want;
  };
  const std::string pooling_ok = R"({"pooling_mode": "mean"})";
  const std::string modules_ok = std::string(R"([{"path": "", "type": ")") + kTransformer +
                                 R"("}, {"path": "1_Pooling", "type": ")" + kPooling + "\"}]";
  const Case cases[] = {
      {std::string(R"([{"path": "", "type": ")") + kTransformer +
           R"("}, {"path": "1_Pooling", "type": ")" + kPooling +
           R"("}, {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}])",
       pooling_ok, "", "module 2 ('sentence_transformers.models.Dense') is not supported"},
      {std::string(R"([{"path": "1_Pooling", "type": ")") + kPooling + "\"}]", pooling_ok, "",
       "module 0 ('" + std::string(kPooling) + "') is not supported"},
      {std::string(R"([{"path": "0_Transformer", "type": ")") + kTransformer + "\"}]", pooling_ok,
       "", "lives in '0_Transformer'"},
      {modules_ok, R"({"pooling_mode": "attention"})", "",
       R"(pooling_mode "attention" is not supported)"},
      {modules_ok, R"({"pooling_mode": []})", "", "pooling_mode must be a mode name"},
      {modules_ok, R"({"pooling_mode_max_tokens": "yes"})", "",
       "pooling_mode_max_tokens must be true or false"},
      {modules_ok, R"({"pooling_mode": "cls", "embedding_dimension": 8})", "",
       "embedding_dimension 8 differs from hidden_size 4"},
      {modules_ok, "[1, 2]", "", "config.json: not a JSON object"},
      {modules_ok, "{not json", "", "config.json: not valid JSON"},
      {modules_ok, pooling_ok, R"({"prompts": {"q": 3}})", "prompts.q must be a string"},
      {modules_ok, pooling_ok, R"({"prompts": {"q": "q: "}, "default_prompt_name": "p"})",
       R"(default_prompt_name "p" is not one of its prompts)"},
      {R"({"modules": []})", pooling_ok, "", "expected a JSON array of modules"},
      {std::string(R"([{"path": "", "type": ")") + kTransformer + "\"}]", pooling_ok, "",
       "modules.json: lists no Pooling module after the Transformer"},
  };
  for (const Case& c : cases) {
    Write("modules.json", c.modules);
    Write("1_Pooling/config.json", c.pooling);
    fs::remove(folder_ / "config_sentence_transformers.json");
    if (!c.prompts.empty()) {
      Write("config_sentence_transformers.json", c.prompts);
    }
    const auto pipeline = Read();
    ASSERT_FALSE(pipeline.ok()) << c.want;
    EXPECT_NE(pipeline.status().message().find(c.want), std::string::npos)
        << pipeline.status() << "\nwanted: " << c.want;
  }
}

// Two rows of three tokens, hidden size 2; the second row's last token is
// padding.
at::Tensor Hidden() {
  return at::tensor({1.0f, 2.0f, 3.0f, -4.0f, 5.0f, 0.0f,  //
                     -1.0f, 1.0f, 2.0f, 2.0f, 100.0f, 100.0f})
      .view({2, 3, 2});
}
at::Tensor Mask() { return at::tensor({1, 1, 1, 1, 1, 0}, at::kLong).view({2, 3}); }

void ExpectRows(const at::Tensor& got, const std::vector<float>& want) {
  ASSERT_EQ(got.numel(), static_cast<std::int64_t>(want.size())) << got;
  const at::Tensor flat = got.contiguous().view({-1});
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(flat[static_cast<std::int64_t>(i)].item<float>(), want[i], 1e-5) << i << got;
  }
}

TEST(PoolTest, EachModeByHand) {
  ExpectRows(Pool(Hidden(), Mask(), {PoolingMode::kCls}, false), {1, 2, -1, 1});
  ExpectRows(Pool(Hidden(), Mask(), {PoolingMode::kMax}, false), {5, 2, 2, 2});
  ExpectRows(Pool(Hidden(), Mask(), {PoolingMode::kMean}, false), {3, -2.0f / 3, 0.5f, 1.5f});
  ExpectRows(Pool(Hidden(), Mask(), {PoolingMode::kMeanSqrtLen}, false),
             {9 / std::sqrt(3.0f), -2 / std::sqrt(3.0f), 1 / std::sqrt(2.0f), 3 / std::sqrt(2.0f)});
  // Weights 1, 2, 3 by position; the padded position weighs nothing.
  ExpectRows(Pool(Hidden(), Mask(), {PoolingMode::kWeightedMean}, false),
             {(1 + 6 + 15) / 6.0f, (2 - 8 + 0) / 6.0f, (-1 + 4) / 3.0f, (1 + 4) / 3.0f});
  // The last token the mask keeps, not the padding after it.
  ExpectRows(Pool(Hidden(), Mask(), {PoolingMode::kLastToken}, false), {5, 0, 2, 2});
  // Concatenated in the order given, then normalised as one vector.
  const at::Tensor both =
      Pool(Hidden(), Mask(), {PoolingMode::kLastToken, PoolingMode::kCls}, true);
  ExpectRows(both.slice(0, 0, 1),
             {5 / std::sqrt(30.0f), 0, 1 / std::sqrt(30.0f), 2 / std::sqrt(30.0f)});
}

TEST(PoolTest, AMaskWithLeadingZerosMovesClsAndLeavesThoseTokensOut) {
  // What a prompt left out of the pooling looks like (include_prompt false).
  const at::Tensor mask = at::tensor({0, 1, 1, 0, 1, 0}, at::kLong).view({2, 3});
  ExpectRows(Pool(Hidden(), mask, {PoolingMode::kCls}, false), {3, -4, 2, 2});
  ExpectRows(Pool(Hidden(), mask, {PoolingMode::kMean}, false), {4, -2, 2, 2});
}

TEST(PoolTest, ModeNamesRoundTrip) {
  for (const char* name :
       {"cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"}) {
    const std::optional<PoolingMode> mode = ParsePoolingMode(name);
    ASSERT_TRUE(mode.has_value()) << name;
    EXPECT_EQ(PoolingModeName(*mode), name);
  }
  EXPECT_FALSE(ParsePoolingMode("attention").has_value());
}

}  // namespace
}  // namespace gantry::sentence_encoder
