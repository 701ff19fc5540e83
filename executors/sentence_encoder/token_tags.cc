#include "token_tags.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace gantry::sentence_encoder {

void TagTokens(DocList& docs, const WordPieceTokenizer& tokenizer, std::string_view prompt,
               bool add_special_tokens) {
  const auto& options = tokenizer.options();
  std::string text;
  std::size_t total = 0;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const auto name = [&docs, i] {
      return "document " + std::to_string(i) + " (id " + docs[i].id() + ")";
    };
    text.assign(prompt);
    text.append(docs[i].text());
    std::vector<TokenSpan> tokens;
    try {
      tokens = tokenizer.Tokenize(text, add_special_tokens);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(name() + ": " + e.what());
    }
    total += tokens.size();
    if (total > kMaxTokensPerRequest) {
      throw std::length_error(name() + " has " + std::to_string(tokens.size()) +
                              " tokens, which bring the request to " + std::to_string(total) +
                              ", more than the " + std::to_string(kMaxTokensPerRequest) +
                              " /tokenize lists for one request");
    }
    Value::List list;
    list.reserve(tokens.size());
    for (const TokenSpan& token : tokens) {
      Value::Dict entry;
      entry["id"] = Value(token.id);
      entry["special"] = Value(token.special);
      if (token.special) {
        entry["text"] =
            Value(token.id == tokenizer.cls_id() ? options.cls_token : options.sep_token);
        entry["start"] = Value(nullptr);
        entry["stop"] = Value(nullptr);
      } else {
        entry["text"] = Value(text.substr(token.start, token.end - token.start));
        entry["start"] = Value(static_cast<std::int64_t>(token.start));
        entry["stop"] = Value(static_cast<std::int64_t>(token.end));
      }
      list.emplace_back(std::move(entry));
    }
    docs[i].mutable_tags()["tokens"] = Value(std::move(list));
  }
}

}  // namespace gantry::sentence_encoder
