#include "tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <utf8proc.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gantry::sentence_encoder {
namespace {

WordPieceTokenizer MakeTokenizer(std::size_t window_bytes = WordPieceOptions{}.window_bytes,
                                 std::size_t max_input_chars_per_word = 100) {
  const std::vector<std::string> tokens = {
      "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", ",", "world", "!", "i", "'", "m",
      "123", "##ab", "##c", ".", "cafe", "de", "##ja", "vu", "東", "京", "una", "##ffa", "##ble",
      "οδοσ", "$", "a", "##a", "b", "ο", "##δ", "##ος",
      // Two spacing marks in NFD's order (classes 216, 224).
      "\U0001d165\u302e"};
  std::unordered_map<std::string, std::int64_t> vocab;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    vocab[tokens[i]] = static_cast<std::int64_t>(i);
  }
  WordPieceOptions options;
  options.window_bytes = window_bytes;
  options.max_input_chars_per_word = max_input_chars_per_word;
  StatusOr<WordPieceTokenizer> t = WordPieceTokenizer::Create(vocab, options);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(t).value();
}

// Ids as token strings make failures readable.
std::vector<std::int64_t> Ids(std::string_view text, std::size_t max_length = 256) {
  static const WordPieceTokenizer tokenizer = MakeTokenizer();
  return tokenizer.Encode(text, max_length);
}

constexpr std::int64_t kUnk = 1, kCls = 2, kSep = 3;

TEST(TokenizerTest, EmptyTextIsClsSep) {
  EXPECT_EQ(Ids(""), (std::vector<std::int64_t>{kCls, kSep}));
}

TEST(TokenizerTest, PunctuationAndDigitsGluedToLetters) {
  // hello , world ! i ' m 123 ##ab ##c .
  EXPECT_EQ(Ids("Hello, world! I'm 123abc."),
            (std::vector<std::int64_t>{kCls, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, kSep}));
}

TEST(TokenizerTest, AccentsStrippedCjkSplitUnknownPunctuation) {
  // cafe de ##ja vu [UNK](—) 東 京: the em dash is punctuation but not in this vocab.
  EXPECT_EQ(Ids("Café déjà vu — 東京"),
            (std::vector<std::int64_t>{kCls, 16, 17, 18, 19, kUnk, 20, 21, kSep}));
}

TEST(TokenizerTest, GreedyLongestMatchFirst) {
  EXPECT_EQ(Ids("unaffable"), (std::vector<std::int64_t>{kCls, 22, 23, 24, kSep}));
}

TEST(TokenizerTest, UnmatchedPieceMakesWholeWordUnknown) {
  EXPECT_EQ(Ids("hellox world"), (std::vector<std::int64_t>{kCls, kUnk, 7, kSep}));
}

TEST(TokenizerTest, GreekCapitalsLowercaseWithoutFinalSigma) {
  // The fast tokenizer lower-cases per char: ΟΔΟΣ -> οδοσ, not οδος.
  EXPECT_EQ(Ids("ΟΔΟΣ"), (std::vector<std::int64_t>{kCls, 25, kSep}));
}

TEST(TokenizerTest, SpecialTokensInRawTextAreKept) {
  EXPECT_EQ(Ids("a [SEP] b"), (std::vector<std::int64_t>{kCls, 27, kSep, 29, kSep}));
  EXPECT_EQ(Ids("a[MASK]b"), (std::vector<std::int64_t>{kCls, 27, 4, 29, kSep}));
  // Case-sensitive: "[sep]" is ordinary text ([ sep ] with sep unknown).
  EXPECT_EQ(Ids("[sep]").size(), 5u);
}

TEST(TokenizerTest, WordsLongerThan100CharsAreUnknown) {
  std::vector<std::int64_t> hundred = {kCls, 27};
  hundred.insert(hundred.end(), 99, 28);
  hundred.push_back(kSep);
  EXPECT_EQ(Ids(std::string(100, 'a')), hundred);
  EXPECT_EQ(Ids(std::string(101, 'a')), (std::vector<std::int64_t>{kCls, kUnk, kSep}));
}

