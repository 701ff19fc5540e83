// YAML 1.2 core-schema typing of one scalar: what a plain or tagged
// scalar's text becomes as a Value (an integer, a float, a bool, null or a
// string). The YAML loader (core/config.cc) asks it for every scalar, after
// `${{ ENV.NAME }}` substitution.
//
// Thread safety: pure functions, safe from any thread.
#ifndef GANTRY_CORE_YAML_SCALAR_H_
#define GANTRY_CORE_YAML_SCALAR_H_

#include <gantry/document.h>
#include <gantry/status.h>

#include <string_view>

namespace gantry::internal {

// `text` typed by `tag` as yaml-cpp reports it: "?" for a plain scalar
// (typed by its text: 12, 0x1f, 1.5, .inf, true, null, else a string), "!"
// for a quoted one (a string), or a core-schema tag ("tag:yaml.org,2002:int",
// float, bool, null, str) that the text must match. InvalidArgument names
// the problem ("expected an integer, got \"x\"", "integer ... does not fit in
// 64 bits", "unsupported YAML tag \"!foo\"").
StatusOr<Value> TypeYamlScalar(std::string_view text, std::string_view tag);

}  // namespace gantry::internal

#endif  // GANTRY_CORE_YAML_SCALAR_H_
