#include "bert_model.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/embedding.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/index_copy.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "attention_rows.h"
#include "attention_tiles.h"
#include "int8_linear.h"
#include "norm_rows.h"

namespace gantry::sentence_encoder {
namespace {

// In float16 on CPU (no fused query/key/value there), sequences up to this
// many tokens take ExplicitAttention. ATen's CPU scaled_dot_product_attention
// (a blocked kernel built for long sequences) took 2.3x as long at 14 tokens
// (the seed text) and was still slower at 64; at 96 and beyond it wins.
constexpr std::int64_t kExplicitAttentionMaxLength = kShortAttentionMaxLength;

std::string ShapeString(at::IntArrayRef shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

// libtorch's oneDNN linear with a fused epilogue: mkldnn::_linear_pointwise,
// the op Inductor emits for CPU. On this machine's AMD cores its GEMMs ran
// 5-15% faster than at::linear's MKL ones, and the GELU and residual adds
// cost no extra pass over the activations. Called boxed, so only the
// schema, not its C++ argument types, has to stay stable across versions.
// `binary`: the overload with a second input (the residual add).
const c10::OperatorHandle* FindOneDnnLinear(bool binary) {
  if (!at::hasMKLDNN()) {
    return nullptr;
  }
  static const std::optional<c10::OperatorHandle> unary_op =
      c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""});
  static const std::optional<c10::OperatorHandle> binary_op =
      c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", "binary"});
  const std::optional<c10::OperatorHandle>& op = binary ? binary_op : unary_op;
  return op.has_value() ? &*op : nullptr;
}

// x W^T + b, then `activation` ("none" or "gelu", exact erf).
at::Tensor OneDnnLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                        const char* activation) {
  torch::jit::Stack stack{x,
                          w,
                          b,
                          std::string(activation),
                          c10::List<std::optional<at::Scalar>>(),
                          std::optional<std::string>("none")};
  FindOneDnnLinear(/*binary=*/false)->callBoxed(&stack);
  return stack[0].toTensor();
}

// x W^T + b + residual.
at::Tensor OneDnnLinearAdd(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                           const at::Tensor& residual) {
  torch::jit::Stack stack{x, residual, w, b, std::string("add")};
  FindOneDnnLinear(/*binary=*/true)->callBoxed(&stack);
  return stack[0].toTensor();
}

// A linear weight in oneDNN's own blocked layout (mkldnn::_reorder_linear_weight,
// as Inductor's weight prepacking does), or an undefined tensor when this
// libtorch lacks the op or it fails. Packed once instead of handed to the op
// in the plain [out, in] layout on every call, the bare model ran 6.5%
// faster in bfloat16 and float32 (whole process, 2 cores). The row count it
// is packed for only picks the layout: outputs are bitwise equal for any row
// count, and none measured (8 to 16,384 rows) ran slower.
at::Tensor PrepackOneDnnLinearWeight(const at::Tensor& w) {
  constexpr std::int64_t kRowsHint = std::int64_t{32} * 14;  // 32 seed documents' tokens
  static const std::optional<c10::OperatorHandle> reorder =
      c10::Dispatcher::singleton().findSchema({"mkldnn::_reorder_linear_weight", ""});
  if (!reorder.has_value()) {
    return {};
  }
  try {
    torch::jit::Stack stack{w, std::optional<std::int64_t>(kRowsHint)};
    reorder->callBoxed(&stack);
    return stack[0].toTensor();
  } catch (const std::exception&) {
    return {};
  }
}

// Hands the pages under a plain weight back to the kernel once its packed
// copy is made: Forward no longer reads it, and only another To() would.
// Over the weight file's mapping that takes the file's pages out of this
// process (read again from the file if touched); MADV_PAGEOUT never loses
// data, so on other memory it swaps or does nothing.
void PageOutUnusedWeight(const at::Tensor& w) {
#ifdef MADV_PAGEOUT
  if (!w.defined() || !w.is_cpu() || w.is_mkldnn() || !w.is_contiguous()) {
    return;
  }
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  char* const data = static_cast<char*>(w.data_ptr());
  const auto start = reinterpret_cast<std::uintptr_t>(data);
  // Whole pages only: the bytes around them may belong to other tensors.
  char* const begin = data + (page - start % page) % page;
  char* const end = data + w.nbytes() - (start + w.nbytes()) % page;
  if (end > begin) {
    ::madvise(begin, static_cast<std::size_t>(end - begin), MADV_PAGEOUT);  // a hint: no error
  }
#else
  (void)w;
#endif
}