TEST(TokenizerTest, ControlAndZeroWidthCharsAreDropped) {
  EXPECT_EQ(Ids("hel\u200blo"), Ids("hello"));  // U+200B is Cf
  EXPECT_EQ(Ids("hel\x01lo"), Ids("hello"));    // Cc
  EXPECT_EQ(Ids(std::string("hel\0lo", 6)), Ids("hello"));
  EXPECT_EQ(Ids("hel\ufffdlo"), Ids("hello"));
}

TEST(TokenizerTest, UnicodeWhitespaceSplits) {
  const std::vector<std::int64_t> want = {kCls, 5, 7, kSep};
  EXPECT_EQ(Ids("hello\u00a0world"), want);
  EXPECT_EQ(Ids("hello\u3000world"), want);
  EXPECT_EQ(Ids("hello\u2028world"), want);
  EXPECT_EQ(Ids("\t hello\r\nworld  "), want);
}

TEST(TokenizerTest, TruncationKeepsTrailingSep) {
  EXPECT_EQ(Ids("hello world hello world", 5), (std::vector<std::int64_t>{kCls, 5, 7, 5, kSep}));
  EXPECT_EQ(Ids("hello world", 2), (std::vector<std::int64_t>{kCls, kSep}));
}

TEST(TokenizerTest, InvalidUtf8Throws) {
  EXPECT_THROW(Ids("bad \xff byte"), std::invalid_argument);
  EXPECT_THROW(Ids("\xed\xa0\x80"), std::invalid_argument);  // a UTF-16 surrogate
}

TEST(TokenizerTest, NormalizeAndPreTokenize) {
  const WordPieceTokenizer t = MakeTokenizer();
  EXPECT_EQ(t.Normalize("İstanbul"), "istanbul");
  EXPECT_EQ(t.Normalize("Ａ"), "ａ");  // no NFKC: fullwidth stays fullwidth
  EXPECT_EQ(t.Normalize("中a"), " 中 a");
  // ASCII symbols ($ + < = > ^ ` | ~) split like punctuation; emoji do not.
  EXPECT_EQ(t.PreTokenize("$5+x hello😀"), (std::vector<std::string>{"$", "5", "+", "x", "hello😀"}));
  EXPECT_EQ(t.PreTokenize("a«b»c"), (std::vector<std::string>{"a", "«", "b", "»", "c"}));
}

// [start, end) bytes of every token as the text they cover.
std::vector<std::string> Covered(const std::vector<TokenSpan>& tokens, std::string_view text) {
  std::vector<std::string> out;
  for (const TokenSpan& token : tokens) {
    out.push_back(token.special ? "<special>"
                                : std::string(text.substr(token.start, token.end - token.start)));
  }
  return out;
}

TEST(TokenizerTest, TokenizeGivesTheBytesEachTokenCameFrom) {
  const WordPieceTokenizer t = MakeTokenizer();
  const std::string text = "Café déjà vu, 東京 [SEP] unaffable!";
  const std::vector<TokenSpan> tokens = t.Tokenize(text, /*add_special_tokens=*/true);
  std::vector<std::int64_t> ids;
  for (const TokenSpan& token : tokens) {
    ids.push_back(token.id);
  }
  EXPECT_EQ(ids, t.EncodeAll(text));
  // Accents and case are gone from the pieces, not from what they cover;
  // [SEP] typed in the text is a token of the text, not a template one.
  EXPECT_EQ(Covered(tokens, text),
            (std::vector<std::string>{"<special>", "Café", "dé", "jà", "vu", ",", "東", "京",
                                      "[SEP]", "una", "ffa", "ble", "!", "<special>"}));
  EXPECT_TRUE(tokens.front().special);
  EXPECT_EQ(tokens.front().start, 0u);
  EXPECT_EQ(tokens.front().end, 0u);
  EXPECT_FALSE(tokens[8].special);
  // An unknown word is one [UNK] over the whole word.
  const std::vector<TokenSpan> unknown = t.Tokenize("hello zzz", /*add_special_tokens=*/false);
  ASSERT_EQ(unknown.size(), 2u);
  EXPECT_EQ(unknown[1].id, kUnk);
  EXPECT_EQ(unknown[1].start, 6u);
  EXPECT_EQ(unknown[1].end, 9u);
  // One char made two by lowercasing (İ -> i + U+0307): both point at it.
  EXPECT_EQ(Covered(t.Tokenize("İ", false), "İ"), (std::vector<std::string>{"İ"}));
}

