#include "gateway/json_docs.h"

#include <gantry/document.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/checked_size.h"
#include "core/value_json.h"

namespace gantry::internal {
namespace {

using nlohmann::json;

// ---- numbers in tensors ----------------------------------------------------

float HalfToFloat(std::uint16_t h) {
  std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1f;
  std::uint32_t mantissa = h & 0x3ff;
  std::uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      bits = sign | (exponent << 23) | ((mantissa & 0x3ff) << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

template <typename T>
json ReadAs(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<double>(value);
  } else {
    return value;
  }
}

// One element of a numpy dtype string ("<f4", "|u1", "bool", ...) as JSON;
// itemsize 0 when the dtype is not one we read.
struct ElementReader {
  std::size_t itemsize = 0;
  json (*read)(const char*) = nullptr;
};

ElementReader ReaderFor(const std::string& dtype) {
  std::string d = dtype;
  if (!d.empty() && (d[0] == '<' || d[0] == '|' || d[0] == '=')) {
    d = d.substr(1);
  }
  if (d == "f4" || d == "float32") return {4, &ReadAs<float>};
  if (d == "f8" || d == "float64") return {8, &ReadAs<double>};
  if (d == "f2" || d == "float16") {
    return {2, [](const char* p) -> json {
              std::uint16_t h;
              std::memcpy(&h, p, 2);
              return static_cast<double>(HalfToFloat(h));
            }};
  }
  if (d == "i1" || d == "int8") return {1, &ReadAs<std::int8_t>};
  if (d == "i2" || d == "int16") return {2, &ReadAs<std::int16_t>};
  if (d == "i4" || d == "int32") return {4, &ReadAs<std::int32_t>};
  if (d == "i8" || d == "int64") return {8, &ReadAs<std::int64_t>};
  if (d == "u1" || d == "uint8") return {1, &ReadAs<std::uint8_t>};
  if (d == "u2" || d == "uint16") return {2, &ReadAs<std::uint16_t>};
  if (d == "u4" || d == "uint32") return {4, &ReadAs<std::uint32_t>};
  if (d == "u8" || d == "uint64") return {8, &ReadAs<std::uint64_t>};
  if (d == "b1" || d == "bool") {
    return {1, [](const char* p) -> json { return *p != 0; }};
  }
  return {};
}

json NestedList(const ElementReader& reader, const std::string& buffer,
                const google::protobuf::RepeatedField<std::uint32_t>& shape, int axis,
                std::size_t* offset) {
  if (axis == shape.size()) {
    json value = reader.read(buffer.data() + *offset);
    *offset += reader.itemsize;
    return value;
  }
  json out = json::array();
  for (std::uint32_t i = 0; i < shape[axis]; ++i) {
    out.push_back(NestedList(reader, buffer, shape, axis + 1, offset));
  }
  return out;
}

json NdArrayToJson(const docarray::NdArrayProto& array) {
  const auto& dense = array.dense();
  ElementReader reader = ReaderFor(dense.dtype());
  std::vector<std::int64_t> shape(dense.shape().begin(), dense.shape().end());
  // Overflow-checked: a wrapped-around size would let NestedList read past
  // the buffer.
  auto needed = TensorByteSize(shape, reader.itemsize, dense.dtype(),
                               std::numeric_limits<std::uint64_t>::max());
  if (reader.itemsize == 0 || !needed.ok() || dense.buffer().size() != *needed) {
    // Not representable as numbers: say what it is rather than guess.
    return json{
        {"dtype", dense.dtype()},
        {"shape", json(std::vector<std::uint32_t>(dense.shape().begin(), dense.shape().end()))},
        {"error", "cannot convert this tensor to JSON"}};
  }
  std::size_t offset = 0;
  return NestedList(reader, dense.buffer(), dense.shape(), 0, &offset);
}

// ---- numbers into tensors ---------------------------------------------------

bool IsNumericArray(const json& value) {
  if (!value.is_array() || value.empty()) {
    return false;
  }
  for (const json& item : value) {
    if (item.is_array() ? !IsNumericArray(item) : !item.is_number()) {
      return false;
    }
  }
  return true;
}

// Shape from the first element at each depth; Flatten checks the rest.
std::vector<std::uint32_t> ShapeOf(const json& value) {
  std::vector<std::uint32_t> shape;
  const json* level = &value;
  while (level->is_array()) {
    shape.push_back(static_cast<std::uint32_t>(level->size()));
    if (level->empty()) {
      break;
    }
    level = &(*level)[0];
  }
  return shape;
}

// Appends one JSON number as a `T`; false when it does not fit. Integer
// dtypes take whole numbers within range only: casting an out-of-range
// double to an integer is undefined behaviour (found by the json_docs
// fuzzer: 950 as uint8). Float dtypes take finite numbers within range.
template <typename T>
bool Append(const json& value, std::string* buffer) {
  T x{};
  if constexpr (std::is_integral_v<T>) {
    if (value.is_number_unsigned()) {
      const auto u = value.get<std::uint64_t>();
      if (!std::in_range<T>(u)) {
        return false;
      }
      x = static_cast<T>(u);
    } else if (value.is_number_integer()) {
      const auto i = value.get<std::int64_t>();
      if (!std::in_range<T>(i)) {
        return false;
      }
      x = static_cast<T>(i);
    } else {
      // min() and max() + 1 are powers of two, exact as doubles.
      const double d = value.get<double>();
      if (d != std::trunc(d) || d < static_cast<double>(std::numeric_limits<T>::min()) ||
          d >= std::ldexp(1.0, std::numeric_limits<T>::digits)) {
        return false;
      }
      x = static_cast<T>(d);
    }
  } else {
    const double d = value.get<double>();
    if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(std::numeric_limits<T>::max())) {
      return false;
    }
    x = static_cast<T>(d);
  }
  buffer->append(reinterpret_cast<const char*>(&x), sizeof(T));
  return true;
}

using Appender = bool (*)(const json&, std::string*);

Status Flatten(const json& value, const std::vector<std::uint32_t>& shape, std::size_t axis,
               Appender append, std::string_view dtype, const std::string& subject,
               std::string* buffer) {
  if (axis == shape.size()) {
    if (!value.is_number()) {
      return InvalidArgumentError(subject + ": tensor is not rectangular");
    }
    if (!append(value, buffer)) {
      return InvalidArgumentError(subject + ": value " + value.dump() + " does not fit " +
                                  std::string(dtype));
    }
    return OkStatus();
  }
  if (!value.is_array() || value.size() != shape[axis]) {
    return InvalidArgumentError(subject + ": tensor is not rectangular (axis " +
                                std::to_string(axis) + " should have " +
                                std::to_string(shape[axis]) + " elements)");
  }
  for (const json& item : value) {
    GANTRY_RETURN_IF_ERROR(Flatten(item, shape, axis + 1, append, dtype, subject, buffer));
  }
  return OkStatus();
}

// `explicit_shape` (null when absent) reshapes the values, which must then
// hold exactly that many elements.
Status ToTensor(const json& values, const std::string& dtype, const json& explicit_shape,
                const std::string& subject, std::uint64_t max_bytes, docarray::NodeProto* out) {
  struct Kind {
    const char* name;
    const char* numpy;
    Appender append;
  };
  static const Kind kKinds[] = {
      {"float32", "<f4", &Append<float>},        {"float64", "<f8", &Append<double>},
      {"int8", "|i1", &Append<std::int8_t>},     {"int16", "<i2", &Append<std::int16_t>},
      {"int32", "<i4", &Append<std::int32_t>},   {"int64", "<i8", &Append<std::int64_t>},
      {"uint8", "|u1", &Append<std::uint8_t>},   {"uint16", "<u2", &Append<std::uint16_t>},
      {"uint32", "<u4", &Append<std::uint32_t>}, {"uint64", "<u8", &Append<std::uint64_t>},
  };
  const Kind* kind = nullptr;
  for (const Kind& k : kKinds) {
    if (dtype == k.name || dtype == k.numpy ||
        (dtype.size() > 1 && dtype.substr(1) == std::string(k.numpy).substr(1))) {
      kind = &k;
    }
  }
  if (kind == nullptr) {
    return InvalidArgumentError(subject + ": unsupported tensor dtype '" + dtype +
                                "' (use float32, float64, int8..int64 or uint8..uint64)");
  }
  std::vector<std::uint32_t> data_shape = ShapeOf(values);
  std::vector<std::int64_t> shape(data_shape.begin(), data_shape.end());
  if (!explicit_shape.is_null()) {
    if (!explicit_shape.is_array()) {
      return InvalidArgumentError(subject + ": shape must be a list of integers");
    }
    shape.clear();
    for (const json& dim : explicit_shape) {
      if (!dim.is_number_integer() ||
          (dim.is_number_unsigned() &&
           dim.get<std::uint64_t>() >
               static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))) {
        return InvalidArgumentError(subject + ": shape must be a list of integers, got " +
                                    explicit_shape.dump());
      }
      shape.push_back(dim.get<std::int64_t>());
    }
  }
  // Negative, overflowing or over-cap shapes are refused before the data is
  // flattened, and the data's own size is bounded before it is allocated.
  if (auto needed = TensorByteSize(shape, DTypeItemSize(kind->numpy), kind->numpy, max_bytes);
      !needed.ok()) {
    return needed.status().WithPrefix(subject);
  }
  std::vector<std::int64_t> data_dims(data_shape.begin(), data_shape.end());
  if (auto has = TensorByteSize(data_dims, DTypeItemSize(kind->numpy), kind->numpy, max_bytes);
      !has.ok()) {
    return has.status().WithPrefix(subject + ": data");
  }
  for (std::size_t axis = 0; axis < shape.size(); ++axis) {
    if (shape[axis] > std::numeric_limits<std::uint32_t>::max()) {
      return InvalidArgumentError(subject + ": shape " + ShapeToString(shape) + " axis " +
                                  std::to_string(axis) + " does not fit docarray's uint32");
    }
  }
  auto* dense = out->mutable_ndarray()->mutable_dense();
  GANTRY_RETURN_IF_ERROR(
      Flatten(values, data_shape, 0, kind->append, kind->name, subject, dense->mutable_buffer()));
  if (Status s = CheckTensorBuffer(shape, kind->numpy, dense->buffer().size(), max_bytes);
      !s.ok()) {
    return s.WithPrefix(subject);
  }
  for (std::int64_t d : shape) {
    dense->add_shape(static_cast<std::uint32_t>(d));
  }
  dense->set_dtype(kind->numpy);
  out->set_type("ndarray");
  return OkStatus();
}

// ---- plain values -----------------------------------------------------------

Status JsonToNode(const json& value, const std::string& subject, int depth,
                  docarray::NodeProto* out);

Status JsonToDict(const json& object, const std::string& subject, int depth,
                  docarray::DictOfAnyProto* out) {
  for (const auto& [key, item] : object.items()) {
    GANTRY_RETURN_IF_ERROR(
        JsonToNode(item, subject + "." + key, depth, &(*out->mutable_data())[key]));
  }
  return OkStatus();
}

// `depth` counts the containers around `value`; the parser bounds it
// already, this keeps the conversion safe on its own.
Status JsonToNode(const json& value, const std::string& subject, int depth,
                  docarray::NodeProto* out) {
  if (value.is_structured()) {
    GANTRY_RETURN_IF_ERROR(CheckDepth(depth + 1, subject));
  }
  switch (value.type()) {
    case json::value_t::null:
      return OkStatus();  // docarray's None: a node with no content
    case json::value_t::string:
      out->set_text(value.get<std::string>());
      return OkStatus();
    case json::value_t::boolean:
      out->set_boolean(value.get<bool>());
      return OkStatus();
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: {
      // docarray writes Python ints as int32; larger ones travel as floats.
      double d = value.get<double>();
      if (d >= std::numeric_limits<std::int32_t>::min() &&
          d <= std::numeric_limits<std::int32_t>::max()) {
        out->set_integer(static_cast<std::int32_t>(value.get<std::int64_t>()));
      } else {
        out->set_float_(d);
      }
      return OkStatus();
    }
    case json::value_t::number_float:
      out->set_float_(value.get<double>());
      return OkStatus();
    case json::value_t::array: {
      auto* list = out->mutable_list();
      std::size_t i = 0;
      for (const json& item : value) {
        GANTRY_RETURN_IF_ERROR(JsonToNode(item, subject + "[" + std::to_string(i++) + "]",
                                          depth + 1, list->add_data()));
      }
      return OkStatus();
    }
    case json::value_t::object:
      return JsonToDict(value, subject, depth + 1, out->mutable_dict());
    default:
      return InvalidArgumentError(subject + ": unsupported JSON value");
  }
}

// These take the texts out of the protos they read rather than copy them: a
// reply's text can be tens of MB.
json NodeToJson(docarray::NodeProto* node);

json DictToJson(google::protobuf::Map<std::string, docarray::NodeProto>* data) {
  json out = json::object();
  for (auto& [key, node] : *data) {
    out[key] = NodeToJson(&node);
  }
  return out;
}

json ListToJson(docarray::ListOfAnyProto* list) {
  json out = json::array();
  for (auto& node : *list->mutable_data()) {
    out.push_back(NodeToJson(&node));
  }
  return out;
}

std::string Base64(const std::string& bytes) {
  static const char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    std::uint32_t n = (static_cast<std::uint8_t>(bytes[i]) << 16) |
                      (static_cast<std::uint8_t>(bytes[i + 1]) << 8) |
                      static_cast<std::uint8_t>(bytes[i + 2]);
    out += {kChars[(n >> 18) & 63], kChars[(n >> 12) & 63], kChars[(n >> 6) & 63], kChars[n & 63]};
  }
  if (i < bytes.size()) {
    std::uint32_t n = static_cast<std::uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) {
      n |= static_cast<std::uint8_t>(bytes[i + 1]) << 8;
    }
    out += kChars[(n >> 18) & 63];
    out += kChars[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kChars[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

json NodeToJson(docarray::NodeProto* node) {
  switch (node->content_case()) {
    case docarray::NodeProto::kText:
      return std::move(*node->mutable_text());
    case docarray::NodeProto::kInteger:
      return node->integer();
    case docarray::NodeProto::kFloat:
      return node->float_();
    case docarray::NodeProto::kBoolean:
      return node->boolean();
    case docarray::NodeProto::kBlob:
      return Base64(node->blob());  // as pydantic writes bytes
    case docarray::NodeProto::kNdarray:
      return NdArrayToJson(node->ndarray());
    case docarray::NodeProto::kDoc:
      return DictToJson(node->mutable_doc()->mutable_data());
    case docarray::NodeProto::kDocArray: {
      json out = json::array();
      for (auto& doc : *node->mutable_doc_array()->mutable_docs()) {
        out.push_back(DictToJson(doc.mutable_data()));
      }
      return out;
    }
    case docarray::NodeProto::kList:
      return ListToJson(node->mutable_list());
    case docarray::NodeProto::kSet:
      return ListToJson(node->mutable_set());
    case docarray::NodeProto::kTuple:
      return ListToJson(node->mutable_tuple());
    case docarray::NodeProto::kDict:
      return DictToJson(node->mutable_dict()->mutable_data());
    case docarray::NodeProto::CONTENT_NOT_SET:
      break;
  }
  return nullptr;
}

}  // namespace

namespace {

// Client-chosen ids can be long; errors quote at most this much of one.
constexpr std::size_t kMaxQuotedId = 64;

Status DocToProto(const json& doc, const std::string& subject, std::uint64_t max_bytes, int depth,
                  docarray::DocProto* out) {
  if (!doc.is_object()) {
    return InvalidArgumentError(subject + ": a document must be a JSON object, got " +
                                std::string(doc.type_name()));
  }
  GANTRY_RETURN_IF_ERROR(CheckDepth(depth, subject));
  std::string where = subject;
  if (auto id = doc.find("id"); id != doc.end() && id->is_string()) {
    const std::string& text = id->get_ref<const std::string&>();
    where +=
        " (id '" + text.substr(0, kMaxQuotedId) + (text.size() > kMaxQuotedId ? "...'" : "'") + ")";
  } else {
    where += " (no id)";
  }
  for (const auto& [key, value] : doc.items()) {
    std::string field = where + ": field '" + key + "'";
    docarray::NodeProto& node = (*out->mutable_data())[key];
    if (key == "id" && value.is_string()) {
      node.set_text(value.get<std::string>());
      node.set_type("id");
    } else if (IsNumericArray(value)) {
      GANTRY_RETURN_IF_ERROR(ToTensor(value, "float32", nullptr, field, max_bytes, &node));
    } else if (value.is_object() && value.contains("dtype") && value.contains("data") &&
               value["dtype"].is_string() && IsNumericArray(value["data"])) {
      GANTRY_RETURN_IF_ERROR(ToTensor(value["data"], value["dtype"].get<std::string>(),
                                      value.value("shape", json()), field, max_bytes, &node));
    } else if (value.is_array() && !value.empty() && value[0].is_object()) {
      // chunks, matches: nested documents.
      auto* docs = node.mutable_doc_array();
      std::size_t i = 0;
      for (const json& item : value) {
        GANTRY_RETURN_IF_ERROR(DocToProto(item, field + ": docs[" + std::to_string(i++) + "]",
                                          max_bytes, depth + 1, docs->add_docs()));
      }
    } else {
      GANTRY_RETURN_IF_ERROR(JsonToNode(value, field, depth, &node));
    }
  }
  return OkStatus();
}

}  // namespace

Status JsonToDocProto(const json& doc, const std::string& subject, std::uint64_t max_bytes,
                      docarray::DocProto* out) {
  return DocToProto(doc, subject, max_bytes, 0, out);
}

json DocProtoToJson(docarray::DocProto doc) { return DictToJson(doc.mutable_data()); }

Status JsonToStruct(const json& object, const std::string& subject, google::protobuf::Struct* out) {
  if (object.is_null()) {
    return OkStatus();
  }
  if (!object.is_object()) {
    return InvalidArgumentError(subject + ": expected a JSON object, got " +
                                std::string(object.type_name()));
  }
  std::function<Status(const json&, int, google::protobuf::Value*)> convert =
      [&](const json& v, int depth, google::protobuf::Value* pv) -> Status {
    if (v.is_structured()) {
      GANTRY_RETURN_IF_ERROR(CheckDepth(depth + 1, subject));
    }
    if (v.is_null()) {
      pv->set_null_value(google::protobuf::NULL_VALUE);
    } else if (v.is_boolean()) {
      pv->set_bool_value(v.get<bool>());
    } else if (v.is_number()) {
      pv->set_number_value(v.get<double>());
    } else if (v.is_string()) {
      pv->set_string_value(v.get<std::string>());
    } else if (v.is_array()) {
      auto* list = pv->mutable_list_value();
      for (const json& item : v) {
        GANTRY_RETURN_IF_ERROR(convert(item, depth + 1, list->add_values()));
      }
    } else {
      auto* fields = pv->mutable_struct_value()->mutable_fields();
      for (const auto& [key, item] : v.items()) {
        GANTRY_RETURN_IF_ERROR(convert(item, depth + 1, &(*fields)[key]));
      }
    }
    return OkStatus();
  };
  for (const auto& [key, value] : object.items()) {
    GANTRY_RETURN_IF_ERROR(convert(value, 0, &(*out->mutable_fields())[key]));
  }
  return OkStatus();
}

json StructToJson(const google::protobuf::Struct& proto) {
  std::function<json(const google::protobuf::Value&)> convert =
      [&](const google::protobuf::Value& v) -> json {
    switch (v.kind_case()) {
      case google::protobuf::Value::kBoolValue:
        return v.bool_value();
      case google::protobuf::Value::kNumberValue:
        return v.number_value();
      case google::protobuf::Value::kStringValue:
        return v.string_value();
      case google::protobuf::Value::kListValue: {
        json out = json::array();
        for (const auto& item : v.list_value().values()) {
          out.push_back(convert(item));
        }
        return out;
      }
      case google::protobuf::Value::kStructValue:
        return StructToJson(v.struct_value());
      default:
        return nullptr;
    }
  };
  json out = json::object();
  for (const auto& [key, value] : proto.fields()) {
    out[key] = convert(value);
  }
  return out;
}

Status ParseHttpDataRequest(std::string_view text, std::string endpoint, std::uint64_t max_bytes,
                            jina::DataRequestProto* request, bool* single) {
  *single = false;
  if (text.empty()) {
    return InvalidArgumentError("request body is empty; expected a JSON object");
  }
  StatusOr<json> parsed = ParseJsonBounded(text);
  if (!parsed.ok()) {
    return InvalidArgumentError("request body must be a JSON object: " +
                                std::string(parsed.status().message()));
  }
  json body = std::move(parsed).value();
  if (!body.is_object()) {
    return InvalidArgumentError("request body must be a JSON object, got " +
                                std::string(body.type_name()));
  }
  // A key of the wrong type is the client's mistake (json::value would
  // throw; the json_docs fuzzer found that).
  for (const char* key : {"execEndpoint", "targetExecutor"}) {
    if (auto it = body.find(key); it != body.end() && !it->is_string() && !it->is_null()) {
      return InvalidArgumentError(std::string(key) + " must be a string, got " +
                                  std::string(it->type_name()));
    }
  }
  if (endpoint.empty()) {
    auto it = body.find("execEndpoint");
    endpoint = it != body.end() && it->is_string() ? it->get<std::string>() : std::string();
    if (endpoint.empty()) {
      endpoint = "/default";
    }
  }
  auto* header = request->mutable_header();
  const json header_json = body.value("header", json::object());
  if (header_json.is_object() && header_json.contains("requestId") &&
      header_json["requestId"].is_string()) {
    header->set_request_id(header_json["requestId"].get<std::string>());
  }
  header->set_exec_endpoint(endpoint);
  std::string target = body.contains("targetExecutor") && body["targetExecutor"].is_string()
                           ? body["targetExecutor"].get<std::string>()
                           : std::string();
  if (header_json.is_object() && header_json.contains("targetExecutor") &&
      header_json["targetExecutor"].is_string()) {
    target = header_json["targetExecutor"].get<std::string>();
  }
  if (!target.empty()) {
    header->set_target_executor(target);
  }
  if (auto parameters = body.find("parameters"); parameters != body.end()) {
    GANTRY_RETURN_IF_ERROR(JsonToStruct(*parameters, "parameters", request->mutable_parameters()));
  }
  // Read in place: the documents are most of the body.
  static const json kNoDocuments = json::array();
  const auto found = body.find("data");
  const json& data = found != body.end() ? *found : kNoDocuments;
  *single = data.is_object();
  auto* docs = request->mutable_data()->mutable_docs();
  if (*single) {
    GANTRY_RETURN_IF_ERROR(JsonToDocProto(data, "data", max_bytes, docs->add_docs()));
  } else if (data.is_array()) {
    for (std::size_t i = 0; i < data.size(); ++i) {
      GANTRY_RETURN_IF_ERROR(
          JsonToDocProto(data[i], "data[" + std::to_string(i) + "]", max_bytes, docs->add_docs()));
    }
  } else if (!data.is_null()) {
    return InvalidArgumentError("data: expected a document or a list of documents");
  }
  // JSON numbers are shorter than their tensor bytes, so a body under the
  // cap can still make a request over it.
  if (std::size_t size = request->ByteSizeLong(); size > max_bytes) {
    return ResourceExhaustedError("request of " + std::to_string(size) +
                                  " bytes (as protobuf) exceeds the " + std::to_string(max_bytes) +
                                  "-byte message cap");
  }
  return OkStatus();
}

}  // namespace gantry::internal
