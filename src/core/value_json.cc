#include "core/value_json.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace gantry::internal {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kFloatTag = "__float__";
constexpr std::string_view kBlobTag = "__blob__";
constexpr std::string_view kTensorTag = "__tensor__";
constexpr std::string_view kDocTag = "__doc__";
constexpr std::string_view kDocListTag = "__doclist__";
constexpr std::string_view kTupleTag = "__tuple__";
constexpr std::string_view kSetTag = "__set__";
constexpr std::string_view kDictTag = "__dict__";
constexpr std::string_view kTypedTag = "__typed__";

bool IsTag(std::string_view key) {
  return key == kFloatTag || key == kBlobTag || key == kTensorTag || key == kDocTag ||
         key == kDocListTag || key == kTupleTag || key == kSetTag || key == kDictTag ||
         key == kTypedTag;
}

constexpr std::string_view kBase64Alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    std::uint32_t n = (static_cast<std::uint8_t>(bytes[i]) << 16) |
                      (static_cast<std::uint8_t>(bytes[i + 1]) << 8) |
                      static_cast<std::uint8_t>(bytes[i + 2]);
    out += kBase64Alphabet[(n >> 18) & 63];
    out += kBase64Alphabet[(n >> 12) & 63];
    out += kBase64Alphabet[(n >> 6) & 63];
    out += kBase64Alphabet[n & 63];
  }
  std::size_t rest = bytes.size() - i;
  if (rest > 0) {
    std::uint32_t n = static_cast<std::uint8_t>(bytes[i]) << 16;
    if (rest == 2) {
      n |= static_cast<std::uint8_t>(bytes[i + 1]) << 8;
    }
    out += kBase64Alphabet[(n >> 18) & 63];
    out += kBase64Alphabet[(n >> 12) & 63];
    out += rest == 2 ? kBase64Alphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

bool Base64Decode(std::string_view text, std::string* out) {
  if (text.size() % 4 != 0) {
    return false;
  }
  std::array<int, 256> index;
  index.fill(-1);
  for (std::size_t i = 0; i < kBase64Alphabet.size(); ++i) {
    index[static_cast<std::uint8_t>(kBase64Alphabet[i])] = static_cast<int>(i);
  }
  out->clear();
  out->reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    std::uint32_t n = 0;
    int padding = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      char c = text[i + j];
      // '=' may only end the last quad, and only in its last two places.
      if (c == '=' && i + 4 == text.size() && j >= 2 && (j == 3 || text[i + 3] == '=')) {
        ++padding;
        n <<= 6;
        continue;
      }
      int v = index[static_cast<std::uint8_t>(c)];
      if (v < 0 || padding > 0) {
        return false;
      }
      n = (n << 6) | static_cast<std::uint32_t>(v);
    }
    out->push_back(static_cast<char>((n >> 16) & 0xff));
    if (padding < 2) {
      out->push_back(static_cast<char>((n >> 8) & 0xff));
    }
    if (padding < 1) {
      out->push_back(static_cast<char>(n & 0xff));
    }
  }
  return true;
}

Json Tagged(std::string_view tag, Json body) {
  Json out = Json::object();
  out[std::string(tag)] = std::move(body);
  return out;
}

Json DictToJson(const Value::Dict& dict);
Json ToJson(const Value& value);

