// TorchModel end to end: models exported by tests/exported/export_models.py
// (an MLP, a CNN, all-MiniLM-L6-v2; AOTInductor .pt2 and TorchScript .pt)
// served from YAML by 2-replica Deployments with dynamic batching, through
// gantry-worker processes, the gateway and the gRPC client on 127.0.0.1.
// Outputs must equal PyTorch eager's, as the export script recorded them.
//
// $GANTRY_EXPORTED_MODELS names the folder exported_models.sh printed.
#include <gantry/config.h>
#include <gantry/deployment.h>
#include <gantry/init.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "safetensors.h"
#include "testutil/testutil.h"

namespace gantry {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string ModelsDir() {
  const char* dir = std::getenv("GANTRY_EXPORTED_MODELS");
  return dir != nullptr ? dir : "";
}

// "cpu", or what $GANTRY_TEST_DEVICE names (the `gpu` twins run on cuda,
// with models compiled there).
std::string TestDevice() {
  const char* device = std::getenv("GANTRY_TEST_DEVICE");
  return device != nullptr && *device != '\0' ? device : "cpu";
}

// One tensor of NAME.expected.safetensors as float32 or int64 rows.
struct Expected {
  std::vector<std::int64_t> shape;
  std::vector<float> floats;
  std::vector<std::int64_t> ints;

  std::int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  std::int64_t row_size() const {
    std::int64_t n = 1;
    for (std::size_t i = 1; i < shape.size(); ++i) {
      n *= shape[i];
    }
    return n;
  }
};

Expected ReadExpected(const std::string& model, const std::string& tensor) {
  const std::string path = ModelsDir() + "/" + model + ".expected.safetensors";
  auto file = sentence_encoder::SafetensorsFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  Expected out;
  if (!file.ok()) {
    return out;
  }
  const sentence_encoder::SafetensorsEntry* entry = file->Find(tensor);
  EXPECT_NE(entry, nullptr) << path << " has no tensor " << tensor;
  if (entry == nullptr) {
    return out;
  }
  out.shape = entry->shape;
  const char* data = file->Data(*entry);
  if (entry->dtype == "F32") {
    out.floats.resize(static_cast<std::size_t>(entry->numel()));
    std::memcpy(out.floats.data(), data, out.floats.size() * sizeof(float));
  } else {
    EXPECT_EQ(entry->dtype, "I64") << tensor;
    out.ints.resize(static_cast<std::size_t>(entry->numel()));
    std::memcpy(out.ints.data(), data, out.ints.size() * sizeof(std::int64_t));
  }
  return out;
}

// Documents whose field `field` is row i of `input`.
DocList DocsFromRows(const Expected& input, const std::string& field) {
  DocList docs;
  std::vector<std::int64_t> row_shape(input.shape.begin() + 1, input.shape.end());
  const auto n = static_cast<std::size_t>(input.row_size());
  for (std::int64_t i = 0; i < input.rows(); ++i) {
    Doc& doc = docs.emplace_back();
    doc.set_text("row " + std::to_string(i));
    doc.set_tensor(field, Tensor::FromValues<float>(
                              row_shape, std::span<const float>(
                                             input.floats.data() + i * input.row_size(), n)));
  }
  return docs;
}

// The largest |got - expected| over every document's `field`.
double MaxAbsDiff(const DocList& docs, const std::string& field, const Expected& expected) {
  EXPECT_EQ(static_cast<std::int64_t>(docs.size()), expected.rows());
  double worst = 0;
  for (std::size_t i = 0; i < docs.size() && static_cast<std::int64_t>(i) < expected.rows(); ++i) {
    const Tensor* got = docs[i].tensor(field);
    EXPECT_NE(got, nullptr) << "document " << i << " has no " << field;
    if (got == nullptr) {
      return INFINITY;
    }
    EXPECT_EQ(got->numel(), expected.row_size()) << "document " << i;
    std::span<const float> values = got->Values<float>();
    for (std::int64_t k = 0; k < expected.row_size() && k < got->numel(); ++k) {
      const float want = expected.floats[static_cast<std::size_t>(
          static_cast<std::int64_t>(i) * expected.row_size() + k)];
      worst = std::max(worst,
                       std::abs(static_cast<double>(values[static_cast<std::size_t>(k)]) - want));
    }
  }
  return worst;
}

// A Deployment YAML beside a link to the models folder, so that `model:`
// is a path relative to the YAML file, as users write it.
class ExportedModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ModelsDir().empty() || !fs::exists(ModelsDir() + "/mlp.pt2")) {
      GTEST_SKIP() << "no exported models: run through with_exported_models.sh "
                      "(GANTRY_EXPORTED_MODELS)";
    }
    fs::create_symlink(ModelsDir(), dir_.File("models"));
    // The Hugging Face folder, for the tokenizer of the text model.
    if (const char* minilm = std::getenv("GANTRY_MODEL_PATH"); minilm != nullptr) {
      fs::create_symlink(minilm, dir_.File("minilm"));
    }
  }

  // `with_lines` are the executor's `with:` keys, indented by 6.
  StatusOr<DeploymentOptions> Load(const std::string& with_lines, int replicas = 2,
                                   const std::string& batching =
                                       "{preferred_batch_size: 8, "
                                       "timeout: 5}") {
    const std::string path = dir_.File("deployment.yml");
    testing::WriteFile(path,
                       "jtype: Deployment\n"
                       "with:\n"
                       "  name: exported\n"
                       "  replicas: " +
                           std::to_string(replicas) +
                           "\n"
                           "  uses:\n"
                           "    jtype: TorchModel\n"
                           "    with:\n"
                           "      device: " +
                           TestDevice() + "\n" + with_lines +
                           "  uses_dynamic_batching: {Infer: " + batching + "}\n");
    return LoadDeploymentConfig(path);
  }

  testing::TempDir dir_;
};

