#include "tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace gantry::sentence_encoder {
namespace {

void AppendUtf8(utf8proc_int32_t cp, std::string& out) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(cp, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
}

utf8proc_category_t Category(utf8proc_int32_t cp) { return utf8proc_category(cp); }

// A normalized char and the byte offset, in the text being tokenized, of
// the char it came from (NFD, lowercasing and CJK spacing make several
// from one), so that every token can say which bytes it stands for.
struct AlignedChar {
  utf8proc_int32_t cp;
  std::uint32_t origin;
};
using AlignedChars = std::vector<AlignedChar>;

// Calls `fn(cp, offset)` for each code point of `text` and the byte it
// starts at; throws std::invalid_argument at a byte that is not UTF-8.
// `base`: where `text` starts in the text the caller was given, for the
// error's offset.
template <typename Fn>
void ForEachCodePoint(std::string_view text, std::size_t base, Fn&& fn) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(text.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    const std::size_t offset = text.size() - static_cast<std::size_t>(left);
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0 || cp < 0) {
      throw std::invalid_argument("text is not valid UTF-8 (bad byte at offset " +
                                  std::to_string(base + offset) + ")");
    }
    fn(cp, offset);
    p += n;
    left -= n;
  }
}

AlignedChars DecodeAligned(std::string_view text, std::size_t base = 0) {
  if (text.size() > std::numeric_limits<std::uint32_t>::max()) {
    throw std::invalid_argument("text is over 4 GiB");
  }
  AlignedChars out;
  out.reserve(text.size());
  ForEachCodePoint(text, base, [&out](utf8proc_int32_t cp, std::size_t offset) {
    out.push_back({cp, static_cast<std::uint32_t>(offset)});
  });
  return out;
}

// Bytes of the UTF-8 char that starts with `lead` (valid UTF-8 assumed).
std::size_t Utf8Length(unsigned char lead) {
  if (lead < 0x80) {
    return 1;
  }
  if (lead < 0xE0) {
    return 2;
  }
  return lead < 0xF0 ? 3 : 4;
}

// Rust's char::is_whitespace, i.e. the Unicode White_Space property. utf8proc
// exposes no property API for it; the list is fixed by the standard.
bool IsWhitespace(utf8proc_int32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

// The fast tokenizer's "other" = Cc | Cf | Co; unassigned (Cn) chars stay.
bool IsControl(utf8proc_int32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') {
    return false;
  }
  const utf8proc_category_t c = Category(cp);
  return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CO;
}