// The value without its docarray_type annotation.
Json UntypedToJson(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kNone:
      return nullptr;
    case Value::Kind::kText:
      return *value.AsText();
    case Value::Kind::kInt:
      return *value.AsInt();
    case Value::Kind::kFloat: {
      double d = *value.AsFloat();
      if (std::isnan(d)) {
        return Tagged(kFloatTag, "nan");
      }
      if (std::isinf(d)) {
        return Tagged(kFloatTag, d > 0 ? "inf" : "-inf");
      }
      return d;
    }
    case Value::Kind::kBool:
      return *value.AsBool();
    case Value::Kind::kBlob:
      return Tagged(kBlobTag, Base64Encode(value.AsBlob()->bytes));
    case Value::Kind::kTensor: {
      const Tensor& t = *value.AsTensor();
      Json body = Json::object();
      body["dtype"] = t.dtype();
      body["shape"] = t.shape();
      body["bytes"] = Base64Encode(t.bytes());
      if (!t.type_name().empty()) {
        body["type"] = t.type_name();
      }
      return Tagged(kTensorTag, std::move(body));
    }
    case Value::Kind::kDoc:
      return Tagged(kDocTag, DictToJson(value.AsDoc()->fields()));
    case Value::Kind::kDocList: {
      Json docs = Json::array();
      for (const Doc& doc : *value.AsDocList()) {
        docs.push_back(DictToJson(doc.fields()));
      }
      return Tagged(kDocListTag, std::move(docs));
    }
    case Value::Kind::kList: {
      Json items = Json::array();
      for (const Value& item : *value.AsList()) {
        items.push_back(ToJson(item));
      }
      switch (value.list_kind()) {
        case Value::ListKind::kTuple:
          return Tagged(kTupleTag, std::move(items));
        case Value::ListKind::kSet:
          return Tagged(kSetTag, std::move(items));
        case Value::ListKind::kList:
          break;
      }
      return items;
    }
    case Value::Kind::kDict: {
      const Value::Dict& dict = *value.AsDict();
      // A user dict that looks like a tagged object is wrapped so that
      // decoding does not mistake it for one.
      if (dict.size() == 1 && IsTag(dict.begin()->first)) {
        return Tagged(kDictTag, DictToJson(dict));
      }
      return DictToJson(dict);
    }
  }
  return nullptr;
}

Json ToJson(const Value& value) {
  if (value.docarray_type().empty()) {
    return UntypedToJson(value);
  }
  Json body = Json::object();
  body["type"] = value.docarray_type();
  body["value"] = UntypedToJson(value);
  return Tagged(kTypedTag, std::move(body));
}

Json DictToJson(const Value::Dict& dict) {
  Json out = Json::object();
  for (const auto& [key, value] : dict) {
    out[key] = ToJson(value);
  }
  return out;
}

Status JsonError(const std::string& path, std::string_view what) {
  return InvalidArgumentError("JSON value dict: " + (path.empty() ? "" : path + ": ") +
                              std::string(what));
}

std::string Join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

StatusOr<Value::Dict> DictFromJson(const Json& json, const std::string& path);

StatusOr<Value::List> ListFromJson(const Json& json, const std::string& path);
StatusOr<Value> FromJson(const Json& json, const std::string& path);

