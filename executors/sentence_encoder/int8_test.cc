// The int8 path of the encoder: the row kernels against plain ATen, the
// int8 linear layer against float32, and a whole model in int8 against the
// float32 one.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "bert_model.h"
#include "int8_linear.h"
#include "int8_rows.h"
#include "sentence_embedder.h"

namespace gantry::sentence_encoder {
namespace {

at::Tensor FloatRows(std::int64_t rows, std::int64_t cols, double scale = 1.0) {
  return (at::randn({rows, cols}) * scale).contiguous();
}

// What the kernels' quantised rows stand for: scale * (q - 128 + offset).
at::Tensor Dequantize(const QuantizedActivations& x) {
  return x.scale.unsqueeze(1) *
         (x.q.to(at::kFloat) - int8_rows::kProductZeroPoint + x.offset.unsqueeze(1));
}

// Every test that runs an int8 product skips, with the reason, on a CPU
// where int8 is refused (no VNNI: its products saturate).
#define SKIP_WITHOUT_INT8()                           \
  do {                                                \
    const Status available = Int8Linear::Available(); \
    if (!available.ok()) {                            \
      GTEST_SKIP() << available;                      \
    }                                                 \
  } while (false)

// The layer's output for x in float32, through the plain epilogue.
at::Tensor Int8Output(const Int8Linear& linear, const at::Tensor& x) {
  const QuantizedActivations xq = QuantizedActivations::FromTensor(x);
  const at::Tensor acc = linear.Multiply(xq);
  at::Tensor out = at::empty({x.size(0), linear.out_features()});
  int8_rows::DequantizeToFloat(linear.Product(acc, xq), 0, x.size(0), out.data_ptr<float>());
  return out;
}

TEST(Int8RowsTest, GeluFollowsTheErfForm) {
  double worst = 0;
  for (double x = -9; x <= 9; x += 1.0 / 1024) {
    const double want = 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    worst = std::max(worst, std::abs(int8_rows::Gelu(static_cast<float>(x)) - want));
  }
  EXPECT_LT(worst, 4e-6);
}

TEST(Int8RowsTest, QuantizedRowsAreWithinHalfAStepAndKeepZeroExact) {
  at::manual_seed(7);
  at::Tensor x = FloatRows(6, 100, 3.0);
  x[1].zero_();                // all zero
  x[2].abs_();                 // all positive: the range widens to hold 0
  x[3] = -x[3].abs();          // all negative
  x[4].zero_()[17] = 1e-3;     // one small value
  x[5].index_put_({0}, 0.0F);  // a real zero among others
  const QuantizedActivations q = QuantizedActivations::FromTensor(x);
  const at::Tensor back = Dequantize(q);
  for (std::int64_t m = 0; m < x.size(0); ++m) {
    const double step = q.scale[m].item<double>();
    EXPECT_LE((back[m] - x[m]).abs().max().item<double>(), step / 2 * 1.001 + 1e-12) << "row " << m;
    EXPECT_EQ(back[m][0].item<float>() == 0.0F, x[m][0].item<float>() == 0.0F) << "row " << m;
  }
  EXPECT_EQ(back[1].abs().max().item<float>(), 0.0F);
}

// Weights that int8 holds exactly (integers times a channel scale, each
// channel reaching 127) and inputs that the quantiser holds exactly: what
// is left is float rounding, so the row offsets and column sums are checked
// to that precision.
TEST(Int8LinearTest, ExactlyRepresentableInputsGiveTheFloatProduct) {
  SKIP_WITHOUT_INT8();
  at::manual_seed(11);
  const std::int64_t rows = 37, in = 64, out = 48;
  at::Tensor w_int = at::randint(-127, 128, {out, in}).to(at::kFloat);
  w_int.select(1, 0).fill_(127);
  const at::Tensor w_scale = at::rand({out, 1}) * 0.02 + 0.001;
  const at::Tensor w = w_int * w_scale;
  const at::Tensor bias = at::randn({out});
  // Rows over the whole of [0, 255] with a zero point of their own.
  at::Tensor q = at::randint(0, 256, {rows, in}).to(at::kFloat);
  q.select(1, 0).fill_(0);
  q.select(1, 1).fill_(255);
  const at::Tensor zero = at::randint(0, 256, {rows, 1}).to(at::kFloat);
  const at::Tensor x = ((q - zero) * 0.0625).contiguous();  // a power of two: exact
  StatusOr<Int8Linear> linear = Int8Linear::FromFloat(w, bias, rows);
  ASSERT_TRUE(linear.ok()) << linear.status();
  const at::Tensor got = Int8Output(*linear, x);
  const at::Tensor want = at::linear(x.to(at::kDouble), w.to(at::kDouble), bias.to(at::kDouble));
  EXPECT_LT((got.to(at::kDouble) - want).abs().max().item<double>(),
            1e-5 * want.abs().max().item<double>());
}

TEST(Int8LinearTest, RandomLayerIsWithinItsQuantisationError) {
  SKIP_WITHOUT_INT8();
  at::manual_seed(12);
  const std::int64_t rows = 50, in = 384, out = 96;
  const at::Tensor w = at::randn({out, in}) * 0.05;
  const at::Tensor bias = at::randn({out}) * 0.1;
  const at::Tensor x = FloatRows(rows, in) + 0.5;  // not centred on 0
  StatusOr<Int8Linear> linear = Int8Linear::FromFloat(w, bias, rows);
  ASSERT_TRUE(linear.ok()) << linear.status();
  const at::Tensor got = Int8Output(*linear, x);
  const at::Tensor want = at::linear(x, w, bias);
  const double relative = ((got - want).norm() / want.norm()).item<double>();
  EXPECT_LT(relative, 0.01);
  EXPECT_GT(relative, 0.0);  // it is int8: not the float product itself
}

// The epilogues against the same steps in ATen, on a product in float32.
class Int8EpilogueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_INT8();
    at::manual_seed(13);
    x_ = FloatRows(rows_, in_);
    w_ = at::randn({out_, in_}) * 0.1;
    bias_ = at::randn({out_}) * 0.1;
    StatusOr<Int8Linear> linear = Int8Linear::FromFloat(w_, bias_, rows_);
    ASSERT_TRUE(linear.ok()) << linear.status();
    linear_ = std::move(linear).value();
    xq_ = QuantizedActivations::FromTensor(x_);
    acc_ = linear_.Multiply(xq_);
    product_ = linear_.Product(acc_, xq_);
    y_ = at::empty({rows_, out_});
    int8_rows::DequantizeToFloat(product_, 0, rows_, y_.data_ptr<float>());
  }

