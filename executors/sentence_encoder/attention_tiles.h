// File: executors/sentence_encoder/attention_tiles.h
//
// The self-attention of short bfloat16 texts on AMX tiles: the same
// contract as attention_rows::AttentionFromQkvBFloat16, from the fused
// query/key/value layer's output to the context rows the output projection
// reads, for CPUs with AMX-BF16 (Xeon Sapphire Rapids and later). A head of
// a 14-token text is one tile product for its scores and two for its
// context, where the vector kernel issues some 900 16-lane multiply-adds;
// what is left is the softmax, in float32 vector registers. The weights are rounded
// to bfloat16 before they multiply the values (the tiles take bfloat16
// only), as ATen's own bfloat16 attention does.
//
// Thread safety: stateless functions; calls on disjoint texts may run
// concurrently (each thread keeps its own scratch and tile configuration).
#ifndef GANTRY_EXECUTORS_SENTENCE_ENCODER_ATTENTION_TILES_H_
#define GANTRY_EXECUTORS_SENTENCE_ENCODER_ATTENTION_TILES_H_

#include <cstdint>

#include "attention_rows.h"

namespace gantry::sentence_encoder::attention_tiles {

// Whether AttentionFromQkvBFloat16 runs here: an x86-64 CPU with AMX-BF16
// and AVX512-BF16, and a Linux kernel that lets the process use the tile
// registers (it must ask, once; a kernel before 5.16 has no AMX support).
bool Available();

// Whether the kernel takes texts of this shape: at most
// kShortAttentionMaxLength tokens, heads a multiple of 32 wide and at most
// 128 (MiniLM's are 32, BERT-base's 64).
bool TakesLayout(const HeadLayout& layout);

// Texts [begin, end) of `qkv` ([batch * length, 3 * heads * head_dim],
// bfloat16 bits: each token's query, key and value, the layer's bias
// added) into `out` ([batch * length, heads * head_dim], token-major).
// `mask`: additive, [batch, length], float's lowest to mask a key (it then
// weighs exactly 0), or nullptr for none. `scale` multiplies the scores
// (1/sqrt(head_dim)). Only where Available() and TakesLayout(layout).
void AttentionFromQkvBFloat16(const std::uint16_t* qkv, const HeadLayout& layout, const float* mask,
                              float scale, std::int64_t begin, std::int64_t end,
                              std::uint16_t* out);

}  // namespace gantry::sentence_encoder::attention_tiles

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_ATTENTION_TILES_H_