// Whether oneDNN has kernels for `dtype` on this CPU: float16, for one,
// has none without AVX512-FP16 and the op throws. Such dtypes keep ATen's.
bool OneDnnLinearWorks(at::ScalarType dtype) {
  if (FindOneDnnLinear(/*binary=*/false) == nullptr ||
      FindOneDnnLinear(/*binary=*/true) == nullptr) {
    return false;
  }
  try {
    const at::TensorOptions options = at::TensorOptions().dtype(dtype);
    const at::Tensor x = at::ones({2, 8}, options);
    const at::Tensor w = at::ones({4, 8}, options);
    const at::Tensor b = at::zeros({4}, options);
    OneDnnLinear(x, w, b, "gelu");
    OneDnnLinearAdd(x, w, b, at::zeros({2, 4}, options));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// [total, cols] whose rows from `used` on are zero; the first `used` are
// left for the caller to fill.
at::Tensor RowsWithZeroTail(std::int64_t total, std::int64_t used, std::int64_t cols,
                            const at::TensorOptions& options) {
  at::Tensor out = at::empty({total, cols}, options);
  if (total > used) {
    out.narrow(0, used, total - used).zero_();
  }
  return out;
}

// `rows` [n, cols] with zero rows appended up to `total` rows.
at::Tensor ZeroPadRows(const at::Tensor& rows, std::int64_t total) {
  const std::int64_t n = rows.size(0);
  if (total <= n) {
    return rows;
  }
  at::Tensor out = RowsWithZeroTail(total, n, rows.size(1), rows.options());
  out.narrow(0, 0, n).copy_(rows);
  return out;
}

// The one-pass attention of texts [begin, end) of `layout`, whose token rows
// start at row `first_row` of `in` ([rows, 3 * hidden], contiguous, float32
// or bfloat16) and of `out` ([rows, hidden], in's dtype). bfloat16 runs on
// AMX tiles (attention_tiles) where the CPU has them and the heads fit.
void AttendShortTexts(const at::Tensor& in, const HeadLayout& layout, const float* mask,
                      float scale, std::int64_t begin, std::int64_t end, std::int64_t first_row,
                      at::Tensor& out) {
  const std::int64_t hidden = layout.heads * layout.head_dim;
  const std::int64_t from = first_row * 3 * hidden;
  const std::int64_t to = first_row * hidden;
  if (in.scalar_type() == at::kFloat) {
    attention_rows::AttentionFromQkv(in.const_data_ptr<float>() + from, layout, mask, scale, begin,
                                     end, out.mutable_data_ptr<float>() + to);
    return;
  }
  const auto* qkv = static_cast<const std::uint16_t*>(in.const_data_ptr()) + from;
  auto* context = static_cast<std::uint16_t*>(out.mutable_data_ptr()) + to;
  if (attention_tiles::Available() && attention_tiles::TakesLayout(layout)) {
    attention_tiles::AttentionFromQkvBFloat16(qkv, layout, mask, scale, begin, end, context);
  } else {
    attention_rows::AttentionFromQkvBFloat16(qkv, layout, mask, scale, begin, end, context);
  }
}

// ATen's blocked attention of `texts` texts of `length` tokens, from their
// token rows of `qkv` ([texts * length, 3 * hidden]) into `out` ([texts *
// length, hidden], token-major, written once). `keep`: bool [texts, 1, 1,
// length], or none.
void BlockedAttention(const at::Tensor& qkv, std::int64_t texts, std::int64_t length,
                      std::int64_t heads, std::int64_t head_dim,
                      const std::optional<at::Tensor>& keep, double scale, const at::Tensor& out) {
  const std::int64_t hidden = heads * head_dim;
  const at::Tensor block = qkv.view({texts, length, 3 * hidden});
  auto split_heads = [&](std::int64_t part) {
    return block.narrow(-1, part * hidden, hidden)
        .view({texts, length, heads, head_dim})
        .transpose(1, 2);
  };
  const at::Tensor attended = at::scaled_dot_product_attention(
      split_heads(0), split_heads(1), split_heads(2), keep,
      /*dropout_p=*/0.0, /*is_causal=*/false, scale);  // [texts, heads, length, head_dim]
  out.view({texts, length, heads, head_dim}).copy_(attended.transpose(1, 2));
}

// attention_rows' attention of each text of `qkv` (B * L token rows of
// 3 * hidden, maybe more rows after them, float32 or bfloat16, contiguous),
// one text per task on libtorch's threads: [out_rows, hidden] in qkv's
// dtype, token rows first, the rest zero.
at::Tensor ShortAttention(const at::Tensor& qkv, const HeadLayout& layout,
                          const std::optional<at::Tensor>& additive_mask, double scale,
                          std::int64_t out_rows) {
  const at::Tensor in = qkv.contiguous();
  at::Tensor out = RowsWithZeroTail(out_rows, layout.batch * layout.length,
                                    layout.heads * layout.head_dim, in.options());
  const float* mask = additive_mask.has_value() ? additive_mask->const_data_ptr<float>() : nullptr;
  ParallelRows(layout.batch, 1, [&](std::int64_t begin, std::int64_t end) {
    AttendShortTexts(in, layout, mask, static_cast<float>(scale), begin, end, 0, out);
  });
  return out;
}

// A text of a packed batch: its first row among the packed rows, and its
// token count.
struct PackedText {
  std::int64_t first_row;
  std::int64_t length;
};

// The real tokens of a right-padded batch without its padding: products
// cost by the row, and texts of varied lengths padded to the longest are
// often a third padding. Texts longer than kShortAttentionMaxLength come
// first, as one block padded to the longest of them (ATen's blocked
// attention takes it, and texts that long are alike); every other text's
// tokens follow on their own.
struct PackedBatch {
  at::Tensor source_rows;  // int64 [packed]: each packed row's row of the [B * L] batch
  std::int64_t long_texts = 0;
  std::int64_t long_length = 0;
  std::optional<at::Tensor> long_mask;  // bool [long_texts, 1, 1, long_length]; none when full
  // The short texts, dealt into one part per intra-op thread by the cost of
  // their attention (quadratic in the length), so the threads finish together.
  std::vector<std::vector<PackedText>> short_parts;

  std::int64_t packed() const { return source_rows.size(0); }
};

// The batch packed, or none when packing saves no row or the mask is not
// right padding (each row's ones first, at least one).
std::optional<PackedBatch> PackBatch(const at::Tensor& attention_mask) {
  const at::Tensor mask = attention_mask.to(at::kCPU, at::kLong).contiguous();
  const std::int64_t batch = mask.size(0);
  const std::int64_t length = mask.size(1);
  const std::int64_t* m = mask.const_data_ptr<std::int64_t>();
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(batch));
  std::int64_t long_texts = 0;
  std::int64_t long_length = 0;
  std::int64_t short_tokens = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t* row = m + b * length;
    std::int64_t n = 0;
    while (n < length && row[n] != 0) {
      ++n;
    }
    if (n == 0 || std::any_of(row + n, row + length, [](std::int64_t v) { return v != 0; })) {
      return std::nullopt;
    }
    lengths[static_cast<std::size_t>(b)] = n;
    if (n > kShortAttentionMaxLength) {
      ++long_texts;
      long_length = std::max(long_length, n);
    } else {
      short_tokens += n;
    }
  }
  const std::int64_t packed = long_texts * long_length + short_tokens;
  if (packed >= batch * length) {
    return std::nullopt;
  }
  PackedBatch out;
  out.long_texts = long_texts;
  out.long_length = long_length;
  out.source_rows = at::empty({packed}, at::TensorOptions().dtype(at::kLong));
  std::int64_t* source = out.source_rows.mutable_data_ptr<std::int64_t>();
  std::int64_t next = 0;
  bool long_padded = false;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t n = lengths[static_cast<std::size_t>(b)];
    if (n > kShortAttentionMaxLength) {
      std::iota(source + next, source + next + long_length, b * length);
      next += long_length;
      long_padded = long_padded || n < long_length;
    }
  }
  if (long_padded) {
    at::Tensor keep =
        at::zeros({long_texts, 1, 1, long_length}, at::TensorOptions().dtype(at::kBool));
    bool* k = keep.mutable_data_ptr<bool>();
    std::int64_t j = 0;
    for (const std::int64_t n : lengths) {
      if (n > kShortAttentionMaxLength) {
        std::fill_n(k + j * long_length, n, true);
        ++j;
      }
    }
    out.long_mask = keep;
  }
  std::vector<PackedText> short_texts;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t n = lengths[static_cast<std::size_t>(b)];
    if (n <= kShortAttentionMaxLength) {
      short_texts.push_back({next, n});
      std::iota(source + next, source + next + n, b * length);
      next += n;
    }
  }
  // Longest first into the part with the least work so far.
  std::sort(short_texts.begin(), short_texts.end(),
            [](const PackedText& a, const PackedText& b) { return a.length > b.length; });
  const auto parts = static_cast<std::size_t>(std::max(at::get_num_threads(), 1));
  out.short_parts.resize(std::min(parts, std::max<std::size_t>(short_texts.size(), 1)));
  std::vector<std::int64_t> work(out.short_parts.size(), 0);
  for (const PackedText& text : short_texts) {
    const auto lightest =
        static_cast<std::size_t>(std::min_element(work.begin(), work.end()) - work.begin());
    out.short_parts[lightest].push_back(text);
    work[lightest] += text.length * (text.length + 16);
  }
  return out;
}

