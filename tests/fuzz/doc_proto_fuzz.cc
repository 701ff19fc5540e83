// libFuzzer target: a worker's decoding of a client's request
// (src/core/doc_proto.cc), as RequestHandler::Handle does it: the bytes as
// a jina.DataRequestProto, its documents (`docs` or `docs_bytes`) under a
// 1 MiB tensor cap, and its parameters. Whatever the bytes, decoding
// answers a Status; a DocList that decoded must encode and decode again to
// the same number of documents.
#include <gantry/document.h>

#include <cstddef>
#include <cstdint>

#include "core/doc_proto.h"
#include "jina/jina.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  jina::DataRequestProto request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) {
    return 0;
  }
  gantry::internal::DecodeLimits limits;
  limits.max_tensor_bytes = std::uint64_t{1} << 20;
  auto* body = request.mutable_data();
  gantry::StatusOr<gantry::DocList> docs = gantry::DocList();
  if (body->has_docs_bytes()) {
    docs = gantry::internal::DocListFromBytes(body->docs_bytes(), limits);
  } else if (body->has_docs()) {
    docs = gantry::internal::TakeDocListFromProto(body->mutable_docs(), limits);
  }
  (void)gantry::internal::StructToDict(request.parameters());
  if (!docs.ok()) {
    return 0;
  }
  // What the worker sends back must be what it can read.
  docarray::DocListProto again;
  gantry::internal::DocListToProto(*docs, &again);
  gantry::StatusOr<gantry::DocList> round_trip =
      gantry::internal::TakeDocListFromProto(&again, limits);
  if (!round_trip.ok() || round_trip->size() != docs->size()) {
    __builtin_trap();
  }
  return 0;
}
