// File: executors/sentence_encoder/token_tags.h
//
// The tokens of documents as tags, for text-embeddings-inference's
// /tokenize: each document gets tag `tokens`, a list of {"id", "text",
// "special", "start", "stop"}, where start/stop are the UTF-8 byte offsets
// of the token in the tokenized text (prompt included) and `text` is those
// bytes; tokens the template adds ([CLS], [SEP]) are special, carry their
// vocabulary string as text and null offsets.
//
// Thread safety: a free function without shared state.
#ifndef GANTRY_EXECUTORS_SENTENCE_ENCODER_TOKEN_TAGS_H_
#define GANTRY_EXECUTORS_SENTENCE_ENCODER_TOKEN_TAGS_H_

#include <gantry/document.h>

#include <cstddef>
#include <string_view>

#include "tokenizer.h"

namespace gantry::sentence_encoder {

// Most tokens one /tokenize request may list, all its documents together:
// each becomes a tag of five fields (a few hundred bytes in the worker, about
// 60 as JSON), so a request of 64 MiB of one-letter words would otherwise
// hold gigabytes.
inline constexpr std::size_t kMaxTokensPerRequest = 131072;

// Sets tag `tokens` on every document from `prompt` + its text. Throws
// std::invalid_argument for text that is not UTF-8 and std::length_error
// once the documents pass kMaxTokensPerRequest tokens in all, each naming the
// document.
void TagTokens(DocList& docs, const WordPieceTokenizer& tokenizer, std::string_view prompt,
               bool add_special_tokens);

}  // namespace gantry::sentence_encoder

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_TOKEN_TAGS_H_