// The attention of a packed batch's texts (`qkv`: [rows, 3 * hidden], the
// packed rows first): [out_rows, hidden] in qkv's dtype, the packed rows
// first, the rest zero.
at::Tensor PackedAttention(const at::Tensor& qkv, const PackedBatch& batch, std::int64_t heads,
                           std::int64_t head_dim, double scale, std::int64_t out_rows) {
  const at::Tensor in = qkv.contiguous();
  at::Tensor out = RowsWithZeroTail(out_rows, batch.packed(), heads * head_dim, in.options());
  if (batch.long_texts > 0) {
    const std::int64_t block_rows = batch.long_texts * batch.long_length;
    BlockedAttention(in.narrow(0, 0, block_rows), batch.long_texts, batch.long_length, heads,
                     head_dim, batch.long_mask, scale, out.narrow(0, 0, block_rows));
  }
  const auto parts = static_cast<std::int64_t>(batch.short_parts.size());
  ParallelRows(parts, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t part = begin; part < end; ++part) {
      for (const PackedText& text : batch.short_parts[static_cast<std::size_t>(part)]) {
        AttendShortTexts(in, {1, text.length, heads, head_dim}, nullptr, static_cast<float>(scale),
                         0, 1, text.first_row, out);
      }
    }
  });
  return out;
}

// LayerNorm over the last dimension: norm_rows' kernel on contiguous
// bfloat16 CPU rows where the CPU has AVX512-BF16, ATen's elsewhere (which
// also says what is wrong with parameters of another size).
at::Tensor LayerNorm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                     double eps) {
  const std::int64_t cols = x.size(-1);
  constexpr std::int64_t kWidth = 16;
  if (!x.is_cpu() || x.scalar_type() != at::kBFloat16 || !x.is_contiguous() ||
      cols > norm_rows::kMaxCols || cols % kWidth != 0 || weight.scalar_type() != at::kBFloat16 ||
      bias.scalar_type() != at::kBFloat16 || !weight.is_contiguous() || !bias.is_contiguous() ||
      weight.numel() != cols || bias.numel() != cols || !weight.is_cpu() || !bias.is_cpu() ||
      !norm_rows::BFloat16RowsAvailable()) {
    return at::layer_norm(x, {cols}, weight, bias, eps);
  }
  at::Tensor out = at::empty_like(x);
  const std::int64_t rows = cols > 0 ? x.numel() / cols : 0;
  constexpr std::int64_t kRowGrain = 64;
  ParallelRows(rows, kRowGrain, [&](std::int64_t begin, std::int64_t end) {
    norm_rows::LayerNormRowsBFloat16(static_cast<const std::uint16_t*>(x.const_data_ptr()), cols,
                                     static_cast<const std::uint16_t*>(weight.const_data_ptr()),
                                     static_cast<const std::uint16_t*>(bias.const_data_ptr()),
                                     static_cast<float>(eps), begin, end,
                                     static_cast<std::uint16_t*>(out.mutable_data_ptr()));
  });
  return out;
}

}  // namespace

at::Tensor ExplicitAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::optional<at::Tensor>& additive_mask, double scale) {
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)).to(at::kFloat).mul_(scale);
  if (additive_mask) {
    scores.add_(*additive_mask);
  }
  scores.sub_(at::amax(scores, {-1}, /*keepdim=*/true)).exp_();
  scores.div_(at::sum(scores, {-1}, /*keepdim=*/true));
  return at::matmul(scores.to(q.scalar_type()), v);
}

