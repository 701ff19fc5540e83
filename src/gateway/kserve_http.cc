#include "gateway/kserve_http.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "core/checked_size.h"
#include "core/value_json.h"
#include "gateway/kserve.h"

namespace gantry::internal {
namespace {

using nlohmann::json;

template <typename T>
void Append(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

template <typename T>
T Read(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// Flattens nested JSON lists (row-major) into `out`, at most `max_depth`
// levels deep.
Status Flatten(const json& data, int depth, int max_depth, std::vector<const json*>& out,
               const std::string& where) {
  if (!data.is_array()) {
    out.push_back(&data);
    return OkStatus();
  }
  if (depth >= max_depth) {
    return InvalidArgumentError(where + ": data nests deeper than the shape allows");
  }
  for (const json& item : data) {
    GANTRY_RETURN_IF_ERROR(Flatten(item, depth + 1, max_depth, out, where));
  }
  return OkStatus();
}

template <typename T>
Status AppendInteger(std::string& out, const json& value, const std::string& where,
                     std::size_t index) {
  bool fits = false;
  if (value.is_number_unsigned()) {
    fits = value.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
  } else if (value.is_number_integer()) {
    const auto v = value.get<std::int64_t>();
    fits = std::numeric_limits<T>::is_signed
               ? v >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
                     v <= static_cast<std::int64_t>(std::numeric_limits<T>::max())
               : v >= 0;
  }
  if (!fits) {
    return InvalidArgumentError(where + ": element " + std::to_string(index) + " (" + value.dump() +
                                ") is not an integer of the datatype");
  }
  Append<T>(out, value.is_number_unsigned() ? static_cast<T>(value.get<std::uint64_t>())
                                            : static_cast<T>(value.get<std::int64_t>()));
  return OkStatus();
}

// JSON `data` of `datatype` as the raw little-endian buffer (BYTES: each
// element's 4-byte length, then its bytes).
StatusOr<std::string> DataToRaw(const json& data, const std::string& datatype, std::uint64_t count,
                                std::uint64_t max_bytes, const std::string& where) {
  std::vector<const json*> values;
  GANTRY_RETURN_IF_ERROR(Flatten(data, 0, kMaxKServeRank, values, where));
  if (values.size() != count) {
    return InvalidArgumentError(where + ": " + std::to_string(values.size()) +
                                " data elements, the shape needs " + std::to_string(count));
  }
  std::string raw;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const json& v = *values[i];
    if (datatype == "BYTES") {
      if (!v.is_string()) {
        return InvalidArgumentError(where + ": element " + std::to_string(i) + " is not a string");
      }
      const auto& text = v.get_ref<const std::string&>();
      Append<std::uint32_t>(raw, static_cast<std::uint32_t>(text.size()));
      raw += text;
    } else if (datatype == "BOOL") {
      if (!v.is_boolean()) {
        return InvalidArgumentError(where + ": element " + std::to_string(i) + " is not a bool");
      }
      raw.push_back(v.get<bool>() ? 1 : 0);
    } else if (datatype == "FP32" || datatype == "FP64") {
      if (!v.is_number()) {
        return InvalidArgumentError(where + ": element " + std::to_string(i) + " is not a number");
      }
      if (datatype == "FP32") {
        Append<float>(raw, v.get<float>());
      } else {
        Append<double>(raw, v.get<double>());
      }
    } else {
      Status s = datatype == "INT8"     ? AppendInteger<std::int8_t>(raw, v, where, i)
                 : datatype == "INT16"  ? AppendInteger<std::int16_t>(raw, v, where, i)
                 : datatype == "INT32"  ? AppendInteger<std::int32_t>(raw, v, where, i)
                 : datatype == "INT64"  ? AppendInteger<std::int64_t>(raw, v, where, i)
                 : datatype == "UINT8"  ? AppendInteger<std::uint8_t>(raw, v, where, i)
                 : datatype == "UINT16" ? AppendInteger<std::uint16_t>(raw, v, where, i)
                 : datatype == "UINT32" ? AppendInteger<std::uint32_t>(raw, v, where, i)
                 : datatype == "UINT64"
                     ? AppendInteger<std::uint64_t>(raw, v, where, i)
                     : InvalidArgumentError(where + ": datatype '" + datatype +
                                            "' cannot be sent as JSON data; send it as binary "
                                            "data (BOOL, integers, FP32, FP64 and BYTES can)");
      GANTRY_RETURN_IF_ERROR(s);
    }
    if (raw.size() > max_bytes) {
      return InvalidArgumentError(where + ": data exceeds the " + std::to_string(max_bytes) +
                                  "-byte message cap");
    }
  }
  return raw;
}

Status ParametersFromJson(const json& params, const std::string& where,
                          google::protobuf::Map<std::string, inference::InferParameter>* out) {
  if (params.is_null()) {
    return OkStatus();
  }
  if (!params.is_object()) {
    return InvalidArgumentError(where + ": parameters must be an object");
  }
  for (const auto& [key, value] : params.items()) {
    inference::InferParameter& param = (*out)[key];
    if (value.is_boolean()) {
      param.set_bool_param(value.get<bool>());
    } else if (value.is_number_unsigned()) {
      param.set_uint64_param(value.get<std::uint64_t>());
    } else if (value.is_number_integer()) {
      param.set_int64_param(value.get<std::int64_t>());
    } else if (value.is_number()) {
      param.set_double_param(value.get<double>());
    } else if (value.is_string()) {
      param.set_string_param(value.get<std::string>());
    } else {
      return InvalidArgumentError(where + ": parameter '" + key +
                                  "' must be a bool, number or string");
    }
  }
  return OkStatus();
}

json ParameterToJson(const inference::InferParameter& param) {
  switch (param.parameter_choice_case()) {
    case inference::InferParameter::kBoolParam:
      return param.bool_param();
    case inference::InferParameter::kInt64Param:
      return param.int64_param();
    case inference::InferParameter::kUint64Param:
      return param.uint64_param();
    case inference::InferParameter::kDoubleParam:
      return param.double_param();
    case inference::InferParameter::kStringParam:
      return param.string_param();
    default:
      return nullptr;
  }
}

// The raw little-endian buffer of `datatype` as a flat JSON list.
StatusOr<json> RawToData(std::string_view raw, const std::string& datatype,
                         const std::string& where) {
  json data = json::array();
  auto each = [&](std::size_t size, auto&& read) -> Status {
    if (raw.size() % size != 0) {
      return InternalError(where + ": buffer of " + std::to_string(raw.size()) +
                           " bytes is not a whole number of " + datatype + " elements");
    }
    for (std::size_t at = 0; at < raw.size(); at += size) {
      data.push_back(read(raw.data() + at));
    }
    return OkStatus();
  };
  Status s = datatype == "FP32"     ? each(4, [](const char* p) { return Read<float>(p); })
             : datatype == "FP64"   ? each(8, [](const char* p) { return Read<double>(p); })
             : datatype == "INT64"  ? each(8, [](const char* p) { return Read<std::int64_t>(p); })
             : datatype == "INT32"  ? each(4, [](const char* p) { return Read<std::int32_t>(p); })
             : datatype == "INT16"  ? each(2, [](const char* p) { return Read<std::int16_t>(p); })
             : datatype == "INT8"   ? each(1, [](const char* p) { return Read<std::int8_t>(p); })
             : datatype == "UINT64" ? each(8, [](const char* p) { return Read<std::uint64_t>(p); })
             : datatype == "UINT32" ? each(4, [](const char* p) { return Read<std::uint32_t>(p); })
             : datatype == "UINT16" ? each(2, [](const char* p) { return Read<std::uint16_t>(p); })
             : datatype == "UINT8"  ? each(1, [](const char* p) { return Read<std::uint8_t>(p); })
             : datatype == "BOOL"   ? each(1, [](const char* p) { return *p != 0; })
                                    : InvalidArgumentError(where + ": datatype " + datatype +
                                                           " can only be returned as binary data "
                                                             "(ask with binary_data: true)");
  GANTRY_RETURN_IF_ERROR(s);
  return data;
}

}  // namespace

StatusOr<inference::ModelInferRequest> ParseKServeHttpInfer(std::string_view body,
                                                            std::int64_t json_length,
                                                            const std::string& model,
                                                            const std::string& version,
                                                            std::uint64_t max_bytes) {
  if (json_length > static_cast<std::int64_t>(body.size())) {
    return InvalidArgumentError("Inference-Header-Content-Length " + std::to_string(json_length) +
                                " exceeds the body's " + std::to_string(body.size()) + " bytes");
  }
  const std::string_view header =
      json_length >= 0 ? body.substr(0, static_cast<std::size_t>(json_length)) : body;
  std::string_view binary =
      json_length >= 0 ? body.substr(static_cast<std::size_t>(json_length)) : std::string_view();
  StatusOr<json> parsed = ParseJsonBounded(header);
  if (!parsed.ok()) {
    return InvalidArgumentError("the inference request is not JSON: " +
                                std::string(parsed.status().message()));
  }
  const json& root = *parsed;
  if (!root.is_object()) {
    return InvalidArgumentError("the inference request must be a JSON object");
  }
  inference::ModelInferRequest request;
  request.set_model_name(model);
  request.set_model_version(version);
  if (auto id = root.find("id"); id != root.end() && id->is_string()) {
    request.set_id(id->get<std::string>());
  }
  GANTRY_RETURN_IF_ERROR(ParametersFromJson(root.value("parameters", json()), "request",
                                            request.mutable_parameters()));
  const json inputs = root.value("inputs", json());
  if (!inputs.is_array() || inputs.empty()) {
    return InvalidArgumentError("'inputs' must be a non-empty list");
  }
  if (inputs.size() > static_cast<std::size_t>(kMaxKServeInputs)) {
    return InvalidArgumentError("the request has " + std::to_string(inputs.size()) +
                                " inputs; at most " + std::to_string(kMaxKServeInputs));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const json& in = inputs[i];
    if (!in.is_object() || !in.contains("name") || !in["name"].is_string()) {
      return InvalidArgumentError("inputs[" + std::to_string(i) + "]: 'name' is required");
    }
    auto* tensor = request.add_inputs();
    tensor->set_name(in["name"].get<std::string>());
    const std::string where = "input '" + tensor->name() + "'";
    if (!in.contains("datatype") || !in["datatype"].is_string()) {
      return InvalidArgumentError(where + ": 'datatype' is required");
    }
    tensor->set_datatype(in["datatype"].get<std::string>());
    const json shape = in.value("shape", json());
    if (!shape.is_array() || shape.empty() || shape.size() > kMaxKServeRank) {
      return InvalidArgumentError(where + ": 'shape' must list 1 to " +
                                  std::to_string(kMaxKServeRank) + " dimensions");
    }
    std::uint64_t count = 1;
    for (const json& dim : shape) {
      if (!dim.is_number_integer() || dim.get<std::int64_t>() < 0) {
        return InvalidArgumentError(where + ": shape dimensions must be integers >= 0");
      }
      tensor->add_shape(dim.get<std::int64_t>());
      GANTRY_ASSIGN_OR_RETURN(count,
                              CheckedMul(count, dim.get<std::uint64_t>(), where + ": shape"));
    }
    const json params = in.value("parameters", json());
    GANTRY_RETURN_IF_ERROR(ParametersFromJson(params, where, tensor->mutable_parameters()));
    std::string* raw = request.add_raw_input_contents();
    if (params.is_object() && params.contains("binary_data_size")) {
      const json& size = params["binary_data_size"];
      if (!size.is_number_unsigned() || size.get<std::uint64_t>() > binary.size()) {
        return InvalidArgumentError(where + ": binary_data_size " + size.dump() + " but " +
                                    std::to_string(binary.size()) +
                                    " bytes of binary data are left");
      }
      const auto n = static_cast<std::size_t>(size.get<std::uint64_t>());
      raw->assign(binary.substr(0, n));
      binary.remove_prefix(n);
    } else if (in.contains("data")) {
      GANTRY_ASSIGN_OR_RETURN(*raw,
                              DataToRaw(in["data"], tensor->datatype(), count, max_bytes, where));
    } else {
      return InvalidArgumentError(where + ": needs 'data' or a binary_data_size parameter");
    }
  }
  if (!binary.empty()) {
    return InvalidArgumentError(std::to_string(binary.size()) +
                                " bytes of binary data follow the inputs that were declared");
  }
  const json outputs = root.value("outputs", json::array());
  if (!outputs.is_array() || outputs.size() > static_cast<std::size_t>(kMaxKServeInputs)) {
    return InvalidArgumentError("'outputs' must be a list of at most " +
                                std::to_string(kMaxKServeInputs));
  }
  for (const json& out : outputs) {
    if (!out.is_object() || !out.contains("name") || !out["name"].is_string()) {
      return InvalidArgumentError("every requested output needs a 'name'");
    }
    auto* requested = request.add_outputs();
    requested->set_name(out["name"].get<std::string>());
    GANTRY_RETURN_IF_ERROR(ParametersFromJson(out.value("parameters", json()),
                                              "output '" + requested->name() + "'",
                                              requested->mutable_parameters()));
  }
  return request;
}

StatusOr<KServeHttpReply> RenderKServeHttpInfer(const inference::ModelInferRequest& request,
                                                const inference::ModelInferResponse& response) {
  bool binary_default = false;
  if (auto it = request.parameters().find("binary_data_output"); it != request.parameters().end()) {
    binary_default = it->second.bool_param();
  }
  json out{{"model_name", response.model_name()},
           {"model_version", response.model_version()},
           {"outputs", json::array()}};
  if (!response.id().empty()) {
    out["id"] = response.id();
  }
  std::string blobs;
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& tensor = response.outputs(i);
    const std::string& raw = response.raw_output_contents(i);
    bool binary = binary_default;
    for (const auto& requested : request.outputs()) {
      if (requested.name() == tensor.name()) {
        if (auto it = requested.parameters().find("binary_data");
            it != requested.parameters().end()) {
          binary = it->second.bool_param();
        }
      }
    }
    json item{{"name", tensor.name()},
              {"datatype", tensor.datatype()},
              {"shape", std::vector<std::int64_t>(tensor.shape().begin(), tensor.shape().end())}};
    if (binary) {
      item["parameters"] = {{"binary_data_size", raw.size()}};
      blobs += raw;
    } else {
      GANTRY_ASSIGN_OR_RETURN(item["data"],
                              RawToData(raw, tensor.datatype(), "output '" + tensor.name() + "'"));
    }
    for (const auto& [key, param] : tensor.parameters()) {
      item["parameters"][key] = ParameterToJson(param);
    }
    out["outputs"].push_back(std::move(item));
  }
  KServeHttpReply reply;
  reply.body = out.dump(-1, ' ', false, json::error_handler_t::replace);
  if (!blobs.empty()) {
    reply.json_length = static_cast<std::int64_t>(reply.body.size());
    reply.body += blobs;
  }
  return reply;
}

json KServeMetadataJson(const inference::ModelMetadataResponse& metadata) {
  auto tensors = [](const auto& list) {
    json out = json::array();
    for (const auto& t : list) {
      out.push_back({{"name", t.name()},
                     {"datatype", t.datatype()},
                     {"shape", std::vector<std::int64_t>(t.shape().begin(), t.shape().end())}});
    }
    return out;
  };
  return json{{"name", metadata.name()},
              {"versions",
               std::vector<std::string>(metadata.versions().begin(), metadata.versions().end())},
              {"platform", metadata.platform()},
              {"inputs", tensors(metadata.inputs())},
              {"outputs", tensors(metadata.outputs())}};
}

json KServeConfigJson(const inference::ModelConfig& config) {
  auto tensors = [](const auto& list) {
    json out = json::array();
    for (const auto& t : list) {
      out.push_back({{"name", t.name()},
                     {"data_type", inference::DataType_Name(t.data_type())},
                     {"dims", std::vector<std::int64_t>(t.dims().begin(), t.dims().end())}});
    }
    return out;
  };
  return json{{"name", config.name()},
              {"platform", config.platform()},
              {"backend", config.backend()},
              {"max_batch_size", config.max_batch_size()},
              {"input", tensors(config.input())},
              {"output", tensors(config.output())}};
}

}  // namespace gantry::internal
