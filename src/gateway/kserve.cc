#include "gateway/kserve.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/checked_size.h"
#include "core/doc_proto.h"
#include "docarray/docarray.pb.h"
#include "gateway/reply_docs.h"

namespace gantry::internal {
namespace {

struct DatatypeInfo {
  std::string_view kserve;
  std::string_view numpy;
};

constexpr DatatypeInfo kDatatypes[] = {{"BOOL", "|b1"},   {"UINT8", "|u1"},  {"UINT16", "<u2"},
                                       {"UINT32", "<u4"}, {"UINT64", "<u8"}, {"INT8", "|i1"},
                                       {"INT16", "<i2"},  {"INT32", "<i4"},  {"INT64", "<i8"},
                                       {"FP16", "<f2"},   {"FP32", "<f4"},   {"FP64", "<f8"}};

std::string NumpyOf(std::string_view kserve) {
  for (const DatatypeInfo& info : kDatatypes) {
    if (info.kserve == kserve) {
      return std::string(info.numpy);
    }
  }
  return "";
}

bool IsValidUtf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::size_t extra = 0;
    std::uint32_t min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      extra = 1;
      min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      min = 0x10000;
    } else {
      return false;
    }
    if (extra > text.size() - i - 1) {
      return false;
    }
    std::uint32_t code = c & (0x3F >> extra);
    for (std::size_t k = 1; k <= extra; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) {
        return false;
      }
      code = (code << 6) | (next & 0x3F);
    }
    if (code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

// Splits a BYTES buffer (each element a 4-byte little-endian length, then
// the bytes) into exactly `count` elements.
StatusOr<std::vector<std::string>> SplitBytesElements(std::string_view raw, std::uint64_t count,
                                                      const std::string& where) {
  std::vector<std::string> elements;
  elements.reserve(static_cast<std::size_t>(count));
  std::size_t at = 0;
  while (at < raw.size()) {
    if (raw.size() - at < 4) {
      return InvalidArgumentError(where + ": BYTES element " + std::to_string(elements.size()) +
                                  " is cut off in its 4-byte length");
    }
    const auto* p = reinterpret_cast<const unsigned char*>(raw.data() + at);
    const std::uint32_t length =
        static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
        (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
    at += 4;
    if (length > raw.size() - at) {
      return InvalidArgumentError(where + ": BYTES element " + std::to_string(elements.size()) +
                                  " says " + std::to_string(length) + " bytes, " +
                                  std::to_string(raw.size() - at) + " are left");
    }
    if (elements.size() == count) {
      return InvalidArgumentError(where + ": more BYTES elements than the shape's " +
                                  std::to_string(count));
    }
    elements.emplace_back(raw.substr(at, length));
    at += length;
  }
  if (elements.size() != count) {
    return InvalidArgumentError(where + ": " + std::to_string(elements.size()) +
                                " BYTES elements, the shape needs " + std::to_string(count));
  }
  return elements;
}

// INT8/16 travel in int_contents (int32) and UINT8/16 in uint_contents: a
// value out of the datatype's range is refused, not wrapped.
template <typename To, typename From>
StatusOr<std::string> PackAs(const google::protobuf::RepeatedField<From>& values,
                             const std::string& where) {
  std::string bytes(static_cast<std::size_t>(values.size()) * sizeof(To), '\0');
  for (int i = 0; i < values.size(); ++i) {
    const From given = values.Get(i);
    if constexpr (std::is_integral_v<To> && !std::is_same_v<From, bool>) {
      if (!std::in_range<To>(given)) {
        return InvalidArgumentError(where + ": element " + std::to_string(i) + " (" +
                                    std::to_string(given) + ") is out of the datatype's range " +
                                    std::to_string(std::numeric_limits<To>::min()) + " to " +
                                    std::to_string(std::numeric_limits<To>::max()));
      }
    }
    const To value = static_cast<To>(given);
    std::memcpy(bytes.data() + static_cast<std::size_t>(i) * sizeof(To), &value, sizeof(To));
  }
  return bytes;
}

// Typed `contents` as the raw little-endian buffer of `datatype`.
StatusOr<std::string> TypedToRaw(const std::string& datatype,
                                 const inference::InferTensorContents& contents,
                                 const std::string& where) {
  if (datatype == "FP32") {
    return PackAs<float>(contents.fp32_contents(), where);
  }
  if (datatype == "FP64") {
    return PackAs<double>(contents.fp64_contents(), where);
  }
  if (datatype == "INT64") {
    return PackAs<std::int64_t>(contents.int64_contents(), where);
  }
  if (datatype == "INT32") {
    return PackAs<std::int32_t>(contents.int_contents(), where);
  }
  if (datatype == "INT16") {
    return PackAs<std::int16_t>(contents.int_contents(), where);
  }
  if (datatype == "INT8") {
    return PackAs<std::int8_t>(contents.int_contents(), where);
  }
  if (datatype == "UINT64") {
    return PackAs<std::uint64_t>(contents.uint64_contents(), where);
  }
  if (datatype == "UINT32") {
    return PackAs<std::uint32_t>(contents.uint_contents(), where);
  }
  if (datatype == "UINT16") {
    return PackAs<std::uint16_t>(contents.uint_contents(), where);
  }
  if (datatype == "UINT8") {
    return PackAs<std::uint8_t>(contents.uint_contents(), where);
  }
  if (datatype == "BOOL") {
    return PackAs<std::uint8_t>(contents.bool_contents(), where);
  }
  return InvalidArgumentError(where + ": datatype " + datatype +
                              " cannot be sent as typed contents; send raw_input_contents");
}

Status SetParameters(const google::protobuf::Map<std::string, inference::InferParameter>& params,
                     google::protobuf::Struct* out) {
  for (const auto& [key, param] : params) {
    google::protobuf::Value& value = (*out->mutable_fields())[key];
    switch (param.parameter_choice_case()) {
      case inference::InferParameter::kBoolParam:
        value.set_bool_value(param.bool_param());
        break;
      case inference::InferParameter::kInt64Param:
        value.set_number_value(static_cast<double>(param.int64_param()));
        break;
      case inference::InferParameter::kUint64Param:
        value.set_number_value(static_cast<double>(param.uint64_param()));
        break;
      case inference::InferParameter::kDoubleParam:
        value.set_number_value(param.double_param());
        break;
      case inference::InferParameter::kStringParam:
        if (!IsValidUtf8(param.string_param())) {
          return InvalidArgumentError("parameter '" + key + "': not valid UTF-8");
        }
        value.set_string_value(param.string_param());
        break;
      default:
        value.set_null_value(google::protobuf::NULL_VALUE);
    }
  }
  return OkStatus();
}

// What a declared tensor travels as: documents carry bfloat16 as float32.
std::string KServeDatatypeOfSpec(const TensorSpec& spec) {
  const std::string_view numpy = NumpyDTypeOfSignature(spec.dtype);
  for (const DatatypeInfo& info : kDatatypes) {
    if (info.numpy == numpy) {
      return std::string(info.kserve);
    }
  }
  return "FP32";
}

// "'a', 'b'": the declared tensors' names, for errors.
std::string SpecNames(const std::vector<TensorSpec>& specs) {
  std::string names;
  for (const TensorSpec& spec : specs) {
    names += (names.empty() ? "'" : ", '") + spec.name + "'";
  }
  return names;
}

// The declared tensor named `name`, or nullptr.
const TensorSpec* FindSpec(const std::vector<TensorSpec>& specs, const std::string& name) {
  for (const TensorSpec& spec : specs) {
    if (spec.name == name) {
      return &spec;
    }
  }
  return nullptr;
}

// Each requested output once, and (with a declaration) only declared ones.
Status CheckRequestedOutputs(const inference::ModelInferRequest& request,
                             const TensorSignature* signature) {
  if (request.outputs_size() > kMaxKServeInputs) {
    return InvalidArgumentError("the request names " + std::to_string(request.outputs_size()) +
                                " outputs; at most " + std::to_string(kMaxKServeInputs));
  }
  for (int i = 0; i < request.outputs_size(); ++i) {
    const std::string& name = request.outputs(i).name();
    for (int j = 0; j < i; ++j) {
      if (request.outputs(j).name() == name) {
        return InvalidArgumentError("output '" + name + "' is requested twice");
      }
    }
    if (signature != nullptr && !signature->outputs.empty() &&
        FindSpec(signature->outputs, name) == nullptr) {
      return InvalidArgumentError("output '" + name + "': the model has no such output; it gives " +
                                  SpecNames(signature->outputs));
    }
  }
  return OkStatus();
}

}  // namespace

inference::ModelMetadataResponse KServeModelMetadata(const std::string& name,
                                                     const TensorSignature* signature) {
  inference::ModelMetadataResponse metadata;
  metadata.set_name(name);
  metadata.add_versions(kKServeModelVersion);
  metadata.set_platform("gantry");
  if (signature != nullptr) {
    auto add = [](const TensorSpec& spec, auto* tensor) {
      tensor->set_name(spec.name);
      tensor->set_datatype(KServeDatatypeOfSpec(spec));
      tensor->add_shape(-1);
      for (std::int64_t dim : spec.shape) {
        tensor->add_shape(dim);
      }
    };
    for (const TensorSpec& spec : signature->inputs) {
      add(spec, metadata.add_inputs());
    }
    for (const TensorSpec& spec : signature->outputs) {
      add(spec, metadata.add_outputs());
    }
    return metadata;
  }
  auto* input = metadata.add_inputs();
  input->set_name("text");
  input->set_datatype("BYTES");
  input->add_shape(-1);
  input->add_shape(1);
  auto* output = metadata.add_outputs();
  output->set_name("embedding");
  output->set_datatype("FP32");
  output->add_shape(-1);
  output->add_shape(-1);
  return metadata;
}

inference::ModelConfig KServeModelConfig(const std::string& name,
                                         const TensorSignature* signature) {
  inference::ModelConfig config;
  config.set_name(name);
  config.set_platform("gantry");
  config.set_backend("gantry");
  config.set_max_batch_size(kKServeMaxBatchSize);
  if (signature != nullptr) {
    auto add = [](const TensorSpec& spec, auto* tensor) {
      tensor->set_name(spec.name);
      inference::DataType type = inference::TYPE_INVALID;
      inference::DataType_Parse("TYPE_" + KServeDatatypeOfSpec(spec), &type);
      tensor->set_data_type(type);
      for (std::int64_t dim : spec.shape) {
        tensor->add_dims(dim);
      }
    };
    for (const TensorSpec& spec : signature->inputs) {
      add(spec, config.add_input());
    }
    for (const TensorSpec& spec : signature->outputs) {
      add(spec, config.add_output());
    }
    return config;
  }
  auto* input = config.add_input();
  input->set_name("text");
  input->set_data_type(inference::TYPE_STRING);
  input->add_dims(1);
  auto* output = config.add_output();
  output->set_name("embedding");
  output->set_data_type(inference::TYPE_FP32);
  output->add_dims(-1);
  return config;
}

std::string KServeDatatypeOf(const std::string& numpy_dtype) {
  for (const DatatypeInfo& info : kDatatypes) {
    if (info.numpy == numpy_dtype) {
      return std::string(info.kserve);
    }
  }
  return "";
}

StatusOr<jina::DataRequestProto> KServeToDataRequest(const inference::ModelInferRequest& request,
                                                     const std::string& endpoint,
                                                     const std::string& request_id,
                                                     std::uint64_t max_bytes,
                                                     const TensorSignature* signature) {
  const int num_inputs = request.inputs_size();
  if (num_inputs == 0) {
    return InvalidArgumentError("the request has no inputs");
  }
  if (num_inputs > kMaxKServeInputs) {
    return InvalidArgumentError("the request has " + std::to_string(num_inputs) +
                                " inputs; at most " + std::to_string(kMaxKServeInputs));
  }
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != num_inputs) {
    return InvalidArgumentError(
        "raw_input_contents has " + std::to_string(request.raw_input_contents_size()) +
        " buffers for " + std::to_string(num_inputs) + " inputs; send one per input");
  }
  std::int64_t batch = -1;
  DocList docs;
  bool has_text = false;
  for (int i = 0; i < num_inputs; ++i) {
    const auto& input = request.inputs(i);
    const std::string where = "input '" + input.name() + "'";
    const std::span<const std::int64_t> shape(input.shape().data(),
                                              static_cast<std::size_t>(input.shape_size()));
    if (input.name().empty() || !IsValidUtf8(input.name()) || input.name().size() > 256) {
      return InvalidArgumentError("input " + std::to_string(i) +
                                  ": a name of 1 to 256 UTF-8 bytes is required");
    }
    for (int j = 0; j < i; ++j) {
      if (request.inputs(j).name() == input.name()) {
        return InvalidArgumentError(where + ": the name is given to inputs " + std::to_string(j) +
                                    " and " + std::to_string(i));
      }
    }
    if (input.shape_size() < 1 || input.shape_size() > kMaxKServeRank) {
      return InvalidArgumentError(where + ": shape " + ShapeToString(shape) + " needs 1 to " +
                                  std::to_string(kMaxKServeRank) +
                                  " dimensions, the first being the batch");
    }
    for (std::int64_t dim : input.shape()) {
      if (dim < 0) {
        return InvalidArgumentError(where + ": shape " + ShapeToString(shape) +
                                    " has a negative dimension");
      }
    }
    const std::int64_t rows = input.shape(0);
    if (rows > kMaxKServeBatch) {
      return InvalidArgumentError(where + ": batch of " + std::to_string(rows) + "; at most " +
                                  std::to_string(kMaxKServeBatch));
    }
    if (batch >= 0 && rows != batch) {
      return InvalidArgumentError(where + ": batch (first dimension) " + std::to_string(rows) +
                                  " differs from the other inputs' " + std::to_string(batch));
    }
    if (batch < 0) {
      batch = rows;
      docs.reserve(static_cast<std::size_t>(rows));
      for (std::int64_t r = 0; r < rows; ++r) {
        docs.emplace_back();
      }
    }
    std::string typed;
    std::string_view data;
    if (raw) {
      data = request.raw_input_contents(i);
    } else if (input.datatype() != "BYTES") {
      GANTRY_ASSIGN_OR_RETURN(typed, TypedToRaw(input.datatype(), input.contents(), where));
      data = typed;
    }
    const std::span<const std::int64_t> row_shape = shape.subspan(1);
    if (input.datatype() == "BYTES") {
      if (has_text) {
        return InvalidArgumentError(where + ": only one BYTES input (the texts) is supported");
      }
      has_text = true;
      if (input.shape_size() > 2 || (input.shape_size() == 2 && input.shape(1) != 1)) {
        return InvalidArgumentError(where + ": a BYTES input holds one text per document: shape [" +
                                    "N] or [N, 1], got " + ShapeToString(shape));
      }
      std::vector<std::string> texts;
      if (raw) {
        GANTRY_ASSIGN_OR_RETURN(texts,
                                SplitBytesElements(data, static_cast<std::uint64_t>(rows), where));
      } else {
        if (input.contents().bytes_contents_size() != rows) {
          return InvalidArgumentError(where + ": " +
                                      std::to_string(input.contents().bytes_contents_size()) +
                                      " bytes_contents, the shape needs " + std::to_string(rows));
        }
        texts.assign(input.contents().bytes_contents().begin(),
                     input.contents().bytes_contents().end());
      }
      for (std::size_t r = 0; r < texts.size(); ++r) {
        if (!IsValidUtf8(texts[r])) {
          return InvalidArgumentError(where + ": element " + std::to_string(r) +
                                      " is not valid UTF-8 text");
        }
        docs[r].set_text(std::move(texts[r]));
      }
      continue;
    }
    const std::string dtype = NumpyOf(input.datatype());
    if (dtype.empty()) {
      return InvalidArgumentError(where + ": datatype '" + input.datatype() +
                                  "' is not supported (BOOL, UINT8..UINT64, INT8..INT64, FP16, "
                                  "FP32, FP64, BYTES)");
    }
    GANTRY_RETURN_IF_ERROR(CheckTensorBuffer(shape, dtype, data.size(), max_bytes)
                               .WithPrefix(where + ": " + input.datatype()));
    if (input.name() == "text" || input.name() == "id") {
      return InvalidArgumentError(where +
                                  ": the name is a document field; name a tensor input "
                                  "otherwise");
    }
    const TensorSpec* spec =
        signature != nullptr ? FindSpec(signature->inputs, input.name()) : nullptr;
    if (spec == nullptr && signature != nullptr && !signature->inputs.empty()) {
      return InvalidArgumentError(where + ": the model has no such input; it takes " +
                                  SpecNames(signature->inputs));
    }
    const std::string& field = spec != nullptr ? spec->field : input.name();
    const std::size_t row_bytes = rows == 0 ? 0 : data.size() / static_cast<std::size_t>(rows);
    for (std::int64_t r = 0; r < rows; ++r) {
      StatusOr<Tensor> tensor = Tensor::FromBytes(
          dtype, std::vector<std::int64_t>(row_shape.begin(), row_shape.end()),
          std::string(data.substr(static_cast<std::size_t>(r) * row_bytes, row_bytes)));
      if (!tensor.ok()) {
        return tensor.status().WithPrefix(where);
      }
      docs[static_cast<std::size_t>(r)].set_tensor(field, std::move(tensor).value());
    }
  }
  // Outputs are checked before the model runs, not after.
  GANTRY_RETURN_IF_ERROR(CheckRequestedOutputs(request, signature));
  jina::DataRequestProto proto;
  proto.mutable_header()->set_request_id(request_id);
  proto.mutable_header()->set_exec_endpoint(endpoint);
  GANTRY_RETURN_IF_ERROR(SetParameters(request.parameters(), proto.mutable_parameters()));
  DocListToProto(docs, proto.mutable_data()->mutable_docs());
  return proto;
}