// ASCII punctuation (also the Sc/Sm/Sk ones such as '$' and '+') or any P*.
bool IsPunctuation(utf8proc_int32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
      (cp >= 123 && cp <= 126)) {
    return true;
  }
  switch (Category(cp)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

// The ranges of the Rust BertNormalizer (not the slow tokenizer's: it uses
// 0x2B820 where the fast one uses 0x2B920).
bool IsChineseChar(utf8proc_int32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// Canonical decomposition with canonical ordering (NFD) of a whole string,
// char by char so that each keeps its origin.
AlignedChars Nfd(const AlignedChars& chars) {
  AlignedChars out;
  out.reserve(chars.size() + chars.size() / 4 + 8);
  utf8proc_int32_t buffer[32];
  for (const AlignedChar& c : chars) {
    int boundclass = UTF8PROC_BOUNDCLASS_START;
    const utf8proc_ssize_t n =
        utf8proc_decompose_char(c.cp, buffer, static_cast<utf8proc_ssize_t>(std::size(buffer)),
                                static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE), &boundclass);
    if (n < 0 || static_cast<std::size_t>(n) > std::size(buffer)) {
      throw std::invalid_argument("NFD failed at code point " + std::to_string(c.cp));
    }
    for (utf8proc_ssize_t i = 0; i < n; ++i) {
      out.push_back({buffer[i], c.origin});
    }
  }
  // Each run of non-starters sorted stably by combining class: the order
  // utf8proc's neighbour swaps reach, in O(n log n) rather than quadratic
  // time on a hostile run of thousands of marks.
  const auto combining_class = [](const AlignedChar& c) {
    return utf8proc_get_property(c.cp)->combining_class;
  };
  for (auto run = out.begin(); run != out.end();) {
    run =
        std::find_if(run, out.end(), [&](const AlignedChar& c) { return combining_class(c) > 0; });
    const auto run_end =
        std::find_if(run, out.end(), [&](const AlignedChar& c) { return combining_class(c) == 0; });
    std::stable_sort(run, run_end, [&](const AlignedChar& a, const AlignedChar& b) {
      return combining_class(a) < combining_class(b);
    });
    run = run_end;
  }
  return out;
}

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return NotFoundError(path + ": cannot open file");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

StatusOr<WordPieceTokenizer> WordPieceTokenizer::Create(
    std::unordered_map<std::string, std::int64_t> vocab, WordPieceOptions options) {
  WordPieceTokenizer t;
  t.vocab_ = std::move(vocab);
  t.options_ = std::move(options);
  auto id_of = [&t](const std::string& token, std::int64_t* id) -> Status {
    auto it = t.vocab_.find(token);
    if (it == t.vocab_.end()) {
      return InvalidArgumentError("vocabulary has no token '" + token + "'");
    }
    *id = it->second;
    return OkStatus();
  };
  GANTRY_RETURN_IF_ERROR(id_of(t.options_.unk_token, &t.unk_id_));
  GANTRY_RETURN_IF_ERROR(id_of(t.options_.cls_token, &t.cls_id_));
  GANTRY_RETURN_IF_ERROR(id_of(t.options_.sep_token, &t.sep_id_));
  GANTRY_RETURN_IF_ERROR(id_of(t.options_.pad_token, &t.pad_id_));
  for (const std::string& special : t.options_.special_tokens) {
    if (special.empty()) {
      continue;
    }
    std::int64_t id = 0;
    GANTRY_RETURN_IF_ERROR(id_of(special, &id));
    t.specials_.emplace_back(special, id);
  }
  // Longest first, so that at one position the longest special token wins.
  std::sort(t.specials_.begin(), t.specials_.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  return t;
}

StatusOr<WordPieceTokenizer> WordPieceTokenizer::LoadVocabTxt(const std::string& path,
                                                              WordPieceOptions options) {
  GANTRY_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::unordered_map<std::string, std::int64_t> vocab;
  std::int64_t id = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) {
      end = text.size();
    }
    std::string token = text.substr(pos, end - pos);
    // Like the Rust reader, trailing whitespace (e.g. "\r") is not part of a token.
    while (!token.empty() &&
           (token.back() == '\r' || token.back() == ' ' || token.back() == '\t')) {
      token.pop_back();
    }
    vocab.emplace(std::move(token), id++);
    pos = end + 1;
  }
  StatusOr<WordPieceTokenizer> t = Create(std::move(vocab), std::move(options));
  if (!t.ok()) {
    return t.status().WithPrefix(path);
  }
  return t;
}

StatusOr<WordPieceTokenizer> WordPieceTokenizer::LoadTokenizerJson(const std::string& path) {
  GANTRY_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) {
    return InvalidArgumentError(path + ": not a JSON object");
  }
  try {
    const nlohmann::json& model = doc.at("model");
    if (model.value("type", "") != "WordPiece") {
      return InvalidArgumentError(path + ": model.type is '" + model.value("type", "") +
                                  "', only WordPiece is supported");
    }
    WordPieceOptions options;
    options.unk_token = model.value("unk_token", options.unk_token);
    options.continuing_subword_prefix =
        model.value("continuing_subword_prefix", options.continuing_subword_prefix);
    options.max_input_chars_per_word =
        model.value("max_input_chars_per_word", options.max_input_chars_per_word);
    if (doc.contains("normalizer") && !doc["normalizer"].is_null()) {
      const nlohmann::json& norm = doc["normalizer"];
      if (norm.value("type", "") != "BertNormalizer") {
        return InvalidArgumentError(path + ": normalizer.type is '" + norm.value("type", "") +
                                    "', only BertNormalizer is supported");
      }
      options.clean_text = norm.value("clean_text", true);
      options.handle_chinese_chars = norm.value("handle_chinese_chars", true);
      options.lowercase = norm.value("lowercase", true);
      const auto strip = norm.find("strip_accents");
      // null means "same as lowercase" in the Rust normalizer.
      options.strip_accents =
          (strip == norm.end() || strip->is_null()) ? options.lowercase : strip->get<bool>();
    }
    options.special_tokens.clear();
    if (doc.contains("added_tokens")) {
      for (const nlohmann::json& added : doc["added_tokens"]) {
        if (added.value("special", false)) {
          options.special_tokens.push_back(added.at("content").get<std::string>());
        }
      }
    }
    std::unordered_map<std::string, std::int64_t> vocab;
    for (const auto& [token, id] : model.at("vocab").items()) {
      vocab.emplace(token, id.get<std::int64_t>());
    }
    StatusOr<WordPieceTokenizer> t = Create(std::move(vocab), std::move(options));
    if (!t.ok()) {
      return t.status().WithPrefix(path);
    }
    return t;
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(path + ": " + e.what());
  }
}