StatusOr<BertConfig> BertConfig::FromJson(const std::string& text, const std::string& path) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return InvalidArgumentError(path + ": not a JSON object");
  }
  BertConfig c;
  try {
    auto get_int = [&](const char* key, std::int64_t* out) -> Status {
      const auto it = j.find(key);
      if (it == j.end()) {
        return InvalidArgumentError(path + ": missing key '" + key + "'");
      }
      if (!it->is_number_integer() || it->get<std::int64_t>() <= 0) {
        return InvalidArgumentError(path + ": '" + key + "' must be a positive integer");
      }
      *out = it->get<std::int64_t>();
      return OkStatus();
    };
    GANTRY_RETURN_IF_ERROR(get_int("vocab_size", &c.vocab_size));
    GANTRY_RETURN_IF_ERROR(get_int("hidden_size", &c.hidden_size));
    GANTRY_RETURN_IF_ERROR(get_int("num_hidden_layers", &c.num_hidden_layers));
    GANTRY_RETURN_IF_ERROR(get_int("num_attention_heads", &c.num_attention_heads));
    GANTRY_RETURN_IF_ERROR(get_int("intermediate_size", &c.intermediate_size));
    GANTRY_RETURN_IF_ERROR(get_int("max_position_embeddings", &c.max_position_embeddings));
    GANTRY_RETURN_IF_ERROR(get_int("type_vocab_size", &c.type_vocab_size));
    c.layer_norm_eps = j.value("layer_norm_eps", 1e-12);
    const std::string act = j.value("hidden_act", "gelu");
    if (act != "gelu") {
      return InvalidArgumentError(path + ": hidden_act '" + act +
                                  "' is not supported (only exact erf \"gelu\")");
    }
    // RoBERTa-family encoders share BERT's parameter names but not its
    // position ids (they start after the padding id): refused by name.
    const std::string model_type = j.value("model_type", "bert");
    if (model_type != "bert") {
      return InvalidArgumentError(path + ": model_type '" + model_type +
                                  "' is not supported (only \"bert\")");
    }
    const std::string pos = j.value("position_embedding_type", "absolute");
    if (pos != "absolute") {
      return InvalidArgumentError(path + ": position_embedding_type '" + pos +
                                  "' is not supported (only \"absolute\")");
    }
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(path + ": " + e.what());
  }
  if (c.hidden_size % c.num_attention_heads != 0) {
    return InvalidArgumentError(path + ": hidden_size " + std::to_string(c.hidden_size) +
                                " is not a multiple of num_attention_heads " +
                                std::to_string(c.num_attention_heads));
  }
  return c;
}

StatusOr<BertConfig> BertConfig::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return NotFoundError(path + ": cannot open file");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return FromJson(ss.str(), path);
}

BertModel::BertModel(const BertConfig& config) : config_(config) {
  layers_.resize(static_cast<std::size_t>(config_.num_hidden_layers));
  for (Slot& slot : Slots()) {
    *slot.tensor = at::empty(slot.shape, at::TensorOptions().dtype(at::kFloat));
  }
}

std::vector<BertModel::Slot> BertModel::Slots() {
  const std::int64_t h = config_.hidden_size;
  const std::int64_t inter = config_.intermediate_size;
  std::vector<Slot> slots = {
      {"embeddings.word_embeddings.weight", {config_.vocab_size, h}, &word_embeddings_},
      {"embeddings.position_embeddings.weight",
       {config_.max_position_embeddings, h},
       &position_embeddings_},
      {"embeddings.token_type_embeddings.weight",
       {config_.type_vocab_size, h},
       &token_type_embeddings_},
      {"embeddings.LayerNorm.weight", {h}, &embeddings_ln_w_},
      {"embeddings.LayerNorm.bias", {h}, &embeddings_ln_b_},
  };
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    const std::string p = "encoder.layer." + std::to_string(i) + ".";
    const std::vector<Slot> layer_slots = {
        {p + "attention.self.query.weight", {h, h}, &l.query_w},
        {p + "attention.self.query.bias", {h}, &l.query_b},
        {p + "attention.self.key.weight", {h, h}, &l.key_w},
        {p + "attention.self.key.bias", {h}, &l.key_b},
        {p + "attention.self.value.weight", {h, h}, &l.value_w},
        {p + "attention.self.value.bias", {h}, &l.value_b},
        {p + "attention.output.dense.weight", {h, h}, &l.attn_out_w},
        {p + "attention.output.dense.bias", {h}, &l.attn_out_b},
        {p + "attention.output.LayerNorm.weight", {h}, &l.attn_ln_w},
        {p + "attention.output.LayerNorm.bias", {h}, &l.attn_ln_b},
        {p + "intermediate.dense.weight", {inter, h}, &l.inter_w},
        {p + "intermediate.dense.bias", {inter}, &l.inter_b},
        {p + "output.dense.weight", {h, inter}, &l.out_w},
        {p + "output.dense.bias", {h}, &l.out_b},
        {p + "output.LayerNorm.weight", {h}, &l.out_ln_w},
        {p + "output.LayerNorm.bias", {h}, &l.out_ln_b},
    };
    slots.insert(slots.end(), layer_slots.begin(), layer_slots.end());
  }
  return slots;
}

std::vector<std::pair<std::string, at::Tensor>> BertModel::NamedParameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const Slot& slot : const_cast<BertModel*>(this)->Slots()) {
    out.emplace_back(slot.name, *slot.tensor);
  }
  return out;
}

StatusOr<at::Tensor> ReadSafetensor(const SafetensorsFile& file, const std::string& name,
                                    const std::vector<std::int64_t>& shape) {
  const SafetensorsEntry* entry = file.Find(name);
  if (entry == nullptr) {
    return InvalidArgumentError(file.path() + ": missing tensor '" + name + "'");
  }
  if (entry->shape != shape) {
    return InvalidArgumentError(file.path() + ": tensor '" + name + "' has shape " +
                                ShapeString(entry->shape) + ", expected " + ShapeString(shape) +
                                " (from config.json)");
  }
  at::ScalarType source_type;
  if (entry->dtype == "F32") {
    source_type = at::kFloat;
  } else if (entry->dtype == "F16") {
    source_type = at::kHalf;
  } else if (entry->dtype == "BF16") {
    source_type = at::kBFloat16;
  } else {
    return InvalidArgumentError(file.path() + ": tensor '" + name + "' has dtype " + entry->dtype +
                                ", expected F32, F16 or BF16");
  }
  const char* data = file.Data(*entry);
  const std::size_t item_size = source_type == at::kFloat ? 4 : 2;
  if (reinterpret_cast<std::uintptr_t>(data) % item_size == 0) {
    // Weights are used where they lie in the file's read-only mapping
    // (SafetensorsFile::Open): no copy, and every replica on the machine
    // shares the same page-cache pages. Nothing writes to parameters; a
    // dtype or device change makes new tensors.
    std::shared_ptr<const void> keep = file.storage();
    return at::from_blob(
        const_cast<char*>(data),  // NOLINT(cppcoreguidelines-pro-type-const-cast)
        shape, [keep](void* /*unused*/) mutable { keep.reset(); },
        at::TensorOptions().dtype(source_type));
  }
  // Otherwise memcpy: the format does not guarantee alignment.
  at::Tensor source = at::empty(shape, at::TensorOptions().dtype(source_type));
  if (source.nbytes() > 0) {
    std::memcpy(source.data_ptr(), data, source.nbytes());
  }
  return source;
}

