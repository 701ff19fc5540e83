#include "int8_linear.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/round.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>

#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace gantry::sentence_encoder {
namespace {

// Rows per task of the row kernels: a few per thread, so that the cores
// finish together.
constexpr std::int64_t kRowGrain = 16;

std::optional<c10::OperatorHandle> FindOp(const char* name) {
  if (!at::hasMKLDNN()) {
    return std::nullopt;
  }
  return c10::Dispatcher::singleton().findSchema({name, ""});
}

const c10::OperatorHandle* PrepackOp() {
  static const std::optional<c10::OperatorHandle> op = FindOp("onednn::qlinear_prepack");
  return op.has_value() ? &*op : nullptr;
}

const c10::OperatorHandle* ProductOp() {
  static const std::optional<c10::OperatorHandle> op = FindOp("onednn::qlinear_pointwise");
  return op.has_value() ? &*op : nullptr;
}

}  // namespace

QuantizedActivations QuantizedActivations::Empty(std::int64_t rows, std::int64_t cols) {
  const at::TensorOptions options;
  return {at::empty({rows, cols}, options.dtype(at::kByte)),
          at::empty({rows}, options.dtype(at::kFloat)),
          at::empty({rows}, options.dtype(at::kFloat))};
}

QuantizedActivations QuantizedActivations::FromTensor(const at::Tensor& x) {
  const std::int64_t rows = x.size(0);
  const std::int64_t cols = x.size(1);
  QuantizedActivations out = Empty(rows, cols);
  const int8_rows::QuantizedRows target = out.Rows();
  const float* data = x.const_data_ptr<float>();
  ParallelRows(rows, kRowGrain, [&](std::int64_t begin, std::int64_t end) {
    int8_rows::QuantizeRows(data, cols, begin, end, target);
  });
  return out;
}

int8_rows::QuantizedRows QuantizedActivations::Rows() const {
  return {q.mutable_data_ptr<std::uint8_t>(), scale.mutable_data_ptr<float>(),
          offset.mutable_data_ptr<float>()};
}

Status Int8Linear::Available() {
  static const Status status = []() -> Status {
    if (PrepackOp() == nullptr || ProductOp() == nullptr) {
      return UnimplementedError(
          "dtype int8 needs oneDNN's int8 linear (onednn::qlinear_prepack and "
          "onednn::qlinear_pointwise), which this libtorch does not have");
    }
    try {
      // The worst case for the product's arithmetic: every activation at
      // 255 times weights of +-127. CPUs without VNNI multiply bytes in
      // pairs summed in 16 bits (vpmaddubsw), where 2 * 255 * 127
      // saturates; the sums would come back wrong, so int8 is refused there.
      constexpr std::int64_t kIn = 64;
      at::Tensor w = at::full({8, kIn}, 127.0F);
      w.slice(0, 4).neg_();
      StatusOr<Int8Linear> linear = FromFloat(w, at::zeros({8}), 4);
      if (!linear.ok()) {
        return linear.status();
      }
      QuantizedActivations x = QuantizedActivations::Empty(4, kIn);
      x.q.fill_(255);
      x.scale.fill_(1.0F);
      x.offset.zero_();
      const at::Tensor acc = linear->Multiply(x);
      // (255 - 128) * 127 * 64 rows of ones times the weight scale 1.
      const double want = (255.0 - int8_rows::kProductZeroPoint) * 127.0 * kIn;
      const double got_positive = acc.select(1, 0).min().item<double>();
      const double got_negative = acc.select(1, 7).max().item<double>();
      if (got_positive != want || got_negative != -want) {
        return UnimplementedError(
            "dtype int8 needs a CPU whose int8 products do not saturate (AVX512-VNNI, AVX-VNNI "
            "or AMX): oneDNN's gave " +
            std::to_string(got_positive) + " for " + std::to_string(want) + " here");
      }
    } catch (const std::exception& e) {
      return UnimplementedError(
          std::string("dtype int8: oneDNN's int8 linear fails on this CPU: ") + e.what());
    }
    return OkStatus();
  }();
  return status;
}

StatusOr<Int8Linear> Int8Linear::FromFloat(const at::Tensor& weight, const at::Tensor& bias,
                                           std::int64_t rows_hint) {
  if (PrepackOp() == nullptr || ProductOp() == nullptr) {
    return UnimplementedError(
        "onednn::qlinear_prepack / qlinear_pointwise are not in this libtorch");
  }
  Int8Linear linear;
  const at::Tensor w = weight.to(at::kFloat).contiguous();
  linear.out_features_ = w.size(0);
  linear.in_features_ = w.size(1);
  // Symmetric per output channel; a row of zeros keeps a scale that is
  // not 0, so that nothing divides by it. (Clipping each channel's range
  // where it rounds closest, by least squares, moved the parity strings'
  // top-10 overlap by 0.002 and took a second at load: not done.)
  const at::Tensor best_scale = (at::amax(at::abs(w), {1}, /*keepdim=*/true) / 127.0)
                                    .clamp_min_(std::numeric_limits<float>::min());
  linear.weight_scale_ = best_scale.squeeze(1).contiguous();
  const at::Tensor q = at::round(w / best_scale).clamp_(-127, 127).to(at::kChar);
  linear.column_sums_ = (at::sum(q.to(at::kFloat), {1}) * linear.weight_scale_).contiguous();
  linear.weight_zero_ = at::zeros({linear.out_features_}, at::TensorOptions().dtype(at::kLong));
  // A copy: ScaleOutputs writes to it, and `bias` may be the weight file's.
  linear.bias_ = bias.to(at::kFloat).clone();
  try {
    torch::jit::Stack stack{q, std::optional<std::vector<std::int64_t>>(
                                   std::vector<std::int64_t>{rows_hint, linear.in_features_})};
    PrepackOp()->callBoxed(&stack);
    linear.packed_weight_ = stack[0].toTensor();
  } catch (const std::exception& e) {
    return InternalError(std::string("onednn::qlinear_prepack failed: ") + e.what());
  }
  return linear;
}

void Int8Linear::ScaleOutputs(std::int64_t begin, std::int64_t end, float factor) {
  weight_scale_.slice(0, begin, end).mul_(factor);
  column_sums_.slice(0, begin, end).mul_(factor);
  bias_.slice(0, begin, end).mul_(factor);
}

at::Tensor Int8Linear::Multiply(const QuantizedActivations& x) const {
  torch::jit::Stack stack{x.q,
                          1.0,
                          static_cast<std::int64_t>(int8_rows::kProductZeroPoint),
                          packed_weight_,
                          weight_scale_,
                          weight_zero_,
                          std::optional<at::Tensor>(),
                          1.0,
                          std::int64_t{0},
                          std::optional<at::ScalarType>(at::kFloat),
                          std::string("none"),
                          c10::List<std::optional<at::Scalar>>(),
                          std::string()};
  ProductOp()->callBoxed(&stack);
  return stack[0].toTensor();
}

int8_rows::Product Int8Linear::Product(const at::Tensor& acc, const QuantizedActivations& x) const {
  return {acc.const_data_ptr<float>(),      x.scale.const_data_ptr<float>(),
          x.offset.const_data_ptr<float>(), column_sums_.const_data_ptr<float>(),
          bias_.const_data_ptr<float>(),    out_features_};
}

}  // namespace gantry::sentence_encoder