namespace {

// A vocab.txt folder's normalizer settings, from tokenizer_config.json as
// Hugging Face's BertTokenizer reads them: do_lower_case (default true),
// strip_accents (null: the same as do_lower_case), tokenize_chinese_chars
// (default true). Without them a cased checkpoint would be lowercased.
StatusOr<WordPieceOptions> ReadTokenizerConfig(const std::string& path) {
  WordPieceOptions options;
  std::ifstream in(path);
  if (!in.good()) {
    return options;
  }
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) {
    return InvalidArgumentError(path + ": not a JSON object");
  }
  const auto read_bool = [&](const char* key, bool* out) -> Status {
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) {
      return OkStatus();
    }
    if (!it->is_boolean()) {
      return InvalidArgumentError(path + ": " + key + " must be true, false or null");
    }
    *out = it->get<bool>();
    return OkStatus();
  };
  GANTRY_RETURN_IF_ERROR(read_bool("do_lower_case", &options.lowercase));
  options.strip_accents = options.lowercase;
  GANTRY_RETURN_IF_ERROR(read_bool("strip_accents", &options.strip_accents));
  GANTRY_RETURN_IF_ERROR(read_bool("tokenize_chinese_chars", &options.handle_chinese_chars));
  return options;
}

}  // namespace

StatusOr<WordPieceTokenizer> WordPieceTokenizer::LoadFromFolder(const std::string& folder) {
  const std::string json_path = folder + "/tokenizer.json";
  if (std::ifstream(json_path).good()) {
    return LoadTokenizerJson(json_path);
  }
  const std::string vocab_path = folder + "/vocab.txt";
  if (std::ifstream(vocab_path).good()) {
    GANTRY_ASSIGN_OR_RETURN(WordPieceOptions options,
                            ReadTokenizerConfig(folder + "/tokenizer_config.json"));
    return LoadVocabTxt(vocab_path, std::move(options));
  }
  return NotFoundError(folder + ": neither tokenizer.json nor vocab.txt exists");
}

namespace {

// Throws std::invalid_argument, as DecodeAligned, unless `text` is UTF-8;
// holds nothing per char.
void CheckUtf8(std::string_view text) {
  ForEachCodePoint(text, 0, [](utf8proc_int32_t /*cp*/, std::size_t /*offset*/) {});
}

// Whether a window may end before byte `i` of `text`: the char there is a
// starter whose canonical decomposition starts with a starter (combining
// class 0), and clean_text does not remove it (NFD runs after clean_text,
// so marks around a removed control char are reordered as one run). NFD's
// reordering never crosses such a char, and every other normalizing step
// works a char at a time.
bool CanCutBefore(std::string_view text, std::size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  if (lead < 0x80) {
    // Of the C0 controls only tab, newline and return stay (as spaces).
    return lead >= 0x20 ? lead != 0x7F : lead == '\t' || lead == '\n' || lead == '\r';
  }
  utf8proc_int32_t cp = 0;
  if ((lead & 0xC0) == 0x80 ||
      utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + i),
                       static_cast<utf8proc_ssize_t>(text.size() - i), &cp) <= 0 ||
      cp < 0 || cp == 0xFFFD || IsControl(cp) || utf8proc_get_property(cp)->combining_class != 0) {
    return false;
  }
  std::array<utf8proc_int32_t, 8> decomposed{};
  int boundclass = 0;
  const utf8proc_ssize_t n = utf8proc_decompose_char(cp, decomposed.data(), decomposed.size(),
                                                     UTF8PROC_DECOMPOSE, &boundclass);
  return n > 0 && static_cast<std::size_t>(n) <= decomposed.size() &&
         utf8proc_get_property(decomposed[0])->combining_class == 0;
}