  const std::int64_t rows_ = 24, in_ = 64, out_ = 40;
  at::Tensor x_, w_, bias_, acc_, y_;
  Int8Linear linear_;
  QuantizedActivations xq_;
  int8_rows::Product product_{};
};

TEST_F(Int8EpilogueTest, GeluThenQuantiseMatchesAten) {
  QuantizedActivations got = QuantizedActivations::Empty(rows_, out_);
  std::vector<float> scratch(static_cast<std::size_t>(out_));
  int8_rows::DequantizeGeluQuantize(product_, 0, rows_, got.Rows(), scratch.data());
  const at::Tensor want = at::gelu(y_);
  const at::Tensor step = got.scale.unsqueeze(1);
  EXPECT_LE(((Dequantize(got) - want).abs() / step).max().item<double>(), 0.5 + 1e-3);
}

TEST_F(Int8EpilogueTest, ResidualLayerNormMatchesAtenAndQuantisesItsOutput) {
  const at::Tensor residual = FloatRows(rows_, out_);
  const at::Tensor gamma = 1 + 0.1 * at::randn({out_});
  const at::Tensor beta = 0.1 * at::randn({out_});
  at::Tensor got = at::empty({rows_, out_});
  QuantizedActivations got_q = QuantizedActivations::Empty(rows_, out_);
  const int8_rows::QuantizedRows got_rows = got_q.Rows();
  int8_rows::DequantizeAddNorm(product_, 0, rows_, residual.data_ptr<float>(),
                               gamma.data_ptr<float>(), beta.data_ptr<float>(), 1e-12F,
                               got.data_ptr<float>(), &got_rows);
  const at::Tensor want = at::layer_norm(y_ + residual, {out_}, gamma, beta, 1e-12);
  EXPECT_LT((got - want).abs().max().item<double>(), 1e-5);
  const QuantizedActivations again = QuantizedActivations::FromTensor(got);
  EXPECT_TRUE(at::equal(got_q.q, again.q));
}

