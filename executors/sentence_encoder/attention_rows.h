// File: executors/sentence_encoder/attention_rows.h
//
// The self-attention of short texts in one pass per text, from the output
// of the fused query/key/value layer to the context rows the output
// projection reads: softmax(q k^T * scale + mask) v for every head, in
// float32 arithmetic, reading and writing float32 or bfloat16. ATen's way
// for a text of 14 tokens is a dozen kernels and as many passes per layer
// (the heads split and transposed, the scores, their softmax, the weighted
// sum, the heads joined again), each spread over the cores on its own;
// here each text stays on one core while it is in cache. The work is
// quadratic in the length, as any attention's: callers send long texts to
// a blocked kernel (ATen's scaled_dot_product_attention) instead.
//
// Thread safety: stateless functions; calls on disjoint texts may run
// concurrently.
#ifndef GANTRY_EXECUTORS_SENTENCE_ENCODER_ATTENTION_ROWS_H_
#define GANTRY_EXECUTORS_SENTENCE_ENCODER_ATTENTION_ROWS_H_

#include <cstdint>

namespace gantry::sentence_encoder {

// The attention's layout of a token-major [batch * length, parts * heads *
// head_dim] matrix: [parts, batch, heads, length, head_dim], each head's
// rows contiguous (parts: query, key and value).
struct HeadLayout {
  std::int64_t batch;
  std::int64_t length;
  std::int64_t heads;
  std::int64_t head_dim;
};

// The longest text these functions are for (each text's keys, values and
// scores are held at once): what the callers send here, and what the
// blocked kernel beats beyond.
inline constexpr std::int64_t kShortAttentionMaxLength = 64;

namespace attention_rows {

// Texts [begin, end) of `qkv` ([batch * length, 3 * heads * head_dim]: each
// token's query, key and value, the layer's bias added) into `out` ([batch
// * length, heads * head_dim], token-major, heads side by side, as the
// output projection reads them). `mask`: additive, [batch, length], float's
// lowest to mask a key (it then weighs exactly 0), or nullptr for none.
// `scale` multiplies the queries (1/sqrt(head_dim)). layout.length is at
// most kShortAttentionMaxLength.
void AttentionFromQkv(const float* qkv, const HeadLayout& layout, const float* mask, float scale,
                      std::int64_t begin, std::int64_t end, float* out);
// The same on bfloat16 (raw bits) in and out; float32 inside.
void AttentionFromQkvBFloat16(const std::uint16_t* qkv, const HeadLayout& layout, const float* mask,
                              float scale, std::int64_t begin, std::int64_t end,
                              std::uint16_t* out);

}  // namespace attention_rows
}  // namespace gantry::sentence_encoder

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_ATTENTION_ROWS_H_
