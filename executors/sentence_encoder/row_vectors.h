// File: executors/sentence_encoder/row_vectors.h
//
// What the row kernels of int8_rows.cc and attention_rows.cc share: the
// macro that compiles an entry point for AVX-512, AVX2 and baseline x86-64
// (picked at run time), vectors of kLanes floats (GCC's and Clang's vector
// extension), e^x and erf without libm, bfloat16 conversions, and one
// text's self-attention in float32. Internal to this folder; every helper
// is forced inline, so that it takes each clone's instruction set.
//
// Thread safety: stateless functions.
#ifndef GANTRY_EXECUTORS_SENTENCE_ENCODER_ROW_VECTORS_H_
#define GANTRY_EXECUTORS_SENTENCE_ENCODER_ROW_VECTORS_H_

#include <algorithm>
#include <bit>
#include <cstddef>
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

namespace gantry::sentence_encoder::row_vectors {

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

// A text's queries, transposed keys and values, its scores and one context
// row for AttendText: each thread keeps its own between calls (thread_local
// at the caller), grown to the largest text seen (at most 64 tokens of 384
// columns in MiniLM: 300 KiB).
struct AttentionScratch {
  std::vector<float> q, k_t, v, context, weights, key_mask;
  void Fit(std::int64_t keys, std::int64_t hidden) {
    const auto tokens = static_cast<std::size_t>(keys * hidden);
    for (std::vector<float>* buffer : {&q, &k_t, &v}) {
      buffer->resize(std::max(buffer->size(), tokens));
    }
    context.resize(std::max(context.size(), static_cast<std::size_t>(hidden)));
    weights.resize(std::max(weights.size(), static_cast<std::size_t>(keys)));
    key_mask.resize(std::max(key_mask.size(), static_cast<std::size_t>(keys)));
  }
};

// One text's self-attention in float32, softmax(q k^T + mask) v per head:
// `q` [length, hidden] (already scaled), `k_t` [hidden, keys] (the keys
// transposed, `keys` = length rounded up to kLanes, the padding columns
// anything finite), `v` [length, hidden], `key_mask` [keys] (additive;
// float's lowest masks a key to exactly 0 weight, and so must the padding
// columns), `weights` [keys] and `context` [hidden] scratch. Each token's
// context row goes to emit(i, context) as soon as it is complete.
template <typename Emit>
GANTRY_ROW_INLINE void AttendText(std::int64_t length, std::int64_t heads, std::int64_t head_dim,
                                  std::int64_t keys, const float* q, const float* k_t,
                                  const float* v, const float* key_mask, float* weights,
                                  float* context, const Emit& emit) {
  const std::int64_t hidden = heads * head_dim;
  for (std::int64_t i = 0; i < length; ++i) {
    for (std::int64_t h = 0; h < heads; ++h) {
      // Blocks of kLanes keys and of kLanes context columns, each summed
      // in a register.
      const float* q_head = q + i * hidden + h * head_dim;
      Floats top = Splat(-3.4e38F);
      for (std::int64_t jb = 0; jb < keys; jb += kLanes) {
        // Four sums in turn, so that the multiply-adds do not wait on
        // each other.
        const float* k_block = k_t + h * head_dim * keys + jb;
        Floats part[4] = {LoadFloats(key_mask + jb), {}, {}, {}};
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
        StoreFloats(weights + jb, block);
        top = block > top ? block : top;
      }
      float top_all = top[0];
      for (std::int64_t l = 1; l < kLanes; ++l) {
        top_all = std::max(top_all, top[l]);
      }
      Floats sums = {};
      for (std::int64_t jb = 0; jb < keys; jb += kLanes) {
        const Floats e = ExpFloats(LoadFloats(weights + jb) - top_all);
        sums += e;
        StoreFloats(weights + jb, e);
      }
      float sum = 0.0F;
      for (std::int64_t l = 0; l < kLanes; ++l) {
        sum += sums[l];
      }
      const float inverse = 1.0F / sum;
      float* ctx = context + h * head_dim;
      std::int64_t db = 0;
      for (; db + kLanes <= head_dim; db += kLanes) {
        const float* v_block = v + h * head_dim + db;
        Floats part[2] = {};
        std::int64_t j = 0;
        for (; j + 2 <= length; j += 2) {
          part[0] += weights[j] * LoadFloats(v_block + j * hidden);
          part[1] += weights[j + 1] * LoadFloats(v_block + (j + 1) * hidden);
        }
        if (j < length) {
          part[0] += weights[j] * LoadFloats(v_block + j * hidden);
        }
        StoreFloats(ctx + db, (part[0] + part[1]) * inverse);
      }
      for (; db < head_dim; ++db) {
        float c = 0.0F;
        for (std::int64_t j = 0; j < length; ++j) {
          c += weights[j] * v[j * hidden + h * head_dim + db];
        }
        ctx[db] = c * inverse;
      }
    }
    emit(i, static_cast<const float*>(context));
  }
}

}  // namespace gantry::sentence_encoder::row_vectors

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_ROW_VECTORS_H_
