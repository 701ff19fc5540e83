// File: executors/sentence_encoder/attention_test_shapes.h
//
// What the attention kernels' tests share: a batch's shape, its name in
// failure messages, and a padding mask.
//
// Thread safety: stateless functions.
#ifndef GANTRY_EXECUTORS_SENTENCE_ENCODER_ATTENTION_TEST_SHAPES_H_
#define GANTRY_EXECUTORS_SENTENCE_ENCODER_ATTENTION_TEST_SHAPES_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <limits>
#include <string>

namespace gantry::sentence_encoder::attention_test {

struct Shape {
  std::int64_t batch, length, heads, head_dim;
};

inline std::string Name(const Shape& s) {
  return std::to_string(s.batch) + " texts of " + std::to_string(s.length) + " tokens, " +
         std::to_string(s.heads) + " heads of " + std::to_string(s.head_dim);
}

// The last text padded after half its tokens (at least one kept), as an
// additive [batch, length] mask.
inline at::Tensor PaddingMask(const Shape& s) {
  at::Tensor mask = at::zeros({s.batch, s.length});
  mask[s.batch - 1].slice(0, (s.length + 1) / 2).fill_(std::numeric_limits<float>::lowest());
  return mask;
}

}  // namespace gantry::sentence_encoder::attention_test

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_ATTENTION_TEST_SHAPES_H_
