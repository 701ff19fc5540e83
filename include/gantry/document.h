// File: gantry/document.h
//
// Documents as they travel on Jina's wire: a Doc is a map of named fields
// (docarray's DocProto), each field a Value (NodeProto): text, numbers,
// booleans, bytes, tensors, nested documents, lists and dicts. Unknown fields
// survive a round trip untouched.
//
// Thread safety: value types; a Doc may be read from several threads at once
// but written by one thread at a time.
#ifndef GANTRY_DOCUMENT_H_
#define GANTRY_DOCUMENT_H_

#include <gantry/status.h>

#include <any>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace gantry {

class Doc;
class DocList;
class Value;

// Bytes per element of a numpy dtype string ("<f4" -> 4), or 0 if unknown.
std::size_t DTypeItemSize(std::string_view dtype);

// The numpy dtype string of a C++ element type.
template <typename T>
constexpr std::string_view DTypeOf() {
  if constexpr (std::is_same_v<T, float>) {
    return "<f4";
  } else if constexpr (std::is_same_v<T, double>) {
    return "<f8";
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    return "<i8";
  } else if constexpr (std::is_same_v<T, std::int32_t>) {
    return "<i4";
  } else if constexpr (std::is_same_v<T, std::int16_t>) {
    return "<i2";
  } else if constexpr (std::is_same_v<T, std::int8_t>) {
    return "|i1";
  } else if constexpr (std::is_same_v<T, std::uint8_t>) {
    return "|u1";
  } else if constexpr (std::is_same_v<T, bool>) {
    return "|b1";
  } else {
    static_assert(sizeof(T) == 0, "no numpy dtype for this element type");
  }
}

// A dense C-order tensor: numpy dtype string, shape and element bytes.
class Tensor {
 public:
  Tensor() = default;

  // Checks that `dtype` is known and that bytes.size() == numel * itemsize.
  static StatusOr<Tensor> FromBytes(std::string dtype, std::vector<std::int64_t> shape,
                                    std::string bytes);

  // Copies `values` (numel must equal the product of `shape`).
  template <typename T>
  static Tensor FromValues(std::vector<std::int64_t> shape, std::span<const T> values) {
    Tensor t;
    t.dtype_ = std::string(DTypeOf<T>());
    t.shape_ = std::move(shape);
    if (static_cast<std::int64_t>(values.size()) != t.numel()) {
      throw std::invalid_argument("Tensor::FromValues: " + std::to_string(values.size()) +
                                  " values do not fill shape " + t.ShapeString());
    }
    t.bytes_.assign(reinterpret_cast<const char*>(values.data()), values.size_bytes());
    return t;
  }
  template <typename T>
  static Tensor FromValues(std::vector<std::int64_t> shape, const std::vector<T>& values) {
    return FromValues<T>(std::move(shape), std::span<const T>(values));
  }

  const std::string& dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t dim() const { return static_cast<std::int64_t>(shape_.size()); }
  std::int64_t numel() const;
  std::size_t itemsize() const { return DTypeItemSize(dtype_); }
  // "[2, 384]"
  std::string ShapeString() const;

  const std::string& bytes() const { return bytes_; }
  std::string& mutable_bytes() { return bytes_; }
  const char* data() const { return bytes_.data(); }
  char* mutable_data() { return bytes_.data(); }

  // The elements as T. Throws std::invalid_argument if dtype is not T's;
  // meant for handlers, where exceptions become error replies.
  template <typename T>
  std::span<const T> Values() const {
    CheckDType(DTypeOf<T>());
    return {reinterpret_cast<const T*>(bytes_.data()), bytes_.size() / sizeof(T)};
  }
  template <typename T>
  std::span<T> MutableValues() {
    CheckDType(DTypeOf<T>());
    return {reinterpret_cast<T*>(bytes_.data()), bytes_.size() / sizeof(T)};
  }

  // docarray's type annotation on the wire ("ndarray", "torch_tensor", ...).
  // Empty means "ndarray" when encoded.
  const std::string& type_name() const { return type_name_; }
  void set_type_name(std::string name) { type_name_ = std::move(name); }

  friend bool operator==(const Tensor& a, const Tensor& b) {
    return a.dtype_ == b.dtype_ && a.shape_ == b.shape_ && a.bytes_ == b.bytes_;
  }

 private:
  void CheckDType(std::string_view want) const;

  std::string dtype_ = "<f4";
  std::vector<std::int64_t> shape_;
  std::string bytes_;
  std::string type_name_;
};

