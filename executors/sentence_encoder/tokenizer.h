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

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
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
  // Bytes of a text normalized at once (about 8 bytes of memory a byte):
  // a longer text is taken a window at a time, cut before a char where no
  // normalizing step crosses (NFD never reorders marks across a starter),
  // and a word cut in two is carried on, so the tokens are the same
  // whatever the window, in any script. Tests make it small.
  std::size_t window_bytes = std::size_t{1} << 16;
};

// The longest text, in bytes, that an executor tokenizes on the thread that
// received its request (in a preparer, GANTRY_PREPARE), where many requests
// are tokenized at once: each such text holds at most 8 bytes of token ids
// per byte while it is tokenized, so a receiving thread holds a few MiB at
// most. Longer texts are tokenized by the handler, one call at a time.
inline constexpr std::size_t kMaxPreparedTextBytes = std::size_t{64} << 10;

// Ids [CLS] pieces... [SEP] cut to at most `max_length` (>= 2) by dropping
// pieces at the end (right) or at the start (left), [CLS] and [SEP] kept.
void CutIds(std::vector<std::int64_t>& ids, std::size_t max_length, bool from_left);

// How many pieces of a pair's two texts (`first`, `second` pieces, without
// special tokens) are kept so that both fit `budget` pieces, as Hugging
// Face's fast tokenizers cut pairs with truncation "longest_first": nothing
// when they fit; else the longer is cut to what the shorter leaves (never
// below the shorter's length); if that still does not fit, each gets half
// (the second the odd one).
std::pair<std::size_t, std::size_t> SplitPairBudget(std::size_t first, std::size_t second,
                                                    std::size_t budget);

// A text pair as BERT reads it: [CLS] a [SEP] b [SEP], and the segment of
// every id (0 for [CLS], a and its [SEP]; 1 for b and its [SEP]).
struct PairIds {
  std::vector<std::int64_t> ids;
  std::vector<std::int64_t> token_types;
};

// One token of a text: its id and the bytes [start, end) of the text it
// stands for. Tokens the template adds ([CLS], [SEP]) are `special` and
// stand for no bytes (0, 0); special tokens written in the text itself are
// not, as in Hugging Face's special_tokens_mask.
struct TokenSpan {
  std::int64_t id = 0;
  std::size_t start = 0;
  std::size_t end = 0;
  bool special = false;
};

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
  // The same, cut on the right or, `from_left`, on the left ([CLS] and
  // [SEP] are kept). Only the pieces kept are ever held, so a long text
  // costs no memory beyond them.
  std::vector<std::int64_t> EncodeCut(std::string_view text, std::size_t max_length,
                                      bool from_left) const;
  // The same, uncut: every piece of `text`.
  std::vector<std::int64_t> EncodeAll(std::string_view text) const;

  // The pair (`first`, `second`) with truncation "longest_first" to at most
  // `max_length` ids in all (>= 4); pieces are dropped at the end of each
  // text (right) or at its start (left). `max_length` 0 keeps both whole.
  // Throws std::invalid_argument if either text is not valid UTF-8.
  PairIds EncodePair(std::string_view first, std::string_view second, std::size_t max_length,
                     bool from_left) const;
  // The same from each text's Pieces(), so that a text paired with many
  // (a reranker's query) is tokenized once.
  PairIds JoinPair(const std::vector<std::int64_t>& first, const std::vector<std::int64_t>& second,
                   std::size_t max_length, bool from_left) const;
  // The same from pieces already cut to at most what a pair keeps (the
  // first or, `from_left`, the last max_length - 3), with each text's count
  // of pieces uncut: "longest_first" splits the budget by those.
  PairIds JoinCutPair(const std::vector<std::int64_t>& first, std::size_t first_total,
                      const std::vector<std::int64_t>& second, std::size_t second_total,
                      std::size_t max_length, bool from_left) const;
  // The pieces of `text` (special tokens matched verbatim), no [CLS]/[SEP].
  // Throws std::invalid_argument if `text` is not valid UTF-8.
  std::vector<std::int64_t> Pieces(std::string_view text) const;
  // At most `most` of them: the first, or `keep_last`, the last. Only those
  // are held while the text is tokenized; with the first kept, the rest of
  // the text is only checked to be UTF-8. With `total`, every piece is
  // counted into it (the text is then tokenized to its end, holding no more).
  std::vector<std::int64_t> Pieces(std::string_view text, std::size_t most, bool keep_last,
                                   std::size_t* total = nullptr) const;

  // Every token of `text` with its bytes, [CLS] and [SEP] around them when
  // `add_special_tokens`; never cut. Throws std::invalid_argument if `text`
  // is not valid UTF-8.
  std::vector<TokenSpan> Tokenize(std::string_view text, bool add_special_tokens) const;

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

  // Takes the tokens made so far (and may clear them); false: stop.
  using TokenFlush = std::function<bool(std::vector<TokenSpan>& tokens)>;
  // Tokenize, handing `flush` the tokens every so often so that a long text
  // is never held as tokens whole (null: keep them all in `tokens`). False
  // when `flush` stopped it.
  bool TokenizeInto(std::string_view text, bool add_special_tokens, std::vector<TokenSpan>& tokens,
                    const TokenFlush& flush) const;
  // The tokens of a text without special tokens that starts `offset` bytes
  // into the text being tokenized, normalized a window of it at a time
  // (cut where no normalizing step crosses; a word may go on in the next
  // window), each window's tokens handed to `flush` when there is one.
  // False when `flush` stopped it.
  bool EncodeSegment(std::string_view text, std::size_t offset, std::vector<TokenSpan>& tokens,
                     const TokenFlush& flush) const;
  // `word`'s pieces; char i of the word came from bytes
  // [char_starts[i], char_ends[i]) of the text. A word of more than
  // max_input_chars_per_word chars never gets here: EncodeSegment makes it
  // one [UNK] without holding it.
  void WordPiece(std::string_view word, const std::size_t* char_starts,
                 const std::size_t* char_ends, std::vector<TokenSpan>& tokens) const;

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
