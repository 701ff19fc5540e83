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
#include <type_traits>
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
// The same for a lambda, after its parameter list.
#define GANTRY_ROW_LAMBDA __attribute__((always_inline))

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

// A text's transposed queries, its keys and values, its attention weights
// and context rows for AttendText: each thread keeps its own between calls
// (thread_local at the caller), grown to the largest text seen (at most 64
// tokens of 384 columns in MiniLM: 500 KiB).
struct AttentionScratch {
  std::vector<float> q_t, k, v, context, weights, key_mask;
  // Fits the buffers to texts of `length` tokens in `hidden` columns and
  // zeroes the query lanes past `length` (computed and never read: they
  // need only be finite, and no text writes them). Returns the query lanes,
  // the length rounded up to kLanes: q_t is [hidden, query lanes].
  GANTRY_ROW_INLINE std::int64_t Prepare(std::int64_t length, std::int64_t hidden) {
    const std::int64_t query_lanes = (length + kLanes - 1) / kLanes * kLanes;
    const auto tokens = static_cast<std::size_t>(query_lanes * hidden);
    for (std::vector<float>* buffer : {&q_t, &k, &v, &context}) {
      buffer->resize(std::max(buffer->size(), tokens));
    }
    const auto lanes = static_cast<std::size_t>(query_lanes);
    weights.resize(std::max(weights.size(), lanes * static_cast<std::size_t>(kLanes)));
    key_mask.resize(std::max(key_mask.size(), lanes));
    for (std::int64_t n = 0; n < hidden; ++n) {
      for (std::int64_t i = length; i < query_lanes; ++i) {
        q_t[static_cast<std::size_t>(n * query_lanes + i)] = 0.0F;
      }
    }
    return query_lanes;
  }
  // Text b's row of an additive [batch, length] mask, or no mask, as key_mask.
  GANTRY_ROW_INLINE void SetKeyMask(const float* mask, std::int64_t b, std::int64_t length) {
    for (std::int64_t j = 0; j < length; ++j) {
      key_mask[static_cast<std::size_t>(j)] = mask != nullptr ? mask[b * length + j] : 0.0F;
    }
  }
};

// step(std::integral_constant<int, U>, i) over i in [0, count): 8 at a
// time while 8 are left, then 4, then one, so that a step's U independent
// chains fill the vector units.
template <typename Step>
GANTRY_ROW_INLINE void InSteps(std::int64_t count, const Step& step) {
  std::int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    step(std::integral_constant<int, 8>{}, i);
  }
  for (; i + 4 <= count; i += 4) {
    step(std::integral_constant<int, 4>{}, i);
  }
  for (; i < count; ++i) {
    step(std::integral_constant<int, 1>{}, i);
  }
}

// The scores of kLanes queries (one per lane) against keys j..j+kKeys-1 of
// one head, the key mask added: one register of sums per key, so that
// kKeys multiply-add chains run side by side.
template <int kKeys>
GANTRY_ROW_INLINE void ScoreKeys(std::int64_t j, std::int64_t head_dim, std::int64_t query_lanes,
                                 std::int64_t hidden, const float* q_head, const float* k_head,
                                 const float* key_mask, float* scores) {
  Floats sums[kKeys];
  for (int u = 0; u < kKeys; ++u) {
    sums[u] = Splat(key_mask[j + u]);
  }
  for (std::int64_t d = 0; d < head_dim; ++d) {
    const Floats queries = LoadFloats(q_head + d * query_lanes);
    for (int u = 0; u < kKeys; ++u) {
      sums[u] += k_head[(j + u) * hidden + d] * queries;
    }
  }
  for (int u = 0; u < kKeys; ++u) {
    StoreFloats(scores + (j + u) * kLanes, sums[u]);
  }
}