// How far past its window a window may reach for a char to cut before.
// Past it (a run of that many bytes of combining marks and removed control
// chars, hundreds of times what any script stacks on a char) the window is
// cut at any char, which can change only how NFD orders the marks kept on
// either side of the cut.
constexpr std::size_t kLongestMarkRunBytes = std::size_t{64} << 10;

// Where the window of `text` that starts at `begin` ends: the whole rest
// when it is short, else before the last char within `window` bytes that
// CanCutBefore (or the first after it). The cut may fall inside a
// word: EncodeSegment carries a word on into the next window.
std::size_t WindowEnd(std::string_view text, std::size_t begin, std::size_t window) {
  window = std::max<std::size_t>(window, 1);
  if (text.size() - begin <= window) {
    return text.size();
  }
  for (std::size_t i = begin + window; i > begin; --i) {
    if (CanCutBefore(text, i)) {
      return i;
    }
  }
  const std::size_t last = std::min(text.size(), begin + window + kLongestMarkRunBytes);
  for (std::size_t i = begin + window + 1; i < last; ++i) {
    if (CanCutBefore(text, i)) {
      return i;
    }
  }
  // Nowhere to cut for kLongestMarkRunBytes: cut at a char boundary.
  for (std::size_t i = last; i > begin; --i) {
    if (i == text.size() || (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      return i;
    }
  }
  return last;
}

// BertNormalizer's steps in its order, each char keeping its origin.
AlignedChars NormalizeAligned(std::string_view text, const WordPieceOptions& options,
                              std::size_t base = 0) {
  AlignedChars chars = DecodeAligned(text, base);
  if (options.clean_text) {
    std::erase_if(
        chars, [](const AlignedChar& c) { return c.cp == 0 || c.cp == 0xFFFD || IsControl(c.cp); });
    for (AlignedChar& c : chars) {
      if (IsWhitespace(c.cp)) {
        c.cp = ' ';
      }
    }
  }
  if (options.handle_chinese_chars &&
      std::any_of(chars.begin(), chars.end(),
                  [](const AlignedChar& c) { return IsChineseChar(c.cp); })) {
    AlignedChars spaced;
    spaced.reserve(chars.size() + 16);
    for (const AlignedChar& c : chars) {
      if (IsChineseChar(c.cp)) {
        spaced.push_back({' ', c.origin});
        spaced.push_back(c);
        spaced.push_back({' ', c.origin});
      } else {
        spaced.push_back(c);
      }
    }
    chars = std::move(spaced);
  }
  if (options.strip_accents) {
    chars = Nfd(chars);
    std::erase_if(chars,
                  [](const AlignedChar& c) { return Category(c.cp) == UTF8PROC_CATEGORY_MN; });
  }
  if (options.lowercase) {
    AlignedChars lower;
    lower.reserve(chars.size() + 4);
    for (const AlignedChar& c : chars) {
      // The one unconditional multi-char lowercase mapping (SpecialCasing);
      // utf8proc_tolower only knows the simple ones.
      if (c.cp == 0x130) {
        lower.push_back({'i', c.origin});
        lower.push_back({0x307, c.origin});
      } else {
        lower.push_back({utf8proc_tolower(c.cp), c.origin});
      }
    }
    chars = std::move(lower);
  }
  return chars;
}

// BertPreTokenizer's rule: words are runs of chars between whitespace, and
// every punctuation char is a word of its own.
enum class WordRole { kBetweenWords, kWordOfItsOwn, kInWord };

WordRole RoleInWords(utf8proc_int32_t cp) {
  if (IsWhitespace(cp)) {
    return WordRole::kBetweenWords;
  }
  return IsPunctuation(cp) ? WordRole::kWordOfItsOwn : WordRole::kInWord;
}

// Calls `word(begin, end)` for each word of `chars`.
template <typename WordFn>
void ForEachWord(const AlignedChars& chars, WordFn&& word) {
  std::size_t begin = 0;
  for (std::size_t i = 0; i < chars.size(); ++i) {
    const WordRole role = RoleInWords(chars[i].cp);
    if (role == WordRole::kInWord) {
      continue;
    }
    if (begin < i) {
      word(begin, i);
    }
    if (role == WordRole::kWordOfItsOwn) {
      word(i, i + 1);
    }
    begin = i + 1;
  }
  if (begin < chars.size()) {
    word(begin, chars.size());
  }
}

}  // namespace

