// File: executors/sentence_encoder/int8_linear.h
//
// A linear layer in int8 on CPU: weights quantised once, symmetric per
// output channel; activations quantised per row (int8_rows.h) on every
// call; the product on oneDNN's int8 matrix multiply (onednn::
// qlinear_pointwise, the op Inductor emits for quantised CPU graphs),
// which returns float32 with the weight scales applied. The row scales,
// zero points, bias and what follows (GELU, residual, LayerNorm) are the
// caller's epilogue (int8_rows.h), since oneDNN takes one activation scale
// per tensor only.
//
// Thread safety: Multiply and Product are safe for concurrent use once
// built; nothing changes an Int8Linear after FromFloat.
#ifndef GANTRY_EXECUTORS_SENTENCE_ENCODER_INT8_LINEAR_H_
#define GANTRY_EXECUTORS_SENTENCE_ENCODER_INT8_LINEAR_H_

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <gantry/status.h>

#include <cstdint>

#include "int8_rows.h"

namespace gantry::sentence_encoder {

// Runs body(begin, end) over [0, count) in pieces of at least `grain` on
// libtorch's intra-op (OpenMP) threads: at::parallel_for. Under TSan on
// the calling thread alone: libgomp is not instrumented, so TSan would see
// the threads' accesses without the fork and barrier that order them.
template <typename Body>
void ParallelRows(std::int64_t count, std::int64_t grain, const Body& body) {
#if defined(GANTRY_TSAN)
  (void)grain;
  if (count > 0) {
    body(std::int64_t{0}, count);
  }
#else
  at::parallel_for(0, count, grain, body);
#endif
}

// Activations quantised per row, owning their tensors.
struct QuantizedActivations {
  at::Tensor q;       // uint8 [rows, cols]
  at::Tensor scale;   // float32 [rows]
  at::Tensor offset;  // float32 [rows], see int8_rows::QuantizedRows

  static QuantizedActivations Empty(std::int64_t rows, std::int64_t cols);
  // x: contiguous float32 [rows, cols] on CPU; all rows, in parallel.
  static QuantizedActivations FromTensor(const at::Tensor& x);
  int8_rows::QuantizedRows Rows() const;
};

class Int8Linear {
 public:
  // OK when this libtorch runs oneDNN's int8 product on this CPU (tried
  // once on a small layer); otherwise says what is missing.
  static Status Available();

  // weight: float32 [out, in]; bias: float32 [out]. `rows_hint` picks
  // oneDNN's weight layout only.
  static StatusOr<Int8Linear> FromFloat(const at::Tensor& weight, const at::Tensor& bias,
                                        std::int64_t rows_hint);

  std::int64_t in_features() const { return in_features_; }
  std::int64_t out_features() const { return out_features_; }

  // Multiplies outputs [begin, end) by `factor` (folds a scale that follows
  // the layer into it). Not safe beside Multiply.
  void ScaleOutputs(std::int64_t begin, std::int64_t end, float factor);

  // float32 [rows, out]: the int32 products of x.q with the int8 weight
  // (zero point 128), times the weight scales.
  at::Tensor Multiply(const QuantizedActivations& x) const;
  // What the epilogue needs to finish `acc` = Multiply(x).
  int8_rows::Product Product(const at::Tensor& acc, const QuantizedActivations& x) const;

 private:
  at::Tensor packed_weight_;  // oneDNN's layout
  at::Tensor weight_scale_;   // float32 [out]
  at::Tensor weight_zero_;    // int64 [out], zeros
  at::Tensor column_sums_;    // float32 [out]
  at::Tensor bias_;           // float32 [out]
  std::int64_t in_features_ = 0;
  std::int64_t out_features_ = 0;
};

}  // namespace gantry::sentence_encoder

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_INT8_LINEAR_H_