Status BertModel::LoadWeights(const SafetensorsFile& file, std::string_view prefix,
                              const std::set<std::string, std::less<>>& others) {
  const auto key = [prefix](std::string_view name) {
    return std::string(prefix) + std::string(name);
  };
  const std::string position_ids = key("embeddings.position_ids");
  const std::vector<Slot> slots = Slots();
  std::set<std::string> expected;
  for (const Slot& slot : slots) {
    expected.insert(key(slot.name));
  }
  for (const SafetensorsEntry& entry : file.entries()) {
    // BERT's pooler (a dense layer over [CLS]) is not used by
    // sentence-transformers: not loaded, and not required.
    if (entry.name != position_ids && entry.name.rfind(key("pooler.dense."), 0) != 0 &&
        !expected.count(entry.name) && !others.count(entry.name)) {
      return InvalidArgumentError(file.path() + ": unexpected tensor '" + entry.name +
                                  "' (not a parameter of BertModel)");
    }
  }
  for (const Slot& slot : slots) {
    GANTRY_ASSIGN_OR_RETURN(*slot.tensor, ReadSafetensor(file, key(slot.name), slot.shape));
  }
  if (const SafetensorsEntry* ids = file.Find(position_ids)) {
    const std::vector<std::int64_t> want = {1, config_.max_position_embeddings};
    if (ids->dtype != "I64" || ids->shape != want) {
      return InvalidArgumentError(file.path() + ": tensor '" + position_ids + "' must be I64 " +
                                  ShapeString(want) + ", got " + ids->dtype + " " +
                                  ShapeString(ids->shape));
    }
    // We always use positions 0..L-1; a checkpoint saying otherwise would
    // silently change results.
    for (std::int64_t i = 0; i < config_.max_position_embeddings; ++i) {
      std::int64_t v = 0;
      std::memcpy(&v, file.Data(*ids) + i * 8, 8);
      if (v != i) {
        return InvalidArgumentError(file.path() + ": tensor '" + position_ids + "' is not arange(" +
                                    std::to_string(want[1]) + ") at index " + std::to_string(i));
      }
    }
  }
  return OkStatus();
}

void BertModel::To(at::Device device, at::ScalarType dtype) {
  int8_layers_.clear();
  for (Slot& slot : Slots()) {
    *slot.tensor = slot.tensor->to(device, dtype);
  }
  fused_cpu_linear_ = device.is_cpu() && OneDnnLinearWorks(dtype);
  // On the CPU in float32 and bfloat16 the query, key and value layers run
  // as one product (float16 has no oneDNN kernels on most CPUs; CUDA keeps
  // the three, not measured there).
  fused_cpu_qkv_ = fused_cpu_linear_ && (dtype == at::kFloat || dtype == at::kBFloat16);
  // Packed copies beside the plain weights, which stay what NamedParameters
  // shows and what another To() reads. Unlike a weight file's pages, which
  // replicas share through the page cache, each replica's copies are its own.
  prepacked_cpu_linear_ = fused_cpu_linear_;
  for (Layer& l : layers_) {
    l.qkv_w = l.qkv_b = l.qkv_packed = at::Tensor();
    if (fused_cpu_qkv_) {
      l.qkv_b = at::cat({l.query_b, l.key_b, l.value_b});
      // Packed from a transient copy, one layer at a time.
      l.qkv_packed = PrepackOneDnnLinearWeight(at::cat({l.query_w, l.key_w, l.value_w}));
      prepacked_cpu_linear_ = prepacked_cpu_linear_ && l.qkv_packed.defined();
    }
    for (auto [plain, packed] : l.Linears()) {
      const bool in_qkv =
          fused_cpu_qkv_ && (plain == &l.query_w || plain == &l.key_w || plain == &l.value_w);
      *packed = fused_cpu_linear_ && !in_qkv ? PrepackOneDnnLinearWeight(*plain) : at::Tensor();
      prepacked_cpu_linear_ = prepacked_cpu_linear_ && (in_qkv || packed->defined());
    }
  }
  for (Layer& l : layers_) {
    for (const auto& [plain, packed] : l.Linears()) {
      if (prepacked_cpu_linear_) {
        PageOutUnusedWeight(*plain);
      } else {
        *packed = at::Tensor();
      }
    }
    if (fused_cpu_qkv_ && !prepacked_cpu_linear_) {
      l.qkv_packed = at::Tensor();
      l.qkv_w = at::cat({l.query_w, l.key_w, l.value_w});
    }
  }
}

std::array<std::pair<const at::Tensor*, at::Tensor*>, 6> BertModel::Layer::Linears() {
  return {{{&query_w, &query_packed},
           {&key_w, &key_packed},
           {&value_w, &value_packed},
           {&attn_out_w, &attn_out_packed},
           {&inter_w, &inter_packed},
           {&out_w, &out_packed}}};
}

std::int64_t CpuProductRows(std::int64_t tokens) {
  if (tokens <= 0) {
    return tokens;
  }
  if (tokens <= 64) {
    return (tokens + 15) / 16 * 16;
  }
  std::int64_t octave = 64;  // the power of two at or below tokens
  while (octave * 2 <= tokens) {
    octave *= 2;
  }
  const std::int64_t step = octave / 16;
  return (tokens + step - 1) / step * step;
}

