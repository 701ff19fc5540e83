#include "export/yaml_writer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

namespace gantry::exporting {

namespace fs = std::filesystem;

namespace {

// Text that YAML would read back as something else (a number, a bool,
// null) or that starts with an indicator is quoted; args must stay strings.
bool NeedsQuotes(std::string_view text) {
  if (text.empty()) {
    return true;
  }
  char c = text.front();
  if ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == '~') {
    return true;
  }
  std::string lower;
  for (char ch : text) {
    lower += static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  }
  for (std::string_view word : {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}) {
    if (lower == word) {
      return true;
    }
  }
  return false;
}

}  // namespace

Status Emit(YAML::Emitter& out, const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kNone:
      out << YAML::Null;
      return OkStatus();
    case Value::Kind::kText: {
      const std::string& text = *value.AsText();
      if (text.find('\n') != std::string::npos) {
        out << YAML::Literal << text;
      } else if (NeedsQuotes(text)) {
        out << YAML::DoubleQuoted << text;
      } else {
        out << text;
      }
      return OkStatus();
    }
    case Value::Kind::kInt:
      out << *value.AsInt();
      return OkStatus();
    case Value::Kind::kFloat:
      out << *value.AsFloat();
      return OkStatus();
    case Value::Kind::kBool:
      out << YAML::TrueFalseBool << *value.AsBool();
      return OkStatus();
    case Value::Kind::kList:
      out << YAML::BeginSeq;
      for (const Value& item : *value.AsList()) {
        GANTRY_RETURN_IF_ERROR(Emit(out, item));
      }
      out << YAML::EndSeq;
      return OkStatus();
    case Value::Kind::kDict:
      out << YAML::BeginMap;
      for (const auto& [key, item] : *value.AsDict()) {
        out << YAML::Key;
        if (NeedsQuotes(key)) {
          out << YAML::DoubleQuoted;
        }
        out << key << YAML::Value;
        GANTRY_RETURN_IF_ERROR(Emit(out, item));
      }
      out << YAML::EndMap;
      return OkStatus();
    default:
      return InvalidArgumentError("a " + value.DebugString() + " cannot be written as YAML");
  }
}

StatusOr<std::string> EmitDocuments(const Topology& t, const std::vector<Value>& docs) {
  YAML::Emitter out;
  out << YAML::Comment(HeaderFor(t));
  for (const Value& doc : docs) {
    out << YAML::BeginDoc;
    GANTRY_RETURN_IF_ERROR(Emit(out, doc));
  }
  if (!out.good()) {
    return InternalError("YAML emitter: " + out.GetLastError());
  }
  return std::string(out.c_str()) + "\n";
}

Value Text(std::string text) { return Value(std::move(text)); }

Value Int(std::int64_t n) { return Value(n); }

Value List(std::initializer_list<Value> items) { return Value(Value::List(items)); }

}  // namespace gantry::exporting