// Accent stripping decomposes char by char (to keep offsets) and reorders
// combining marks itself: it must equal utf8proc's whole-string NFD.
TEST(TokenizerTest, CharByCharNfdEqualsWholeStringNfd) {
  WordPieceOptions options;
  options.clean_text = false;
  options.handle_chinese_chars = false;
  options.lowercase = false;
  options.strip_accents = true;
  StatusOr<WordPieceTokenizer> t = WordPieceTokenizer::Create(
      {{"[PAD]", 0}, {"[UNK]", 1}, {"[CLS]", 2}, {"[SEP]", 3}, {"[MASK]", 4}}, options);
  ASSERT_TRUE(t.ok()) << t.status();
  // Letters that decompose, Hangul, and marks of different classes in runs.
  const std::vector<utf8proc_int32_t> pool = {
      'a',    'e',    0xE9,   0x1EC7, 0x1E69, 0x0301, 0x0323,  0x0308,  0x031B,  0x0345,
      0x05B0, 0x0591, 0x0F71, 0x0F72, 0xAC00, 0xD7A3, 0x1D15F, 0x1D165, 0x1D16E, 0x0958,
      0x2126, 0x212B, 0x1F80, 0x0344, 0x0F73, 0x0385, 0x1E0A,  0x0307,  0x0327,  0x20D2};
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    const int length = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < length; ++i) {
      utf8proc_uint8_t buf[4];
      const utf8proc_ssize_t n = utf8proc_encode_char(pool[rng() % pool.size()], buf);
      text.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
    }
    utf8proc_uint8_t* nfd = utf8proc_NFD(reinterpret_cast<const utf8proc_uint8_t*>(text.c_str()));
    ASSERT_NE(nfd, nullptr);
    std::string want;
    for (const utf8proc_uint8_t* p = nfd; *p != 0;) {
      utf8proc_int32_t cp = 0;
      const utf8proc_ssize_t n = utf8proc_iterate(p, -1, &cp);
      if (utf8proc_category(cp) != UTF8PROC_CATEGORY_MN) {
        want.append(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
      }
      p += n;
    }
    std::free(nfd);
    ASSERT_EQ(t->Normalize(text), want) << "text '" << text << "'";
  }
}

// A hostile run of marks in reverse class order (230 then 220, 200,000 of
// them): sorted run by run, where the neighbour swaps utf8proc's NFD does took
// 15 s for 40,000 pairs and grow with the square.
TEST(TokenizerTest, ALongRunOfCombiningMarksIsReorderedInLinearithmicTime) {
  std::string text = "a";
  for (int i = 0; i < 100000; ++i) {
    text += "\u0301\u0323";
  }
  const WordPieceTokenizer t = MakeTokenizer();
  EXPECT_EQ(t.Normalize(text), "a");  // every mark is Mn, stripped
  EXPECT_EQ(t.Encode(text, 8), (std::vector<std::int64_t>{kCls, 27, kSep}));  // "a"
}

TEST(TokenizerTest, CutIdsKeepsClsAndSepAndCutsEitherEnd) {
  const std::vector<std::int64_t> all = {101, 1, 2, 3, 4, 102};
  std::vector<std::int64_t> ids = all;
  CutIds(ids, 4, /*from_left=*/false);
  EXPECT_EQ(ids, (std::vector<std::int64_t>{101, 1, 2, 102}));
  ids = all;
  CutIds(ids, 4, /*from_left=*/true);
  EXPECT_EQ(ids, (std::vector<std::int64_t>{101, 3, 4, 102}));
  ids = all;
  CutIds(ids, 6, /*from_left=*/true);
  EXPECT_EQ(ids, all);
  ids = all;
  CutIds(ids, 0, /*from_left=*/false);  // never below [CLS] [SEP]
  EXPECT_EQ(ids, (std::vector<std::int64_t>{101, 102}));
}

