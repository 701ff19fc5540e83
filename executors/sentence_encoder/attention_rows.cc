#include "attention_rows.h"

#include <cstddef>
#include <cstdint>

#include "row_vectors.h"

namespace gantry::sentence_encoder::attention_rows {
namespace {

using row_vectors::FromBFloat16;
using row_vectors::ToBFloat16;

GANTRY_ROW_INLINE float ToFloat(float v) { return v; }
GANTRY_ROW_INLINE float ToFloat(std::uint16_t v) { return FromBFloat16(v); }
GANTRY_ROW_INLINE void FromFloat(float v, float* out) { *out = v; }
GANTRY_ROW_INLINE void FromFloat(float v, std::uint16_t* out) { *out = ToBFloat16(v); }

// Writes token i's context row as row first_row + i of `out`.
template <typename T>
struct StoreContextRow {
  T* out;
  std::int64_t first_row;
  std::int64_t hidden;
  GANTRY_ROW_INLINE void operator()(std::int64_t i, const float* row) const {
    T* dst = out + (first_row + i) * hidden;
    for (std::int64_t n = 0; n < hidden; ++n) {
      FromFloat(row[n], dst + n);
    }
  }
};

template <typename T>
GANTRY_ROW_INLINE void Attend(const T* qkv, const HeadLayout& layout, const float* mask,
                              float scale, std::int64_t begin, std::int64_t end, T* out,
                              row_vectors::AttentionScratch& s) {
  const std::int64_t length = layout.length;
  const std::int64_t hidden = layout.heads * layout.head_dim;
  const std::int64_t query_lanes = s.Prepare(length, hidden);
  float* const q_t = s.q_t.data();
  float* const k = s.k.data();
  float* const v = s.v.data();
  for (std::int64_t b = begin; b < end; ++b) {
    for (std::int64_t i = 0; i < length; ++i) {
      const T* row = qkv + (b * length + i) * 3 * hidden;
      float* k_row = k + i * hidden;
      float* v_row = v + i * hidden;
      for (std::int64_t n = 0; n < hidden; ++n) {
        q_t[n * query_lanes + i] = ToFloat(row[n]) * scale;
      }
      for (std::int64_t n = 0; n < hidden; ++n) {
        k_row[n] = ToFloat(row[hidden + n]);
      }
      for (std::int64_t n = 0; n < hidden; ++n) {
        v_row[n] = ToFloat(row[2 * hidden + n]);
      }
    }
    s.SetKeyMask(mask, b, length);
    row_vectors::AttendText(length, layout.heads, layout.head_dim, query_lanes, q_t, k, v,
                            s.key_mask.data(), s.weights.data(), s.context.data(),
                            StoreContextRow<T>{out, b * length, hidden});
  }
}

}  // namespace

GANTRY_ROW_KERNEL
void AttentionFromQkv(const float* qkv, const HeadLayout& layout, const float* mask, float scale,
                      std::int64_t begin, std::int64_t end, float* out) {
  thread_local row_vectors::AttentionScratch scratch;
  Attend(qkv, layout, mask, scale, begin, end, out, scratch);
}

GANTRY_ROW_KERNEL
void AttentionFromQkvBFloat16(const std::uint16_t* qkv, const HeadLayout& layout, const float* mask,
                              float scale, std::int64_t begin, std::int64_t end,
                              std::uint16_t* out) {
  thread_local row_vectors::AttentionScratch scratch;
  Attend(qkv, layout, mask, scale, begin, end, out, scratch);
}

}  // namespace gantry::sentence_encoder::attention_rows
