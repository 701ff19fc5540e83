// attention_tiles: the AMX attention of short bfloat16 texts against ATen's
// softmax attention in float32 from the same inputs, and against the vector
// kernel it stands in for.
#include "attention_tiles.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "attention_rows.h"
#include "attention_test_shapes.h"

namespace gantry::sentence_encoder {
namespace {

using attention_test::Name;
using attention_test::PaddingMask;
using attention_test::Shape;

HeadLayout Layout(const Shape& s) { return {s.batch, s.length, s.heads, s.head_dim}; }

// Per head: the weights softmax(q k^T * scale + mask), from token-major
// [B * L, 3h] float32; [B, heads, L, L].
at::Tensor Weights(const at::Tensor& qkv, const Shape& s, const at::Tensor& mask, double scale) {
  const at::Tensor parts =
      qkv.view({s.batch, s.length, 3, s.heads, s.head_dim}).permute({2, 0, 3, 1, 4});
  return at::softmax(at::matmul(parts[0], parts[1].transpose(-1, -2)) * scale +
                         mask.view({s.batch, 1, 1, s.length}),
                     -1);
}

// weights v per head, back to token-major [B * L, h]; `values_of` maps
// the values first (abs() gives the bound on the error of rounded weights).
template <typename Map>
at::Tensor Context(const at::Tensor& weights, const at::Tensor& qkv, const Shape& s,
                   const Map& values_of) {
  const at::Tensor parts =
      qkv.view({s.batch, s.length, 3, s.heads, s.head_dim}).permute({2, 0, 3, 1, 4});
  return at::matmul(weights, values_of(parts[2]))
      .permute({0, 2, 1, 3})
      .reshape({s.batch * s.length, s.heads * s.head_dim});
}

at::Tensor RunTiles(const at::Tensor& qkv, const Shape& s, const at::Tensor& mask, double scale,
                    std::int64_t begin, std::int64_t end, at::Tensor out) {
  attention_tiles::AttentionFromQkvBFloat16(
      static_cast<const std::uint16_t*>(qkv.const_data_ptr()), Layout(s),
      mask.defined() ? mask.data_ptr<float>() : nullptr, static_cast<float>(scale), begin, end,
      static_cast<std::uint16_t*>(out.mutable_data_ptr()));
  return out;
}

// Lengths on and off the tiles' 16-row and 32-key blocks, up to the longest
// taken; head sizes of one to four 32-column chunks (MiniLM's: 12 x 32).
const Shape kShapes[] = {{2, 1, 2, 32},  {3, 7, 2, 32},  {2, 14, 12, 32}, {2, 16, 2, 32},
                         {2, 17, 3, 32}, {1, 33, 4, 64}, {2, 48, 2, 96},  {2, 64, 2, 128}};

#define SKIP_WITHOUT_TILES()                                                      \
  if (!attention_tiles::Available()) {                                            \
    GTEST_SKIP() << "this CPU or kernel has no AMX-BF16 tiles for this process: " \
                    "BertModel uses attention_rows' vector kernel here";          \
  }

TEST(AttentionTilesTest, TakesShortTextsWithHeadsOf32ColumnChunks) {
  EXPECT_TRUE(attention_tiles::TakesLayout({128, 14, 12, 32}));
  EXPECT_TRUE(attention_tiles::TakesLayout({1, kShortAttentionMaxLength, 12, 64}));
  EXPECT_FALSE(attention_tiles::TakesLayout({1, kShortAttentionMaxLength + 1, 12, 32}));
  EXPECT_FALSE(attention_tiles::TakesLayout({1, 14, 2, 16}));
  EXPECT_FALSE(attention_tiles::TakesLayout({1, 14, 2, 48}));
  EXPECT_FALSE(attention_tiles::TakesLayout({1, 14, 2, 160}));
  EXPECT_FALSE(attention_tiles::TakesLayout({1, 0, 2, 32}));
}

TEST(AttentionTilesTest, MatchesFloat32AttentionWithinBFloat16Weights) {
  SKIP_WITHOUT_TILES();
  at::manual_seed(7);
  for (const Shape& s : kShapes) {
    ASSERT_TRUE(attention_tiles::TakesLayout(Layout(s))) << Name(s);
    const std::int64_t hidden = s.heads * s.head_dim;
    // Scores spread like a trained model's (a few units), so that the
    // softmax is far from uniform.
    const at::Tensor qkv = (at::randn({s.batch * s.length, 3 * hidden}) * 2).to(at::kBFloat16);
    const at::Tensor mask = PaddingMask(s);
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
    const at::Tensor got = RunTiles(qkv, s, mask, scale, 0, s.batch,
                                    at::empty({s.batch * s.length, hidden}, at::kBFloat16));
    const at::Tensor exact = qkv.to(at::kFloat);
    const at::Tensor weights = Weights(exact, s, mask, scale);
    const at::Tensor want = Context(weights, exact, s, [](const at::Tensor& v) { return v; });
    // Each weight rounded to bfloat16 (2^-9 relative) moves the output by
    // at most 2^-9 of sum |weight * value|; the output's own rounding adds
    // 2^-9 of itself.
    const at::Tensor bound =
        Context(weights, exact, s, [](const at::Tensor& v) { return v.abs(); }) * (1.0 / 256) +
        want.abs() * (1.0 / 256) + 1e-5;
    const at::Tensor error = (got.to(at::kFloat) - want).abs();
    EXPECT_TRUE(at::all(error <= bound).item<bool>())
        << Name(s) << ": worst " << error.max().item<double>();
    // And close to the vector kernel on the same inputs.
    at::Tensor rows = at::empty({s.batch * s.length, hidden}, at::kBFloat16);
    attention_rows::AttentionFromQkvBFloat16(
        static_cast<const std::uint16_t*>(qkv.const_data_ptr()), Layout(s), mask.data_ptr<float>(),
        static_cast<float>(scale), 0, s.batch,
        static_cast<std::uint16_t*>(rows.mutable_data_ptr()));
    EXPECT_LT((got.to(at::kFloat) - rows.to(at::kFloat)).abs().max().item<double>(), 0.05)
        << Name(s);
  }
}

TEST(AttentionTilesTest, MaskedKeysWeighNothingAndTextsAreIndependent) {
  SKIP_WITHOUT_TILES();
  at::manual_seed(8);
  const Shape s{3, 20, 2, 32};
  const std::int64_t hidden = s.heads * s.head_dim;
  const at::Tensor qkv = at::randn({s.batch * s.length, 3 * hidden}).to(at::kBFloat16);
  const at::Tensor mask = PaddingMask(s);  // text 2 keeps its first 10 tokens
  // Texts in two calls, as two threads would take them.
  at::Tensor got = at::empty({s.batch * s.length, hidden}, at::kBFloat16);
  RunTiles(qkv, s, mask, 0.25, 0, 1, got);
  RunTiles(qkv, s, mask, 0.25, 1, 3, got);
  // Text 2's first 10 tokens alone, unmasked, come out bit for bit the same
  // (the masked keys' weights are exactly 0).
  const Shape alone_shape{1, 10, s.heads, s.head_dim};
  const at::Tensor alone_in = qkv.slice(0, 2 * s.length, 2 * s.length + 10).contiguous();
  const at::Tensor alone = RunTiles(alone_in, alone_shape, at::Tensor(), 0.25, 0, 1,
                                    at::empty({10, hidden}, at::kBFloat16));
  EXPECT_TRUE(at::equal(alone, got.slice(0, 2 * s.length, 2 * s.length + 10)));
  // Text 0 alone equals text 0 of the batch.
  const Shape first_shape{1, s.length, s.heads, s.head_dim};
  const at::Tensor first_in = qkv.slice(0, 0, s.length).contiguous();
  const at::Tensor first = RunTiles(first_in, first_shape, at::Tensor(), 0.25, 0, 1,
                                    at::empty({s.length, hidden}, at::kBFloat16));
  EXPECT_TRUE(at::equal(first, got.slice(0, 0, s.length)));
  // A short text after a longer one on the same thread: nothing stale from
  // the longer text's operands (its keys past the short text's) reaches it.
  const Shape long_shape{1, 40, s.heads, s.head_dim};
  const at::Tensor long_in = at::randn({40, 3 * hidden}).to(at::kBFloat16);
  RunTiles(long_in, long_shape, at::zeros({1, 40}), 0.25, 0, 1,
           at::empty({40, hidden}, at::kBFloat16));
  const at::Tensor again = RunTiles(alone_in, alone_shape, at::Tensor(), 0.25, 0, 1,
                                    at::empty({10, hidden}, at::kBFloat16));
  EXPECT_TRUE(at::equal(alone, again));
}

}  // namespace
}  // namespace gantry::sentence_encoder