constexpr char kMlpWith[] =
    "      inputs: [{name: x, dtype: float32, shape: [16], field: tensor}]\n"
    "      outputs: [{name: logits, dtype: float32, shape: [4], field: embedding}]\n";

// Posts the model's test rows in requests of 5 (so several requests share a
// batched call) and returns the max abs difference to eager.
double ServeAndCompare(Deployment& dep, const std::string& model, const std::string& input,
                       const std::string& output) {
  const Expected in = ReadExpected(model, "input." + input);
  const Expected want = ReadExpected(model, "output." + output);
  StatusOr<DocList> got = dep.Post("/infer", DocsFromRows(in, "tensor"),
                                   {.request_size = 5, .timeout = std::chrono::seconds(60)});
  EXPECT_TRUE(got.ok()) << got.status();
  if (!got.ok()) {
    return INFINITY;
  }
  return MaxAbsDiff(*got, "embedding", want);
}

TEST_F(ExportedModelTest, MlpPackageEqualsEagerThroughTwoBatchedReplicas) {
  auto options = Load("      model: models/mlp.pt2\n" + std::string(kMlpWith));
  ASSERT_TRUE(options.ok()) << options.status();
  Deployment dep(*options);
  ASSERT_TRUE(dep.ok()) << dep.status();
  const double diff = ServeAndCompare(dep, "mlp", "x", "logits");
  std::cout << "mlp.pt2 float32 on " << TestDevice() << ": max abs diff to eager " << diff << "\n";
  EXPECT_LE(diff, 1e-5);
  // Both replicas served: the requests were spread.
  for (const ReplicaInfo& replica : dep.replicas()) {
    EXPECT_GT(replica.requests, 0u) << replica.name;
  }
}

TEST_F(ExportedModelTest, MlpTorchScriptEqualsEager) {
  auto options = Load("      model: models/mlp.pt\n" + std::string(kMlpWith));
  ASSERT_TRUE(options.ok()) << options.status();
  Deployment dep(*options);
  ASSERT_TRUE(dep.ok()) << dep.status();
  const double diff = ServeAndCompare(dep, "mlp", "x", "logits");
  std::cout << "mlp.pt float32: max abs diff to eager " << diff << "\n";
  EXPECT_LE(diff, 1e-5);
}