std::string WordPieceTokenizer::Normalize(std::string_view text) const {
  std::string out;
  for (const AlignedChar& c : NormalizeAligned(text, options_)) {
    AppendUtf8(c.cp, out);
  }
  return out;
}

std::vector<std::string> WordPieceTokenizer::PreTokenize(std::string_view text) const {
  const AlignedChars chars = NormalizeAligned(text, options_);
  std::vector<std::string> words;
  ForEachWord(chars, [&](std::size_t begin, std::size_t end) {
    std::string& word = words.emplace_back();
    for (std::size_t i = begin; i < end; ++i) {
      AppendUtf8(chars[i].cp, word);
    }
  });
  return words;
}

void WordPieceTokenizer::WordPiece(std::string_view word, const std::size_t* char_starts,
                                   const std::size_t* char_ends,
                                   std::vector<TokenSpan>& tokens) const {
  // Byte offset of every char boundary, so pieces never split a char.
  std::vector<std::size_t> bounds;
  bounds.reserve(word.size() + 1);
  for (std::size_t i = 0; i < word.size(); ++i) {
    if ((static_cast<unsigned char>(word[i]) & 0xC0) != 0x80) {
      bounds.push_back(i);
    }
  }
  const std::size_t chars = bounds.size();
  bounds.push_back(word.size());
  // The bytes of the text a run of the word's chars came from.
  const auto span = [&](std::int64_t id, std::size_t first, std::size_t last) {
    return TokenSpan{.id = id,
                     .start = char_starts[first],
                     .end = std::max(char_starts[first], char_ends[last - 1])};
  };
  const std::size_t first_piece = tokens.size();
  std::string piece;
  std::size_t start = 0;
  while (start < chars) {
    std::size_t end = chars;
    bool found = false;
    while (end > start) {
      piece.clear();
      if (start > 0) {
        piece += options_.continuing_subword_prefix;
      }
      piece.append(word.substr(bounds[start], bounds[end] - bounds[start]));
      auto it = vocab_.find(piece);
      if (it != vocab_.end()) {
        tokens.push_back(span(it->second, start, end));
        found = true;
        break;
      }
      --end;
    }
    if (!found) {
      // One unknown piece makes the whole word [UNK], as in the Rust model.
      tokens.resize(first_piece);
      tokens.push_back(span(unk_id_, 0, chars));
      return;
    }
    start = end;
  }
}

bool WordPieceTokenizer::EncodeSegment(std::string_view text, std::size_t offset,
                                       std::vector<TokenSpan>& tokens,
                                       const TokenFlush& flush) const {
  // The word being read: it may go on in the next window. Past
  // max_input_chars_per_word chars it is one [UNK] whatever follows, so
  // only where it starts and ends is kept.
  std::string word;
  std::vector<std::size_t> starts;
  std::vector<std::size_t> ends;
  std::size_t word_chars = 0;
  std::size_t word_start = 0;
  std::size_t word_end = 0;
  const std::size_t most_chars = options_.max_input_chars_per_word;
  const auto end_word = [&] {
    if (word_chars > most_chars) {
      tokens.push_back(
          TokenSpan{.id = unk_id_, .start = word_start, .end = std::max(word_start, word_end)});
    } else if (word_chars > 0) {
      WordPiece(word, starts.data(), ends.data(), tokens);
    }
    word.clear();
    starts.clear();
    ends.clear();
    word_chars = 0;
  };
  const auto add_char = [&](utf8proc_int32_t cp, std::size_t start, std::size_t end) {
    if (word_chars == 0) {
      word_start = start;
    }
    word_end = end;
    ++word_chars;
    if (word_chars <= most_chars) {
      AppendUtf8(cp, word);
      starts.push_back(start);
      ends.push_back(end);
    } else if (word_chars == most_chars + 1) {
      word.clear();
      starts.clear();
      ends.clear();
    }
  };
  for (std::size_t begin = 0; begin < text.size();) {
    const std::size_t end = WindowEnd(text, begin, options_.window_bytes);
    const std::string_view window = text.substr(begin, end - begin);
    const std::size_t base = offset + begin;
    for (const AlignedChar& c : NormalizeAligned(window, options_, base)) {
      const WordRole role = RoleInWords(c.cp);
      if (role != WordRole::kInWord) {
        end_word();
      }
      if (role != WordRole::kBetweenWords) {
        add_char(c.cp, base + c.origin,
                 base + c.origin + Utf8Length(static_cast<unsigned char>(window[c.origin])));
      }
      if (role == WordRole::kWordOfItsOwn) {
        end_word();
      }
    }
    if (flush && !flush(tokens)) {
      return false;
    }
    begin = end;
  }
  end_word();
  return true;
}

