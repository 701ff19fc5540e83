// Conversion between Gantry documents and docarray/Jina protobufs. Internal:
// only gRPC-side code may include this (it pulls in generated .pb.h files).
#ifndef GANTRY_CORE_DOC_PROTO_H_
#define GANTRY_CORE_DOC_PROTO_H_

#include <gantry/document.h>
#include <gantry/status.h>

#include <cstdint>
#include <limits>
#include <string>

#include "core/limits.h"
#include "docarray/docarray.pb.h"
#include "google/protobuf/struct.pb.h"

namespace jina {
class StatusProto;
}  // namespace jina

namespace gantry::internal {

// Whether an executor's error reply says the input was too large for it (its
// handler threw std::length_error, e.g. a text over the model's token limit
// with truncation off, or the reply it made was over the message cap, so
// that fewer documents a request would pass): HTTP 413 and gRPC INVALID_ARGUMENT for the gateway's
// front ends and the C++ client, where executor errors other than these and
// IsInvalidInput's are 500 and INTERNAL (UNKNOWN for the client).
bool IsInputTooLarge(const jina::StatusProto& status);
// An executor's error reply for input it refused as invalid: its handler
// threw std::invalid_argument (a parameter of the wrong type, a prompt the
// model lacks, bad UTF-8). Over HTTP 400 (TEI's routes 422), over gRPC
// INVALID_ARGUMENT, as IsInputTooLarge's.
bool IsInvalidInput(const jina::StatusProto& status);

// Appends every document of `docs` to `proto`.
void DocListToProto(const DocList& docs, docarray::DocListProto* proto);

// Bounds on decoding client data.
struct DecodeLimits {
  // Largest tensor buffer accepted (the worker passes its message cap; the
  // buffer has to be in the message anyway, so this mostly names the cap in
  // errors).
  std::uint64_t max_tensor_bytes = std::numeric_limits<std::uint64_t>::max();
  // Deepest nesting of documents (chunks, matches, doc fields), lists and
  // dicts, counted from the top-level document (0).
  int max_depth = kMaxNestingDepth;
};

// Decodes `proto`, moving its strings and bytes out (the proto is left in a
// valid but unspecified state). Bad tensors (unknown dtype, negative or
// overflowing shape, buffer size not exactly the shape's, over the cap) and
// nesting past `limits.max_depth` are InvalidArgument naming the document's
// index and id and the field: "docs[3] (id 'abc'): field 'embedding': shape
// [1000000000] of float32 needs 4000000000 bytes, buffer has 0".
StatusOr<DocList> TakeDocListFromProto(docarray::DocListProto* proto,
                                       const DecodeLimits& limits = {});

// Parses a serialized DocListProto (Jina's `docs_bytes`), then as above.
StatusOr<DocList> DocListFromBytes(const std::string& bytes, const DecodeLimits& limits = {});

// google.protobuf.Struct <-> Value::Dict. Struct numbers are doubles; on the
// way in, whole numbers stay doubles (as Python's json would give them).
// Nesting deeper than kMaxNestingDepth is InvalidArgument naming the key path.
StatusOr<Value::Dict> StructToDict(const google::protobuf::Struct& proto);
void DictToStruct(const Value::Dict& dict, google::protobuf::Struct* proto);

}  // namespace gantry::internal

#endif  // GANTRY_CORE_DOC_PROTO_H_