TEST_F(ExportedModelTest, MlpTorchScriptInBfloat16IsCloseToEager) {
  // float16 too where it is native (CUDA).
  std::vector<std::string> dtypes = {"bfloat16"};
  if (TestDevice() != "cpu") {
    dtypes.emplace_back("float16");
  }
  for (const std::string& dtype : dtypes) {
    auto options =
        Load("      model: models/mlp.pt\n      dtype: " + dtype + "\n" + std::string(kMlpWith), 1);
    ASSERT_TRUE(options.ok()) << options.status();
    Deployment dep(*options);
    ASSERT_TRUE(dep.ok()) << dep.status();
    const double diff = ServeAndCompare(dep, "mlp", "x", "logits");
    std::cout << "mlp.pt " << dtype << " on " << TestDevice() << ": max abs diff to float32 eager "
              << diff << "\n";
    // 8 (bfloat16) or 11 (float16) bits of mantissa: logits of magnitude ~1
    // differ by ~1e-2 at most.
    EXPECT_LE(diff, 0.1) << dtype;
    EXPECT_GT(diff, 0.0) << dtype << " gave float32's exact outputs: was the dtype applied?";
  }
}

constexpr char kCnnWith[] =
    "      inputs: [{name: image, dtype: float32, shape: [3, 32, 32], field: tensor}]\n"
    "      outputs: [{name: logits, dtype: float32, shape: [10], field: embedding}]\n";

TEST_F(ExportedModelTest, CnnPackageAndTorchScriptEqualEager) {
  for (const char* file : {"cnn.pt2", "cnn.pt"}) {
    auto options = Load("      model: models/" + std::string(file) + "\n" + kCnnWith);
    ASSERT_TRUE(options.ok()) << options.status();
    Deployment dep(*options);
    ASSERT_TRUE(dep.ok()) << dep.status();
    const double diff = ServeAndCompare(dep, "cnn", "image", "logits");
    std::cout << file << " float32: max abs diff to eager " << diff << "\n";
    EXPECT_LE(diff, 1e-5) << file;
  }
}

std::vector<std::string> MiniLmTexts() {
  const nlohmann::json meta =
      nlohmann::json::parse(testing::ReadFile(ModelsDir() + "/minilm.json"), nullptr, false);
  std::vector<std::string> texts;
  if (meta.is_object() && meta.contains("texts")) {
    texts = meta["texts"].get<std::vector<std::string>>();
  }
  return texts;
}

TEST_F(ExportedModelTest, MiniLmPackageWithTokenizerEqualsSentenceTransformers) {
  if (!fs::exists(ModelsDir() + "/minilm.pt2") || std::getenv("GANTRY_MODEL_PATH") == nullptr) {
    GTEST_SKIP() << "all-MiniLM-L6-v2 was not exported (no model folder)";
  }
  const std::vector<std::string> texts = MiniLmTexts();
  ASSERT_GT(texts.size(), 10u);
  for (const auto& [file, pooling, expected] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"minilm.pt2", "mean", "output.sentence_embedding"},
           {"minilm.pt", "mean", "output.sentence_embedding"},
           {"minilm.pt2", "cls", "output.cls"}}) {
    auto options = Load("      model: models/" + file +
                        "\n      tokenizer: minilm\n"
                        "      pooling: " +
                        pooling + "\n      normalize: true\n");
    ASSERT_TRUE(options.ok()) << options.status();
    Deployment dep(*options);
    ASSERT_TRUE(dep.ok()) << dep.status();
    DocList docs;
    for (const std::string& text : texts) {
      docs.emplace_back(text);
    }
    StatusOr<DocList> got =
        dep.Post("/encode", docs, {.request_size = 4, .timeout = std::chrono::seconds(60)});
    ASSERT_TRUE(got.ok()) << got.status();
    const double diff = MaxAbsDiff(*got, "embedding", ReadExpected("minilm", expected));
    std::cout << file << " pooling " << pooling << ": max abs diff to " << expected << " " << diff
              << "\n";
    EXPECT_LE(diff, 1e-5) << file << " " << pooling;
  }
}