// A random text of what normalizing and pre-tokenizing treat specially:
// whitespace of every kind, ASCII and other punctuation, accents written as
// combining marks (also right after a space), CJK, control chars, the one
// multi-char lowercase mapping, special tokens, words too long for a piece.
std::string TrickyText(std::mt19937& random, std::size_t parts) {
  const std::vector<std::string> pieces = {
      "hello", "world", "caf\u00e9", "cafe\u0301", " \u0301", "\u0301\u0327", "\u6771\u4eac",
      "\u0130", " ", "  ", "\t", "\n", "\r\n", "\u3000", "\u00a0", ",", ".", "!", "'", "$",
      "\u00bf", "\u2014", "\x01", "\x7f", "[SEP]", "[MASK]", "123", "unaffable", "ab", "abc",
      "\u03bf\u03b4\u03bf\u03c3", std::string(150, 'a'),
      // A starter whose decomposition starts with a mark (Tibetan).
      "\u0f73",
      // A spacing mark of class 216.
      "\U0001d165",
      // Hangul: NFD makes jamo.
      "\ud55c\uad6d",
      // NFD makes it '`', punctuation.
      "\u1fef",
      // A format char: removed, so the chars around it are one word.
      "\u200d", "\u0327\u0301\u0327",
      // The same two marks the other way round: NFD swaps them, also across
      // control chars, which are removed before NFD runs.
      " \u302e\v\U0001d165", " \u302e\f\U0001d165", " \u302e\x01\U0001d165", " \u302e\U0001d165"};
  std::string text;
  for (std::size_t i = 0; i < parts; ++i) {
    text += pieces[random() % pieces.size()];
  }
  return text;
}

// Windows change nothing: with windows of a few bytes the tokens (ids and
// byte offsets) are those of the text taken whole, words cut by a window
// included; error offsets too.
TEST(TokenizerTest, WindowsOfAnySizeGiveTheSameTokens) {
  const WordPieceTokenizer whole = MakeTokenizer(std::numeric_limits<std::size_t>::max());
  std::mt19937 random(7);
  for (const std::size_t window : {1, 2, 5, 16, 64, 1 << 16}) {
    const WordPieceTokenizer windowed = MakeTokenizer(window);
    const auto expect_same = [&](const std::string& text, std::string_view what) {
      const std::vector<TokenSpan> want = whole.Tokenize(text, /*add_special_tokens=*/true);
      const std::vector<TokenSpan> got = windowed.Tokenize(text, /*add_special_tokens=*/true);
      ASSERT_EQ(got.size(), want.size()) << "window " << window << ": " << what;
      for (std::size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i].id, want[i].id) << "window " << window << " token " << i << ": " << what;
        ASSERT_EQ(got[i].start, want[i].start)
            << "window " << window << " token " << i << ": " << what;
        ASSERT_EQ(got[i].end, want[i].end) << "window " << window << " token " << i << ": " << what;
      }
      EXPECT_EQ(windowed.Pieces(text), whole.Pieces(text)) << what;
    };
    for (int round = 0; round < 200; ++round) {
      const std::string text = TrickyText(random, 1 + random() % 40);
      expect_same(text, "'" + text + "'");
    }
    // Texts with no whitespace or punctuation for far longer than a window:
    // CJK, one word of letters (one [UNK] over the whole of it), and a run
    // of combining marks too long to find a starter in (cut inside).
    std::string cjk;
    std::string letters;
    while (cjk.size() < (std::size_t{200} << 10)) {
      cjk += "\u6771\u4eac\u0130a";
      letters += "ab\u0301\u200d";
    }
    expect_same(cjk, "200 KiB of CJK");
    expect_same(letters, "200 KiB of one word");
    std::string marks = "a";
    for (int i = 0; i < 70000; ++i) {
      marks += "\u0301";
    }
    expect_same(marks + "b hello", "140 KB of marks");
    // Bad UTF-8 far into the text is found, and its offset is the text's.
    const std::string bad = "hello world, " + std::string(10, 'b') + " \xff x";
    for (const WordPieceTokenizer* t : {&whole, &windowed}) {
      try {
        t->Pieces(bad);
        ADD_FAILURE() << "window " << window << ": no error";
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("offset 24"), std::string::npos) << e.what();
      }
    }
  }
}

