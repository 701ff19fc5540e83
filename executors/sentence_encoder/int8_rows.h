// File: executors/sentence_encoder/int8_rows.h
//
// The row-wise work around an int8 matrix product (int8_linear.h): each
// activation row quantised to uint8 with its own scale and zero point (one
// token's row at a time, so a padded or outlier token costs no other token
// precision), and the product's epilogues (dequantise, bias, GELU, residual,
// LayerNorm, quantise for the next product) in one pass over each row while
// it is in cache. Plain C++ on raw rows, compiled for AVX-512, AVX2 and
// baseline x86-64 and picked at run time; no libtorch header is seen here.
//
// A quantised row keeps x[k] ~= scale * (q[k] - 128 + offset): the product
// runs with zero point 128 for every row, and the row's own zero point
// comes back as `offset` (128 minus it) in the epilogue, times the weight's
// column sums.
//
// Thread safety: stateless functions; calls on disjoint rows may run
// concurrently.
#ifndef GANTRY_EXECUTORS_SENTENCE_ENCODER_INT8_ROWS_H_
#define GANTRY_EXECUTORS_SENTENCE_ENCODER_INT8_ROWS_H_

#include <cstdint>

#include "attention_rows.h"

namespace gantry::sentence_encoder::int8_rows {

// The zero point the matrix product is given for every row.
inline constexpr int kProductZeroPoint = 128;

// Rows [begin, end) of a row-major matrix quantised to uint8.
struct QuantizedRows {
  std::uint8_t* q;  // [rows, cols]
  float* scale;     // [rows]
  float* offset;    // [rows]: 128 minus the row's zero point
};

// An int32 product turned back into real numbers: row m, column n of the
// result is scale[m] * (acc[m, n] + offset[m] * column_sums[n]) + bias[n],
// where acc already carries the weight's per-column scale.
struct Product {
  const float* acc;          // [rows, cols]
  const float* row_scale;    // [rows]
  const float* row_offset;   // [rows]
  const float* column_sums;  // [cols]: weight scale times the sum of the int8 column
  const float* bias;         // [cols]
  std::int64_t cols;
};

// Quantises rows [begin, end) of x (`cols` wide) into `out`.
void QuantizeRows(const float* x, std::int64_t cols, std::int64_t begin, std::int64_t end,
                  const QuantizedRows& out);

// The product's rows [begin, end) in float32: the plain epilogue, which the
// ones below extend.
void DequantizeToFloat(const Product& p, std::int64_t begin, std::int64_t end, float* out);

// GELU (exact erf form; erf to 5e-7) of the product's rows [begin, end),
// quantised for the next product. `scratch`: p.cols floats of the caller's.
void DequantizeGeluQuantize(const Product& p, std::int64_t begin, std::int64_t end,
                            const QuantizedRows& out, float* scratch);

// LayerNorm(product + residual) of rows [begin, end) into `out` (float32,
// p.cols wide), and, when `quantized` is given, also quantised for the next
// product.
void DequantizeAddNorm(const Product& p, std::int64_t begin, std::int64_t end,
                       const float* residual, const float* gamma, const float* beta, float eps,
                       float* out, const QuantizedRows* quantized);

// The attention's layout (attention_rows.h).
using sentence_encoder::HeadLayout;

// The product's rows [begin, end) (p.cols a multiple of head_dim) written in
// `layout`, in float32 or bfloat16 (raw bits).
void DequantizeToHeads(const Product& p, const HeadLayout& layout, std::int64_t begin,
                       std::int64_t end, float* out);
void DequantizeToHeadsBFloat16(const Product& p, const HeadLayout& layout, std::int64_t begin,
                               std::int64_t end, std::uint16_t* out);

// Token rows [begin, end) of x, which is [batch, heads, length, head_dim]
// (the attention's output), quantised as rows of heads * head_dim (at most
// 4096).
void QuantizeHeadRows(const float* x, const HeadLayout& layout, std::int64_t begin,
                      std::int64_t end, const QuantizedRows& out);
void QuantizeHeadRowsBFloat16(const std::uint16_t* x, const HeadLayout& layout, std::int64_t begin,
                              std::int64_t end, const QuantizedRows& out);

// The whole self-attention of texts [begin, end) from the product of the
// fused query/key/value layer (p.cols = 3 * heads * head_dim; the queries
// already scaled by 1/sqrt(head_dim)), in float32, for short texts:
// dequantised into the cache, softmax(q k^T + mask) v per head, and each
// token's context row quantised for the output projection into `out` (rows
// b * length + i). `mask`: additive, [batch, length], float's lowest to
// mask (masked keys weigh exactly 0), or nullptr. Its work is quadratic
// in the length, as any attention's, but on one core per text: the caller
// sends long texts to a blocked kernel instead.
void AttentionFromProduct(const Product& p, const HeadLayout& layout, const float* mask,
                          std::int64_t begin, std::int64_t end, const QuantizedRows& out);

// GELU of one float, as DequantizeGeluQuantize computes it (for tests).
float Gelu(float x);

}  // namespace gantry::sentence_encoder::int8_rows

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_INT8_ROWS_H_