TEST_F(Int8EpilogueTest, HeadLayoutIsTheAttentionsPermutation) {
  // 24 rows as 4 texts of 6 tokens; 40 columns as 2 parts x 4 heads x 5.
  const int8_rows::HeadLayout layout{4, 6, 4, 5};
  at::Tensor heads = at::empty({2, 4, 4, 6, 5});
  int8_rows::DequantizeToHeads(product_, layout, 0, rows_, heads.data_ptr<float>());
  const at::Tensor want = y_.view({4, 6, 2, 4, 5}).permute({2, 0, 3, 1, 4});
  // (Equal but for the last bit, where the compiler fused another
  // multiply-add.)
  EXPECT_TRUE(at::allclose(heads, want, 1e-6, 1e-6));
  // And back: token rows gathered from one part's [batch, heads, length, dim].
  const at::Tensor part = heads[1].contiguous();
  QuantizedActivations got = QuantizedActivations::Empty(rows_, 20);
  int8_rows::QuantizeHeadRows(part.data_ptr<float>(), layout, 0, rows_, got.Rows());
  const QuantizedActivations direct = QuantizedActivations::FromTensor(
      part.permute({0, 2, 1, 3}).reshape({rows_, 20}).contiguous());
  EXPECT_TRUE(at::equal(got.q, direct.q));
  EXPECT_TRUE(at::equal(got.scale, direct.scale));
}

// The fused attention of short texts against ATen's, on the product of a
// query/key/value layer: 3 texts of 7 tokens, 2 heads of 16, the last text
// padded after 4 tokens.
TEST(Int8RowsTest, AttentionFromProductMatchesAtenAndIgnoresMaskedKeys) {
  SKIP_WITHOUT_INT8();
  at::manual_seed(14);
  const std::int64_t batch = 3, length = 7, heads = 2, head_dim = 16, hidden = 32;
  const std::int64_t rows = batch * length;
  const at::Tensor x = FloatRows(rows, 24);
  StatusOr<Int8Linear> qkv =
      Int8Linear::FromFloat(at::randn({3 * hidden, 24}) * 0.3, at::randn({3 * hidden}), rows);
  ASSERT_TRUE(qkv.ok()) << qkv.status();
  const QuantizedActivations xq = QuantizedActivations::FromTensor(x);
  const at::Tensor acc = qkv->Multiply(xq);
  const int8_rows::Product product = qkv->Product(acc, xq);
  at::Tensor mask = at::zeros({batch, length});
  mask[2].slice(0, 4).fill_(std::numeric_limits<float>::lowest());
  const int8_rows::HeadLayout layout{batch, length, heads, head_dim};
  QuantizedActivations got = QuantizedActivations::Empty(rows, hidden);
  int8_rows::AttentionFromProduct(product, layout, mask.data_ptr<float>(), 0, batch, got.Rows());

  at::Tensor y = at::empty({rows, 3 * hidden});
  int8_rows::DequantizeToFloat(product, 0, rows, y.data_ptr<float>());
  const at::Tensor parts = y.view({batch, length, 3, heads, head_dim}).permute({2, 0, 3, 1, 4});
  const at::Tensor weights = at::softmax(
      at::matmul(parts[0], parts[1].transpose(-1, -2)) + mask.view({batch, 1, 1, length}), -1);
  const at::Tensor context =
      at::matmul(weights, parts[2]).permute({0, 2, 1, 3}).reshape({rows, hidden});
  const at::Tensor step = got.scale.unsqueeze(1);
  EXPECT_LE(((Dequantize(got) - context).abs() / step).max().item<double>(), 0.5 + 1e-3);
  // The masked keys weigh nothing: text 2's first 4 tokens alone agree.
  QuantizedActivations alone = QuantizedActivations::Empty(4, hidden);
  const at::Tensor acc_alone = acc.slice(0, 2 * length, 2 * length + 4).contiguous();
  int8_rows::Product product_alone = product;
  product_alone.acc = acc_alone.data_ptr<float>();
  product_alone.row_scale += 2 * length;
  product_alone.row_offset += 2 * length;
  int8_rows::AttentionFromProduct(product_alone, {1, 4, heads, head_dim}, nullptr, 0, 1,
                                  alone.Rows());
  EXPECT_TRUE(at::equal(alone.q, got.q.slice(0, 2 * length, 2 * length + 4)));
}