void CutIds(std::vector<std::int64_t>& ids, std::size_t max_length, bool from_left) {
  if (ids.size() <= max_length || ids.size() < 2) {
    return;
  }
  const std::size_t drop = ids.size() - std::max<std::size_t>(max_length, 2);
  const auto first_piece = ids.begin() + 1;
  if (from_left) {
    ids.erase(first_piece, first_piece + static_cast<std::ptrdiff_t>(drop));
  } else {
    const auto sep = ids.end() - 1;
    ids.erase(sep - static_cast<std::ptrdiff_t>(drop), sep);
  }
}

std::vector<std::int64_t> WordPieceTokenizer::Encode(std::string_view text,
                                                     std::size_t max_length) const {
  return EncodeCut(text, max_length, /*from_left=*/false);
}

std::vector<std::int64_t> WordPieceTokenizer::EncodeAll(std::string_view text) const {
  return EncodeCut(text, std::numeric_limits<std::size_t>::max(), /*from_left=*/false);
}

std::pair<std::size_t, std::size_t> SplitPairBudget(std::size_t first, std::size_t second,
                                                    std::size_t budget) {
  if (first + second <= budget) {
    return {first, second};
  }
  // As the Rust tokenizers library: with n1 the shorter, the longer may keep
  // what n1 leaves but never less than n1; if even that is too much, halves.
  const bool swapped = first > second;
  std::size_t shorter = swapped ? second : first;
  std::size_t longer = shorter > budget ? shorter : std::max(shorter, budget - shorter);
  if (shorter + longer > budget) {
    shorter = budget / 2;
    longer = shorter + budget % 2;
  }
  std::size_t keep_first = swapped ? longer : shorter;
  std::size_t keep_second = swapped ? shorter : longer;
  return {std::min(keep_first, first), std::min(keep_second, second)};
}

PairIds WordPieceTokenizer::EncodePair(std::string_view first, std::string_view second,
                                       std::size_t max_length, bool from_left) const {
  return JoinPair(Pieces(first), Pieces(second), max_length, from_left);
}

PairIds WordPieceTokenizer::JoinPair(const std::vector<std::int64_t>& first,
                                     const std::vector<std::int64_t>& second,
                                     std::size_t max_length, bool from_left) const {
  return JoinCutPair(first, first.size(), second, second.size(), max_length, from_left);
}

PairIds WordPieceTokenizer::JoinCutPair(const std::vector<std::int64_t>& first,
                                        std::size_t first_total,
                                        const std::vector<std::int64_t>& second,
                                        std::size_t second_total, std::size_t max_length,
                                        bool from_left) const {
  std::size_t keep_first = first.size();
  std::size_t keep_second = second.size();
  if (max_length != 0) {
    // [CLS] and two [SEP] are always kept. What is kept is never more than
    // what was held: at most the budget, at most the text.
    const std::size_t budget = max_length > 3 ? max_length - 3 : 0;
    std::tie(keep_first, keep_second) = SplitPairBudget(first_total, second_total, budget);
    keep_first = std::min(keep_first, first.size());
    keep_second = std::min(keep_second, second.size());
  }
  // The kept pieces: the first `keep` (cut on the right) or the last.
  const auto append = [from_left](std::vector<std::int64_t>& ids,
                                  const std::vector<std::int64_t>& pieces, std::size_t keep) {
    const auto begin =
        pieces.begin() + static_cast<std::ptrdiff_t>(from_left ? pieces.size() - keep : 0);
    ids.insert(ids.end(), begin, begin + static_cast<std::ptrdiff_t>(keep));
  };
  PairIds pair;
  pair.ids.reserve(keep_first + keep_second + 3);
  pair.ids.push_back(cls_id_);
  append(pair.ids, first, keep_first);
  pair.ids.push_back(sep_id_);
  pair.token_types.assign(pair.ids.size(), 0);
  append(pair.ids, second, keep_second);
  pair.ids.push_back(sep_id_);
  pair.token_types.resize(pair.ids.size(), 1);
  return pair;
}

