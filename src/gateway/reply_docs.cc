#include "gateway/reply_docs.h"

namespace gantry::internal {

StatusOr<docarray::DocListProto> ReplyDocProtos(jina::DataRequestProto* reply) {
  docarray::DocListProto list;
  if (reply->data().has_docs()) {
    list.Swap(reply->mutable_data()->mutable_docs());
    return list;
  }
  if (!reply->data().docs_bytes().empty() && !list.ParseFromString(reply->data().docs_bytes())) {
    return InvalidArgumentError("docs_bytes is not a serialized DocListProto");
  }
  reply->mutable_data()->clear_docs_bytes();
  return list;
}

StatusOr<DocList> ReplyDocs(jina::DataRequestProto* reply, const DecodeLimits& limits) {
  if (reply->data().has_docs()) {
    return TakeDocListFromProto(reply->mutable_data()->mutable_docs(), limits);
  }
  if (!reply->data().docs_bytes().empty()) {
    StatusOr<DocList> docs = DocListFromBytes(reply->data().docs_bytes(), limits);
    reply->mutable_data()->clear_docs_bytes();
    return docs;
  }
  return DocList();
}

std::optional<int> QueueRefusalCode(const jina::StatusProto& status) {
  if (status.code() != jina::StatusProto::ERROR) {
    return std::nullopt;
  }
  for (StatusCode code : {StatusCode::kResourceExhausted, StatusCode::kDeadlineExceeded}) {
    if (status.exception().name() == StatusCodeName(code)) {
      return static_cast<int>(code);
    }
  }
  return std::nullopt;
}

}  // namespace gantry::internal