// kLanes context columns from column `col` of queries r..r+kRows-1 of the
// block whose weights are `weights` ([length][kLanes], a query a lane).
template <int kRows>
GANTRY_ROW_INLINE void ContextColumns(std::int64_t r, std::int64_t first_query, std::int64_t length,
                                      std::int64_t hidden, std::int64_t col, const float* weights,
                                      const float* v, float* context) {
  Floats sums[kRows] = {};
  for (std::int64_t j = 0; j < length; ++j) {
    const Floats values = LoadFloats(v + j * hidden + col);
    const float* w = weights + j * kLanes + r;
    for (int u = 0; u < kRows; ++u) {
      sums[u] += w[u] * values;
    }
  }
  for (int u = 0; u < kRows; ++u) {
    StoreFloats(context + (first_query + r + u) * hidden + col, sums[u]);
  }
}

// One text's self-attention in float32, softmax(q k^T + mask) v per head:
// `q_t` [hidden, query_lanes] (the queries, already scaled, transposed:
// query i of column n at n * query_lanes + i; lanes from `length` on
// anything finite), `k` and `v` [length, hidden], `key_mask` [length]
// (additive; float's lowest masks a key to exactly 0 weight), `weights`
// [query_lanes][kLanes] and `context` [query_lanes, hidden] scratch. Each
// token's context row goes to emit(i, row) once all heads are done.
//
// kLanes queries go through the softmax at once, one per lane: its max and
// sum over the keys are then element-wise across registers instead of
// reductions within one, and every loop has independent chains of
// multiply-adds to overlap. One query at a time, as this was first written,
// waited on each chain's latency: the whole kernel took about 1.4x as long in a
// bfloat16 batch on a Xeon with AMX.
template <typename Emit>
GANTRY_ROW_INLINE void AttendText(std::int64_t length, std::int64_t heads, std::int64_t head_dim,
                                  std::int64_t query_lanes, const float* q_t, const float* k,
                                  const float* v, const float* key_mask, float* weights,
                                  float* context, const Emit& emit) {
  const std::int64_t hidden = heads * head_dim;
  for (std::int64_t h = 0; h < heads; ++h) {
    const float* k_head = k + h * head_dim;
    for (std::int64_t first = 0; first < length; first += kLanes) {
      const float* q_head = q_t + h * head_dim * query_lanes + first;
      InSteps(length, [&](auto keys, std::int64_t j) GANTRY_ROW_LAMBDA {
        ScoreKeys<keys()>(j, head_dim, query_lanes, hidden, q_head, k_head, key_mask, weights);
      });
      // Softmax over the keys, each lane a query; the weights end up
      // normalised, so the context needs no scaling after.
      Floats top = LoadFloats(weights);
      for (std::int64_t j = 1; j < length; ++j) {
        const Floats s = LoadFloats(weights + j * kLanes);
        top = s > top ? s : top;
      }
      Floats sums = {};
      for (std::int64_t j = 0; j < length; ++j) {
        const Floats e = ExpFloats(LoadFloats(weights + j * kLanes) - top);
        sums += e;
        StoreFloats(weights + j * kLanes, e);
      }
      const Floats inverse = Splat(1.0F) / sums;
      for (std::int64_t j = 0; j < length; ++j) {
        StoreFloats(weights + j * kLanes, LoadFloats(weights + j * kLanes) * inverse);
      }
      const std::int64_t rows = std::min(kLanes, length - first);
      std::int64_t db = 0;
      for (; db + kLanes <= head_dim; db += kLanes) {
        const std::int64_t col = h * head_dim + db;
        InSteps(rows, [&](auto queries, std::int64_t r) GANTRY_ROW_LAMBDA {
          ContextColumns<queries()>(r, first, length, hidden, col, weights, v, context);
        });
      }
      for (std::int64_t col = h * head_dim + db; col < (h + 1) * head_dim; ++col) {
        for (std::int64_t r = 0; r < rows; ++r) {
          float c = 0.0F;
          for (std::int64_t j = 0; j < length; ++j) {
            c += weights[j * kLanes + r] * v[j * hidden + col];
          }
          context[(first + r) * hidden + col] = c;
        }
      }
    }
  }
  for (std::int64_t i = 0; i < length; ++i) {
    emit(i, static_cast<const float*>(context + i * hidden));
  }
}

}  // namespace gantry::sentence_encoder::row_vectors

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_ROW_VECTORS_H_
