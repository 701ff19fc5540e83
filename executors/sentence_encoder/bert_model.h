// File: executors/sentence_encoder/bert_model.h
//
// A BERT encoder (Hugging Face BertModel, eval mode) on plain ATen ops, with
// parameters named exactly as the checkpoint keys ("encoder.layer.0.
// attention.self.query.weight", ...). Pooling is sentence_pipeline.h's.
//
// Thread safety: Forward is safe for concurrent use once loaded; Load and To
// are "one thread at a time".
#ifndef GANTRY_EXECUTORS_SENTENCE_ENCODER_BERT_MODEL_H_
#define GANTRY_EXECUTORS_SENTENCE_ENCODER_BERT_MODEL_H_

#include <ATen/core/Tensor.h>
#include <gantry/status.h>

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "int8_linear.h"
#include "safetensors.h"

namespace gantry::sentence_encoder {

struct BertConfig {
  std::int64_t vocab_size = 30522;
  std::int64_t hidden_size = 384;
  std::int64_t num_hidden_layers = 6;
  std::int64_t num_attention_heads = 12;
  std::int64_t intermediate_size = 1536;
  std::int64_t max_position_embeddings = 512;
  std::int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;

  // Parses config.json text; `path` is for messages. Rejects activations
  // other than exact "gelu" and non-absolute position embeddings.
  static StatusOr<BertConfig> FromJson(const std::string& text, const std::string& path);
  static StatusOr<BertConfig> Load(const std::string& path);
};

// softmax(q k^T * scale + additive_mask) v as two batched GEMMs and a
// softmax taken in float32 for any dtype (as SDPA accumulates), spelled out
// because ATen's softmax kernel over a last dimension this short was 5x
// slower than its four element-wise passes. BertModel::Forward uses it for
// short sequences on CPU, where it beats ATen's SDPA (bert_model.cc).
// q, k, v: [B, heads, L, head_dim], any strides; `additive_mask`:
// [B, 1, 1, L] float, 0 to attend and float's lowest to mask (finite, so a
// row with no key left averages them all instead of giving NaN).
at::Tensor ExplicitAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::optional<at::Tensor>& additive_mask, double scale);

// One tensor of `file` with the given shape, over the file's bytes where
// aligned (see BertModel::LoadWeights); errors name the file and key.
StatusOr<at::Tensor> ReadSafetensor(const SafetensorsFile& file, const std::string& name,
                                    const std::vector<std::int64_t>& shape);

// The rows the CPU's fused products run a bfloat16 pass of `tokens` tokens
// as: up to 64, a multiple of 16; beyond, a multiple of a sixteenth of the
// power of two at or below `tokens` (at most 6.25% more rows, about 3% on
// average). oneDNN builds a kernel for every row count it meets, in
// bfloat16 about 18 ms for the four products of a pass of 3,584 rows on a
// Xeon with AMX; texts of varied lengths in passes of varied sizes made a
// new row count almost every pass, and a fifth of a replica's time went
// into building kernels. Rounded, a replica meets 16 row counts per
// doubling of the pass. float32 keeps the exact count: there the kernels
// took under 1% of the time and the padding cost more.
std::int64_t CpuProductRows(std::int64_t tokens);

class BertModel {
 public:
  // Parameters are allocated (uninitialized) on CPU in float32.
  explicit BertModel(const BertConfig& config);
  BertModel(BertModel&&) = default;
  BertModel& operator=(BertModel&&) = default;

  const BertConfig& config() const { return config_; }

  // Checkpoint key -> parameter, in a fixed order.
  std::vector<std::pair<std::string, at::Tensor>> NamedParameters() const;

  // Takes every parameter from `file`, in the file's dtype (F32, F16 or
  // BF16; To() converts), over the file's own bytes where they are aligned.
  // Missing, unexpected and mis-shaped keys are errors naming the file and
  // key. `embeddings.position_ids` (an
  // int64 buffer old checkpoints carry) is checked to be arange and skipped.
  // `prefix` comes before every key ("bert." in a model with a task head);
  // `others` are keys the caller loads itself (the head), not unexpected.
  Status LoadWeights(const SafetensorsFile& file, std::string_view prefix = {},
                     const std::set<std::string, std::less<>>& others = {});