namespace internal {
// A heap box with value semantics; breaks the Value -> Doc -> Value cycle.
template <typename T>
class Box {
 public:
  explicit Box(T value) : ptr_(std::make_unique<T>(std::move(value))) {}
  Box(const Box& other) : ptr_(std::make_unique<T>(*other.ptr_)) {}
  Box(Box&&) noexcept = default;
  Box& operator=(const Box& other) {
    ptr_ = std::make_unique<T>(*other.ptr_);
    return *this;
  }
  Box& operator=(Box&&) noexcept = default;
  T& get() { return *ptr_; }
  const T& get() const { return *ptr_; }

 private:
  std::unique_ptr<T> ptr_;
};
}  // namespace internal

// Raw bytes (NodeProto.blob), distinct from text.
struct Blob {
  std::string bytes;
  friend bool operator==(const Blob& a, const Blob& b) { return a.bytes == b.bytes; }
};

// One field value, the counterpart of docarray's NodeProto.
class Value {
 public:
  enum class Kind {
    kNone,
    kText,
    kInt,
    kFloat,
    kBool,
    kBlob,
    kTensor,
    kDoc,
    kDocList,
    kList,
    kDict
  };
  // How a list travels: docarray keeps list, set and tuple apart.
  enum class ListKind { kList, kSet, kTuple };
  using List = std::vector<Value>;
  using Dict = std::map<std::string, Value, std::less<>>;

  Value();
  Value(std::nullptr_t);                              // NOLINT(google-explicit-constructor)
  Value(const char* text);                            // NOLINT(google-explicit-constructor)
  Value(std::string text);                            // NOLINT(google-explicit-constructor)
  Value(std::string_view text);                       // NOLINT(google-explicit-constructor)
  Value(int number);                                  // NOLINT(google-explicit-constructor)
  Value(std::int64_t number);                         // NOLINT(google-explicit-constructor)
  Value(double number);                               // NOLINT(google-explicit-constructor)
  Value(bool flag);                                   // NOLINT(google-explicit-constructor)
  Value(Blob blob);                                   // NOLINT(google-explicit-constructor)
  Value(Tensor tensor);                               // NOLINT(google-explicit-constructor)
  Value(Doc doc);                                     // NOLINT(google-explicit-constructor)
  Value(DocList docs);                                // NOLINT(google-explicit-constructor)
  Value(List list, ListKind kind = ListKind::kList);  // NOLINT(google-explicit-constructor)
  Value(Dict dict);                                   // NOLINT(google-explicit-constructor)
  Value(const Value&);
  Value(Value&&) noexcept;
  Value& operator=(const Value&);
  Value& operator=(Value&&) noexcept;
  ~Value();

  Kind kind() const;
  bool is_none() const { return kind() == Kind::kNone; }

  // Find-style accessors: nullptr when the value holds another kind.
  const std::string* AsText() const;
  const std::int64_t* AsInt() const;
  const double* AsFloat() const;
  const bool* AsBool() const;
  const Blob* AsBlob() const;
  const Tensor* AsTensor() const;
  Tensor* AsMutableTensor();
  const Doc* AsDoc() const;
  Doc* AsMutableDoc();
  const DocList* AsDocList() const;
  DocList* AsMutableDocList();
  const List* AsList() const;
  List* AsMutableList();
  const Dict* AsDict() const;
  Dict* AsMutableDict();

  // A number as double whether stored as int or float; nullopt-like false.
  bool ToNumber(double* out) const;

  ListKind list_kind() const { return list_kind_; }

  // docarray's NodeProto.type annotation ("id", "ndarray", "any_url", ...).
  const std::string& docarray_type() const { return docarray_type_; }
  void set_docarray_type(std::string type) { docarray_type_ = std::move(type); }

  // Compact JSON-like rendering for logs and test failure messages.
  std::string DebugString() const;

  friend bool operator==(const Value& a, const Value& b);

 private:
  using Storage = std::variant<std::monostate, std::string, std::int64_t, double, bool, Blob,
                               Tensor, internal::Box<Doc>, internal::Box<DocList>,
                               internal::Box<List>, internal::Box<Dict>>;
  Storage storage_;
  ListKind list_kind_ = ListKind::kList;
  std::string docarray_type_;
};

// A document: named fields. A new Doc gets a random 32-hex-digit id, as
// docarray does; the id is the field "id" with type annotation "id".
class Doc {
 public:
  Doc();
  // A new document holding `text` (and a fresh id).
  explicit Doc(std::string text);
  // A document with no fields at all (used when decoding).
  static Doc Empty();

  // Empty if the document has no id.
  const std::string& id() const;
  void set_id(std::string id);

  // The "text" field; empty if absent or not text.
  std::string_view text() const;
  void set_text(std::string text);

