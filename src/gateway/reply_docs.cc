#include "gateway/reply_docs.h"

namespace gantry::internal {

StatusOr<docarray::DocListProto> ReplyDocProtos(const jina::DataRequestProto& reply) {
  if (reply.data().has_docs()) {
    return reply.data().docs();
  }
  docarray::DocListProto list;
  if (!reply.data().docs_bytes().empty() && !list.ParseFromString(reply.data().docs_bytes())) {
    return InvalidArgumentError("docs_bytes is not a serialized DocListProto");
  }
  return list;
}

StatusOr<DocList> ReplyDocs(const jina::DataRequestProto& reply, const DecodeLimits& limits) {
  if (reply.data().has_docs()) {
    docarray::DocListProto copy = reply.data().docs();
    return TakeDocListFromProto(&copy, limits);
  }
  if (!reply.data().docs_bytes().empty()) {
    return DocListFromBytes(reply.data().docs_bytes(), limits);
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
