#include "int8_rows.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "row_vectors.h"

namespace gantry::sentence_encoder::int8_rows {
namespace {

using row_vectors::FromBFloat16;
using row_vectors::GeluInline;
using row_vectors::kLanes;
using row_vectors::RoundEven;
using row_vectors::ToBFloat16;

// The row's range, widened to hold 0 (so that 0 stays exact).
GANTRY_ROW_INLINE void RowRange(const float* x, std::int64_t cols, float* lo, float* hi) {
  float l = 0.0F;
  float h = 0.0F;
  for (std::int64_t k = 0; k < cols; ++k) {
    l = std::min(l, x[k]);
    h = std::max(h, x[k]);
  }
  *lo = l;
  *hi = h;
}

// Quantises one float row whose range [lo, hi] (holding 0) is known
// (asymmetric uint8).
GANTRY_ROW_INLINE void QuantizeRowInRange(const float* x, std::int64_t cols, float lo, float hi,
                                          std::uint8_t* q, float* scale, float* offset) {
  float s = (hi - lo) / 255.0F;
  if (!(s > 0.0F)) {
    s = 1.0F;  // an all-zero row
  }
  const float inverse = 1.0F / s;
  const float zero = std::min(std::max(RoundEven(-lo * inverse), 0.0F), 255.0F);
  for (std::int64_t k = 0; k < cols; ++k) {
    const float v = std::min(std::max(RoundEven(x[k] * inverse) + zero, 0.0F), 255.0F);
    q[k] = static_cast<std::uint8_t>(static_cast<std::int32_t>(v));
  }
  *scale = s;
  *offset = static_cast<float>(kProductZeroPoint) - zero;
}

// Quantises one float row (asymmetric uint8, the row's own range).
GANTRY_ROW_INLINE void QuantizeRow(const float* x, std::int64_t cols, std::uint8_t* q, float* scale,
                                   float* offset) {
  float lo = 0.0F;
  float hi = 0.0F;
  RowRange(x, cols, &lo, &hi);
  QuantizeRowInRange(x, cols, lo, hi, q, scale, offset);
}

GANTRY_ROW_INLINE void DequantizeRow(const Product& p, std::int64_t m, float* out) {
  const float* acc = p.acc + m * p.cols;
  const float s = p.row_scale[m];
  const float o = p.row_offset[m];
  for (std::int64_t n = 0; n < p.cols; ++n) {
    out[n] = s * (acc[n] + o * p.column_sums[n]) + p.bias[n];
  }
}

}  // namespace

GANTRY_ROW_KERNEL
void QuantizeRows(const float* x, std::int64_t cols, std::int64_t begin, std::int64_t end,
                  const QuantizedRows& out) {
  for (std::int64_t m = begin; m < end; ++m) {
    QuantizeRow(x + m * cols, cols, out.q + m * cols, out.scale + m, out.offset + m);
  }
}

GANTRY_ROW_KERNEL
void DequantizeToFloat(const Product& p, std::int64_t begin, std::int64_t end, float* out) {
  for (std::int64_t m = begin; m < end; ++m) {
    DequantizeRow(p, m, out + m * p.cols);
  }
}

GANTRY_ROW_KERNEL
void DequantizeGeluQuantize(const Product& p, std::int64_t begin, std::int64_t end,
                            const QuantizedRows& out, float* scratch) {
  for (std::int64_t m = begin; m < end; ++m) {
    const float* acc = p.acc + m * p.cols;
    const float s = p.row_scale[m];
    const float o = p.row_offset[m];
    // The row's range in the same pass (vectorised: this file builds with
    // -ffinite-math-only, so min and max reduce in any order).
    float lo = 0.0F;
    float hi = 0.0F;
    for (std::int64_t n = 0; n < p.cols; ++n) {
      const float v = GeluInline(s * (acc[n] + o * p.column_sums[n]) + p.bias[n]);
      scratch[n] = v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    QuantizeRowInRange(scratch, p.cols, lo, hi, out.q + m * p.cols, out.scale + m, out.offset + m);
  }
}

GANTRY_ROW_KERNEL
void DequantizeAddNorm(const Product& p, std::int64_t begin, std::int64_t end,
                       const float* residual, const float* gamma, const float* beta, float eps,
                       float* out, const QuantizedRows* quantized) {
  const std::int64_t cols = p.cols;
  for (std::int64_t m = begin; m < end; ++m) {
    float* row = out + m * cols;
    DequantizeRow(p, m, row);
    const float* res = residual + m * cols;
    float sums[kLanes] = {};
    std::int64_t n = 0;
    for (; n + kLanes <= cols; n += kLanes) {
      for (std::int64_t j = 0; j < kLanes; ++j) {
        row[n + j] += res[n + j];
        sums[j] += row[n + j];
      }
    }
    for (; n < cols; ++n) {
      row[n] += res[n];
      sums[0] += row[n];
    }
    float sum = 0.0F;
    for (float v : sums) {
      sum += v;
    }
    const float mean = sum / static_cast<float>(cols);
    float squares[kLanes] = {};
    n = 0;
    for (; n + kLanes <= cols; n += kLanes) {
      for (std::int64_t j = 0; j < kLanes; ++j) {
        const float d = row[n + j] - mean;
        squares[j] += d * d;
      }
    }
    for (; n < cols; ++n) {
      const float d = row[n] - mean;
      squares[0] += d * d;
    }
    float square_sum = 0.0F;
    for (float v : squares) {
      square_sum += v;
    }
    const float inverse_std = 1.0F / std::sqrt(square_sum / static_cast<float>(cols) + eps);
    for (n = 0; n < cols; ++n) {
      row[n] = (row[n] - mean) * inverse_std * gamma[n] + beta[n];
    }
    if (quantized != nullptr) {
      QuantizeRow(row, cols, quantized->q + m * cols, quantized->scale + m, quantized->offset + m);
    }
  }
}

namespace {

template <typename T>
GANTRY_ROW_INLINE float Load(T v) {
  if constexpr (sizeof(T) == 2) {
    return FromBFloat16(v);
  } else {
    return v;
  }
}

template <typename T>
GANTRY_ROW_INLINE T Store(float v) {
  if constexpr (sizeof(T) == 2) {
    return ToBFloat16(v);
  } else {
    return v;
  }
}

}  // namespace

namespace {

template <typename T>
GANTRY_ROW_INLINE void DequantizeToHeadsOf(const Product& p, const HeadLayout& layout,
                                           std::int64_t begin, std::int64_t end, T* out) {
  const std::int64_t head_dim = layout.head_dim;
  const std::int64_t chunks = p.cols / head_dim;  // (part, head) pairs
  for (std::int64_t m = begin; m < end; ++m) {
    const float* acc = p.acc + m * p.cols;
    const float s = p.row_scale[m];
    const float o = p.row_offset[m];
    const std::int64_t b = m / layout.length;
    const std::int64_t l = m % layout.length;
    for (std::int64_t c = 0; c < chunks; ++c) {
      const std::int64_t part = c / layout.heads;
      const std::int64_t h = c % layout.heads;
      T* dst =
          out + (((part * layout.batch + b) * layout.heads + h) * layout.length + l) * head_dim;
      const std::int64_t n0 = c * head_dim;
      for (std::int64_t d = 0; d < head_dim; ++d) {
        dst[d] = Store<T>(s * (acc[n0 + d] + o * p.column_sums[n0 + d]) + p.bias[n0 + d]);
      }
    }
  }
}

template <typename T>
GANTRY_ROW_INLINE void QuantizeHeadRowsOf(const T* x, const HeadLayout& layout, std::int64_t begin,
                                          std::int64_t end, const QuantizedRows& out) {
  constexpr std::int64_t kMaxCols = 4096;
  float row[kMaxCols];
  const std::int64_t head_dim = layout.head_dim;
  const std::int64_t cols = layout.heads * head_dim;
  for (std::int64_t m = begin; m < end; ++m) {
    const std::int64_t b = m / layout.length;
    const std::int64_t l = m % layout.length;
    for (std::int64_t h = 0; h < layout.heads; ++h) {
      const T* src = x + ((b * layout.heads + h) * layout.length + l) * head_dim;
      for (std::int64_t d = 0; d < head_dim; ++d) {
        row[h * head_dim + d] = Load(src[d]);
      }
    }
    QuantizeRow(row, cols, out.q + m * cols, out.scale + m, out.offset + m);
  }
}

}  // namespace

GANTRY_ROW_KERNEL
void DequantizeToHeads(const Product& p, const HeadLayout& layout, std::int64_t begin,
                       std::int64_t end, float* out) {
  DequantizeToHeadsOf(p, layout, begin, end, out);
}

GANTRY_ROW_KERNEL
void DequantizeToHeadsBFloat16(const Product& p, const HeadLayout& layout, std::int64_t begin,
                               std::int64_t end, std::uint16_t* out) {
  DequantizeToHeadsOf(p, layout, begin, end, out);
}

GANTRY_ROW_KERNEL
void QuantizeHeadRows(const float* x, const HeadLayout& layout, std::int64_t begin,
                      std::int64_t end, const QuantizedRows& out) {
  QuantizeHeadRowsOf(x, layout, begin, end, out);
}

GANTRY_ROW_KERNEL
void QuantizeHeadRowsBFloat16(const std::uint16_t* x, const HeadLayout& layout, std::int64_t begin,
                              std::int64_t end, const QuantizedRows& out) {
  QuantizeHeadRowsOf(x, layout, begin, end, out);
}

namespace {

// Quantises token i's context row as row first_row + i of `out`.
struct QuantizeContextRow {
  const QuantizedRows& out;
  std::int64_t first_row;
  std::int64_t hidden;
  GANTRY_ROW_INLINE void operator()(std::int64_t i, const float* row) const {
    const std::int64_t m = first_row + i;
    QuantizeRow(row, hidden, out.q + m * hidden, out.scale + m, out.offset + m);
  }
};

}  // namespace

GANTRY_ROW_KERNEL
void AttentionFromProduct(const Product& p, const HeadLayout& layout, const float* mask,
                          std::int64_t begin, std::int64_t end, const QuantizedRows& out) {
  const std::int64_t length = layout.length;
  const std::int64_t head_dim = layout.head_dim;
  const std::int64_t hidden = layout.heads * head_dim;
  thread_local row_vectors::AttentionScratch scratch;
  const std::int64_t query_lanes = scratch.Prepare(length, hidden);
  float* const q_t = scratch.q_t.data();  // [hidden, query_lanes]
  float* const k = scratch.k.data();
  float* const v = scratch.v.data();
  for (std::int64_t b = begin; b < end; ++b) {
    for (std::int64_t i = 0; i < length; ++i) {
      const std::int64_t m = b * length + i;
      const float* acc = p.acc + m * p.cols;
      const float s = p.row_scale[m];
      const float o = p.row_offset[m];
      float* k_row = k + i * hidden;
      float* v_row = v + i * hidden;
      for (std::int64_t n = 0; n < hidden; ++n) {
        q_t[n * query_lanes + i] = s * (acc[n] + o * p.column_sums[n]) + p.bias[n];
      }
      for (std::int64_t n = 0; n < hidden; ++n) {
        const std::int64_t c = hidden + n;
        k_row[n] = s * (acc[c] + o * p.column_sums[c]) + p.bias[c];
      }
      for (std::int64_t n = 0; n < hidden; ++n) {
        const std::int64_t c = 2 * hidden + n;
        v_row[n] = s * (acc[c] + o * p.column_sums[c]) + p.bias[c];
      }
    }
    scratch.SetKeyMask(mask, b, length);
    row_vectors::AttendText(length, layout.heads, head_dim, query_lanes, q_t, k, v,
                            scratch.key_mask.data(), scratch.weights.data(), scratch.context.data(),
                            QuantizeContextRow{out, b * length, hidden});
  }
}

float Gelu(float x) { return GeluInline(x); }

}  // namespace gantry::sentence_encoder::int8_rows