BertConfig SmallConfig() {
  BertConfig c;
  c.vocab_size = 50;
  c.hidden_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 128;
  c.max_position_embeddings = 80;
  return c;
}

// A model with random weights loaded from a safetensors image of them.
class Int8ModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::manual_seed(15);
    for (const auto& [name, tensor] : float_model_.NamedParameters()) {
      const bool ln_weight = name.find("LayerNorm.weight") != std::string::npos;
      const at::Tensor value =
          ln_weight ? 1 + 0.1 * at::randn(tensor.sizes()) : 0.1 * at::randn(tensor.sizes());
      tensor.copy_(value);
    }
    for (const auto& [name, tensor] : int8_model_.NamedParameters()) {
      for (const auto& [float_name, float_tensor] : float_model_.NamedParameters()) {
        if (name == float_name) {
          tensor.copy_(float_tensor);
        }
      }
    }
    float_model_.To(at::Device(at::kCPU), at::kFloat);
    int8_model_.To(at::Device(at::kCPU), at::kFloat);
  }

  static at::Tensor Pooled(const at::Tensor& hidden, const at::Tensor& mask) {
    const at::Tensor m = mask.to(at::kFloat).unsqueeze(-1);
    const at::Tensor pooled = (hidden.to(at::kFloat) * m).sum(1) / m.sum(1);
    return pooled / pooled.norm(2, {1}, true);
  }

  BertModel float_model_{SmallConfig()};
  BertModel int8_model_{SmallConfig()};
};

TEST_F(Int8ModelTest, StaysCloseToFloat32InEitherAttentionDType) {
  SKIP_WITHOUT_INT8();
  const at::Tensor ids = at::randint(5, 50, {4, 12});
  at::Tensor mask = at::ones({4, 12}, at::kLong);
  mask[2].slice(0, 7).zero_();
  const at::Tensor want = Pooled(float_model_.Forward(ids, mask), mask);
  for (const at::ScalarType attention : {at::kFloat, at::kBFloat16}) {
    ASSERT_TRUE(int8_model_.QuantizeToInt8(attention).ok());
    ASSERT_TRUE(int8_model_.int8());
    const at::Tensor hidden = int8_model_.Forward(ids, mask);
    EXPECT_EQ(hidden.scalar_type(), at::kFloat);
    const at::Tensor cosine = (Pooled(hidden, mask) * want).sum(1);
    EXPECT_GT(cosine.min().item<double>(), 0.995) << c10::toString(attention);
    EXPECT_LT(cosine.min().item<double>(), 1.0 - 1e-7) << "int8 gave float32's numbers exactly";
    // A row's real tokens do not depend on the padding beside them.
    const at::Tensor alone = Pooled(
        int8_model_.Forward(ids.slice(0, 2, 3).slice(1, 0, 7), mask.slice(0, 2, 3).slice(1, 0, 7)),
        mask.slice(0, 2, 3).slice(1, 0, 7));
    EXPECT_LT((alone[0] - Pooled(hidden, mask)[2]).abs().max().item<double>(), 1e-6);
    // Beyond the explicit attention's lengths, SDPA takes over.
    const at::Tensor long_ids = at::randint(5, 50, {2, 70});
    const at::Tensor long_mask = at::ones({2, 70}, at::kLong);
    const at::Tensor long_cosine = (Pooled(int8_model_.Forward(long_ids, long_mask), long_mask) *
                                    Pooled(float_model_.Forward(long_ids, long_mask), long_mask))
                                       .sum(1);
    EXPECT_GT(long_cosine.min().item<double>(), 0.995);
  }
  // Another To() goes back to float32.
  int8_model_.To(at::Device(at::kCPU), at::kFloat);
  EXPECT_FALSE(int8_model_.int8());
  EXPECT_TRUE(at::allclose(int8_model_.Forward(ids, mask), float_model_.Forward(ids, mask)));
}