StatusOr<inference::ModelInferResponse> DataReplyToKServe(
    const inference::ModelInferRequest& request, jina::DataRequestProto reply,
    std::uint64_t max_bytes, const TensorSignature* signature) {
  const DecodeLimits limits{.max_tensor_bytes = max_bytes};
  StatusOr<DocList> docs = ReplyDocs(&reply, limits);
  if (!docs.ok()) {
    return InternalError("the executor's reply does not decode: " +
                         std::string(docs.status().message()));
  }
  GANTRY_RETURN_IF_ERROR(CheckRequestedOutputs(request, signature));
  std::vector<std::string> names;
  for (const auto& output : request.outputs()) {
    names.push_back(output.name());
  }
  if (names.empty() && signature != nullptr) {
    for (const TensorSpec& spec : signature->outputs) {
      names.push_back(spec.name);
    }
  }
  if (names.empty()) {
    names.emplace_back("embedding");
  }
  inference::ModelInferResponse response;
  response.set_model_name(request.model_name());
  response.set_model_version(request.model_version());
  response.set_id(request.id());
  for (const std::string& name : names) {
    auto* output = response.add_outputs();
    output->set_name(name);
    std::string* buffer = response.add_raw_output_contents();
    const TensorSpec* spec = signature != nullptr ? FindSpec(signature->outputs, name) : nullptr;
    const std::string& field = spec != nullptr ? spec->field : name;
    const Tensor* first = nullptr;
    for (std::size_t i = 0; i < docs->size(); ++i) {
      const Tensor* tensor = (*docs)[i].tensor(field);
      const std::string where = "output '" + name + "', document " + std::to_string(i);
      if (tensor == nullptr) {
        return InvalidArgumentError(where + ": the executor set no tensor '" + field + "'");
      }
      if (first == nullptr) {
        first = tensor;
        if (KServeDatatypeOf(tensor->dtype()).empty()) {
          return InvalidArgumentError(where + ": dtype " + tensor->dtype() +
                                      " has no KServe datatype");
        }
        GANTRY_ASSIGN_OR_RETURN(
            std::uint64_t total,
            CheckedMul(tensor->bytes().size(), docs->size(), "output '" + name + "'"));
        GANTRY_RETURN_IF_ERROR(CheckedCap(total, max_bytes, "output '" + name + "'").status());
        buffer->reserve(static_cast<std::size_t>(total));
      } else if (tensor->dtype() != first->dtype() || tensor->shape() != first->shape()) {
        return InvalidArgumentError(where + ": " + DTypeName(tensor->dtype()) + " " +
                                    tensor->ShapeString() + " differs from document 0's " +
                                    DTypeName(first->dtype()) + " " + first->ShapeString() +
                                    "; outputs are stacked into one tensor");
      }
      buffer->append(tensor->bytes());
    }
    output->add_shape(static_cast<std::int64_t>(docs->size()));
    if (first != nullptr) {
      output->set_datatype(KServeDatatypeOf(first->dtype()));
      for (std::int64_t dim : first->shape()) {
        output->add_shape(dim);
      }
    } else if (spec != nullptr) {
      // No documents: the declared output, its dynamic sizes empty.
      output->set_datatype(KServeDatatypeOfSpec(*spec));
      for (std::int64_t dim : spec->shape) {
        output->add_shape(std::max<std::int64_t>(dim, 0));
      }
    } else {
      output->set_datatype("FP32");
    }
  }
  return response;
}

}  // namespace gantry::internal