StatusOr<Value> TaggedFromJson(std::string_view tag, const Json& body, const std::string& path) {
  std::string tag_path = Join(path, tag);
  if (tag == kFloatTag) {
    if (body == "nan") {
      return Value(std::numeric_limits<double>::quiet_NaN());
    }
    if (body == "inf") {
      return Value(std::numeric_limits<double>::infinity());
    }
    if (body == "-inf") {
      return Value(-std::numeric_limits<double>::infinity());
    }
    return JsonError(tag_path, "expected \"nan\", \"inf\" or \"-inf\"");
  }
  if (tag == kBlobTag) {
    Blob blob;
    if (!body.is_string() || !Base64Decode(body.get_ref<const std::string&>(), &blob.bytes)) {
      return JsonError(tag_path, "expected a base64 string");
    }
    return Value(std::move(blob));
  }
  if (tag == kTensorTag) {
    bool has_type = body.is_object() && body.contains("type");
    if (!body.is_object() || body.size() != (has_type ? 4u : 3u) || !body.contains("dtype") ||
        !body.contains("shape") || !body.contains("bytes") || !body["dtype"].is_string() ||
        !body["shape"].is_array() || !body["bytes"].is_string() ||
        (has_type && !body["type"].is_string())) {
      return JsonError(tag_path,
                       "expected {\"dtype\": string, \"shape\": [int, ...], \"bytes\": base64"
                       "[, \"type\": string]}");
    }
    std::vector<std::int64_t> shape;
    for (const Json& dim : body["shape"]) {
      if (!dim.is_number_integer() ||
          (dim.is_number_unsigned() &&
           dim.get<std::uint64_t>() >
               static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))) {
        return JsonError(tag_path + ".shape", "expected integers");
      }
      shape.push_back(dim.get<std::int64_t>());
    }
    std::string bytes;
    if (!Base64Decode(body["bytes"].get_ref<const std::string&>(), &bytes)) {
      return JsonError(tag_path + ".bytes", "expected a base64 string");
    }
    StatusOr<Tensor> tensor =
        Tensor::FromBytes(body["dtype"].get<std::string>(), std::move(shape), std::move(bytes));
    if (!tensor.ok()) {
      return JsonError(tag_path, tensor.status().message());
    }
    if (has_type) {
      tensor->set_type_name(body["type"].get<std::string>());
    }
    return Value(std::move(tensor).value());
  }
  if (tag == kDocTag) {
    GANTRY_ASSIGN_OR_RETURN(Value::Dict fields, DictFromJson(body, tag_path));
    Doc doc = Doc::Empty();
    doc.mutable_fields() = std::move(fields);
    return Value(std::move(doc));
  }
  if (tag == kDocListTag) {
    if (!body.is_array()) {
      return JsonError(tag_path, "expected an array of objects");
    }
    DocList docs;
    for (std::size_t i = 0; i < body.size(); ++i) {
      GANTRY_ASSIGN_OR_RETURN(Value::Dict fields,
                              DictFromJson(body[i], tag_path + "[" + std::to_string(i) + "]"));
      Doc doc = Doc::Empty();
      doc.mutable_fields() = std::move(fields);
      docs.push_back(std::move(doc));
    }
    return Value(std::move(docs));
  }
  if (tag == kTypedTag) {
    if (!body.is_object() || body.size() != 2 || !body.contains("type") ||
        !body["type"].is_string() || !body.contains("value")) {
      return JsonError(tag_path, "expected {\"type\": string, \"value\": ...}");
    }
    GANTRY_ASSIGN_OR_RETURN(Value value, FromJson(body["value"], tag_path + ".value"));
    value.set_docarray_type(body["type"].get<std::string>());
    return value;
  }
  if (tag == kTupleTag || tag == kSetTag) {
    GANTRY_ASSIGN_OR_RETURN(Value::List items, ListFromJson(body, tag_path));
    return Value(std::move(items),
                 tag == kTupleTag ? Value::ListKind::kTuple : Value::ListKind::kSet);
  }
  // kDictTag: the wrapped dict is taken as is, even if it looks tagged.
  if (!body.is_object()) {
    return JsonError(tag_path, "expected an object");
  }
  GANTRY_ASSIGN_OR_RETURN(Value::Dict dict, DictFromJson(body, tag_path));
  return Value(std::move(dict));
}

StatusOr<Value> FromJson(const Json& json, const std::string& path) {
  switch (json.type()) {
    case Json::value_t::null:
      return Value();
    case Json::value_t::string:
      return Value(json.get<std::string>());
    case Json::value_t::boolean:
      return Value(json.get<bool>());
    case Json::value_t::number_integer:
      return Value(json.get<std::int64_t>());
    case Json::value_t::number_unsigned: {
      auto n = json.get<std::uint64_t>();
      if (n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return JsonError(path, "integer " + std::to_string(n) + " does not fit in int64");
      }
      return Value(static_cast<std::int64_t>(n));
    }
    case Json::value_t::number_float:
      return Value(json.get<double>());
    case Json::value_t::array: {
      GANTRY_ASSIGN_OR_RETURN(Value::List items, ListFromJson(json, path));
      return Value(std::move(items));
    }
    case Json::value_t::object: {
      if (json.size() == 1 && IsTag(json.begin().key())) {
        return TaggedFromJson(json.begin().key(), json.begin().value(), path);
      }
      GANTRY_ASSIGN_OR_RETURN(Value::Dict dict, DictFromJson(json, path));
      return Value(std::move(dict));
    }
    case Json::value_t::binary:
    case Json::value_t::discarded:
      break;
  }
  return JsonError(path, "unsupported JSON value");
}

