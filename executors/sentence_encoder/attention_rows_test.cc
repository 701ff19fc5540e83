// attention_rows: the one-pass attention of short texts against ATen's
// softmax attention, in float32 and bfloat16.
#include "attention_rows.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "attention_test_shapes.h"

namespace gantry::sentence_encoder {
namespace {

using attention_test::Name;
using attention_test::PaddingMask;
using attention_test::Shape;

// softmax(q k^T * scale + mask) v per head, from token-major [B * L, 3h]
// float32, back to token-major [B * L, h].
at::Tensor Reference(const at::Tensor& qkv, const Shape& s, const at::Tensor& mask, double scale) {
  const std::int64_t hidden = s.heads * s.head_dim;
  const at::Tensor parts =
      qkv.view({s.batch, s.length, 3, s.heads, s.head_dim}).permute({2, 0, 3, 1, 4});
  const at::Tensor weights = at::softmax(at::matmul(parts[0] * scale, parts[1].transpose(-1, -2)) +
                                             mask.view({s.batch, 1, 1, s.length}),
                                         -1);
  return at::matmul(weights, parts[2]).permute({0, 2, 1, 3}).reshape({s.batch * s.length, hidden});
}

// Lengths on and off the kernel's 16-key blocks, up to the longest it
// takes; head sizes on and off its 16-column blocks (MiniLM's: 12 x 32).
const Shape kShapes[] = {{2, 1, 2, 16},  {3, 7, 2, 16},  {2, 14, 12, 32},
                         {2, 17, 3, 20}, {1, 33, 4, 64}, {2, 64, 2, 16}};

TEST(AttentionRowsTest, Float32MatchesAtensSoftmaxAttention) {
  at::manual_seed(3);
  for (const Shape& s : kShapes) {
    const std::int64_t hidden = s.heads * s.head_dim;
    const at::Tensor qkv = at::randn({s.batch * s.length, 3 * hidden});
    const at::Tensor mask = PaddingMask(s);
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
    at::Tensor got = at::empty({s.batch * s.length, hidden});
    attention_rows::AttentionFromQkv(
        qkv.data_ptr<float>(), {s.batch, s.length, s.heads, s.head_dim}, mask.data_ptr<float>(),
        static_cast<float>(scale), 0, s.batch, got.data_ptr<float>());
    const double error = (got - Reference(qkv, s, mask, scale)).abs().max().item<double>();
    EXPECT_LT(error, 2e-6) << Name(s);
  }
}

TEST(AttentionRowsTest, MaskedKeysWeighExactlyNothingAndTextsAreIndependent) {
  at::manual_seed(4);
  const Shape s{3, 20, 2, 16};
  const std::int64_t hidden = s.heads * s.head_dim;
  const at::Tensor qkv = at::randn({s.batch * s.length, 3 * hidden});
  const at::Tensor mask = PaddingMask(s);  // text 2 keeps its first 10 tokens
  at::Tensor got = at::empty({s.batch * s.length, hidden});
  // Texts in two calls, as two threads would take them.
  const HeadLayout layout{s.batch, s.length, s.heads, s.head_dim};
  attention_rows::AttentionFromQkv(qkv.data_ptr<float>(), layout, mask.data_ptr<float>(), 0.25F, 0,
                                   1, got.data_ptr<float>());
  attention_rows::AttentionFromQkv(qkv.data_ptr<float>(), layout, mask.data_ptr<float>(), 0.25F, 1,
                                   3, got.data_ptr<float>());
  // Text 2's first 10 tokens alone, unmasked, come out bit for bit the same.
  const at::Tensor alone_in = qkv.slice(0, 2 * s.length, 2 * s.length + 10).contiguous();
  at::Tensor alone = at::empty({10, hidden});
  attention_rows::AttentionFromQkv(alone_in.data_ptr<float>(), {1, 10, s.heads, s.head_dim},
                                   nullptr, 0.25F, 0, 1, alone.data_ptr<float>());
  EXPECT_TRUE(at::equal(alone, got.slice(0, 2 * s.length, 2 * s.length + 10)));
  // And text 0 alone equals text 0 of the batch.
  at::Tensor first = at::empty({s.length, hidden});
  const at::Tensor first_in = qkv.slice(0, 0, s.length).contiguous();
  attention_rows::AttentionFromQkv(first_in.data_ptr<float>(), {1, s.length, s.heads, s.head_dim},
                                   nullptr, 0.25F, 0, 1, first.data_ptr<float>());
  EXPECT_TRUE(at::equal(first, got.slice(0, 0, s.length)));
}

TEST(AttentionRowsTest, BFloat16IsFloat32InsideRoundedOnce) {
  at::manual_seed(5);
  for (const Shape& s : kShapes) {
    const std::int64_t hidden = s.heads * s.head_dim;
    const at::Tensor qkv = at::randn({s.batch * s.length, 3 * hidden}).to(at::kBFloat16);
    const at::Tensor mask = PaddingMask(s);
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
    at::Tensor got = at::empty({s.batch * s.length, hidden}, at::kBFloat16);
    attention_rows::AttentionFromQkvBFloat16(
        static_cast<const std::uint16_t*>(qkv.const_data_ptr()),
        {s.batch, s.length, s.heads, s.head_dim}, mask.data_ptr<float>(), static_cast<float>(scale),
        0, s.batch, static_cast<std::uint16_t*>(got.mutable_data_ptr()));
    // The reference in float32 from the same bfloat16 inputs: the output
    // differs by its one rounding to bfloat16 (8 bits: 2^-8 relative).
    const at::Tensor want = Reference(qkv.to(at::kFloat), s, mask, scale);
    const at::Tensor error = (got.to(at::kFloat) - want).abs();
    EXPECT_TRUE(at::all(error <= want.abs() * (1.0 / 256) + 1e-6).item<bool>())
        << Name(s) << ": worst " << error.max().item<double>();
  }
}

}  // namespace
}  // namespace gantry::sentence_encoder
