#include "core/yaml_scalar.h"

#include <cctype>
#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace gantry::internal {
namespace {

std::string Quote(std::string_view text) { return "\"" + std::string(text) + "\""; }

// YAML 1.2 core-schema integers: decimal, 0x hex, 0o octal.
enum class IntParse { kNotInt, kOk, kOutOfRange };
IntParse ParseInt(std::string_view text, std::int64_t* out) {
  bool negative = false;
  std::string_view digits = text;
  if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) {
    negative = digits[0] == '-';
    digits.remove_prefix(1);
  }
  int base = 10;
  if (digits.starts_with("0x")) {
    base = 16;
    digits.remove_prefix(2);
  } else if (digits.starts_with("0o")) {
    base = 8;
    digits.remove_prefix(2);
  }
  if (digits.empty()) {
    return IntParse::kNotInt;
  }
  for (char c : digits) {
    bool ok = base == 16 ? std::isxdigit(static_cast<unsigned char>(c)) != 0
                         : (c >= '0' && c < static_cast<char>('0' + base));
    if (!ok) {
      return IntParse::kNotInt;
    }
  }
  std::uint64_t magnitude = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (ec != std::errc() || magnitude > kMax + (negative ? 1 : 0)) {
    return IntParse::kOutOfRange;
  }
  *out = negative ? static_cast<std::int64_t>(0 - magnitude) : static_cast<std::int64_t>(magnitude);
  return IntParse::kOk;
}

// YAML 1.2 core-schema floats, including .inf and .nan.
bool ParseFloat(std::string_view text, double* out) {
  std::string_view body = text;
  bool negative = false;
  if (!body.empty() && (body[0] == '-' || body[0] == '+')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == ".inf" || body == ".Inf" || body == ".INF") {
    *out = negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
    return true;
  }
  if (text == ".nan" || text == ".NaN" || text == ".NAN") {
    *out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  bool has_digit = false;
  for (char c : body) {
    if (c >= '0' && c <= '9') {
      has_digit = true;
    } else if (c != '.' && c != 'e' && c != 'E' && c != '-' && c != '+') {
      return false;
    }
  }
  if (!has_digit || body[0] == 'e' || body[0] == 'E' || body[0] == '-' || body[0] == '+') {
    return false;
  }
  double value = 0;
  auto [ptr, ec] = std::from_chars(body.data(), body.data() + body.size(), value);
  if (ptr != body.data() + body.size() ||
      (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    return false;
  }
  *out = negative ? -value : value;
  return true;
}

std::optional<bool> ParseBool(std::string_view text) {
  if (text == "true" || text == "True" || text == "TRUE") {
    return true;
  }
  if (text == "false" || text == "False" || text == "FALSE") {
    return false;
  }
  return std::nullopt;
}

bool IsNullText(std::string_view text) {
  return text == "~" || text == "null" || text == "Null" || text == "NULL";
}

}  // namespace

StatusOr<Value> TypeYamlScalar(std::string_view text, std::string_view tag) {
  constexpr std::string_view kCore = "tag:yaml.org,2002:";
  std::string_view type;
  if (tag == "?") {
    type = "";
  } else if (tag == "!") {
    type = "str";
  } else if (tag.starts_with(kCore)) {
    type = tag.substr(kCore.size());
  } else {
    return InvalidArgumentError("unsupported YAML tag " + Quote(tag));
  }
  if (type == "str") {
    return Value(std::string(text));
  }
  if (type.empty() || type == "int") {
    std::int64_t i = 0;
    switch (ParseInt(text, &i)) {
      case IntParse::kOk:
        return Value(i);
      case IntParse::kOutOfRange:
        return InvalidArgumentError("integer " + std::string(text) + " does not fit in 64 bits");
      case IntParse::kNotInt:
        if (!type.empty()) {
          return InvalidArgumentError("expected an integer, got " + Quote(text));
        }
    }
  }
  if (type.empty() || type == "float") {
    double d = 0;
    if (ParseFloat(text, &d)) {
      return Value(d);
    }
    if (!type.empty()) {
      return InvalidArgumentError("expected a float, got " + Quote(text));
    }
  }
  if (type.empty() || type == "bool") {
    if (std::optional<bool> b = ParseBool(text)) {
      return Value(*b);
    }
    if (!type.empty()) {
      return InvalidArgumentError("expected true or false, got " + Quote(text));
    }
  }
  if (type.empty() || type == "null") {
    if (IsNullText(text) || (!type.empty() && text.empty())) {
      return Value();
    }
    if (!type.empty()) {
      return InvalidArgumentError("expected null, got " + Quote(text));
    }
  }
  if (!type.empty()) {
    return InvalidArgumentError("unsupported YAML tag " + Quote(tag));
  }
  return Value(std::string(text));
}

}  // namespace gantry::internal
