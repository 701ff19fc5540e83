// libFuzzer target: the SentenceEncoder's WordPiece tokenizer
// (executors/sentence_encoder/tokenizer.cc) on arbitrary text. The vocab is
// tests/fuzz/tokenizer_vocab.txt (GANTRY_FUZZ_VOCAB, set by CMake), a few
// thousand entries of BERT's uncased vocab: specials, single characters and
// their "##" continuations, common words. The first byte picks max_length
// (2..257). Invalid UTF-8 must be std::invalid_argument, as documented;
// anything else (another exception, a crash, ids out of the vocab, more
// than max_length ids, no [CLS] ... [SEP] frame) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "tokenizer.h"

namespace {

const gantry::sentence_encoder::WordPieceTokenizer& Tokenizer() {
  static const gantry::sentence_encoder::WordPieceTokenizer* tokenizer = [] {
    const char* path = std::getenv("GANTRY_FUZZ_VOCAB");
    auto loaded = gantry::sentence_encoder::WordPieceTokenizer::LoadVocabTxt(
        path != nullptr ? path : GANTRY_FUZZ_VOCAB);
    if (!loaded.ok()) {
      __builtin_trap();  // the vocab is part of the target
    }
    return new gantry::sentence_encoder::WordPieceTokenizer(std::move(loaded).value());
  }();
  return *tokenizer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  const auto& tokenizer = Tokenizer();
  const std::size_t max_length = 2 + data[0];
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<std::int64_t> ids;
  try {
    ids = tokenizer.Encode(text, max_length);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  if (ids.size() < 2 || ids.size() > max_length || ids.front() != tokenizer.cls_id() ||
      ids.back() != tokenizer.sep_id()) {
    __builtin_trap();
  }
  for (std::int64_t id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= tokenizer.vocab_size()) {
      __builtin_trap();
    }
  }
  return 0;
}