// Requests that do not match the declared inputs fail alone, as
// INVALID_ARGUMENT naming the document, the input, what was expected and
// what came; the replicas serve on.
TEST_F(ExportedModelTest, MismatchedInputsAreInvalidArgumentAndTheDeploymentServesOn) {
  auto options = Load("      model: models/mlp.pt2\n" + std::string(kMlpWith));
  ASSERT_TRUE(options.ok()) << options.status();
  Deployment dep(*options);
  ASSERT_TRUE(dep.ok()) << dep.status();
  const Expected in = ReadExpected("mlp", "input.x");
  const DocList good = DocsFromRows(in, "tensor");

  auto post_one = [&](Doc bad, std::size_t index) {
    DocList docs;
    for (std::size_t i = 0; i < index; ++i) {
      docs.push_back(good[i]);
    }
    bad.set_id("bad-doc");
    docs.push_back(std::move(bad));
    return dep.Post("/infer", docs, {.request_size = 100, .timeout = std::chrono::seconds(30)});
  };
  struct Case {
    const char* what;
    Doc doc;
    const char* message;
  };
  std::vector<Case> cases;
  {
    Doc d;
    d.set_tensor("tensor", Tensor::FromValues<double>({16}, std::vector<double>(16, 1.0)));
    cases.push_back({"float64", d, "input 'x': expected dtype float32, got float64"});
  }
  {
    Doc d;
    d.set_tensor("tensor", Tensor::FromValues<float>({4, 4}, std::vector<float>(16, 1.0F)));
    cases.push_back({"rank 2", d, "input 'x': expected shape [16] (-1: any size), got [4, 4]"});
  }
  {
    Doc d;
    d.set_tensor("tensor", Tensor::FromValues<float>({15}, std::vector<float>(15, 1.0F)));
    cases.push_back({"size 15", d, "input 'x': expected shape [16] (-1: any size), got [15]"});
  }
  {
    Doc d;
    d.set_text("no tensor at all");
    cases.push_back({"missing", d, "input 'x': field 'tensor' is missing"});
  }
  {
    Doc d;
    d.Set("tensor", Value("a string"));
    cases.push_back({"not a tensor", d, "input 'x': field 'tensor' is not a tensor"});
  }
  for (Case& c : cases) {
    StatusOr<DocList> result = post_one(c.doc, 3);
    ASSERT_FALSE(result.ok()) << c.what;
    EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument)
        << c.what << ": " << result.status();
    EXPECT_THAT(result.status().message(), HasSubstr("document 3 (id bad-doc)")) << c.what;
    EXPECT_THAT(result.status().message(), HasSubstr(c.message)) << c.what;
  }

  // 10,000 documents of mismatched shapes (requests of 100), concurrent with
  // good requests that share the batch queue: every bad request fails, no
  // good one does.
  auto flood = std::async(std::launch::async, [&] {
    DocList bad;
    for (int i = 0; i < 10000; ++i) {
      Doc& d = bad.emplace_back();
      const int n = 1 + i % 40;
      d.set_tensor("tensor", Tensor::FromValues<float>(
                                 {n}, std::vector<float>(static_cast<std::size_t>(n), 0.5F)));
    }
    int failed = 0;
    for (int start = 0; start < 10000; start += 100) {
      DocList part(std::vector<Doc>(bad.begin() + start, bad.begin() + start + 100));
      auto r = dep.Post("/infer", part, {.request_size = 100, .timeout = std::chrono::seconds(30)});
      failed += !r.ok() && r.status().code() == StatusCode::kInvalidArgument ? 1 : 0;
    }
    return failed;
  });
  const Expected want = ReadExpected("mlp", "output.logits");
  for (int round = 0; round < 20; ++round) {
    StatusOr<DocList> ok =
        dep.Post("/infer", good, {.request_size = 3, .timeout = std::chrono::seconds(30)});
    ASSERT_TRUE(ok.ok()) << "round " << round << ": " << ok.status();
    EXPECT_LE(MaxAbsDiff(*ok, "embedding", want), 1e-5);
  }
  EXPECT_EQ(flood.get(), 100) << "every request of mismatched shapes is INVALID_ARGUMENT";
  for (const ReplicaInfo& replica : dep.replicas()) {
    EXPECT_TRUE(testing::ProcessAlive(replica.pid)) << replica.name;
  }
}

