// Conversion between Gantry documents and docarray/Jina protobufs. Internal:
// only gRPC-side code may include this (it pulls in generated .pb.h files).
#ifndef GANTRY_CORE_DOC_PROTO_H_
#define GANTRY_CORE_DOC_PROTO_H_

#include <gantry/document.h>
#include <gantry/status.h>

#include "docarray/docarray.pb.h"
#include "google/protobuf/struct.pb.h"

namespace gantry::internal {

// Appends every document of `docs` to `proto`.
void DocListToProto(const DocList& docs, docarray::DocListProto* proto);

// Decodes `proto`, moving its strings and bytes out (the proto is left in a
// valid but unspecified state). Bad tensors (unknown dtype, buffer size not
// matching the shape) are InvalidArgument naming the document and field.
StatusOr<DocList> TakeDocListFromProto(docarray::DocListProto* proto);

// Parses a serialized DocListProto (Jina's `docs_bytes`).
StatusOr<DocList> DocListFromBytes(const std::string& bytes);

// google.protobuf.Struct <-> Value::Dict. Struct numbers are doubles; on the
// way in, whole numbers stay doubles (as Python's json would give them).
Value::Dict StructToDict(const google::protobuf::Struct& proto);
void DictToStruct(const Value::Dict& dict, google::protobuf::Struct* proto);

}  // namespace gantry::internal

#endif  // GANTRY_CORE_DOC_PROTO_H_
