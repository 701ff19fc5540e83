// Declared model inputs and outputs (gantry/tensor_signature.h) and how the
// gateway's KServe v2 service reports and maps them (gateway/kserve.h).
#include <gantry/config.h>
#include <gantry/tensor_signature.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
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

inference::ModelInferRequest ImageRequest(std::int64_t rows) {
  inference::ModelInferRequest request;
  request.set_model_name("cnn");
  auto* input = request.add_inputs();
  input->set_name("image");
  input->set_datatype("FP32");
  for (std::int64_t d : {rows, std::int64_t{3}, std::int64_t{2}, std::int64_t{2}}) {
    input->add_shape(d);
  }
  request.add_raw_input_contents(std::string(static_cast<std::size_t>(rows) * 12 * 4, '\0'));
  return request;
}

std::string RequestError(const inference::ModelInferRequest& request,
                         const TensorSignature* signature) {
  StatusOr<jina::DataRequestProto> data =
      internal::KServeToDataRequest(request, "/infer", "id", 1 << 20, signature);
  EXPECT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kInvalidArgument);
  return std::string(data.status().message());
}

TEST(TensorSignatureTest, KServeRefusesTensorsTheModelDoesNotDeclare) {
  const TensorSignature signature = CnnSignature();
  inference::ModelInferRequest extra = ImageRequest(1);
  auto* z = extra.add_inputs();
  z->set_name("z");
  z->set_datatype("FP32");
  z->add_shape(1);
  z->add_shape(1);
  extra.add_raw_input_contents(std::string(4, '\0'));
  EXPECT_THAT(RequestError(extra, &signature),
              HasSubstr("input 'z': the model has no such input; it takes 'image'"));
  // Without a declaration any tensor name is a document field, as before.
  EXPECT_TRUE(internal::KServeToDataRequest(extra, "/infer", "id", 1 << 20, nullptr).ok());

  inference::ModelInferRequest twice = ImageRequest(1);
  *twice.add_inputs() = twice.inputs(0);
  twice.add_raw_input_contents(twice.raw_input_contents(0));
  EXPECT_THAT(RequestError(twice, &signature),
              HasSubstr("input 'image': the name is given to inputs 0 and 1"));

  // Outputs: only declared ones, each once; an input's name is not one. They
  // are refused before the request is forwarded, and in the reply.
  inference::ModelInferRequest asks_input = ImageRequest(1);
  asks_input.add_outputs()->set_name("image");
  EXPECT_THAT(RequestError(asks_input, &signature),
              HasSubstr("output 'image': the model has no such output; it gives 'logits'"));
  jina::DataRequestProto reply;
  DocList docs;
  docs.emplace_back().set_embedding(Tensor::FromValues<float>({4}, {1, 2, 3, 4}));
  internal::DocListToProto(docs, reply.mutable_data()->mutable_docs());
  for (const std::vector<std::string>& outputs :
       {std::vector<std::string>{"image"}, std::vector<std::string>{"logits", "logits"}}) {
    inference::ModelInferRequest request = ImageRequest(1);
    for (const std::string& name : outputs) {
      request.add_outputs()->set_name(name);
    }
    StatusOr<inference::ModelInferResponse> response =
        internal::DataReplyToKServe(request, reply, 1 << 20, &signature);
    ASSERT_FALSE(response.ok());
    EXPECT_EQ(response.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(response.status().message(),
                HasSubstr(outputs.size() == 1
                              ? "output 'image': the model has no such output; it gives 'logits'"
                              : "output 'logits' is requested twice"));
  }
}

TEST(TensorSignatureTest, KServeAnswersAnEmptyBatchWithTheDeclaredDatatypeAndShape) {
  StatusOr<TensorSignature> signature =
      ParseTensorSignature(WithOf("  inputs: [{name: x, dtype: int64, shape: [-1]}]\n"
                                  "  outputs: [{name: y, dtype: int64, shape: [-1, 4]}]\n"));
  ASSERT_TRUE(signature.ok()) << signature.status();
  inference::ModelInferRequest request;
  request.set_model_name("m");
  jina::DataRequestProto reply;
  reply.mutable_data()->mutable_docs();
  StatusOr<inference::ModelInferResponse> response =
      internal::DataReplyToKServe(request, reply, 1 << 20, &*signature);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->outputs_size(), 1);
  EXPECT_EQ(response->outputs(0).datatype(), "INT64");
  EXPECT_THAT(response->outputs(0).shape(), ::testing::ElementsAre(0, 0, 4));
}

TEST(TensorSignatureTest, KServeRefusesTypedIntegersOutOfTheirDatatypesRange) {
  for (const auto& [datatype, value, ok] :
       std::vector<std::tuple<std::string, std::int64_t, bool>>{{"INT8", 127, true},
                                                                {"INT8", 128, false},
                                                                {"INT8", -129, false},
                                                                {"INT16", -32768, true},
                                                                {"INT16", 40000, false},
                                                                {"UINT8", 255, true},
                                                                {"UINT8", 256, false},
                                                                {"UINT16", 65536, false}}) {
    SCOPED_TRACE(datatype + " " + std::to_string(value));
    inference::ModelInferRequest request;
    request.set_model_name("m");
    auto* input = request.add_inputs();
    input->set_name("x");
    input->set_datatype(datatype);
    input->add_shape(1);
    input->add_shape(1);
    if (datatype[0] == 'U') {
      input->mutable_contents()->add_uint_contents(static_cast<std::uint32_t>(value));
    } else {
      input->mutable_contents()->add_int_contents(static_cast<std::int32_t>(value));
    }
    StatusOr<jina::DataRequestProto> data =
        internal::KServeToDataRequest(request, "/infer", "id", 1 << 20, nullptr);
    EXPECT_EQ(data.ok(), ok) << data.status();
    if (!ok) {
      EXPECT_THAT(data.status().message(), HasSubstr("input 'x': element 0"));
      EXPECT_THAT(data.status().message(), HasSubstr("out of the datatype's range"));
    }
  }
}

}  // namespace
}  // namespace gantry
