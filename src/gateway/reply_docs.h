// The documents of an executor's reply (a Jina DataRequestProto), in either
// of Jina's forms: `docs`, or `docs_bytes` (a serialized DocListProto). A
// reply with neither has no documents. Also what kind of error a reply is. The HTTP, OpenAI and
// KServe front ends all read replies through here.
//
// Thread safety: stateless functions, safe from any thread.
#ifndef GANTRY_GATEWAY_REPLY_DOCS_H_
#define GANTRY_GATEWAY_REPLY_DOCS_H_

#include <gantry/document.h>
#include <gantry/status.h>

#include <optional>

#include "core/doc_proto.h"
#include "docarray/docarray.pb.h"
#include "jina/jina.pb.h"

namespace gantry::internal {

// Both take the documents out of `reply` (a reply's texts can be tens of MB,
// and a copy would hold them twice); its header and parameters stay.

// As protos, for front ends that write them out as they are (HTTP JSON).
// `docs_bytes` that do not parse are InvalidArgument.
StatusOr<docarray::DocListProto> ReplyDocProtos(jina::DataRequestProto* reply);

// Decoded as Documents within `limits` (core/doc_proto.h's errors).
StatusOr<DocList> ReplyDocs(jina::DataRequestProto* reply, const DecodeLimits& limits);

// The gRPC code (StatusCode's number) of an error reply that a worker's
// dynamic batching queue gave without running the handler:
// RESOURCE_EXHAUSTED (queue full) or DEADLINE_EXCEEDED (past
// queue_timeout), read from the exception name the worker sets to the
// code's name. nullopt for any other reply, handler errors included. Front
// ends answer these as their protocol's overload and timeout (HTTP 429, 504).
std::optional<int> QueueRefusalCode(const jina::StatusProto& status);

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_REPLY_DOCS_H_
