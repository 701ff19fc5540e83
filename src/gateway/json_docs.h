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

#include <nlohmann/json.hpp>
#include <string>

#include "docarray/docarray.pb.h"
#include "google/protobuf/struct.pb.h"

namespace gantry::internal {

// `subject` names the document in errors ("data[3]").
Status JsonToDocProto(const nlohmann::json& doc, const std::string& subject,
                      docarray::DocProto* out);
nlohmann::json DocProtoToJson(const docarray::DocProto& doc);

// google.protobuf.Struct <-> JSON object (numbers are doubles in a Struct).
Status JsonToStruct(const nlohmann::json& object, const std::string& subject,
                    google::protobuf::Struct* out);
nlohmann::json StructToJson(const google::protobuf::Struct& proto);

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_JSON_DOCS_H_
