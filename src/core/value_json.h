// JSON encoding of Value::Dict, used to hand an executor's `with:` and
// `metas:` to worker processes on their command line.
//
// Plain values map onto JSON as expected: none <-> null, text <-> string,
// int <-> integer, float <-> number with a fraction or exponent, bool <->
// bool, list <-> array, dict <-> object. ValueDictFromJson turns JSON
// integers into ints (int64) and every other number into a float, so
// ValueDictToJson's output round-trips exactly. Output is ASCII only
// (non-ASCII text is \u-escaped), so it is safe as one argv entry.
//
// Kinds JSON has no word for travel as single-key tagged objects:
//   {"__float__": "nan" | "inf" | "-inf"}             non-finite floats
//   {"__blob__": "<base64>"}                          Blob
//   {"__tensor__": {"dtype": "<f4", "shape": [2, 3], "bytes": "<base64>"}}
//                  (plus "type": "torch_tensor" when the tensor has a type name)
//   {"__doc__": {<fields>}}                           Doc (all fields kept)
//   {"__doclist__": [<doc fields>, ...]}              DocList
//   {"__tuple__": [...]}, {"__set__": [...]}          non-list ListKinds
//   {"__typed__": {"type": "id", "value": ...}}      a value with a
//                                                     docarray_type annotation
//   {"__dict__": {...}}                               a dict whose only key
//                                                     is one of these tags
// Text that is not valid UTF-8 is encoded with U+FFFD replacements.
#ifndef GANTRY_CORE_VALUE_JSON_H_
#define GANTRY_CORE_VALUE_JSON_H_

#include <gantry/document.h>
#include <gantry/status.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/limits.h"

namespace gantry::internal {

// A compact JSON object. Never fails.
std::string ValueDictToJson(const Value::Dict& dict);

// Parses a JSON object. Malformed JSON, a top level that is not an object,
// integers outside int64, malformed tagged objects and nesting deeper than
// kMaxNestingDepth are InvalidArgument.
StatusOr<Value::Dict> ValueDictFromJson(std::string_view json);

// Parses JSON text from a client, refusing nesting deeper than `max_depth`
// arrays and objects while parsing (not after: a 100,000-deep document
// would overflow the stack of whatever walks it next). Malformed JSON and
// empty text are InvalidArgument with the parser's message; too deep is
// InvalidArgument "JSON nested deeper than 100 levels".
StatusOr<nlohmann::json> ParseJsonBounded(std::string_view text, int max_depth = kMaxNestingDepth);

}  // namespace gantry::internal

#endif  // GANTRY_CORE_VALUE_JSON_H_