// A word over max_input_chars_per_word chars is one [UNK] over all of its
// bytes, whatever the windows cut it into; with 0, every word is.
TEST(TokenizerTest, WordsTooLongForAPieceAreOneUnknownOverTheirBytes) {
  const std::string text = "hello wor\u0301ld, unaffable \u6771 abcab";
  for (const std::size_t most : {0, 1, 3, 5}) {
    const WordPieceTokenizer whole = MakeTokenizer(std::numeric_limits<std::size_t>::max(), most);
    for (const std::size_t window : {1, 2, 3, 7}) {
      const std::vector<TokenSpan> want = whole.Tokenize(text, /*add_special_tokens=*/false);
      const std::vector<TokenSpan> got =
          MakeTokenizer(window, most).Tokenize(text, /*add_special_tokens=*/false);
      ASSERT_EQ(got.size(), want.size()) << most << " " << window;
      for (std::size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i].id, want[i].id) << most << " " << window << " token " << i;
        EXPECT_EQ(got[i].start, want[i].start) << most << " " << window << " token " << i;
        EXPECT_EQ(got[i].end, want[i].end) << most << " " << window << " token " << i;
      }
    }
  }
  const std::vector<TokenSpan> none =
      MakeTokenizer(2, 0).Tokenize("hello world", /*add_special_tokens=*/false);
  ASSERT_EQ(none.size(), 2U);
  EXPECT_EQ(none[0].id, kUnk);
  EXPECT_EQ(none[0].start, 0U);
  EXPECT_EQ(none[0].end, 5U);
  EXPECT_EQ(none[1].id, kUnk);
  EXPECT_EQ(none[1].start, 6U);
  EXPECT_EQ(none[1].end, 11U);
}

// Cut while tokenizing: the first or last `most` pieces of every piece, and
// EncodeCut as Encode then CutIds; a text of megabytes is cut without being
// held as tokens, and its bad UTF-8 past the kept pieces is still refused.
TEST(TokenizerTest, PiecesCutWhileTokenizingKeepTheFirstOrTheLast) {
  const WordPieceTokenizer tokenizer = MakeTokenizer(16);
  std::mt19937 random(11);
  for (int round = 0; round < 200; ++round) {
    const std::string text = TrickyText(random, 1 + random() % 40);
    const std::vector<std::int64_t> all = tokenizer.Pieces(text);
    for (const std::size_t most :
         {std::size_t{0}, std::size_t{1}, std::size_t{3}, all.size(), all.size() + 5}) {
      const std::size_t keep = std::min(most, all.size());
      EXPECT_EQ(tokenizer.Pieces(text, most, /*keep_last=*/false),
                std::vector<std::int64_t>(all.begin(), all.begin() + keep))
          << most << ": '" << text << "'";
      EXPECT_EQ(tokenizer.Pieces(text, most, /*keep_last=*/true),
                std::vector<std::int64_t>(all.end() - keep, all.end()))
          << most << ": '" << text << "'";
    }
    for (const std::size_t max_length : {0, 2, 3, 7}) {
      for (const bool from_left : {false, true}) {
        std::vector<std::int64_t> want = tokenizer.EncodeAll(text);
        CutIds(want, max_length, from_left);
        EXPECT_EQ(tokenizer.EncodeCut(text, max_length, from_left), want)
            << max_length << (from_left ? " left" : " right") << ": '" << text << "'";
      }
    }
  }
  std::string big;
  while (big.size() < (std::size_t{8} << 20)) {
    big += "hello world, unaffable cafe! ";
  }
  EXPECT_EQ(tokenizer.EncodeCut(big, 5, /*from_left=*/false),
            (std::vector<std::int64_t>{kCls, 5, 7, 6, kSep}));
  EXPECT_EQ(tokenizer.Pieces(big, 2, /*keep_last=*/true), (std::vector<std::int64_t>{16, 8}));
  EXPECT_THROW(tokenizer.EncodeCut(big + "\xff", 5, /*from_left=*/false), std::invalid_argument);
}

TEST(TokenizerTest, CreateRejectsVocabWithoutSpecialTokens) {
  StatusOr<WordPieceTokenizer> t = WordPieceTokenizer::Create({{"hello", 0}});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("[UNK]"), std::string::npos) << t.status();
}

// Hugging Face's "longest_first" for pairs, worked by hand from its rules.
TEST(TokenizerTest, PairBudgetCutsTheLongerFirstThenHalves) {
  using Split = std::pair<std::size_t, std::size_t>;
  EXPECT_EQ(SplitPairBudget(3, 4, 10), (Split{3, 4}));    // fits: nothing cut
  EXPECT_EQ(SplitPairBudget(3, 20, 10), (Split{3, 7}));   // the longer keeps what is left
  EXPECT_EQ(SplitPairBudget(20, 3, 10), (Split{7, 3}));   // whichever it is
  EXPECT_EQ(SplitPairBudget(6, 20, 10), (Split{5, 5}));   // the shorter is over half: halves
  EXPECT_EQ(SplitPairBudget(20, 20, 11), (Split{5, 6}));  // the second takes the odd one
  EXPECT_EQ(SplitPairBudget(12, 30, 10), (Split{5, 5}));  // both over the budget
  EXPECT_EQ(SplitPairBudget(0, 30, 10), (Split{0, 10}));
}