  // The tensor field `name`, or nullptr if absent or not a tensor.
  const Tensor* tensor(std::string_view name) const;
  Tensor* mutable_tensor(std::string_view name);
  void set_tensor(std::string name, Tensor tensor);

  // Shorthands for the "embedding" field.
  const Tensor* embedding() const { return tensor("embedding"); }
  void set_embedding(Tensor tensor) { set_tensor("embedding", std::move(tensor)); }

  // The "tags" dict; an empty dict if absent.
  const Value::Dict& tags() const;
  Value::Dict& mutable_tags();

  const Value* Find(std::string_view field) const;
  Value* FindMutable(std::string_view field);
  void Set(std::string field, Value value);
  bool Erase(std::string_view field);
  bool Has(std::string_view field) const { return Find(field) != nullptr; }

  const Value::Dict& fields() const { return fields_; }
  Value::Dict& mutable_fields() { return fields_; }

  // What the handler's preparer (GANTRY_PREPARE, gantry/executor.h) worked
  // out from this document for the handler; empty if none. Not a field: it
  // is never sent or compared, and it stays with the document through
  // dynamic batching.
  const std::any& prepared() const { return prepared_; }
  std::any& mutable_prepared() { return prepared_; }
  void set_prepared(std::any prepared) { prepared_ = std::move(prepared); }

  // Fields only: what was prepared is not part of the document.
  friend bool operator==(const Doc& a, const Doc& b) { return a.fields_ == b.fields_; }

 private:
  struct NoIdTag {};
  explicit Doc(NoIdTag) {}

  Value::Dict fields_;
  std::any prepared_;
};

// An ordered list of documents (docarray's DocList).
class DocList {
 public:
  DocList() = default;
  DocList(std::initializer_list<Doc> docs) : docs_(docs) {}
  explicit DocList(std::vector<Doc> docs) : docs_(std::move(docs)) {}

  std::size_t size() const { return docs_.size(); }
  bool empty() const { return docs_.empty(); }
  void reserve(std::size_t n) { docs_.reserve(n); }
  void clear() { docs_.clear(); }
  Doc& operator[](std::size_t i) { return docs_[i]; }
  const Doc& operator[](std::size_t i) const { return docs_[i]; }
  void push_back(Doc doc) { docs_.push_back(std::move(doc)); }
  template <typename... Args>
  Doc& emplace_back(Args&&... args) {
    return docs_.emplace_back(std::forward<Args>(args)...);
  }
  std::vector<Doc>::iterator begin() { return docs_.begin(); }
  std::vector<Doc>::iterator end() { return docs_.end(); }
  std::vector<Doc>::const_iterator begin() const { return docs_.begin(); }
  std::vector<Doc>::const_iterator end() const { return docs_.end(); }

  std::vector<Doc>& docs() { return docs_; }
  const std::vector<Doc>& docs() const { return docs_; }

  // Every document's text, in order (docarray's `docs.text`): views into
  // the documents, valid while their texts are unchanged.
  std::vector<std::string_view> texts() const;

  friend bool operator==(const DocList& a, const DocList& b) { return a.docs_ == b.docs_; }

 private:
  std::vector<Doc> docs_;
};

// What a preparer left with every document of `docs` as a T, moved out of
// them (each document's prepared() is left empty); an empty vector, and the
// documents untouched, when any document has no T. A handler that prepares
// all of a request or none of it reads its documents back this way.
template <typename T>
std::vector<T> TakePrepared(DocList& docs) {
  for (const Doc& doc : docs) {
    if (std::any_cast<T>(&doc.prepared()) == nullptr) {
      return {};
    }
  }
  std::vector<T> taken;
  taken.reserve(docs.size());
  for (Doc& doc : docs) {
    taken.push_back(std::move(*std::any_cast<T>(&doc.mutable_prepared())));
    doc.mutable_prepared().reset();
  }
  return taken;
}

// Request parameters (Jina's `parameters` dict). Numbers arrive as doubles,
// as in google.protobuf.Struct.
class Parameters {
 public:
  Parameters() = default;
  explicit Parameters(Value::Dict values) : values_(std::move(values)) {}

  const Value* Find(std::string_view key) const;
  std::string GetString(std::string_view key, std::string fallback = "") const;
  double GetNumber(std::string_view key, double fallback = 0) const;
  std::int64_t GetInt(std::string_view key, std::int64_t fallback = 0) const;
  bool GetBool(std::string_view key, bool fallback = false) const;

  const Value::Dict& values() const { return values_; }
  Value::Dict& mutable_values() { return values_; }

 private:
  Value::Dict values_;
};

}  // namespace gantry

#endif  // GANTRY_DOCUMENT_H_
