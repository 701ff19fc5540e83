// File: executors/sentence_encoder/tokenizer.h
//
// A BERT WordPiece tokenizer that gives the same ids as Hugging Face's fast
// (Rust) BertTokenizerFast built from tokenizer.json: special tokens cut out
// first, BertNormalizer (clean text, CJK spacing, NFD accent stripping,
// lowercase), BertPreTokenizer (whitespace + punctuation), WordPiece with
// "##" continuations, then [CLS] ... [SEP] with truncation. Unicode data
// comes from utf8proc.
//
// Thread safety: immutable after Load; safe for concurrent use.
#ifndef GANTRY_EXECUTORS_SENTENCE_ENCODER_TOKENIZER_H_
#define GANTRY_EXECUTORS_SENTENCE_ENCODER_TOKENIZER_H_

#include <gantry/status.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gantry::sentence_encoder {

struct WordPieceOptions {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  bool strip_accents = true;
  bool lowercase = true;
  std::string unk_token = "[UNK]";
  std::string cls_token = "[CLS]";
  std::string sep_token = "[SEP]";
  std::string pad_token = "[PAD]";
  std::string continuing_subword_prefix = "##";
  // Longer words (in code points) become a single unk token.
  std::size_t max_input_chars_per_word = 100;
  // Matched verbatim in the raw text before normalization.
  std::vector<std::string> special_tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
};

// Ids [CLS] pieces... [SEP] cut to at most `max_length` (>= 2) by dropping
// pieces at the end (right) or at the start (left), [CLS] and [SEP] kept.
void CutIds(std::vector<std::int64_t>& ids, std::size_t max_length, bool from_left);

class WordPieceTokenizer {
 public:
  // `vocab`: token -> id.
  static StatusOr<WordPieceTokenizer> Create(std::unordered_map<std::string, std::int64_t> vocab,
                                             WordPieceOptions options = {});
  // vocab.txt: one token per line, id = 0-based line number.
  static StatusOr<WordPieceTokenizer> LoadVocabTxt(const std::string& path,
                                                   WordPieceOptions options = {});
  // tokenizer.json: vocab and normalizer/model settings from the file. Its
  // truncation and padding sections are ignored on purpose (they say 128).
  static StatusOr<WordPieceTokenizer> LoadTokenizerJson(const std::string& path);
  // Prefers tokenizer.json in `folder`, else vocab.txt.
  static StatusOr<WordPieceTokenizer> LoadFromFolder(const std::string& folder);

  // [CLS] pieces... [SEP], at most `max_length` ids in all (>= 2), cut on
  // the right. Throws std::invalid_argument if `text` is not valid UTF-8.
  std::vector<std::int64_t> Encode(std::string_view text, std::size_t max_length) const;
  // The same, uncut: every piece of `text`.
  std::vector<std::int64_t> EncodeAll(std::string_view text) const;

  // The normalized text of one segment without special tokens (for tests).
  std::string Normalize(std::string_view text) const;
  // Normalized words after pre-tokenization (for tests).
  std::vector<std::string> PreTokenize(std::string_view text) const;

  std::int64_t cls_id() const { return cls_id_; }
  std::int64_t sep_id() const { return sep_id_; }
  std::int64_t pad_id() const { return pad_id_; }
  std::int64_t unk_id() const { return unk_id_; }
  std::size_t vocab_size() const { return vocab_.size(); }
  const WordPieceOptions& options() const { return options_; }

 private:
  WordPieceTokenizer() = default;

  void EncodeSegment(std::string_view text, std::vector<std::int64_t>& ids) const;
  void WordPiece(std::string_view word, std::vector<std::int64_t>& ids) const;

  std::unordered_map<std::string, std::int64_t> vocab_;
  WordPieceOptions options_;
  std::vector<std::pair<std::string, std::int64_t>> specials_;
  std::int64_t cls_id_ = 0;
  std::int64_t sep_id_ = 0;
  std::int64_t pad_id_ = 0;
  std::int64_t unk_id_ = 0;
};

}  // namespace gantry::sentence_encoder

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_TOKENIZER_H_
