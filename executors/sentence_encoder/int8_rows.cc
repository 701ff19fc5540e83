#include "int8_rows.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

// Each entry point is compiled three times and picked by the loader from
// the CPU it runs on (GCC's and Clang's target_clones): the loops below are
// written so the compiler vectorises them (this file builds at -O3), and
// the helpers are forced inline so that they take each clone's instruction
// set instead of the baseline's.
// Not under the sanitizers: the loader runs the clones' resolvers before
// the sanitizer's runtime is up, and their instrumented code crashes there.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define GANTRY_ROW_KERNEL_SANITIZED 1
#endif
#endif
// (The TSan build undefines __SANITIZE_THREAD__ and says GANTRY_TSAN: see
// CMakeLists.txt.)
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(GANTRY_TSAN)
#define GANTRY_ROW_KERNEL_SANITIZED 1
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(GANTRY_ROW_KERNEL_SANITIZED)
#define GANTRY_ROW_KERNEL __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GANTRY_ROW_KERNEL
#endif
#define GANTRY_ROW_INLINE inline __attribute__((always_inline))

namespace gantry::sentence_encoder::int8_rows {
namespace {

// Lanes the reductions keep apart, so that they vectorise without the
// compiler having to reorder float additions (which it may not).
constexpr std::int64_t kLanes = 16;

// kLanes floats as one value (GCC's and Clang's vector extension): a
// register in the AVX-512 clone, two or four in the others. For the
// attention's loops, whose sums the vectoriser would not keep in registers.
using Floats = float __attribute__((vector_size(kLanes * sizeof(float))));
using Ints = std::int32_t __attribute__((vector_size(kLanes * sizeof(float))));

GANTRY_ROW_INLINE Floats LoadFloats(const float* p) {
  Floats v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

GANTRY_ROW_INLINE void StoreFloats(float* p, Floats v) { std::memcpy(p, &v, sizeof v); }

GANTRY_ROW_INLINE Floats Splat(float x) { return Floats{} + x; }

// Round to nearest, ties to even, for |v| < 2^22, without a libm call.
GANTRY_ROW_INLINE float RoundEven(float v) {
  constexpr float kMagic = 12582912.0F;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}

// e^x of kLanes floats to about 2e-7 relative for x in [-87, 88] (0 below,
// clamped above): 2^n times a degree-6 polynomial on the rest.
GANTRY_ROW_INLINE Floats ExpFloats(Floats x) {
  const Ints underflows = x < -87.0F;
  x = x < -87.0F ? Splat(-87.0F) : x;
  x = x > 88.0F ? Splat(88.0F) : x;
  constexpr float kMagic = 12582912.0F;
  const Floats n = (x * 1.44269504088896341F + kMagic) - kMagic;
  Floats r = x - n * 0.693145751953125F;
  r -= n * 1.428606765330187e-06F;
  Floats p = Splat(1.0F / 720.0F);
  p = p * r + 1.0F / 120.0F;
  p = p * r + 1.0F / 24.0F;
  p = p * r + 1.0F / 6.0F;
  p = p * r + 0.5F;
  p = p * r + 1.0F;
  p = p * r + 1.0F;
  const Ints bits = (__builtin_convertvector(n, Ints) + 127) << 23;
  Floats scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return underflows ? Splat(0.0F) : p * scale;
}

// erf to 5e-7 absolute: x P(x^2) / Q(x^2) on x clamped to [-4, 4], where
// erf is 1 to float precision (the rational form Eigen and XLA use), with no
// exp and one division.
GANTRY_ROW_INLINE float Erf(float x) {
  x = std::min(std::max(x, -4.0F), 4.0F);
  const float x2 = x * x;
  float p = -2.72614225801306e-10F;
  p = p * x2 + 2.77068142495902e-08F;
  p = p * x2 - 2.10102402082508e-06F;
  p = p * x2 - 5.69250639462346e-05F;
  p = p * x2 - 7.34990630326855e-04F;
  p = p * x2 - 2.95459980854025e-03F;
  p = p * x2 - 1.60960333262415e-02F;
  float q = -1.45660718464996e-05F;
  q = q * x2 - 2.13374055278905e-04F;
  q = q * x2 - 1.68282697438203e-03F;
  q = q * x2 - 7.37332916720468e-03F;
  q = q * x2 - 1.42647390514189e-02F;
  return x * p / q;
}

GANTRY_ROW_INLINE float GeluInline(float x) {
  return 0.5F * x * (1.0F + Erf(x * 0.70710678118654752F));
}

GANTRY_ROW_INLINE std::uint16_t ToBFloat16(float f) {
  const auto u = std::bit_cast<std::uint32_t>(f);
  return static_cast<std::uint16_t>((u + 0x7FFFU + ((u >> 16U) & 1U)) >> 16U);
}

GANTRY_ROW_INLINE float FromBFloat16(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16U);
}

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

GANTRY_ROW_KERNEL
void AttentionFromProduct(const Product& p, const HeadLayout& layout, const float* mask,
                          std::int64_t begin, std::int64_t end, const QuantizedRows& out) {
  const std::int64_t length = layout.length;
  const std::int64_t head_dim = layout.head_dim;
  const std::int64_t hidden = layout.heads * head_dim;
  // Keys padded to whole vectors; the padding weighs 0.
  const std::int64_t keys = (length + kLanes - 1) / kLanes * kLanes;
  std::vector<float> q(static_cast<std::size_t>(length * hidden));
  std::vector<float> k_t(static_cast<std::size_t>(hidden * keys), 0.0F);  // [hidden, keys]
  std::vector<float> v(static_cast<std::size_t>(length * hidden));
  std::vector<float> context(static_cast<std::size_t>(hidden));
  std::vector<float> weights(static_cast<std::size_t>(keys));
  std::vector<float> key_mask(static_cast<std::size_t>(keys));
  for (std::int64_t b = begin; b < end; ++b) {
    for (std::int64_t i = 0; i < length; ++i) {
      const std::int64_t m = b * length + i;
      const float* acc = p.acc + m * p.cols;
      const float s = p.row_scale[m];
      const float o = p.row_offset[m];
      float* q_row = q.data() + i * hidden;
      float* v_row = v.data() + i * hidden;
      for (std::int64_t n = 0; n < hidden; ++n) {
        q_row[n] = s * (acc[n] + o * p.column_sums[n]) + p.bias[n];
      }
      for (std::int64_t n = 0; n < hidden; ++n) {
        const std::int64_t c = hidden + n;
        k_t[static_cast<std::size_t>(n * keys + i)] =
            s * (acc[c] + o * p.column_sums[c]) + p.bias[c];
      }
      for (std::int64_t n = 0; n < hidden; ++n) {
        const std::int64_t c = 2 * hidden + n;
        v_row[n] = s * (acc[c] + o * p.column_sums[c]) + p.bias[c];
      }
    }
    for (std::int64_t j = 0; j < keys; ++j) {
      key_mask[j] = j >= length ? -3.4e38F : (mask != nullptr ? mask[b * length + j] : 0.0F);
    }
    for (std::int64_t i = 0; i < length; ++i) {
      for (std::int64_t h = 0; h < layout.heads; ++h) {
        // Blocks of kLanes keys and of kLanes context columns, each summed
        // in a register.
        const float* q_head = q.data() + i * hidden + h * head_dim;
        Floats top = Splat(-3.4e38F);
        for (std::int64_t jb = 0; jb < keys; jb += kLanes) {
          // Four sums in turn, so that the multiply-adds do not wait on
          // each other.
          const float* k_block = k_t.data() + h * head_dim * keys + jb;
          Floats part[4] = {LoadFloats(key_mask.data() + jb), {}, {}, {}};
          std::int64_t d = 0;
          for (; d + 4 <= head_dim; d += 4) {
            for (std::int64_t u = 0; u < 4; ++u) {
              part[u] += q_head[d + u] * LoadFloats(k_block + (d + u) * keys);
            }
          }
          for (; d < head_dim; ++d) {
            part[0] += q_head[d] * LoadFloats(k_block + d * keys);
          }
          const Floats block = (part[0] + part[1]) + (part[2] + part[3]);
          StoreFloats(weights.data() + jb, block);
          top = block > top ? block : top;
        }
        float top_all = top[0];
        for (std::int64_t l = 1; l < kLanes; ++l) {
          top_all = std::max(top_all, top[l]);
        }
        Floats sums = {};
        for (std::int64_t jb = 0; jb < keys; jb += kLanes) {
          const Floats e = ExpFloats(LoadFloats(weights.data() + jb) - top_all);
          sums += e;
          StoreFloats(weights.data() + jb, e);
        }
        float sum = 0.0F;
        for (std::int64_t l = 0; l < kLanes; ++l) {
          sum += sums[l];
        }
        const float inverse = 1.0F / sum;
        float* ctx = context.data() + h * head_dim;
        std::int64_t db = 0;
        for (; db + kLanes <= head_dim; db += kLanes) {
          const float* v_block = v.data() + h * head_dim + db;
          Floats part[2] = {};
          std::int64_t j = 0;
          for (; j + 2 <= length; j += 2) {
            part[0] += weights[static_cast<std::size_t>(j)] * LoadFloats(v_block + j * hidden);
            part[1] +=
                weights[static_cast<std::size_t>(j + 1)] * LoadFloats(v_block + (j + 1) * hidden);
          }
          if (j < length) {
            part[0] += weights[static_cast<std::size_t>(j)] * LoadFloats(v_block + j * hidden);
          }
          StoreFloats(ctx + db, (part[0] + part[1]) * inverse);
        }
        for (; db < head_dim; ++db) {
          float c = 0.0F;
          for (std::int64_t j = 0; j < length; ++j) {
            c += weights[static_cast<std::size_t>(j)] *
                 v[static_cast<std::size_t>(j * hidden + h * head_dim + db)];
          }
          ctx[db] = c * inverse;
        }
      }
      const std::int64_t m = b * length + i;
      QuantizeRow(context.data(), hidden, out.q + m * hidden, out.scale + m, out.offset + m);
    }
  }
}

float Gelu(float x) { return GeluInline(x); }

}  // namespace gantry::sentence_encoder::int8_rows