std::vector<std::int64_t> WordPieceTokenizer::Pieces(std::string_view text) const {
  return Pieces(text, std::numeric_limits<std::size_t>::max(), /*keep_last=*/false);
}

std::vector<std::int64_t> WordPieceTokenizer::Pieces(std::string_view text, std::size_t most,
                                                     bool keep_last, std::size_t* total) const {
  std::vector<std::int64_t> pieces;
  std::size_t counted = 0;
  const auto flush = [&](std::vector<TokenSpan>& tokens) {
    counted += tokens.size();
    if (!keep_last && pieces.size() >= most) {
      tokens.clear();  // counted only
      return total != nullptr;
    }
    for (const TokenSpan& token : tokens) {
      pieces.push_back(token.id);
    }
    tokens.clear();
    if (pieces.size() <= most) {
      return true;
    }
    if (!keep_last) {
      pieces.resize(most);
      return total != nullptr;
    }
    // The last `most` so far; dropped in bulk, not one by one.
    if (pieces.size() - most >= most + 4096) {
      pieces.erase(pieces.begin(), pieces.end() - static_cast<std::ptrdiff_t>(most));
    }
    return true;
  };
  std::vector<TokenSpan> tokens;
  if (!TokenizeInto(text, /*add_special_tokens=*/false, tokens, flush)) {
    // Stopped with the first `most` pieces: the rest is not tokenized, but
    // must still be text.
    CheckUtf8(text);
    return pieces;
  }
  flush(tokens);
  if (pieces.size() > most) {
    pieces.erase(pieces.begin(), pieces.end() - static_cast<std::ptrdiff_t>(most));
  }
  if (total != nullptr) {
    *total = counted;
  }
  return pieces;
}

std::vector<std::int64_t> WordPieceTokenizer::EncodeCut(std::string_view text,
                                                        std::size_t max_length,
                                                        bool from_left) const {
  // [CLS] and [SEP] are kept whatever max_length says, as CutIds keeps them.
  const std::vector<std::int64_t> pieces =
      Pieces(text, std::max<std::size_t>(max_length, 2) - 2, from_left);
  std::vector<std::int64_t> ids;
  ids.reserve(pieces.size() + 2);
  ids.push_back(cls_id_);
  ids.insert(ids.end(), pieces.begin(), pieces.end());
  ids.push_back(sep_id_);
  return ids;
}

std::vector<TokenSpan> WordPieceTokenizer::Tokenize(std::string_view text,
                                                    bool add_special_tokens) const {
  std::vector<TokenSpan> tokens;
  TokenizeInto(text, add_special_tokens, tokens, nullptr);
  return tokens;
}

bool WordPieceTokenizer::TokenizeInto(std::string_view text, bool add_special_tokens,
                                      std::vector<TokenSpan>& tokens,
                                      const TokenFlush& flush) const {
  if (add_special_tokens) {
    tokens.push_back(TokenSpan{.id = cls_id_, .special = true});
  }
  // Special tokens are cut out of the raw text first (leftmost, then longest).
  std::size_t segment_start = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::pair<std::string, std::int64_t>* match = nullptr;
    for (const auto& special : specials_) {
      if (text.compare(pos, special.first.size(), special.first) == 0) {
        match = &special;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    if (!EncodeSegment(text.substr(segment_start, pos - segment_start), segment_start, tokens,
                       flush)) {
      return false;
    }
    tokens.push_back(
        TokenSpan{.id = match->second, .start = pos, .end = pos + match->first.size()});
    pos += match->first.size();
    segment_start = pos;
    // A text of special tokens alone makes no segment to flush after.
    if (flush && tokens.size() >= 4096 && !flush(tokens)) {
      return false;
    }
  }
  if (!EncodeSegment(text.substr(segment_start), segment_start, tokens, flush)) {
    return false;
  }
  if (add_special_tokens) {
    tokens.push_back(TokenSpan{.id = sep_id_, .special = true});
  }
  return true;
}

}  // namespace gantry::sentence_encoder