// Inputs with a dynamic dimension: padded to the longest with pad_value, or
// (pad: false) run in passes of equal sizes. The model sums its rows, so
// zero padding leaves every answer exact.
TEST_F(ExportedModelTest, DynamicInputsArePaddedOrGroupedAndAnswersStayExact) {
  for (const char* pad : {"true", "false"}) {
    for (const char* file : {"ragged.pt2", "ragged.pt"}) {
      auto options = Load("      model: models/" + std::string(file) +
                              "\n      inputs: [{name: seq, dtype: float32, shape: [-1, 8], "
                              "field: tensor, pad_value: 0, pad: " +
                              pad +
                              "}]\n"
                              "      outputs: [{name: total, dtype: float32, shape: [8], "
                              "field: embedding}]\n",
                          1, "{preferred_batch_size: 64, timeout: 20}");
      ASSERT_TRUE(options.ok()) << options.status();
      Deployment dep(*options);
      ASSERT_TRUE(dep.ok()) << dep.status();
      DocList docs;
      for (int i = 0; i < 50; ++i) {
        const int rows = 1 + (i * 7) % 13;
        std::vector<float> values(static_cast<std::size_t>(rows) * 8);
        for (std::size_t k = 0; k < values.size(); ++k) {
          values[k] = static_cast<float>((i + 1) * 0.25 + static_cast<double>(k % 8));
        }
        docs.emplace_back().set_tensor("tensor", Tensor::FromValues<float>({rows, 8}, values));
      }
      StatusOr<DocList> got =
          dep.Post("/infer", docs, {.request_size = 7, .timeout = std::chrono::seconds(60)});
      ASSERT_TRUE(got.ok()) << got.status();
      for (std::size_t i = 0; i < docs.size(); ++i) {
        const Tensor* total = (*got)[i].embedding();
        ASSERT_NE(total, nullptr);
        ASSERT_EQ(total->shape(), std::vector<std::int64_t>{8});
        const auto rows = docs[i].tensor("tensor")->shape()[0];
        for (int c = 0; c < 8; ++c) {
          const float want = static_cast<float>(rows) *
                             static_cast<float>((static_cast<double>(i) + 1) * 0.25 + c);
          EXPECT_FLOAT_EQ(total->Values<float>()[static_cast<std::size_t>(c)], want)
              << file << " pad " << pad << " document " << i;
        }
      }
      if (std::string(file) == "ragged.pt2") {
        // Past the package's bound on the dynamic size (Dim max 512): the
        // client's input, refused as such.
        DocList longer;
        longer.emplace_back().set_tensor(
            "tensor", Tensor::FromValues<float>({600, 8}, std::vector<float>(600 * 8, 1.0F)));
        StatusOr<DocList> refused = dep.Post("/infer", longer);
        ASSERT_FALSE(refused.ok());
        EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status();
        EXPECT_THAT(refused.status().message(), HasSubstr("an input is outside the sizes"));
      }
    }
  }
}

// Dynamic batching merges requests into one call, and the documents of one
// request are padded to each other's sizes (the output keeps the padded
// length, as documented); another request's documents never pad them, so
// what a request gets back does not depend on who shared its call.
TEST_F(ExportedModelTest, ARequestIsNeverPaddedToTheSizesOfAnotherInItsBatch) {
  auto options = Load(
      "      model: models/doubler.pt\n"
      "      inputs: [{name: seq, dtype: float32, shape: [-1], field: tensor}]\n"
      "      outputs: [{name: twice, dtype: float32, shape: [-1], field: embedding}]\n",
      1, "{preferred_batch_size: 64, timeout: 300}");
  ASSERT_TRUE(options.ok()) << options.status();
  Deployment dep(*options);
  ASSERT_TRUE(dep.ok()) << dep.status();
  auto doc_of = [](std::vector<float> values) {
    Doc doc;
    const auto n = static_cast<std::int64_t>(values.size());
    doc.set_tensor("tensor", Tensor::FromValues<float>({n}, std::move(values)));
    return doc;
  };
  // Short and long requests at once, so that they share calls.
  std::vector<std::future<StatusOr<DocList>>> posts;
  for (int i = 0; i < 8; ++i) {
    const bool shorter = i % 2 == 0;
    posts.push_back(std::async(std::launch::async, [&, shorter] {
      return dep.Post("/infer", DocList{doc_of(shorter ? std::vector<float>{1, 2}
                                                       : std::vector<float>{1, 2, 3, 4})});
    }));
  }
  for (int i = 0; i < 8; ++i) {
    StatusOr<DocList> got = posts[static_cast<std::size_t>(i)].get();
    ASSERT_TRUE(got.ok()) << got.status();
    const std::vector<float> want =
        i % 2 == 0 ? std::vector<float>{2, 4} : std::vector<float>{2, 4, 6, 8};
    ASSERT_NE((*got)[0].embedding(), nullptr);
    const std::span<const float> values = (*got)[0].embedding()->Values<float>();
    EXPECT_EQ(std::vector<float>(values.begin(), values.end()), want) << "request " << i;
  }
  // Within one request, documents are padded to each other's sizes.
  StatusOr<DocList> both = dep.Post("/infer", DocList{doc_of({1, 2}), doc_of({1, 2, 3, 4})});
  ASSERT_TRUE(both.ok()) << both.status();
  const std::span<const float> padded = (*both)[0].embedding()->Values<float>();
  EXPECT_EQ(std::vector<float>(padded.begin(), padded.end()), (std::vector<float>{2, 4, 0, 0}));
}

