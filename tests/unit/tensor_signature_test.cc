// Declared model inputs and outputs (gantry/tensor_signature.h) and how the
// gateway's KServe v2 service reports and maps them (gateway/kserve.h).
#include <gantry/config.h>
#include <gantry/tensor_signature.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/doc_proto.h"
#include "gateway/kserve.h"

namespace gantry {
namespace {

using ::testing::HasSubstr;

Value::Dict WithOf(const std::string& yaml) {
  StatusOr<ExecutorConfig> config = ParseExecutorConfig("jtype: X\nwith:\n" + yaml, "<test>");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? config->with : Value::Dict{};
}

std::string ErrorOf(const std::string& yaml) {
  StatusOr<TensorSignature> signature = ParseTensorSignature(WithOf(yaml));
  EXPECT_FALSE(signature.ok());
  EXPECT_EQ(signature.status().code(), StatusCode::kInvalidArgument);
  return signature.status().message();
}

TEST(TensorSignatureTest, ReadsInputsAndOutputsWithDefaults) {
  StatusOr<TensorSignature> signature = ParseTensorSignature(
      WithOf("  inputs:\n"
             "    - {name: image, dtype: float32, shape: [3, 224, 224], field: tensor}\n"
             "    - {name: tokens, dtype: int64, shape: [-1], pad_value: 3, pad: false}\n"
             "  outputs: [{name: logits, shape: [1000]}]\n"));
  ASSERT_TRUE(signature.ok()) << signature.status();
  ASSERT_EQ(signature->inputs.size(), 2u);
  EXPECT_EQ(signature->inputs[0].field, "tensor");
  EXPECT_EQ(signature->inputs[0].shape, (std::vector<std::int64_t>{3, 224, 224}));
  EXPECT_FALSE(signature->inputs[0].has_dynamic_dims());
  EXPECT_EQ(signature->inputs[1].field, "tokens");  // defaults to the name
  EXPECT_EQ(signature->inputs[1].pad_value, 3);
  EXPECT_FALSE(signature->inputs[1].pad);
  EXPECT_TRUE(signature->inputs[1].has_dynamic_dims());
  EXPECT_EQ(signature->outputs[0].dtype, "float32");  // the default
  EXPECT_EQ(signature->outputs[0].ShapeString(), "[1000]");
  EXPECT_EQ(NumpyDTypeOfSignature("bfloat16"), "<f4");
  EXPECT_EQ(SignatureDTypeOfNumpy("<f4"), "float32");
  EXPECT_EQ(SignatureDTypeOfNumpy("<f8"), "float64");
}

TEST(TensorSignatureTest, MistakesNameTheKeyAndWhatWasWrong) {
  EXPECT_EQ(ErrorOf("  inputs: {name: x}\n"),
            "with.inputs: expected a list of {name, dtype, shape, field}, got {\"name\": \"x\"}");
  EXPECT_EQ(ErrorOf("  inputs: [{name: x, dtype: float128, shape: [1]}]\n"),
            "with.inputs[0].dtype: unknown dtype \"float128\" (expected one of float32, float64, "
            "float16, bfloat16, int64, int32, int16, int8, uint8, bool)");
  EXPECT_THAT(
      ErrorOf("  inputs: [{name: x, shape: [3, 0]}]\n"),
      HasSubstr("with.inputs[0].shape[1]: expected a positive size or -1 (dynamic), got 0"));
  EXPECT_THAT(ErrorOf("  inputs: [{name: x}]\n"),
              HasSubstr("with.inputs[0].shape: required key is missing"));
  EXPECT_THAT(ErrorOf("  outputs: [{shape: [1]}]\n"),
              HasSubstr("with.outputs[0].name: required key is missing"));
  EXPECT_THAT(ErrorOf("  outputs: [{name: y, shape: [1], pad: true}]\n"),
              HasSubstr("with.outputs[0].pad: unknown key (allowed: name, dtype, shape, field)"));
  EXPECT_THAT(ErrorOf("  inputs: [{name: x, shape: [1]}, {name: x, shape: [2]}]\n"),
              HasSubstr("with.inputs[1].name: \"x\" is declared twice"));
  EXPECT_THAT(ErrorOf("  inputs: [{name: x, shape: [1, 1, 1, 1, 1, 1, 1, 1, 1]}]\n"),
              HasSubstr("at most 8 dimensions, got 9"));
  EXPECT_THAT(ErrorOf("  inputs: [{name: x, shape: [1], pad_value: abc}]\n"),
              HasSubstr("with.inputs[0].pad_value: expected a number"));
}

TensorSignature CnnSignature() {
  StatusOr<TensorSignature> signature = ParseTensorSignature(
      WithOf("  inputs: [{name: image, dtype: float32, shape: [3, 2, 2], field: tensor}]\n"
             "  outputs: [{name: logits, dtype: bfloat16, shape: [4], field: embedding}]\n"));
  EXPECT_TRUE(signature.ok()) << signature.status();
  return signature.ok() ? *signature : TensorSignature{};
}

TEST(TensorSignatureTest, KServeReportsTheDeclaredTensorsWithTheBatchDimension) {
  const TensorSignature signature = CnnSignature();
  inference::ModelMetadataResponse metadata = internal::KServeModelMetadata("cnn", &signature);
  ASSERT_EQ(metadata.inputs_size(), 1);
  EXPECT_EQ(metadata.inputs(0).name(), "image");
  EXPECT_EQ(metadata.inputs(0).datatype(), "FP32");
  EXPECT_THAT(metadata.inputs(0).shape(), ::testing::ElementsAre(-1, 3, 2, 2));
  ASSERT_EQ(metadata.outputs_size(), 1);
  // Documents carry bfloat16 as float32, and so does the protocol.
  EXPECT_EQ(metadata.outputs(0).datatype(), "FP32");
  EXPECT_THAT(metadata.outputs(0).shape(), ::testing::ElementsAre(-1, 4));
  inference::ModelConfig config = internal::KServeModelConfig("cnn", &signature);
  EXPECT_EQ(config.max_batch_size(), internal::kKServeMaxBatchSize);
  EXPECT_EQ(config.input(0).data_type(), inference::TYPE_FP32);
  EXPECT_THAT(config.input(0).dims(), ::testing::ElementsAre(3, 2, 2));
  EXPECT_EQ(config.output(0).name(), "logits");
  // Without a signature: the text-embedding one.
  EXPECT_EQ(internal::KServeModelMetadata("enc").inputs(0).datatype(), "BYTES");
}

TEST(TensorSignatureTest, KServeTensorsMapToTheDeclaredFields) {
  const TensorSignature signature = CnnSignature();
  inference::ModelInferRequest request;
  request.set_model_name("cnn");
  auto* input = request.add_inputs();
  input->set_name("image");
  input->set_datatype("FP32");
  for (std::int64_t d : {2, 3, 2, 2}) {
    input->add_shape(d);
  }
  request.add_raw_input_contents(std::string(std::size_t{2} * 12 * sizeof(float), '\0'));
  StatusOr<jina::DataRequestProto> data =
      internal::KServeToDataRequest(request, "/infer", "id", 1 << 20, &signature);
  ASSERT_TRUE(data.ok()) << data.status();
  StatusOr<DocList> docs = internal::TakeDocListFromProto(data->mutable_data()->mutable_docs());
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 2u);
  ASSERT_NE((*docs)[1].tensor("tensor"), nullptr);
  EXPECT_EQ((*docs)[1].tensor("tensor")->ShapeString(), "[3, 2, 2]");

  // The reply: every declared output when the request names none, read from
  // its field.
  for (Doc& doc : *docs) {
    doc.set_embedding(Tensor::FromValues<float>({4}, std::vector<float>{1, 2, 3, 4}));
  }
  jina::DataRequestProto reply;
  internal::DocListToProto(*docs, reply.mutable_data()->mutable_docs());
  StatusOr<inference::ModelInferResponse> response =
      internal::DataReplyToKServe(request, reply, 1 << 20, &signature);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->outputs_size(), 1);
  EXPECT_EQ(response->outputs(0).name(), "logits");
  EXPECT_THAT(response->outputs(0).shape(), ::testing::ElementsAre(2, 4));
  EXPECT_EQ(response->raw_output_contents(0).size(), std::size_t{2} * 4 * sizeof(float));
}

}  // namespace
}  // namespace gantry
