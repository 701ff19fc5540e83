#include <gantry/document.h>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <sstream>

#include "core/checked_size.h"

namespace gantry {

std::size_t DTypeItemSize(std::string_view dtype) {
  // numpy dtype strings: byte order ('<', '>', '|', '=') then kind and size.
  if (dtype.size() < 3) {
    return 0;
  }
  char order = dtype[0];
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    return 0;
  }
  char kind = dtype[1];
  std::string_view size = dtype.substr(2);
  if (kind == 'b' && size == "1") {
    return 1;
  }
  if (kind == 'f' && (size == "2" || size == "4" || size == "8")) {
    return static_cast<std::size_t>(size[0] - '0');
  }
  if ((kind == 'i' || kind == 'u') && (size == "1" || size == "2" || size == "4" || size == "8")) {
    return static_cast<std::size_t>(size[0] - '0');
  }
  if (kind == 'c' && (size == "8" || size == "16")) {
    return size == "8" ? 8 : 16;
  }
  return 0;
}

// ---- Tensor ----------------------------------------------------------------

StatusOr<Tensor> Tensor::FromBytes(std::string dtype, std::vector<std::int64_t> shape,
                                   std::string bytes) {
  Tensor t;
  t.dtype_ = std::move(dtype);
  t.shape_ = std::move(shape);
  // Overflow-checked: a wrapped-around product could match a short buffer.
  GANTRY_RETURN_IF_ERROR(internal::CheckTensorBuffer(t.shape_, t.dtype_, bytes.size(),
                                                     std::numeric_limits<std::uint64_t>::max()));
  t.bytes_ = std::move(bytes);
  return t;
}

std::int64_t Tensor::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape_) {
    n *= d;
  }
  return n;
}

std::string Tensor::ShapeString() const {
  std::string out = "[";
  for (std::size_t i = 0; i < shape_.size(); ++i) {
    if (i > 0) {
      out += ", ";
    }
    out += std::to_string(shape_[i]);
  }
  out += "]";
  return out;
}

void Tensor::CheckDType(std::string_view want) const {
  // '=' and '<' are the same byte order on the little-endian hosts we run on.
  bool same =
      dtype_ == want || (dtype_.size() == want.size() && dtype_.substr(1) == want.substr(1) &&
                         (dtype_[0] == '=' || dtype_[0] == '|' || dtype_[0] == '<'));
  if (!same) {
    throw std::invalid_argument("tensor has dtype " + dtype_ + ", not " + std::string(want));
  }
}

// ---- Value -----------------------------------------------------------------

Value::Value() = default;
Value::Value(std::nullptr_t) {}
Value::Value(const char* text) : storage_(std::string(text)) {}
Value::Value(std::string text) : storage_(std::move(text)) {}
Value::Value(std::string_view text) : storage_(std::string(text)) {}
Value::Value(int number) : storage_(static_cast<std::int64_t>(number)) {}
Value::Value(std::int64_t number) : storage_(number) {}
Value::Value(double number) : storage_(number) {}
Value::Value(bool flag) : storage_(flag) {}
Value::Value(Blob blob) : storage_(std::move(blob)) {}
Value::Value(Tensor tensor) : storage_(std::move(tensor)) {}
Value::Value(Doc doc) : storage_(internal::Box<Doc>(std::move(doc))) {}
Value::Value(DocList docs) : storage_(internal::Box<DocList>(std::move(docs))) {}
Value::Value(List list, ListKind kind)
    : storage_(internal::Box<List>(std::move(list))), list_kind_(kind) {}
Value::Value(Dict dict) : storage_(internal::Box<Dict>(std::move(dict))) {}
Value::Value(const Value&) = default;
Value::Value(Value&&) noexcept = default;
Value& Value::operator=(const Value&) = default;
Value& Value::operator=(Value&&) noexcept = default;
Value::~Value() = default;

Value::Kind Value::kind() const { return static_cast<Kind>(storage_.index()); }

namespace {
template <typename T, typename V>
const T* GetIf(const V& storage) {
  return std::get_if<T>(&storage);
}
}  // namespace

