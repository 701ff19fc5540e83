// Values written as YAML the way `gantry export` writes its files: strings
// that YAML would read back as something else are quoted, multi-line text
// is a literal block, every file starts with the header comment.
//
// Thread safety: pure functions.
#ifndef GANTRY_EXPORT_YAML_WRITER_H_
#define GANTRY_EXPORT_YAML_WRITER_H_

#include <gantry/document.h>
#include <gantry/status.h>
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "export/topology.h"

namespace gantry::exporting {

// `value` onto `out`; a kind YAML cannot hold (a tensor, a blob) is
// InvalidArgument.
Status Emit(YAML::Emitter& out, const Value& value);

// One or more YAML documents, with the header comment first.
StatusOr<std::string> EmitDocuments(const Topology& t, const std::vector<Value>& docs);

// Short names for the values the documents are built of.
Value Text(std::string text);
Value Int(std::int64_t n);
Value List(std::initializer_list<Value> items);

}  // namespace gantry::exporting

#endif  // GANTRY_EXPORT_YAML_WRITER_H_