struct BadModel {
  const char* file;
  const char* message;
};

// A model that cannot be served fails the Deployment's start with a message
// naming the file and the cause, and leaves no process behind.
TEST_F(ExportedModelTest, BadModelFilesFailTheStartWithTheirCause) {
  if (TestDevice() != "cpu") {
    GTEST_SKIP() << "the broken packages are CPU packages";
  }
  for (const BadModel& bad : {
           BadModel{"truncated.pt2", "is not a readable AOTInductor package"},
           BadModel{"corrupt.pt2", "is not a readable AOTInductor package"},
           BadModel{"cuda_claimed.pt2", "was compiled for cuda, and this replica's device is cpu"},
           BadModel{"absent.pt2", "does not exist"},
       }) {
    auto options = Load("      model: models/" + std::string(bad.file) + "\n" + kMlpWith, 1);
    ASSERT_TRUE(options.ok()) << options.status();
    Deployment dep(*options);
    ASSERT_FALSE(dep.ok()) << bad.file;
    EXPECT_THAT(dep.status().message(), HasSubstr(bad.message)) << bad.file;
    EXPECT_THAT(dep.status().message(), HasSubstr(bad.file)) << bad.file;
  }
  // Inputs a package contradicts (it checks them), a dtype for a package,
  // which runs in the one it was compiled in, and int8 for a module.
  for (const auto& [with, message] : std::vector<std::pair<std::string, std::string>>{
           {"      model: models/cnn.pt2\n"
            "      inputs: [{name: image, dtype: float32, shape: [3, 16, 16], field: tensor}]\n"
            "      outputs: [{name: logits, dtype: float32, shape: [10], field: embedding}]\n",
            "input_handles[0]: unmatched dim value at 2, expected: 32, but got: 16"},
           {"      model: models/mlp.pt2\n"
            "      inputs: [{name: x, dtype: float16, shape: [16], field: tensor}]\n"
            "      outputs: [{name: logits, dtype: float32, shape: [4], field: embedding}]\n",
            "input_handles[0]: unmatched dtype"},
           {"      model: models/mlp.pt2\n      dtype: bfloat16\n" + std::string(kMlpWith),
            "with.dtype: a .pt2 package runs in the dtype it was compiled in"},
           {"      model: models/mlp.pt\n      dtype: int8\n" + std::string(kMlpWith),
            "with.dtype: int8 is SentenceEncoder's"},
           // A tensor on a document's text, and one document over the message
           // cap: refused before the model loads (the warm-up alone would
           // need gigabytes).
           {"      model: models/mlp.pt\n"
            "      inputs: [{name: text, dtype: float32, shape: [16]}]\n"
            "      outputs: [{name: logits, dtype: float32, shape: [4], field: embedding}]\n",
            "with.inputs[0].name: \"text\" is a document's own field"},
           {"      model: models/mlp.pt\n"
            "      inputs: [{name: x, dtype: float32, shape: [65536, 65536, 16], field: tensor}]\n"
            "      outputs: [{name: logits, dtype: float32, shape: [4], field: embedding}]\n",
            "with.inputs[0].shape: [65536, 65536, 16] of float32 is 274877906944 bytes a "
            "document, over the 67108864-byte message cap"}}) {
    auto contradicted = Load(with, 1);
    ASSERT_TRUE(contradicted.ok()) << contradicted.status();
    Deployment dep(*contradicted);
    ASSERT_FALSE(dep.ok()) << with;
    EXPECT_THAT(dep.status().message(), HasSubstr(message)) << with;
  }
  // Outputs the model contradicts are caught by the warm-up pass.
  auto options = Load(
      "      model: models/mlp.pt2\n"
      "      inputs: [{name: x, dtype: float32, shape: [16], field: tensor}]\n"
      "      outputs: [{name: logits, dtype: float32, shape: [5], field: embedding}]\n",
      1);
  ASSERT_TRUE(options.ok());
  Deployment dep(*options);
  ASSERT_FALSE(dep.ok());
  EXPECT_THAT(dep.status().message(), HasSubstr("output 'logits' has shape [64, 4]"));
  EXPECT_THAT(dep.status().message(), HasSubstr("declared [-1] + [5]"));
}