at::Tensor BertModel::Forward(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                              std::optional<bool> padded, const at::Tensor& token_type_ids) const {
  // Not value_or: its argument, a device sync on CUDA, would run anyway.
  const bool any_padding = padded.has_value() ? *padded : !attention_mask.all().item<bool>();
  if (!int8_layers_.empty()) {
    return ForwardInt8(input_ids, attention_mask, any_padding, token_type_ids);
  }
  const std::int64_t batch = input_ids.size(0);
  const std::int64_t length = input_ids.size(1);
  const std::int64_t hidden = config_.hidden_size;
  const std::int64_t heads = config_.num_attention_heads;
  const std::int64_t head_dim = hidden / heads;
  const double eps = config_.layer_norm_eps;

  at::Tensor x = Embed(input_ids, token_type_ids);
  // With the fused products every token is a row ([rows, hidden]), and a
  // padded batch keeps only its real tokens (PackBatch); in bfloat16 the
  // rows are then padded to one of few counts (CpuProductRows).
  const std::int64_t tokens = batch * length;
  std::optional<PackedBatch> packing;
  if (fused_cpu_qkv_ && any_padding) {
    packing = PackBatch(attention_mask);
  }
  const std::int64_t used = packing.has_value() ? packing->packed() : tokens;
  const std::int64_t rows =
      fused_cpu_qkv_ && x.scalar_type() == at::kBFloat16 ? CpuProductRows(used) : used;
  if (packing.has_value()) {
    at::Tensor gathered = RowsWithZeroTail(rows, used, hidden, x.options());
    at::Tensor real = gathered.narrow(0, 0, used);
    at::index_select_out(real, x.reshape({tokens, hidden}), 0, packing->source_rows);
    x = gathered;
  } else if (fused_cpu_qkv_) {
    x = ZeroPadRows(x.reshape({tokens, hidden}), rows);
  }

  const bool short_fused = fused_cpu_qkv_ && length <= kShortAttentionMaxLength;
  const bool explicit_attention = !fused_cpu_qkv_ && x.is_cpu() && x.scalar_type() != at::kFloat &&
                                  length <= kExplicitAttentionMaxLength;
  // Key mask [B, 1, 1, L]: boolean (true = attend) for SDPA, additive
  // float32 for ExplicitAttention and attention_rows. None when nothing is
  // padded, as transformers does, which lets SDPA pick its fastest kernel.
  std::optional<at::Tensor> mask;
  if (any_padding && !packing.has_value()) {
    mask = attention_mask.to(at::kBool).view({batch, 1, 1, length});
    if (explicit_attention || short_fused) {
      mask = at::zeros({batch, 1, 1, length}, x.options().dtype(at::kFloat))
                 .masked_fill_(mask->logical_not(), std::numeric_limits<float>::lowest());
    }
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  auto split_heads = [&](const at::Tensor& t) {
    return t.view({batch, length, heads, head_dim}).transpose(1, 2);
  };
  const bool fused = fused_cpu_linear_;
  auto linear = [fused](const at::Tensor& in, const at::Tensor& w, const at::Tensor& b) {
    return fused ? OneDnnLinear(in, w, b, "none") : at::linear(in, w, b);
  };
  auto linear_gelu = [fused](const at::Tensor& in, const at::Tensor& w, const at::Tensor& b) {
    return fused ? OneDnnLinear(in, w, b, "gelu") : at::gelu(at::linear(in, w, b));
  };
  auto linear_add = [fused](const at::Tensor& in, const at::Tensor& w, const at::Tensor& b,
                            const at::Tensor& residual) {
    return fused ? OneDnnLinearAdd(in, w, b, residual) : at::linear(in, w, b) + residual;
  };
  const bool packed = prepacked_cpu_linear_;
  for (const Layer& l : layers_) {
    auto weight = [packed](const at::Tensor& plain,
                           const at::Tensor& prepacked) -> const at::Tensor& {
      return packed ? prepacked : plain;
    };
    at::Tensor context;
    if (fused_cpu_qkv_) {
      const at::Tensor qkv = linear(x, weight(l.qkv_w, l.qkv_packed), l.qkv_b);  // [rows, 3h]
      if (packing.has_value()) {
        context = PackedAttention(qkv, *packing, heads, head_dim, scale, rows);
      } else if (short_fused) {
        context = ShortAttention(qkv, {batch, length, heads, head_dim}, mask, scale, rows);
      } else {
        context = RowsWithZeroTail(rows, tokens, hidden, qkv.options());
        BlockedAttention(qkv.narrow(0, 0, tokens), batch, length, heads, head_dim, mask, scale,
                         context.narrow(0, 0, tokens));
      }
    } else {
      const at::Tensor q = split_heads(linear(x, weight(l.query_w, l.query_packed), l.query_b));
      const at::Tensor k = split_heads(linear(x, weight(l.key_w, l.key_packed), l.key_b));
      const at::Tensor v = split_heads(linear(x, weight(l.value_w, l.value_packed), l.value_b));
      context =
          (explicit_attention ? ExplicitAttention(q, k, v, mask, scale)
                              : at::scaled_dot_product_attention(q, k, v, mask, /*dropout_p=*/0.0,
                                                                 /*is_causal=*/false, scale))
              .transpose(1, 2)
              .reshape({batch, length, hidden});
    }
    const at::Tensor a =
        LayerNorm(linear_add(context, weight(l.attn_out_w, l.attn_out_packed), l.attn_out_b, x),
                  l.attn_ln_w, l.attn_ln_b, eps);
    const at::Tensor i =
        linear_gelu(a, weight(l.inter_w, l.inter_packed), l.inter_b);  // exact erf GELU
    x = LayerNorm(linear_add(i, weight(l.out_w, l.out_packed), l.out_b, a), l.out_ln_w, l.out_ln_b,
                  eps);
  }
  if (packing.has_value()) {
    // Back to [B, L, hidden]; the padding's rows are zero.
    return at::zeros({tokens, hidden}, x.options())
        .index_copy_(0, packing->source_rows, x.narrow(0, 0, used))
        .view({batch, length, hidden});
  }
  return fused_cpu_qkv_ ? x.narrow(0, 0, tokens).view({batch, length, hidden}) : x;
}

at::Tensor BertModel::Embed(const at::Tensor& input_ids, const at::Tensor& token_type_ids) const {
  const at::Tensor positions = at::arange(input_ids.size(1), input_ids.options());
  // Without token_type_ids every token is segment 0, as for single sentences.
  const at::Tensor token_types = token_type_ids.defined()
                                     ? at::embedding(token_type_embeddings_, token_type_ids)
                                     : token_type_embeddings_[0];
  const at::Tensor x = at::embedding(word_embeddings_, input_ids) +
                       at::embedding(position_embeddings_, positions).unsqueeze(0) + token_types;
  return LayerNorm(x, embeddings_ln_w_, embeddings_ln_b_, config_.layer_norm_eps);
}

Status BertModel::QuantizeToInt8(at::ScalarType attention_dtype) {
  GANTRY_RETURN_IF_ERROR(Int8Linear::Available());
  if (!word_embeddings_.is_cpu() || word_embeddings_.scalar_type() != at::kFloat) {
    return FailedPreconditionError("int8 needs the model on the CPU in float32 first");
  }
  if (attention_dtype != at::kFloat && attention_dtype != at::kBFloat16) {
    return InvalidArgumentError("int8: the attention runs in float32 or bfloat16");
  }
  constexpr std::int64_t kMaxHidden = 4096;  // int8_rows' row buffers
  if (config_.hidden_size > kMaxHidden) {
    return InvalidArgumentError("int8: hidden_size " + std::to_string(config_.hidden_size) +
                                " is over the " + std::to_string(kMaxHidden) + " it supports");
  }
  constexpr std::int64_t kRowsHint = std::int64_t{32} * 14;  // as the float weights' packing
  const std::int64_t head_dim = config_.hidden_size / config_.num_attention_heads;
  std::vector<Int8Layer> quantized;
  quantized.reserve(layers_.size());
  for (Layer& l : layers_) {
    // The three projections of the attention as one product, three times
    // as wide: one quantisation of the input, one call.
    GANTRY_ASSIGN_OR_RETURN(
        Int8Linear qkv, Int8Linear::FromFloat(at::cat({l.query_w, l.key_w, l.value_w}),
                                              at::cat({l.query_b, l.key_b, l.value_b}), kRowsHint));
    GANTRY_ASSIGN_OR_RETURN(Int8Linear attn_out,
                            Int8Linear::FromFloat(l.attn_out_w, l.attn_out_b, kRowsHint));
    GANTRY_ASSIGN_OR_RETURN(Int8Linear inter,
                            Int8Linear::FromFloat(l.inter_w, l.inter_b, kRowsHint));
    GANTRY_ASSIGN_OR_RETURN(Int8Linear out, Int8Linear::FromFloat(l.out_w, l.out_b, kRowsHint));
    // The attention's 1/sqrt(head_dim) on the queries, in their scales.
    qkv.ScaleOutputs(0, config_.hidden_size,
                     static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))));
    quantized.push_back({std::move(qkv), std::move(attn_out), std::move(inter), std::move(out)});
  }
  int8_layers_ = std::move(quantized);
  int8_attention_dtype_ = attention_dtype;
  // The float weights of the linear layers are not read again (unless by
  // another To()), nor their packed copies.
  for (Layer& l : layers_) {
    for (auto [plain, packed] : l.Linears()) {
      *packed = at::Tensor();
      PageOutUnusedWeight(*plain);
    }
    l.qkv_w = l.qkv_b = l.qkv_packed = at::Tensor();
  }
  prepacked_cpu_linear_ = false;
  fused_cpu_qkv_ = false;
  return OkStatus();
}

