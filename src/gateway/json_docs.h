// docarray JSON <-> docarray protobufs, for the HTTP gateway.
//
// A document is a JSON object of fields, as docarray's `doc.json()` writes
// it: {"id": "...", "text": "...", "embedding": [..], "tags": {...}}.
// Going in, at a document's top level: "id" becomes the typed id; a
// (nested, rectangular) array of numbers is a tensor, float32 unless the
// field is given as {"dtype": "<i8", "data": [...]} ; an array of objects is a
// nested DocList ("chunks", "matches"); an object is a dict; scalars keep
// their JSON type (integers that fit int32 stay integers, as docarray's).
// Inside dicts and lists everything is plain data. Going out, tensors of any
// dtype become nested lists shaped like the tensor.
#ifndef GANTRY_GATEWAY_JSON_DOCS_H_
#define GANTRY_GATEWAY_JSON_DOCS_H_

#include <gantry/status.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "docarray/docarray.pb.h"
#include "google/protobuf/struct.pb.h"
#include "jina/jina.pb.h"

namespace gantry::internal {

// `subject` names the document in errors ("data[3]"); errors add its id and
// the field: "data[3] (id 'abc'): field 'embedding': shape [-1] of float32
// has the negative dimension -1 on axis 0". A tensor may also be given as
// {"dtype": "<f4", "shape": [2, 2], "data": [...]}: the data is then
// reshaped and must hold exactly that many elements. Tensors over
// `max_bytes` and nesting past kMaxNestingDepth are InvalidArgument.
Status JsonToDocProto(const nlohmann::json& doc, const std::string& subject,
                      std::uint64_t max_bytes, docarray::DocProto* out);
// Takes `doc` (moved in, its texts are moved out rather than copied).
nlohmann::json DocProtoToJson(docarray::DocProto doc);

// google.protobuf.Struct <-> JSON object (numbers are doubles in a Struct).
// Nesting past kMaxNestingDepth is InvalidArgument naming `subject`.
Status JsonToStruct(const nlohmann::json& object, const std::string& subject,
                    google::protobuf::Struct* out);
nlohmann::json StructToJson(const google::protobuf::Struct& proto);

// The JSON body of the HTTP gateway's POST /<endpoint> (`endpoint` "/x") or
// POST /post (`endpoint` empty: the body's "execEndpoint", else /default)
// as the DataRequestProto it forwards: header (requestId, left empty when
// the body names none; targetExecutor), parameters and documents. Client
// mistakes (empty body, not JSON, not an object, too deep, bad documents)
// are InvalidArgument; a request over `max_bytes` once converted to
// protobuf is ResourceExhausted. `*single` tells whether "data" was one
// document rather than a list (the reply then is one document too).
Status ParseHttpDataRequest(std::string_view body, std::string endpoint, std::uint64_t max_bytes,
                            jina::DataRequestProto* request, bool* single);

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_JSON_DOCS_H_