const std::string* Value::AsText() const { return GetIf<std::string>(storage_); }
const std::int64_t* Value::AsInt() const { return GetIf<std::int64_t>(storage_); }
const double* Value::AsFloat() const { return GetIf<double>(storage_); }
const bool* Value::AsBool() const { return GetIf<bool>(storage_); }
const Blob* Value::AsBlob() const { return GetIf<Blob>(storage_); }
const Tensor* Value::AsTensor() const { return GetIf<Tensor>(storage_); }
Tensor* Value::AsMutableTensor() { return std::get_if<Tensor>(&storage_); }
const Doc* Value::AsDoc() const {
  auto* box = GetIf<internal::Box<Doc>>(storage_);
  return box ? &box->get() : nullptr;
}
Doc* Value::AsMutableDoc() {
  auto* box = std::get_if<internal::Box<Doc>>(&storage_);
  return box ? &box->get() : nullptr;
}
const DocList* Value::AsDocList() const {
  auto* box = GetIf<internal::Box<DocList>>(storage_);
  return box ? &box->get() : nullptr;
}
DocList* Value::AsMutableDocList() {
  auto* box = std::get_if<internal::Box<DocList>>(&storage_);
  return box ? &box->get() : nullptr;
}
const Value::List* Value::AsList() const {
  auto* box = GetIf<internal::Box<List>>(storage_);
  return box ? &box->get() : nullptr;
}
Value::List* Value::AsMutableList() {
  auto* box = std::get_if<internal::Box<List>>(&storage_);
  return box ? &box->get() : nullptr;
}
const Value::Dict* Value::AsDict() const {
  auto* box = GetIf<internal::Box<Dict>>(storage_);
  return box ? &box->get() : nullptr;
}
Value::Dict* Value::AsMutableDict() {
  auto* box = std::get_if<internal::Box<Dict>>(&storage_);
  return box ? &box->get() : nullptr;
}

bool Value::ToNumber(double* out) const {
  if (const double* d = AsFloat()) {
    *out = *d;
    return true;
  }
  if (const std::int64_t* i = AsInt()) {
    *out = static_cast<double>(*i);
    return true;
  }
  return false;
}

namespace {

void AppendQuoted(std::string& out, std::string_view text) {
  out += '"';
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

void AppendDebug(std::string& out, const Value& value);

void AppendDebugDoc(std::string& out, const Doc& doc) {
  out += "Doc{";
  bool first = true;
  for (const auto& [key, field] : doc.fields()) {
    if (!first) {
      out += ", ";
    }
    first = false;
    out += key;
    out += ": ";
    AppendDebug(out, field);
  }
  out += "}";
}

void AppendDebug(std::string& out, const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kNone:
      out += "null";
      break;
    case Value::Kind::kText:
      AppendQuoted(out, *value.AsText());
      break;
    case Value::Kind::kInt:
      out += std::to_string(*value.AsInt());
      break;
    case Value::Kind::kFloat: {
      std::ostringstream os;
      os << *value.AsFloat();
      out += os.str();
      break;
    }
    case Value::Kind::kBool:
      out += *value.AsBool() ? "true" : "false";
      break;
    case Value::Kind::kBlob:
      out += "blob(" + std::to_string(value.AsBlob()->bytes.size()) + " bytes)";
      break;
    case Value::Kind::kTensor: {
      const Tensor& t = *value.AsTensor();
      out += "tensor(" + t.dtype() + ", " + t.ShapeString() + ")";
      break;
    }
    case Value::Kind::kDoc:
      AppendDebugDoc(out, *value.AsDoc());
      break;
    case Value::Kind::kDocList: {
      out += "DocList[";
      bool first = true;
      for (const Doc& doc : *value.AsDocList()) {
        if (!first) {
          out += ", ";
        }
        first = false;
        AppendDebugDoc(out, doc);
      }
      out += "]";
      break;
    }
    case Value::Kind::kList: {
      out += "[";
      bool first = true;
      for (const Value& item : *value.AsList()) {
        if (!first) {
          out += ", ";
        }
        first = false;
        AppendDebug(out, item);
      }
      out += "]";
      break;
    }
    case Value::Kind::kDict: {
      out += "{";
      bool first = true;
      for (const auto& [key, item] : *value.AsDict()) {
        if (!first) {
          out += ", ";
        }
        first = false;
        AppendQuoted(out, key);
        out += ": ";
        AppendDebug(out, item);
      }
      out += "}";
      break;
    }
  }
}

}  // namespace

std::string Value::DebugString() const {
  std::string out;
  AppendDebug(out, *this);
  return out;
}

bool operator==(const Value& a, const Value& b) {
  if (a.kind() != b.kind() || a.docarray_type_ != b.docarray_type_) {
    return false;
  }
  switch (a.kind()) {
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kText:
      return *a.AsText() == *b.AsText();
    case Value::Kind::kInt:
      return *a.AsInt() == *b.AsInt();
    case Value::Kind::kFloat:
      return *a.AsFloat() == *b.AsFloat();
    case Value::Kind::kBool:
      return *a.AsBool() == *b.AsBool();
    case Value::Kind::kBlob:
      return *a.AsBlob() == *b.AsBlob();
    case Value::Kind::kTensor:
      return *a.AsTensor() == *b.AsTensor();
    case Value::Kind::kDoc:
      return *a.AsDoc() == *b.AsDoc();
    case Value::Kind::kDocList:
      return *a.AsDocList() == *b.AsDocList();
    case Value::Kind::kList:
      return a.list_kind_ == b.list_kind_ && *a.AsList() == *b.AsList();
    case Value::Kind::kDict:
      return *a.AsDict() == *b.AsDict();
  }
  return false;
}

