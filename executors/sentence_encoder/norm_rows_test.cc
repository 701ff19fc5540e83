// norm_rows: the bfloat16 LayerNorm against ATen's.
#include "norm_rows.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>

namespace gantry::sentence_encoder {
namespace {

const std::uint16_t* Bits(const at::Tensor& t) {
  return static_cast<const std::uint16_t*>(t.const_data_ptr());
}

TEST(NormRowsTest, BFloat16MatchesAtenWithinOneRoundingStep) {
  if (!norm_rows::BFloat16RowsAvailable()) {
    GTEST_SKIP() << "this CPU has no AVX512-BF16: BertModel uses ATen's LayerNorm here";
  }
  at::manual_seed(5);
  for (const std::int64_t cols : {std::int64_t{384}, std::int64_t{16}, std::int64_t{48}}) {
    // Rows with an offset and a spread of their own, so that the mean matters.
    const at::Tensor x =
        (at::randn({33, cols}) * (1 + 3 * at::rand({33, 1})) + 5 * at::randn({33, 1}))
            .to(at::kBFloat16);
    const at::Tensor gamma = (1 + 0.2 * at::randn({cols})).to(at::kBFloat16);
    const at::Tensor beta = (0.1 * at::randn({cols})).to(at::kBFloat16);
    const at::Tensor want = at::layer_norm(x, {cols}, gamma, beta, 1e-12);
    at::Tensor got = at::full_like(x, 7.0);
    // Rows 2..30 only: the others stay as they were.
    norm_rows::LayerNormRowsBFloat16(Bits(x), cols, Bits(gamma), Bits(beta), 1e-12F, 2, 31,
                                     static_cast<std::uint16_t*>(got.mutable_data_ptr()));
    const at::Tensor g = got.slice(0, 2, 31).to(at::kFloat);
    const at::Tensor w = want.slice(0, 2, 31).to(at::kFloat);
    // Both work in float32 and round once; where the two float32 results
    // straddle a rounding boundary they are one bfloat16 step apart.
    const at::Tensor step = w.abs().clamp_min(1e-30) * (1.0 / 128);
    EXPECT_TRUE(at::all((g - w).abs() <= step).item<bool>())
        << cols << " columns: max difference " << (g - w).abs().max().item<double>();
    EXPECT_GT(at::eq(g, w).to(at::kFloat).mean().item<double>(), 0.9) << cols;
    EXPECT_TRUE(at::equal(got.slice(0, 0, 2), at::full({2, cols}, 7.0, at::kBFloat16)));
    EXPECT_TRUE(at::equal(got.slice(0, 31), at::full({2, cols}, 7.0, at::kBFloat16)));
  }
}

TEST(NormRowsTest, ConstantRowGivesBeta) {
  if (!norm_rows::BFloat16RowsAvailable()) {
    GTEST_SKIP() << "this CPU has no AVX512-BF16";
  }
  const at::Tensor x = at::full({1, 64}, 3.0, at::kBFloat16);
  const at::Tensor gamma = at::ones({64}, at::kBFloat16);
  const at::Tensor beta = at::linspace(-1, 1, 64).to(at::kBFloat16);
  at::Tensor got = at::empty_like(x);
  norm_rows::LayerNormRowsBFloat16(Bits(x), 64, Bits(gamma), Bits(beta), 1e-12F, 0, 1,
                                   static_cast<std::uint16_t*>(got.mutable_data_ptr()));
  EXPECT_TRUE(at::equal(got[0], beta));
}

}  // namespace
}  // namespace gantry::sentence_encoder