StatusOr<Value::List> ListFromJson(const Json& json, const std::string& path) {
  if (!json.is_array()) {
    return JsonError(path, "expected an array");
  }
  Value::List items;
  items.reserve(json.size());
  for (std::size_t i = 0; i < json.size(); ++i) {
    GANTRY_ASSIGN_OR_RETURN(Value item, FromJson(json[i], path + "[" + std::to_string(i) + "]"));
    items.push_back(std::move(item));
  }
  return items;
}

StatusOr<Value::Dict> DictFromJson(const Json& json, const std::string& path) {
  if (!json.is_object()) {
    return JsonError(path, std::string("expected an object, got ") + json.type_name());
  }
  Value::Dict dict;
  for (auto it = json.begin(); it != json.end(); ++it) {
    GANTRY_ASSIGN_OR_RETURN(Value value, FromJson(it.value(), Join(path, it.key())));
    dict.emplace(it.key(), std::move(value));
  }
  return dict;
}

}  // namespace

std::string ValueDictToJson(const Value::Dict& dict) {
  return DictToJson(dict).dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace);
}

StatusOr<Value::Dict> ValueDictFromJson(std::string_view json) {
  StatusOr<Json> parsed = ParseJsonBounded(json);
  if (!parsed.ok()) {
    return JsonError("", parsed.status().message());
  }
  return DictFromJson(*parsed, "");
}

namespace {

// Builds the document from nlohmann's SAX events as its own DOM parser does,
// but moves each string out of the lexer instead of copying it (a body's
// texts are most of its bytes), and stops at `max_depth` open containers.
// nlohmann calls its members by name: this is not an interface.
class BoundedDomBuilder {
 public:
  BoundedDomBuilder(Json& root, int max_depth) : root_(root), max_depth_(max_depth) {}

  bool null() { return Add(nullptr); }
  bool boolean(bool value) { return Add(value); }
  bool number_integer(Json::number_integer_t value) { return Add(value); }
  bool number_unsigned(Json::number_unsigned_t value) { return Add(value); }
  bool number_float(Json::number_float_t value, const Json::string_t& /*text*/) {
    return Add(value);
  }
  bool string(Json::string_t& value) { return Add(std::move(value)); }
  bool binary(Json::binary_t& value) { return Add(Json::binary(std::move(value))); }
  bool start_object(std::size_t /*elements*/) { return Open(Json::object()); }
  bool key(Json::string_t& key) {
    key_ = std::move(key);
    return true;
  }
  bool end_object() { return Close(); }
  bool start_array(std::size_t /*elements*/) { return Open(Json::array()); }
  bool end_array() { return Close(); }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& error) {
    error_ = std::string("JSON does not parse: ") + error.what();
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  // Puts `value` where the document is at; the slot it now has.
  Json* Place(Json&& value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Json& container = *open_.back();
    if (container.is_array()) {
      container.push_back(std::move(value));
      return &container.back();
    }
    Json& slot = container[key_];
    slot = std::move(value);
    return &slot;
  }
  bool Add(Json&& value) {
    Place(std::move(value));
    return true;
  }
  bool Open(Json&& container) {
    if (static_cast<int>(open_.size()) >= max_depth_) {
      error_ = "JSON nested deeper than " + std::to_string(max_depth_) + " levels";
      return false;
    }
    // A container's slot stays put while it is open: only the innermost
    // open container grows.
    open_.push_back(Place(std::move(container)));
    return true;
  }
  bool Close() {
    open_.pop_back();
    return true;
  }

  Json& root_;
  const int max_depth_;
  std::vector<Json*> open_;
  std::string key_;
  std::string error_;
};

}  // namespace

StatusOr<nlohmann::json> ParseJsonBounded(std::string_view text, int max_depth) {
  Json root;
  BoundedDomBuilder builder(root, max_depth);
  if (!Json::sax_parse(text.begin(), text.end(), &builder)) {
    return InvalidArgumentError(builder.error());
  }
  return root;
}

}  // namespace gantry::internal
