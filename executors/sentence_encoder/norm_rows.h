// File: executors/sentence_encoder/norm_rows.h
//
// LayerNorm over the rows of a token-major bfloat16 [rows, cols] matrix,
// in float32 arithmetic, on AVX-512 with the BF16 conversions: what
// BertModel runs after each residual add in bfloat16 on such a CPU. ATen's
// own LayerNorm kernel is compiled for AVX2 at most and rounds to bfloat16
// in integer steps; on a Xeon with AMX it took 241 ns a row of 384, this one
// about 90, and ATen's took 6.8% of a bfloat16 batch's samples.
//
// Thread safety: stateless functions; calls on disjoint rows may run
// concurrently.
#ifndef GANTRY_EXECUTORS_SENTENCE_ENCODER_NORM_ROWS_H_
#define GANTRY_EXECUTORS_SENTENCE_ENCODER_NORM_ROWS_H_

#include <cstdint>

namespace gantry::sentence_encoder::norm_rows {

// The widest row LayerNormRowsBFloat16 takes (a row is held in float32 on
// the stack while it is normalised); cols must also be a multiple of 16.
inline constexpr std::int64_t kMaxCols = 4096;

// Whether LayerNormRowsBFloat16 runs here: an x86-64 CPU with AVX512-BF16
// (and AVX512-BW/VL). Callers use ATen's LayerNorm elsewhere.
bool BFloat16RowsAvailable();

// Rows [begin, end) of `x` ([rows, cols], bfloat16 bits, contiguous) into
// the same rows of `out`: (x - mean) / sqrt(variance + eps) * gamma + beta
// with the row's mean and biased variance, rounded to nearest even.
// cols: a multiple of 16, at most kMaxCols. Only where BFloat16RowsAvailable().
void LayerNormRowsBFloat16(const std::uint16_t* x, std::int64_t cols, const std::uint16_t* gamma,
                           const std::uint16_t* beta, float eps, std::int64_t begin,
                           std::int64_t end, std::uint16_t* out);

}  // namespace gantry::sentence_encoder::norm_rows

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_NORM_ROWS_H_