// ---- Doc -------------------------------------------------------------------

namespace {
constexpr std::string_view kIdField = "id";
constexpr std::string_view kTextField = "text";
constexpr std::string_view kTagsField = "tags";

// docarray's default id is 16 random bytes in hex.
std::string NewDocId() {
  thread_local std::mt19937_64 engine{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(32, '0');
  std::uint64_t parts[2] = {engine(), engine()};
  for (int i = 0; i < 32; ++i) {
    id[i] = kHex[(parts[i / 16] >> ((i % 16) * 4)) & 0xf];
  }
  return id;
}
}  // namespace

Doc::Doc() { set_id(NewDocId()); }

Doc::Doc(std::string text) : Doc() { set_text(std::move(text)); }

Doc Doc::Empty() { return Doc(NoIdTag{}); }

std::vector<std::string_view> DocList::texts() const {
  std::vector<std::string_view> texts;
  texts.reserve(docs_.size());
  for (const Doc& doc : docs_) {
    texts.push_back(doc.text());
  }
  return texts;
}

const std::string& Doc::id() const {
  static const std::string kEmpty;
  const Value* v = Find(kIdField);
  const std::string* text = v ? v->AsText() : nullptr;
  return text ? *text : kEmpty;
}

void Doc::set_id(std::string id) {
  Value v(std::move(id));
  v.set_docarray_type("id");
  fields_.insert_or_assign(std::string(kIdField), std::move(v));
}

std::string_view Doc::text() const {
  const Value* v = Find(kTextField);
  const std::string* text = v ? v->AsText() : nullptr;
  return text ? std::string_view(*text) : std::string_view();
}

void Doc::set_text(std::string text) {
  fields_.insert_or_assign(std::string(kTextField), Value(std::move(text)));
}

const Tensor* Doc::tensor(std::string_view name) const {
  const Value* v = Find(name);
  return v ? v->AsTensor() : nullptr;
}

Tensor* Doc::mutable_tensor(std::string_view name) {
  Value* v = FindMutable(name);
  return v ? v->AsMutableTensor() : nullptr;
}

void Doc::set_tensor(std::string name, Tensor tensor) {
  fields_.insert_or_assign(std::move(name), Value(std::move(tensor)));
}

const Value::Dict& Doc::tags() const {
  static const Value::Dict kEmpty;
  const Value* v = Find(kTagsField);
  const Value::Dict* dict = v ? v->AsDict() : nullptr;
  return dict ? *dict : kEmpty;
}

Value::Dict& Doc::mutable_tags() {
  Value* v = FindMutable(kTagsField);
  if (v == nullptr || v->AsMutableDict() == nullptr) {
    v = &fields_.insert_or_assign(std::string(kTagsField), Value(Value::Dict{})).first->second;
  }
  return *v->AsMutableDict();
}

const Value* Doc::Find(std::string_view field) const {
  auto it = fields_.find(field);
  return it == fields_.end() ? nullptr : &it->second;
}

Value* Doc::FindMutable(std::string_view field) {
  auto it = fields_.find(field);
  return it == fields_.end() ? nullptr : &it->second;
}

void Doc::Set(std::string field, Value value) {
  fields_.insert_or_assign(std::move(field), std::move(value));
}

bool Doc::Erase(std::string_view field) {
  auto it = fields_.find(field);
  if (it == fields_.end()) {
    return false;
  }
  fields_.erase(it);
  return true;
}

// ---- Parameters --------------------------------------------------------------

const Value* Parameters::Find(std::string_view key) const {
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

std::string Parameters::GetString(std::string_view key, std::string fallback) const {
  const Value* v = Find(key);
  const std::string* text = v ? v->AsText() : nullptr;
  if (text == nullptr) {
    return fallback;
  }
  return *text;
}

double Parameters::GetNumber(std::string_view key, double fallback) const {
  const Value* v = Find(key);
  double out = fallback;
  if (v != nullptr && v->ToNumber(&out)) {
    return out;
  }
  return fallback;
}

std::int64_t Parameters::GetInt(std::string_view key, std::int64_t fallback) const {
  const Value* v = Find(key);
  if (v == nullptr) {
    return fallback;
  }
  if (const std::int64_t* i = v->AsInt()) {
    return *i;
  }
  if (const double* d = v->AsFloat()) {
    return static_cast<std::int64_t>(*d);
  }
  return fallback;
}

bool Parameters::GetBool(std::string_view key, bool fallback) const {
  const Value* v = Find(key);
  const bool* b = v ? v->AsBool() : nullptr;
  return b ? *b : fallback;
}

}  // namespace gantry
