// Bare-model throughput: encodes N copies of the Jina tutorial sentence with
// SentenceEmbedder in one process (no framework, no RPC) and prints docs/s.
//
//   encoder_bare [--n N] [--batch-size B] [--device cpu|cuda|cuda:N]
//                [--dtype float32|float16|bfloat16] [--model-path DIR] [--repeat R]
//                [--mode encode|tokenize] [--cuda-graphs]
// --batch-size defaults to SentenceEncoder's own (32 on a CPU, 128 in
// bfloat16 on a CPU with AMX, 256 on CUDA), and the heap is set up as a
// worker's (gantry/heap.h), so that the bare model runs as a replica's does.
// Output: one line "docs_per_s=<value> n=<N> ..." per repeat. --mode
// tokenize times the tokenizer alone (bench/tokenizer/run.sh compares it
// with Hugging Face `tokenizers`). --cuda-graphs replays each pass's shape
// as a CUDA graph (SentenceEncoder's `cuda_graphs`; CUDA only).
#include <ATen/core/Tensor.h>
#include <gantry/heap.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "sentence_embedder.h"

namespace {

constexpr std::string_view kSentence = "Using a GPU allows you to significantly speed up encoding.";

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--n N] [--batch-size B] [--device D] [--dtype T] [--model-path DIR] "
               "[--repeat R] [--mode encode|tokenize] [--cuda-graphs]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using gantry::sentence_encoder::EmbedderOptions;
  using gantry::sentence_encoder::SentenceEmbedder;
  gantry::KeepModelBuffersInHeap();
  EmbedderOptions options;
  options.batch_size = 0;  // the executor's default
  long n = 10000;
  long repeat = 1;
  std::string device = "cpu";
  std::string mode = "encode";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--cuda-graphs") {
      options.cuda_graphs = true;
      continue;
    }
    if (i + 1 >= argc) {
      return Usage(argv[0]);
    }
    const char* value = argv[++i];
    if (arg == "--n") {
      n = std::atol(value);
    } else if (arg == "--batch-size") {
      options.batch_size = std::atol(value);
    } else if (arg == "--device") {
      device = value;
    } else if (arg == "--dtype") {
      options.dtype = value;
    } else if (arg == "--model-path") {
      options.model_path = value;
    } else if (arg == "--repeat") {
      repeat = std::atol(value);
    } else if (arg == "--mode" &&
               (std::string_view(value) == "encode" || std::string_view(value) == "tokenize")) {
      mode = value;
    } else {
      return Usage(argv[0]);
    }
  }
  gantry::StatusOr<gantry::Device> parsed = gantry::Device::Parse(device);
  if (!parsed.ok()) {
    std::fprintf(stderr, "encoder_bare: %s\n", parsed.status().ToString().c_str());
    return 2;
  }
  options.device = *parsed;
  gantry::StatusOr<std::unique_ptr<SentenceEmbedder>> embedder = SentenceEmbedder::Load(options);
  if (!embedder.ok()) {
    std::fprintf(stderr, "encoder_bare: %s\n", embedder.status().ToString().c_str());
    return 1;
  }
  const std::vector<std::string_view> texts(static_cast<std::size_t>(n), kSentence);
  if (mode == "tokenize") {
    for (long r = 0; r < repeat; ++r) {
      const auto start = std::chrono::steady_clock::now();
      const std::vector<std::vector<std::int64_t>> ids = (*embedder)->Tokenize(texts);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::size_t tokens = 0;
      for (const auto& one : ids) {
        tokens += one.size();
      }
      std::printf("docs_per_s=%.1f n=%ld seconds=%.4f tokens=%zu mode=tokenize\n",
                  static_cast<double>(n) / seconds, n, seconds, tokens);
    }
    return 0;
  }
  for (long r = 0; r < repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    // Tokenization is part of the cost, as in SentenceTransformer.encode.
    const at::Tensor out = (*embedder)->Encode(texts);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("docs_per_s=%.1f n=%ld seconds=%.3f batch_size=%lld device=%s dtype=%s dim=%lld\n",
                static_cast<double>(n) / seconds, n, seconds,
                static_cast<long long>((*embedder)->batch_size()),
                (*embedder)->device().ToString().c_str(), options.dtype.c_str(),
                static_cast<long long>(out.size(1)));
  }
  return 0;
}
