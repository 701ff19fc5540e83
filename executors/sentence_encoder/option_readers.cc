#include "option_readers.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace gantry::sentence_encoder {

WithReader::WithReader(const ExecutorContext& context, std::string_view type,
                       std::initializer_list<std::string_view> keys)
    : context_(context), type_(type) {
  std::string allowed;
  for (std::string_view key : keys) {
    allowed += (allowed.empty() ? "" : ", ") + std::string(key);
  }
  for (const auto& [key, value] : context.with.values()) {
    bool known = false;
    for (std::string_view k : keys) {
      known = known || key == k;
    }
    if (!known) {
      throw std::runtime_error(Error(key, "unknown key (allowed: " + allowed + ")"));
    }
  }
}

std::string WithReader::Error(std::string_view key, const std::string& what) const {
  return "executor '" + context_.name + "' (" + type_ + "): with." + std::string(key) + ": " + what;
}

std::string WithReader::LoadError(const std::string& what) const {
  return "executor '" + context_.name + "' (" + type_ + ") on " + context_.device.ToString() +
         ": " + what;
}

std::string WithReader::Text(std::string_view key, std::string fallback) const {
  const Value* value = context_.with.Find(key);
  if (value == nullptr || value->is_none()) {
    return fallback;
  }
  const std::string* text = value->AsText();
  if (text == nullptr) {
    throw std::runtime_error(Error(key, "expected a string, got " + value->DebugString()));
  }
  return *text;
}

std::int64_t WithReader::PositiveInt(std::string_view key, std::int64_t fallback) const {
  const Value* value = context_.with.Find(key);
  if (value == nullptr || value->is_none()) {
    return fallback;
  }
  double number = 0;
  if (!value->ToNumber(&number) || number != std::floor(number) || number < 1 || number > 1e9) {
    throw std::runtime_error(
        Error(key, "expected a positive integer, got " + value->DebugString()));
  }
  return static_cast<std::int64_t>(number);
}

std::optional<bool> WithReader::Bool(std::string_view key) const {
  const Value* value = context_.with.Find(key);
  if (value == nullptr || value->is_none()) {
    return std::nullopt;
  }
  const bool* flag = value->AsBool();
  if (flag == nullptr) {
    throw std::runtime_error(Error(key, "expected true or false, got " + value->DebugString()));
  }
  return *flag;
}

std::optional<bool> ReadBoolParameter(const Parameters& parameters, std::string_view key) {
  const Value* given = parameters.Find(key);
  if (given == nullptr || given->is_none()) {
    return std::nullopt;
  }
  const bool* flag = given->AsBool();
  if (flag == nullptr) {
    throw std::invalid_argument("parameter " + std::string(key) + ": expected true or false, got " +
                                given->DebugString());
  }
  return *flag;
}

Truncation ReadTruncation(const Parameters& parameters, bool auto_truncate) {
  if (!ReadBoolParameter(parameters, "truncate").value_or(auto_truncate)) {
    return Truncation::kNone;
  }
  const Value* direction = parameters.Find("truncation_direction");
  if (direction == nullptr || direction->is_none()) {
    return Truncation::kRight;
  }
  // TEI spells them "Right" and "Left".
  const std::string* text = direction->AsText();
  if (text != nullptr && (*text == "right" || *text == "Right")) {
    return Truncation::kRight;
  }
  if (text != nullptr && (*text == "left" || *text == "Left")) {
    return Truncation::kLeft;
  }
  throw std::invalid_argument(
      "parameter truncation_direction: expected \"right\" or \"left\", got " +
      direction->DebugString());
}

namespace {

// A value as an error quotes it: at most 80 characters of it.
std::string Shortened(const Value& value) {
  constexpr std::size_t kMost = 80;
  std::string text = value.DebugString();
  if (text.size() > kMost) {
    text.resize(kMost);
    text += "...";
  }
  return text;
}

}  // namespace

Status CheckTexts(const DocList& docs) {
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const Value* text = docs[i].Find("text");
    if (text != nullptr && text->AsText() == nullptr) {
      return InvalidArgumentError("document " + std::to_string(i) + " (id " + docs[i].id() +
                                  ") has a field 'text' that is not text: " + Shortened(*text));
    }
  }
  return OkStatus();
}

bool HasText(const Doc& doc) {
  const Value* text = doc.Find("text");
  return text != nullptr && text->AsText() != nullptr;
}

Status CheckReplyFits(const DocList& docs, std::int64_t dimension, std::int64_t max_message_bytes) {
  if (max_message_bytes <= 0 || docs.empty()) {
    return OkStatus();
  }
  const auto vector_bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(dimension, 0)) * 4;
  std::uint64_t least = 0;
  for (const Doc& doc : docs) {
    const Value* text = doc.Find("text");
    if (text != nullptr && text->AsText() != nullptr) {
      least += vector_bytes + text->AsText()->size();
    }
  }
  const auto cap = static_cast<std::uint64_t>(max_message_bytes);
  if (least <= cap) {
    return OkStatus();
  }
  const std::uint64_t fitting =
      std::max<std::uint64_t>(1, cap / ((least + docs.size() - 1) / docs.size()));
  return InvalidArgumentError(
      std::to_string(docs.size()) + " documents make a reply of at least " + std::to_string(least) +
      " bytes (each its text and " + std::to_string(dimension) + " float32 values), over the " +
      std::to_string(cap) +
      "-byte message cap (max_message_bytes): send fewer documents a request (at most " +
      std::to_string(fitting) + " of these sizes could fit)");
}

}  // namespace gantry::sentence_encoder
