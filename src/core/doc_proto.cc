#include "core/doc_proto.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "core/checked_size.h"
#include "jina/jina.pb.h"

namespace gantry::internal {
namespace {

void ValueToNode(const Value& value, docarray::NodeProto* node);

void DocToProto(const Doc& doc, docarray::DocProto* proto) {
  auto* data = proto->mutable_data();
  for (const auto& [key, value] : doc.fields()) {
    ValueToNode(value, &(*data)[key]);
  }
}

void TensorToNode(const Tensor& tensor, docarray::NdArrayProto* proto) {
  auto* dense = proto->mutable_dense();
  dense->set_buffer(tensor.bytes());
  for (std::int64_t d : tensor.shape()) {
    dense->add_shape(static_cast<std::uint32_t>(d));
  }
  dense->set_dtype(tensor.dtype());
}

void ValueToNode(const Value& value, docarray::NodeProto* node) {
  switch (value.kind()) {
    case Value::Kind::kNone:
      break;
    case Value::Kind::kText:
      node->set_text(*value.AsText());
      break;
    case Value::Kind::kInt: {
      // docarray's `integer` is int32; wider numbers travel as doubles.
      std::int64_t i = *value.AsInt();
      if (i >= std::numeric_limits<std::int32_t>::min() &&
          i <= std::numeric_limits<std::int32_t>::max()) {
        node->set_integer(static_cast<std::int32_t>(i));
      } else {
        node->set_float_(static_cast<double>(i));
      }
      break;
    }
    case Value::Kind::kFloat:
      node->set_float_(*value.AsFloat());
      break;
    case Value::Kind::kBool:
      node->set_boolean(*value.AsBool());
      break;
    case Value::Kind::kBlob:
      node->set_blob(value.AsBlob()->bytes);
      break;
    case Value::Kind::kTensor: {
      const Tensor& tensor = *value.AsTensor();
      TensorToNode(tensor, node->mutable_ndarray());
      if (!tensor.type_name().empty()) {
        node->set_type(tensor.type_name());
      } else if (!value.docarray_type().empty()) {
        node->set_type(value.docarray_type());
      } else {
        node->set_type("ndarray");
      }
      return;
    }
    case Value::Kind::kDoc:
      DocToProto(*value.AsDoc(), node->mutable_doc());
      break;
    case Value::Kind::kDocList:
      DocListToProto(*value.AsDocList(), node->mutable_doc_array());
      break;
    case Value::Kind::kList: {
      docarray::ListOfAnyProto* list = nullptr;
      switch (value.list_kind()) {
        case Value::ListKind::kList:
          list = node->mutable_list();
          break;
        case Value::ListKind::kSet:
          list = node->mutable_set();
          break;
        case Value::ListKind::kTuple:
          list = node->mutable_tuple();
          break;
      }
      for (const Value& item : *value.AsList()) {
        ValueToNode(item, list->add_data());
      }
      break;
    }
    case Value::Kind::kDict: {
      auto* data = node->mutable_dict()->mutable_data();
      for (const auto& [key, item] : *value.AsDict()) {
        ValueToNode(item, &(*data)[key]);
      }
      break;
    }
  }
  if (!value.docarray_type().empty()) {
    node->set_type(value.docarray_type());
  }
}

// `label` names the document in errors ("docs[3]").
StatusOr<Doc> TakeDoc(docarray::DocProto* proto, const DecodeLimits& limits, int depth,
                      std::string_view label);
StatusOr<DocList> TakeDocList(docarray::DocListProto* proto, const DecodeLimits& limits, int depth);

// Client-chosen ids can be long; errors quote at most this much of one.
constexpr std::size_t kMaxQuotedId = 64;

// " (id 'abc')" or " (no id)" for a document that failed to decode: the id
// is in the decoded fields if it was taken already, else still in the proto.
std::string IdForError(const Doc& partial, const docarray::DocProto& proto) {
  const std::string* id = nullptr;
  if (auto it = partial.fields().find("id"); it != partial.fields().end()) {
    id = it->second.AsText();
  } else if (auto node = proto.data().find("id");
             node != proto.data().end() &&
             node->second.content_case() == docarray::NodeProto::kText) {
    id = &node->second.text();
  }
  if (id == nullptr) {
    return " (no id)";
  }
  return " (id '" + id->substr(0, kMaxQuotedId) + (id->size() > kMaxQuotedId ? "...'" : "'") + ")";
}

StatusOr<Tensor> TakeTensor(docarray::NodeProto* node, const DecodeLimits& limits) {
  auto* dense = node->mutable_ndarray()->mutable_dense();
  std::vector<std::int64_t> shape(dense->shape().begin(), dense->shape().end());
  // Checked here, before Tensor::FromBytes, so that the message carries the
  // message cap; an empty buffer is no longer read as zeros (a 90-byte
  // request could ask for gigabytes that way).
  GANTRY_RETURN_IF_ERROR(
      CheckTensorBuffer(shape, dense->dtype(), dense->buffer().size(), limits.max_tensor_bytes));
  GANTRY_ASSIGN_OR_RETURN(Tensor tensor,
                          Tensor::FromBytes(std::move(*dense->mutable_dtype()), std::move(shape),
                                            std::move(*dense->mutable_buffer())));
  tensor.set_type_name(node->type());
  return tensor;
}

// Errors are built bottom-up: each level prefixes its key, so the happy path
// allocates no location strings. `depth` counts nested containers (lists,
// dicts, documents) from the top-level document's fields (0).
StatusOr<Value> TakeNode(docarray::NodeProto* node, const DecodeLimits& limits, int depth) {
  Value value;
  switch (node->content_case()) {
    case docarray::NodeProto::CONTENT_NOT_SET:
      break;
    case docarray::NodeProto::kText:
      value = Value(std::move(*node->mutable_text()));
      break;
    case docarray::NodeProto::kInteger:
      value = Value(static_cast<std::int64_t>(node->integer()));
      break;
    case docarray::NodeProto::kFloat:
      value = Value(node->float_());
      break;
    case docarray::NodeProto::kBoolean:
      value = Value(node->boolean());
      break;
    case docarray::NodeProto::kBlob:
      value = Value(Blob{std::move(*node->mutable_blob())});
      break;
    case docarray::NodeProto::kNdarray: {
      GANTRY_ASSIGN_OR_RETURN(Tensor tensor, TakeTensor(node, limits));
      return Value(std::move(tensor));
    }
    case docarray::NodeProto::kDoc: {
      GANTRY_ASSIGN_OR_RETURN(Doc doc, TakeDoc(node->mutable_doc(), limits, depth + 1, "doc"));
      value = Value(std::move(doc));
      break;
    }
    case docarray::NodeProto::kDocArray: {
      GANTRY_ASSIGN_OR_RETURN(DocList docs,
                              TakeDocList(node->mutable_doc_array(), limits, depth + 1));
      value = Value(std::move(docs));
      break;
    }
    case docarray::NodeProto::kList:
    case docarray::NodeProto::kSet:
    case docarray::NodeProto::kTuple: {
      GANTRY_RETURN_IF_ERROR(CheckDepth(depth + 1, "", limits.max_depth));
      docarray::ListOfAnyProto* list =
          node->content_case() == docarray::NodeProto::kList  ? node->mutable_list()
          : node->content_case() == docarray::NodeProto::kSet ? node->mutable_set()
                                                              : node->mutable_tuple();
      Value::ListKind kind =
          node->content_case() == docarray::NodeProto::kList  ? Value::ListKind::kList
          : node->content_case() == docarray::NodeProto::kSet ? Value::ListKind::kSet
                                                              : Value::ListKind::kTuple;
      Value::List items;
      items.reserve(static_cast<std::size_t>(list->data_size()));
      for (int i = 0; i < list->data_size(); ++i) {
        auto item = TakeNode(list->mutable_data(i), limits, depth + 1);
        if (!item.ok()) {
          return item.status().WithPrefix("[" + std::to_string(i) + "]");
        }
        items.push_back(std::move(item).value());
      }
      value = Value(std::move(items), kind);
      break;
    }
    case docarray::NodeProto::kDict: {
      GANTRY_RETURN_IF_ERROR(CheckDepth(depth + 1, "", limits.max_depth));
      Value::Dict dict;
      for (auto& [key, item_node] : *node->mutable_dict()->mutable_data()) {
        auto item = TakeNode(&item_node, limits, depth + 1);
        if (!item.ok()) {
          return item.status().WithPrefix(key);
        }
        dict.emplace(key, std::move(item).value());
      }
      value = Value(std::move(dict));
      break;
    }
  }
  if (node->docarray_type_case() == docarray::NodeProto::kType) {
    value.set_docarray_type(std::move(*node->mutable_type()));
  }
  return value;
}

StatusOr<Doc> TakeDoc(docarray::DocProto* proto, const DecodeLimits& limits, int depth,
                      std::string_view label) {
  GANTRY_RETURN_IF_ERROR(CheckDepth(depth, label, limits.max_depth));
  Doc doc = Doc::Empty();
  for (auto& [key, node] : *proto->mutable_data()) {
    auto value = TakeNode(&node, limits, depth);
    if (!value.ok()) {
      return value.status().WithPrefix(std::string(label) + IdForError(doc, *proto) + ": field '" +
                                       key + "'");
    }
    doc.mutable_fields().emplace(key, std::move(value).value());
  }
  return doc;
}

StatusOr<DocList> TakeDocList(docarray::DocListProto* proto, const DecodeLimits& limits,
                              int depth) {
  GANTRY_RETURN_IF_ERROR(CheckDepth(depth, "", limits.max_depth));
  DocList docs;
  docs.reserve(static_cast<std::size_t>(proto->docs_size()));
  for (int i = 0; i < proto->docs_size(); ++i) {
    auto doc = TakeDoc(proto->mutable_docs(i), limits, depth, "docs[" + std::to_string(i) + "]");
    if (!doc.ok()) {
      return doc.status();
    }
    docs.push_back(std::move(doc).value());
  }
  return docs;
}

StatusOr<Value> StructValueToValue(const google::protobuf::Value& in, int depth);

StatusOr<Value::Dict> StructFieldsToDict(const google::protobuf::Struct& proto, int depth) {
  GANTRY_RETURN_IF_ERROR(CheckDepth(depth, ""));
  Value::Dict dict;
  for (const auto& [key, item] : proto.fields()) {
    auto value = StructValueToValue(item, depth);
    if (!value.ok()) {
      return value.status().WithPrefix(key);
    }
    dict.emplace(key, std::move(value).value());
  }
  return dict;
}

StatusOr<Value> StructValueToValue(const google::protobuf::Value& in, int depth) {
  switch (in.kind_case()) {
    case google::protobuf::Value::kNullValue:
    case google::protobuf::Value::KIND_NOT_SET:
      return Value();
    case google::protobuf::Value::kNumberValue:
      return Value(in.number_value());
    case google::protobuf::Value::kStringValue:
      return Value(in.string_value());
    case google::protobuf::Value::kBoolValue:
      return Value(in.bool_value());
    case google::protobuf::Value::kStructValue: {
      GANTRY_ASSIGN_OR_RETURN(Value::Dict dict, StructFieldsToDict(in.struct_value(), depth + 1));
      return Value(std::move(dict));
    }
    case google::protobuf::Value::kListValue: {
      GANTRY_RETURN_IF_ERROR(CheckDepth(depth + 1, ""));
      Value::List list;
      const auto& values = in.list_value().values();
      for (int i = 0; i < values.size(); ++i) {
        auto item = StructValueToValue(values[i], depth + 1);
        if (!item.ok()) {
          return item.status().WithPrefix("[" + std::to_string(i) + "]");
        }
        list.push_back(std::move(item).value());
      }
      return Value(std::move(list));
    }
  }
  return Value();
}

void ValueToStructValue(const Value& in, google::protobuf::Value* out) {
  switch (in.kind()) {
    case Value::Kind::kNone:
      out->set_null_value(google::protobuf::NULL_VALUE);
      break;
    case Value::Kind::kText:
      out->set_string_value(*in.AsText());
      break;
    case Value::Kind::kInt:
      out->set_number_value(static_cast<double>(*in.AsInt()));
      break;
    case Value::Kind::kFloat:
      out->set_number_value(*in.AsFloat());
      break;
    case Value::Kind::kBool:
      out->set_bool_value(*in.AsBool());
      break;
    case Value::Kind::kBlob:
      out->set_string_value(in.AsBlob()->bytes);
      break;
    case Value::Kind::kList: {
      auto* list = out->mutable_list_value();
      for (const Value& item : *in.AsList()) {
        ValueToStructValue(item, list->add_values());
      }
      break;
    }
    case Value::Kind::kDict:
      DictToStruct(*in.AsDict(), out->mutable_struct_value());
      break;
    case Value::Kind::kTensor:
    case Value::Kind::kDoc:
    case Value::Kind::kDocList:
      // A Struct cannot hold these; parameters are JSON-like by contract.
      out->set_string_value(in.DebugString());
      break;
  }
}

}  // namespace

void DocListToProto(const DocList& docs, docarray::DocListProto* proto) {
  proto->mutable_docs()->Reserve(proto->docs_size() + static_cast<int>(docs.size()));
  for (const Doc& doc : docs) {
    DocToProto(doc, proto->add_docs());
  }
}

StatusOr<DocList> TakeDocListFromProto(docarray::DocListProto* proto, const DecodeLimits& limits) {
  return TakeDocList(proto, limits, 0);
}

StatusOr<DocList> DocListFromBytes(const std::string& bytes, const DecodeLimits& limits) {
  docarray::DocListProto proto;
  if (!proto.ParseFromString(bytes)) {
    return InvalidArgumentError(
        "docs_bytes is not a serialized docarray.DocListProto (or is nested deeper than "
        "protobuf's 100-level limit)");
  }
  return TakeDocListFromProto(&proto, limits);
}

StatusOr<Value::Dict> StructToDict(const google::protobuf::Struct& proto) {
  return StructFieldsToDict(proto, 0);
}

void DictToStruct(const Value::Dict& dict, google::protobuf::Struct* proto) {
  auto* fields = proto->mutable_fields();
  for (const auto& [key, value] : dict) {
    ValueToStructValue(value, &(*fields)[key]);
  }
}

bool IsInputTooLarge(const jina::StatusProto& status) {
  return status.code() == jina::StatusProto::ERROR &&
         (status.exception().name() == "std::length_error" ||
          status.exception().name() == "ReplyTooLarge");
}

bool IsInvalidInput(const jina::StatusProto& status) {
  return status.code() == jina::StatusProto::ERROR &&
         status.exception().name() == "std::invalid_argument";
}

}  // namespace gantry::internal
