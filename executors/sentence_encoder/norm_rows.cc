#include "norm_rows.h"

#include <cmath>
#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GANTRY_NORM_ROWS_X86 1
#endif

namespace gantry::sentence_encoder::norm_rows {

#if defined(GANTRY_NORM_ROWS_X86)
// GCC 12 warns inside its own AVX-512 headers that the "undefined" vector
// some intrinsics start from may be uninitialised (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace {

#define GANTRY_NORM_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

GANTRY_NORM_TARGET inline __m512 LoadBFloat16(const std::uint16_t* p) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

}  // namespace

bool BFloat16RowsAvailable() {
  static const bool available =
      __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx512bw") != 0 &&
      __builtin_cpu_supports("avx512vl") != 0 && __builtin_cpu_supports("avx512bf16") != 0;
  return available;
}

GANTRY_NORM_TARGET
void LayerNormRowsBFloat16(const std::uint16_t* x, std::int64_t cols, const std::uint16_t* gamma,
                           const std::uint16_t* beta, float eps, std::int64_t begin,
                           std::int64_t end, std::uint16_t* out) {
  constexpr std::int64_t kWidth = 16;
  alignas(64) float g[kMaxCols];
  alignas(64) float b[kMaxCols];
  alignas(64) float row[kMaxCols];
  const std::int64_t vectors = cols / kWidth;
  // The parameters once a call, not once a row.
  for (std::int64_t v = 0; v < vectors; ++v) {
    _mm512_store_ps(g + v * kWidth, LoadBFloat16(gamma + v * kWidth));
    _mm512_store_ps(b + v * kWidth, LoadBFloat16(beta + v * kWidth));
  }
  const auto n = static_cast<float>(cols);
  for (std::int64_t m = begin; m < end; ++m) {
    const std::uint16_t* src = x + m * cols;
    std::uint16_t* dst = out + m * cols;
    // Two sums side by side, so that the adds overlap.
    __m512 sum0 = _mm512_setzero_ps();
    __m512 sum1 = _mm512_setzero_ps();
    std::int64_t v = 0;
    for (; v + 2 <= vectors; v += 2) {
      const __m512 a = LoadBFloat16(src + v * kWidth);
      const __m512 c = LoadBFloat16(src + (v + 1) * kWidth);
      _mm512_store_ps(row + v * kWidth, a);
      _mm512_store_ps(row + (v + 1) * kWidth, c);
      sum0 = _mm512_add_ps(sum0, a);
      sum1 = _mm512_add_ps(sum1, c);
    }
    for (; v < vectors; ++v) {
      const __m512 a = LoadBFloat16(src + v * kWidth);
      _mm512_store_ps(row + v * kWidth, a);
      sum0 = _mm512_add_ps(sum0, a);
    }
    const __m512 mean = _mm512_set1_ps(_mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1)) / n);
    __m512 squares0 = _mm512_setzero_ps();
    __m512 squares1 = _mm512_setzero_ps();
    for (v = 0; v + 2 <= vectors; v += 2) {
      const __m512 d0 = _mm512_sub_ps(_mm512_load_ps(row + v * kWidth), mean);
      const __m512 d1 = _mm512_sub_ps(_mm512_load_ps(row + (v + 1) * kWidth), mean);
      squares0 = _mm512_fmadd_ps(d0, d0, squares0);
      squares1 = _mm512_fmadd_ps(d1, d1, squares1);
    }
    for (; v < vectors; ++v) {
      const __m512 d = _mm512_sub_ps(_mm512_load_ps(row + v * kWidth), mean);
      squares0 = _mm512_fmadd_ps(d, d, squares0);
    }
    const float variance = _mm512_reduce_add_ps(_mm512_add_ps(squares0, squares1)) / n;
    const __m512 inverse_std = _mm512_set1_ps(1.0F / std::sqrt(variance + eps));
    for (v = 0; v < vectors; ++v) {
      const __m512 normalized =
          _mm512_mul_ps(_mm512_sub_ps(_mm512_load_ps(row + v * kWidth), mean), inverse_std);
      const __m512 y = _mm512_fmadd_ps(normalized, _mm512_load_ps(g + v * kWidth),
                                       _mm512_load_ps(b + v * kWidth));
      // Rounds to nearest even, as at::BFloat16 does.
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + v * kWidth),
                          reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(y)));
    }
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#else

bool BFloat16RowsAvailable() { return false; }

void LayerNormRowsBFloat16(const std::uint16_t*, std::int64_t, const std::uint16_t*,
                           const std::uint16_t*, float, std::int64_t, std::int64_t,
                           std::uint16_t*) {}

#endif

}  // namespace gantry::sentence_encoder::norm_rows