// A padded batch runs its real tokens only (texts over 64 tokens as one
// padded block): each text of a batch of mixed lengths, in no order, gives
// what it gives alone, and stays close to float32.
TEST_F(Int8ModelTest, EachTextOfAPackedBatchMatchesItselfAlone) {
  SKIP_WITHOUT_INT8();
  const std::vector<std::int64_t> lengths = {9, 78, 64, 3, 70, 1, 78, 40};
  const auto batch = static_cast<std::int64_t>(lengths.size());
  const std::int64_t length = 78;
  const at::Tensor ids = at::randint(5, 50, {batch, length});
  at::Tensor mask = at::zeros({batch, length}, at::kLong);
  for (std::int64_t b = 0; b < batch; ++b) {
    mask[b].slice(0, 0, lengths[static_cast<std::size_t>(b)]).fill_(1);
  }
  const at::Tensor want = Pooled(float_model_.Forward(ids, mask), mask);
  for (const at::ScalarType attention : {at::kFloat, at::kBFloat16}) {
    ASSERT_TRUE(int8_model_.QuantizeToInt8(attention).ok());
    const at::Tensor hidden = int8_model_.Forward(ids, mask);
    const at::Tensor got = Pooled(hidden, mask);
    EXPECT_GT((got * want).sum(1).min().item<double>(), 0.995) << c10::toString(attention);
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t n = lengths[static_cast<std::size_t>(b)];
      const at::Tensor row_mask = mask.slice(0, b, b + 1).slice(1, 0, n);
      const at::Tensor alone =
          Pooled(int8_model_.Forward(ids.slice(0, b, b + 1).slice(1, 0, n), row_mask), row_mask);
      // The long block's SDPA pads; what is padded weighs exactly nothing,
      // but its sums may run in another order.
      EXPECT_LT((alone[0] - got[b]).abs().max().item<double>(), n > 64 ? 1e-5 : 1e-6)
          << c10::toString(attention) << ", text " << b << " of " << n << " tokens";
      if (n <= 64) {
        EXPECT_EQ(hidden[b].slice(0, n).abs().max().item<float>(), 0.0F) << "text " << b;
      }
    }
  }
}

TEST_F(Int8ModelTest, NeedsTheFloat32ModelOnTheCpu) {
  int8_model_.To(at::Device(at::kCPU), at::kBFloat16);
  const Status status = int8_model_.QuantizeToInt8(at::kFloat);
  // Where int8 is refused altogether, that is the first thing said.
  const StatusCode expected =
      Int8Linear::Available().ok() ? StatusCode::kFailedPrecondition : StatusCode::kUnimplemented;
  EXPECT_EQ(status.code(), expected) << status;
  EXPECT_FALSE(int8_model_.int8());
}

TEST(Int8DTypeTest, IsForTheCpuOnly) {
  StatusOr<std::string> cpu = ResolveDType("int8", Device::Cpu());
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(*cpu, "int8");
  StatusOr<Device> cuda = Device::Parse("cuda:0");
  ASSERT_TRUE(cuda.ok());
  const StatusOr<std::string> on_cuda = ResolveDType("int8", *cuda);
  ASSERT_FALSE(on_cuda.ok());
  EXPECT_NE(on_cuda.status().message().find("CPU only"), std::string::npos) << on_cuda.status();
  const StatusOr<std::string> unknown = ResolveDType("int4", Device::Cpu());
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("int8"), std::string::npos) << unknown.status();
}

}  // namespace
}  // namespace gantry::sentence_encoder