// A model that throws on some inputs: that request gets the model's error,
// and the replica serves the next one.
TEST_F(ExportedModelTest, AModelThatThrowsFailsTheRequestNotTheReplica) {
  auto options = Load(
      "      model: models/throws.pt\n"
      "      inputs: [{name: x, dtype: float32, shape: [16], field: tensor}]\n"
      "      outputs: [{name: y, dtype: float32, shape: [16], field: embedding}]\n",
      1, "{preferred_batch_size: 8, timeout: 300}");
  ASSERT_TRUE(options.ok()) << options.status();
  Deployment dep(*options);
  ASSERT_TRUE(dep.ok()) << dep.status();
  DocList bad;
  bad.emplace_back().set_tensor("tensor",
                                Tensor::FromValues<float>({16}, std::vector<float>(16, -1000.0F)));
  StatusOr<DocList> failed = dep.Post("/infer", bad, {.timeout = std::chrono::seconds(30)});
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), HasSubstr("TorchModel"));
  EXPECT_THAT(failed.status().message(), HasSubstr("negative input"));
  DocList good;
  good.emplace_back().set_tensor("tensor",
                                 Tensor::FromValues<float>({16}, std::vector<float>(16, 1.5F)));
  StatusOr<DocList> served = dep.Post("/infer", good, {.timeout = std::chrono::seconds(30)});
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_FLOAT_EQ((*served)[0].embedding()->Values<float>()[0], 3.0F);

  // Sent at once, batched into calls together: the bad request fails alone,
  // and the requests that shared its call are served, each run once (also
  // where the output overwrites the input, one document a pass).
  for (const char* output_field : {"embedding", "tensor"}) {
    SCOPED_TRACE(output_field);
    auto batched = Load(
        "      model: models/throws.pt\n      batch_size: 1\n"
        "      inputs: [{name: x, dtype: float32, shape: [16], field: tensor}]\n"
        "      outputs: [{name: y, dtype: float32, shape: [16], field: " +
            std::string(output_field) + "}]\n",
        1, "{preferred_batch_size: 8, timeout: 300}");
    ASSERT_TRUE(batched.ok()) << batched.status();
    Deployment shared(*batched);
    ASSERT_TRUE(shared.ok()) << shared.status();
    std::vector<std::future<StatusOr<DocList>>> posts;
    for (int i = 0; i < 6; ++i) {
      posts.push_back(std::async(std::launch::async, [&, i] {
        return shared.Post("/infer", i == 2 ? bad : good, {.timeout = std::chrono::seconds(30)});
      }));
    }
    for (int i = 0; i < 6; ++i) {
      StatusOr<DocList> got = posts[static_cast<std::size_t>(i)].get();
      if (i == 2) {
        ASSERT_FALSE(got.ok());
        EXPECT_THAT(got.status().message(), HasSubstr("negative input"));
        continue;
      }
      ASSERT_TRUE(got.ok()) << "request " << i << ": " << got.status();
      const Tensor* y = (*got)[0].tensor(output_field);
      ASSERT_NE(y, nullptr);
      EXPECT_FLOAT_EQ(y->Values<float>()[0], 3.0F) << "request " << i;
    }
  }
}

}  // namespace
}  // namespace gantry

int main(int argc, char** argv) {
  gantry::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