  // Moves parameters to `device` and floating parameters to `dtype`. On CPU
  // the linear layers then run through oneDNN with GELU and the residual
  // adds fused in, when this libtorch has oneDNN (see fused_cpu_linear()).
  void To(at::Device device, at::ScalarType dtype);
  bool fused_cpu_linear() const { return fused_cpu_linear_; }
  // Whether those layers also run on weights prepacked into oneDNN's layout
  // at To() (a private copy of each linear weight, for speed).
  bool prepacked_cpu_linear() const { return prepacked_cpu_linear_; }
  // Whether the query, key and value layers run as one product, and texts
  // up to kShortAttentionMaxLength tokens take attention_rows.h's attention
  // straight from it (on the CPU in float32 and bfloat16, with oneDNN).
  bool fused_cpu_qkv() const { return fused_cpu_qkv_; }

  // After To(cpu, float32): runs the linear layers in int8 from now on
  // (int8_linear.h), the four of each layer (query, key and value as one)
  // with activations quantised per token, and GELU, the residual adds and
  // LayerNorm in float32 in the products' epilogues; the attention of texts
  // up to 64 tokens in float32 too, longer ones in `attention_dtype`
  // (float32 or bfloat16). Forward then returns float32.
  // Errors say what this libtorch or CPU lacks. Another To() undoes it.
  Status QuantizeToInt8(at::ScalarType attention_dtype);
  bool int8() const { return !int8_layers_.empty(); }
  // After QuantizeToInt8: the long texts' attention dtype it was given.
  at::ScalarType int8_attention_dtype() const { return int8_attention_dtype_; }

  // ids, mask: int64 [B, L] on the model's device. Returns the last hidden
  // state [B, L, hidden] in the model's dtype. `padded`: whether any mask
  // entry is 0, when the caller knows it; else it is read from the mask,
  // which on CUDA waits for the device.
  // `token_type_ids` (int64 [B, L], 0 or 1: the segment of each token of a
  // text pair) may be left undefined: all 0.
  // With fused_cpu_qkv() a right-padded batch runs its real tokens only:
  // texts over kShortAttentionMaxLength as one block padded to the longest
  // of them, every other text without padding; the padding's rows of the
  // result are then zero. In bfloat16 those T rows run through the
  // products as CpuProductRows(T) rows, the extra ones zero-filled and
  // dropped at the end, so that oneDNN meets few product shapes.
  at::Tensor Forward(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                     std::optional<bool> padded = std::nullopt,
                     const at::Tensor& token_type_ids = {}) const;

 private:
  struct Layer {
    at::Tensor query_w, query_b, key_w, key_b, value_w, value_b;
    at::Tensor attn_out_w, attn_out_b, attn_ln_w, attn_ln_b;
    at::Tensor inter_w, inter_b, out_w, out_b, out_ln_w, out_ln_b;
    // The six linear weights above in oneDNN's layout, when prepacked.
    at::Tensor query_packed, key_packed, value_packed, attn_out_packed, inter_packed, out_packed;
    // (plain weight, its packed copy) for each linear layer.
    std::array<std::pair<const at::Tensor*, at::Tensor*>, 6> Linears();
    // On the CPU in float32 and bfloat16 (fused_cpu_qkv()): the query, key
    // and value layers as one, three times as wide (and its packed copy),
    // in place of the three.
    at::Tensor qkv_w, qkv_b, qkv_packed;
  };
  struct Int8Layer {
    Int8Linear qkv, attn_out, inter, out;
  };
  struct Slot {
    std::string name;
    std::vector<std::int64_t> shape;
    at::Tensor* tensor;
  };
  std::vector<Slot> Slots();
  // Word, position and segment embeddings, summed and normalised.
  at::Tensor Embed(const at::Tensor& input_ids, const at::Tensor& token_type_ids) const;
  at::Tensor ForwardInt8(const at::Tensor& input_ids, const at::Tensor& attention_mask, bool padded,
                         const at::Tensor& token_type_ids) const;

  BertConfig config_;
  at::Tensor word_embeddings_, position_embeddings_, token_type_embeddings_;
  at::Tensor embeddings_ln_w_, embeddings_ln_b_;
  std::vector<Layer> layers_;
  bool fused_cpu_linear_ = false;
  bool prepacked_cpu_linear_ = false;
  bool fused_cpu_qkv_ = false;
  std::vector<Int8Layer> int8_layers_;
  at::ScalarType int8_attention_dtype_ = at::kFloat;
};

}  // namespace gantry::sentence_encoder

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_BERT_MODEL_H_
