// File: executors/sentence_encoder/option_readers.h
//
// Readers shared by the model executors (SentenceEncoder, CrossEncoder):
// their `with:` keys, checked against the keys an executor knows, and the
// truncation a request asks for. Errors name the executor and the key or
// parameter.
//
// Thread safety: WithReader is "one thread at a time" (used in constructors);
// the other functions are pure.
#ifndef GANTRY_EXECUTORS_SENTENCE_ENCODER_OPTION_READERS_H_
#define GANTRY_EXECUTORS_SENTENCE_ENCODER_OPTION_READERS_H_

#include <gantry/executor.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sentence_embedder.h"

namespace gantry::sentence_encoder {

class WithReader {
 public:
  // Throws std::runtime_error for a key of context.with not in `keys`.
  // `type` is the executor type for messages ("SentenceEncoder").
  WithReader(const ExecutorContext& context, std::string_view type,
             std::initializer_list<std::string_view> keys);

  // The key's value, `fallback` when absent or null; throws
  // std::runtime_error naming the key when it has another type.
  std::string Text(std::string_view key, std::string fallback) const;
  // A whole number in [1, 1e9].
  std::int64_t PositiveInt(std::string_view key, std::int64_t fallback) const;
  std::optional<bool> Bool(std::string_view key) const;

  // "executor 'NAME' (TYPE): with.KEY: WHAT".
  std::string Error(std::string_view key, const std::string& what) const;
  // "executor 'NAME' (TYPE) on DEVICE: WHAT", for what loading the model said.
  std::string LoadError(const std::string& what) const;

 private:
  const ExecutorContext& context_;
  std::string type_;
};

// The request parameter `key` as true/false, nullopt when absent or null.
// Throws std::invalid_argument naming the parameter for another type.
std::optional<bool> ReadBoolParameter(const Parameters& parameters, std::string_view key);

// The request's `truncate` (true/false; `auto_truncate` when absent) and
// `truncation_direction` ("right"/"left", or TEI's "Right"/"Left").
// Throws std::invalid_argument naming the parameter.
Truncation ReadTruncation(const Parameters& parameters, bool auto_truncate);

// InvalidArgument naming the first document whose "text" field is not text
// (a number, a list: what a JSON client sends by mistake), rather than
// encoding it as an empty text; "" is text. A document without the field is
// not refused: the encoders leave it as it came (HasText), as Jina's do, so
// that documents with ids only (a Flow's /delete) pass through them. The
// executors' validators check each request with it before requests are
// merged, so that one bad request fails alone.
Status CheckTexts(const DocList& docs);

// Whether `doc` has a "text" field that is text: the documents an encoder
// encodes (the others it leaves as they came).
bool HasText(const Doc& doc);

// InvalidArgument when the reply to `docs` could only be over
// `max_message_bytes` (0: no cap): each document comes back with its text
// and `dimension` float32 values (documents with text, HasText), and those
// alone pass it. Checked before
// anything is encoded, so that a request of a hundred thousand short texts
// is refused at once, not after minutes of work whose reply would be
// refused anyway. Documents without text count as "" (CheckTexts first).
Status CheckReplyFits(const DocList& docs, std::int64_t dimension, std::int64_t max_message_bytes);

}  // namespace gantry::sentence_encoder

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_OPTION_READERS_H_
