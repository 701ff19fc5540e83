#include "gateway/request_merge.h"

#include <string>
#include <unordered_map>
#include <utility>

namespace gantry::internal {
namespace {

void MergeDocs(docarray::DocProto* left, docarray::DocProto* right);

// The document's id, or nullptr when it has none (it then matches nothing).
const std::string* DocId(const docarray::DocProto& doc) {
  auto it = doc.data().find("id");
  if (it == doc.data().end() || it->second.content_case() != docarray::NodeProto::kText) {
    return nullptr;
  }
  return &it->second.text();
}

void AppendList(docarray::ListOfAnyProto* left, docarray::ListOfAnyProto* right, bool as_set) {
  for (docarray::NodeProto& item : *right->mutable_data()) {
    if (as_set) {
      // Sets hold scalars in practice; equal encodings are equal members.
      const std::string encoded = item.SerializeAsString();
      bool present = false;
      for (const docarray::NodeProto& have : left->data()) {
        present = present || have.SerializeAsString() == encoded;
      }
      if (present) {
        continue;
      }
    }
    *left->add_data() = std::move(item);
  }
}

// docarray's BaseDoc.update for one field that both documents set.
void MergeNode(docarray::NodeProto* left, docarray::NodeProto* right) {
  const auto kind = right->content_case();
  if (kind == left->content_case()) {
    switch (kind) {
      case docarray::NodeProto::kDict:
        for (auto& [key, value] : *right->mutable_dict()->mutable_data()) {
          (*left->mutable_dict()->mutable_data())[key] = std::move(value);
        }
        return;
      case docarray::NodeProto::kList:
        AppendList(left->mutable_list(), right->mutable_list(), false);
        return;
      case docarray::NodeProto::kTuple:
        AppendList(left->mutable_tuple(), right->mutable_tuple(), false);
        return;
      case docarray::NodeProto::kSet:
        AppendList(left->mutable_set(), right->mutable_set(), true);
        return;
      case docarray::NodeProto::kDoc:
        MergeDocs(left->mutable_doc(), right->mutable_doc());
        return;
      case docarray::NodeProto::kDocArray:
        MergeDocLists(left->mutable_doc_array(), right->mutable_doc_array());
        return;
      default:
        break;
    }
  }
  *left = std::move(*right);
}

void MergeDocs(docarray::DocProto* left, docarray::DocProto* right) {
  auto* fields = left->mutable_data();
  for (auto& [key, value] : *right->mutable_data()) {
    // A field left None does not erase the other branch's value.
    if (key == "id" || value.content_case() == docarray::NodeProto::CONTENT_NOT_SET) {
      continue;
    }
    auto it = fields->find(key);
    if (it == fields->end() || it->second.content_case() == docarray::NodeProto::CONTENT_NOT_SET) {
      (*fields)[key] = std::move(value);
    } else {
      MergeNode(&it->second, &value);
    }
  }
}

// The request's documents as a DocListProto in `docs`, decoding `docs_bytes`.
Status NormalizeDocs(jina::DataRequestProto& request, std::size_t index) {
  auto* data = request.mutable_data();
  if (!data->has_docs_bytes()) {
    data->mutable_docs();  // an absent list is an empty one
    return OkStatus();
  }
  docarray::DocListProto docs;
  if (!docs.ParseFromString(data->docs_bytes())) {
    return InvalidArgumentError("reply " + std::to_string(index) +
                                ": docs_bytes is not a serialized DocListProto");
  }
  *data->mutable_docs() = std::move(docs);
  return OkStatus();
}

}  // namespace

void MergeDocLists(docarray::DocListProto* left, docarray::DocListProto* right) {
  std::unordered_map<std::string, int> index;
  for (int i = 0; i < left->docs_size(); ++i) {
    if (const std::string* id = DocId(left->docs(i))) {
      index.emplace(*id, i);
    }
  }
  for (docarray::DocProto& doc : *right->mutable_docs()) {
    const std::string* id = DocId(doc);
    auto it = id != nullptr ? index.find(*id) : index.end();
    if (it != index.end()) {
      MergeDocs(left->mutable_docs(it->second), &doc);
      continue;
    }
    if (id != nullptr) {
      index.emplace(*id, left->docs_size());
    }
    *left->add_docs() = std::move(doc);
  }
}

Status MergeRequests(std::vector<jina::DataRequestProto>& parts) {
  if (parts.empty()) {
    return InvalidArgumentError("no replies to merge");
  }
  jina::DataRequestProto& base = parts.front();
  GANTRY_RETURN_IF_ERROR(NormalizeDocs(base, 0));
  for (std::size_t i = 1; i < parts.size(); ++i) {
    jina::DataRequestProto& part = parts[i];
    GANTRY_RETURN_IF_ERROR(NormalizeDocs(part, i));
    MergeDocLists(base.mutable_data()->mutable_docs(), part.mutable_data()->mutable_docs());
    // Routes the branches share (the steps before they split) appear once.
    for (jina::RouteProto& route : *part.mutable_routes()) {
      bool seen = false;
      for (const jina::RouteProto& have : base.routes()) {
        seen = seen ||
               (have.executor() == route.executor() &&
                have.start_time().SerializeAsString() == route.start_time().SerializeAsString());
      }
      if (!seen) {
        *base.add_routes() = std::move(route);
      }
    }
  }
  return OkStatus();
}

}  // namespace gantry::internal