TEST(TokenizerTest, PairIsClsFirstSepSecondSepWithSegments) {
  const WordPieceTokenizer tokenizer = MakeTokenizer();
  // hello , world !  /  i ' m
  const PairIds whole = tokenizer.EncodePair("Hello, world!", "I'm", 0, false);
  EXPECT_EQ(whole.ids, (std::vector<std::int64_t>{kCls, 5, 6, 7, 8, kSep, 9, 10, 11, kSep}));
  EXPECT_EQ(whole.token_types, (std::vector<std::int64_t>{0, 0, 0, 0, 0, 0, 1, 1, 1, 1}));
  // 8 ids: 5 pieces for 4 + 3, so halves, the longer (first) keeping the
  // odd one; each text loses its end, or its start.
  const PairIds right = tokenizer.EncodePair("Hello, world!", "I'm", 8, false);
  EXPECT_EQ(right.ids, (std::vector<std::int64_t>{kCls, 5, 6, 7, kSep, 9, 10, kSep}));
  const PairIds left = tokenizer.EncodePair("Hello, world!", "I'm", 8, true);
  EXPECT_EQ(left.ids, (std::vector<std::int64_t>{kCls, 6, 7, 8, kSep, 10, 11, kSep}));
  EXPECT_EQ(left.token_types, (std::vector<std::int64_t>{0, 0, 0, 0, 0, 1, 1, 1}));
}

// A folder with vocab.txt and no tokenizer.json: tokenizer_config.json says
// whether the checkpoint is cased, as Hugging Face's BertTokenizer reads it.
class VocabFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = std::filesystem::temp_directory_path() /
              ("gantry_vocab_folder_" + std::to_string(::getpid()));
    std::filesystem::create_directories(folder_);
    std::ofstream(folder_ / "vocab.txt")
        << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nHello\ncafe\ncaf\u00e9\nCafe\n";
  }
  void TearDown() override { std::filesystem::remove_all(folder_); }

  // The ids of "Hello Café" with tokenizer_config.json's `config` (none when empty).
  StatusOr<std::vector<std::int64_t>> Encode(const std::string& config) {
    if (!config.empty()) {
      std::ofstream(folder_ / "tokenizer_config.json") << config;
    }
    GANTRY_ASSIGN_OR_RETURN(WordPieceTokenizer tokenizer,
                            WordPieceTokenizer::LoadFromFolder(folder_.string()));
    return tokenizer.Encode("Hello Caf\u00e9", 16);
  }

  std::filesystem::path folder_;
};

TEST_F(VocabFolderTest, UncasedUnlessTokenizerConfigSaysOtherwise) {
  constexpr std::int64_t kLower = 5, kUpper = 6, kCafe = 7, kCafeAccent = 8, kUpperCafe = 9;
  StatusOr<std::vector<std::int64_t>> ids = Encode("");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<std::int64_t>{kCls, kLower, kCafe, kSep}));
  ids = Encode(R"({"do_lower_case": false, "model_max_length": 512})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<std::int64_t>{kCls, kUpper, kUnk, kSep}));
  ids = Encode(R"({"do_lower_case": false, "strip_accents": true})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<std::int64_t>{kCls, kUpper, kUpperCafe, kSep}));
  ids = Encode(R"({"do_lower_case": true, "strip_accents": false})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<std::int64_t>{kCls, kLower, kCafeAccent, kSep}));
}

TEST_F(VocabFolderTest, AMalformedTokenizerConfigIsRefusedNamingFileAndKey) {
  StatusOr<std::vector<std::int64_t>> ids = Encode(R"({"do_lower_case": "no"})");
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find("tokenizer_config.json: do_lower_case"), std::string::npos)
      << ids.status();
  EXPECT_FALSE(Encode("[1, 2]").ok());
}

}  // namespace
}  // namespace gantry::sentence_encoder