at::Tensor BertModel::ForwardInt8(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                  bool padded, const at::Tensor& token_type_ids) const {
  const std::int64_t batch = input_ids.size(0);
  const std::int64_t length = input_ids.size(1);
  const std::int64_t tokens = batch * length;
  // A padded batch keeps only its real tokens, as in Forward.
  const std::optional<PackedBatch> packing =
      padded ? PackBatch(attention_mask) : std::optional<PackedBatch>();
  const std::int64_t rows = packing.has_value() ? packing->packed() : tokens;
  const std::int64_t hidden = config_.hidden_size;
  const std::int64_t heads = config_.num_attention_heads;
  const std::int64_t head_dim = hidden / heads;
  const auto eps = static_cast<float>(config_.layer_norm_eps);
  constexpr std::int64_t kGrain = 16;
  const at::TensorOptions float_options = at::TensorOptions().dtype(at::kFloat);

  // Every row is one token: [rows, hidden] from here to the end.
  at::Tensor x = Embed(input_ids, token_type_ids).reshape({tokens, hidden});
  x = packing.has_value() ? x.index_select(0, packing->source_rows) : x.contiguous();
  QuantizedActivations xq = QuantizedActivations::FromTensor(x);

  // Up to kExplicitAttentionMaxLength tokens the attention is one pass of
  // int8_rows per text, in float32, from the product straight to the next
  // product's input; beyond, ATen's SDPA (in int8_attention_dtype_) on
  // query, key and value laid out per head. Either way the queries are
  // scaled already: QuantizeToInt8 folded 1/sqrt(head_dim) into them.
  const bool short_texts = length <= kShortAttentionMaxLength;
  const bool bf16_attention = int8_attention_dtype_ == at::kBFloat16;
  const int8_rows::HeadLayout layout{batch, length, heads, head_dim};
  std::optional<at::Tensor> mask;
  if (padded && !packing.has_value()) {
    mask = attention_mask.to(at::kBool).view({batch, 1, 1, length});
    if (short_texts) {
      mask = at::zeros({batch, length}, float_options)
                 .masked_fill_(mask->view({batch, length}).logical_not(),
                               std::numeric_limits<float>::lowest());
    }
  }
  // The texts of `texts` (a layout of the first rows) through SDPA.
  auto long_attention = [&](const int8_rows::Product& qkv_product, const QuantizedActivations& out,
                            const int8_rows::HeadLayout& texts,
                            const std::optional<at::Tensor>& keep) {
    const std::int64_t text_rows = texts.batch * texts.length;
    at::Tensor qkv = at::empty({3, texts.batch, heads, texts.length, head_dim},
                               float_options.dtype(int8_attention_dtype_));
    ParallelRows(text_rows, kGrain, [&](std::int64_t begin, std::int64_t end) {
      if (bf16_attention) {
        int8_rows::DequantizeToHeadsBFloat16(qkv_product, texts, begin, end,
                                             static_cast<std::uint16_t*>(qkv.mutable_data_ptr()));
      } else {
        int8_rows::DequantizeToHeads(qkv_product, texts, begin, end, qkv.mutable_data_ptr<float>());
      }
    });
    const at::Tensor context =
        at::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], keep, /*dropout_p=*/0.0,
                                         /*is_causal=*/false, /*scale=*/1.0)
            .contiguous();
    const int8_rows::QuantizedRows out_rows = out.Rows();
    ParallelRows(text_rows, kGrain, [&](std::int64_t begin, std::int64_t end) {
      if (bf16_attention) {
        int8_rows::QuantizeHeadRowsBFloat16(
            static_cast<const std::uint16_t*>(context.const_data_ptr()), texts, begin, end,
            out_rows);
      } else {
        int8_rows::QuantizeHeadRows(context.const_data_ptr<float>(), texts, begin, end, out_rows);
      }
    });
  };
  // A packed batch's attention: the long block as above, every short text
  // on its own rows.
  auto packed_attention = [&](const int8_rows::Product& qkv_product,
                              const QuantizedActivations& out) {
    if (packing->long_texts > 0) {
      long_attention(qkv_product, out, {packing->long_texts, packing->long_length, heads, head_dim},
                     packing->long_mask);
    }
    const int8_rows::QuantizedRows out_rows = out.Rows();
    const std::int64_t out_cols = heads * head_dim;
    const auto parts = static_cast<std::int64_t>(packing->short_parts.size());
    ParallelRows(parts, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t part = begin; part < end; ++part) {
        for (const PackedText& text : packing->short_parts[static_cast<std::size_t>(part)]) {
          int8_rows::Product at_text = qkv_product;
          at_text.acc += text.first_row * qkv_product.cols;
          at_text.row_scale += text.first_row;
          at_text.row_offset += text.first_row;
          const int8_rows::QuantizedRows to_text{out_rows.q + text.first_row * out_cols,
                                                 out_rows.scale + text.first_row,
                                                 out_rows.offset + text.first_row};
          int8_rows::AttentionFromProduct(at_text, {1, text.length, heads, head_dim}, nullptr, 0, 1,
                                          to_text);
        }
      }
    });
  };
  for (std::size_t i = 0; i < int8_layers_.size(); ++i) {
    const Int8Layer& q8 = int8_layers_[i];
    const Layer& l = layers_[i];
    const bool last = i + 1 == int8_layers_.size();

    const at::Tensor qkv_acc = q8.qkv.Multiply(xq);
    const int8_rows::Product qkv_product = q8.qkv.Product(qkv_acc, xq);
    const QuantizedActivations cq = QuantizedActivations::Empty(rows, hidden);
    if (packing.has_value()) {
      packed_attention(qkv_product, cq);
    } else if (short_texts) {
      const int8_rows::QuantizedRows cq_rows = cq.Rows();
      const float* mask_data = mask.has_value() ? mask->const_data_ptr<float>() : nullptr;
      ParallelRows(batch, 1, [&](std::int64_t begin, std::int64_t end) {
        int8_rows::AttentionFromProduct(qkv_product, layout, mask_data, begin, end, cq_rows);
      });
    } else {
      long_attention(qkv_product, cq, layout, mask);
    }

    const at::Tensor attn_acc = q8.attn_out.Multiply(cq);
    const int8_rows::Product attn_product = q8.attn_out.Product(attn_acc, cq);
    at::Tensor a = at::empty({rows, hidden}, float_options);
    QuantizedActivations aq = QuantizedActivations::Empty(rows, hidden);
    const int8_rows::QuantizedRows aq_rows = aq.Rows();
    ParallelRows(rows, kGrain, [&](std::int64_t begin, std::int64_t end) {
      int8_rows::DequantizeAddNorm(
          attn_product, begin, end, x.const_data_ptr<float>(), l.attn_ln_w.const_data_ptr<float>(),
          l.attn_ln_b.const_data_ptr<float>(), eps, a.mutable_data_ptr<float>(), &aq_rows);
    });

    const at::Tensor inter_acc = q8.inter.Multiply(aq);
    const int8_rows::Product inter_product = q8.inter.Product(inter_acc, aq);
    QuantizedActivations iq = QuantizedActivations::Empty(rows, q8.inter.out_features());
    const int8_rows::QuantizedRows iq_rows = iq.Rows();
    ParallelRows(rows, kGrain, [&](std::int64_t begin, std::int64_t end) {
      std::vector<float> scratch(static_cast<std::size_t>(inter_product.cols));
      int8_rows::DequantizeGeluQuantize(inter_product, begin, end, iq_rows, scratch.data());
    });

    const at::Tensor out_acc = q8.out.Multiply(iq);
    const int8_rows::Product out_product = q8.out.Product(out_acc, iq);
    at::Tensor next = at::empty({rows, hidden}, float_options);
    QuantizedActivations next_q =
        last ? QuantizedActivations() : QuantizedActivations::Empty(rows, hidden);
    const int8_rows::QuantizedRows next_rows = last ? int8_rows::QuantizedRows{} : next_q.Rows();
    ParallelRows(rows, kGrain, [&](std::int64_t begin, std::int64_t end) {
      int8_rows::DequantizeAddNorm(out_product, begin, end, a.const_data_ptr<float>(),
                                   l.out_ln_w.const_data_ptr<float>(),
                                   l.out_ln_b.const_data_ptr<float>(), eps,
                                   next.mutable_data_ptr<float>(), last ? nullptr : &next_rows);
    });
    x = std::move(next);
    xq = std::move(next_q);
  }
  if (packing.has_value()) {
    return at::zeros({tokens, hidden}, float_options)
        .index_copy_(0, packing->source_rows, x)
        .view({batch, length, hidden});
  }
  return x.view({batch, length, hidden});
}

}  // namespace gantry::sentence_encoder
