// The seed's main.py on the real model: a Deployment of SentenceEncoder
// (all-MiniLM-L6-v2 in libtorch), 10,000 copies of one sentence posted to
// /encode in requests of 32 with a progress bar; prints the time and docs/s
// and checks that every document came back with a 384-d embedding.
//
//   encode_10k [--device cpu|cuda|cuda:N] [--dtype T] [--model-path DIR]
//              [--replicas N] [--docs N] [--request-size N] [--no-progress]
//              [--batch-size N] [--dynamic-batching PREFERRED:TIMEOUT_MS|off] [--repeat R]
//              [--uses EXECUTOR.yml] [--cuda-graphs]
// --dtype is SentenceEncoder's `dtype` (float32 by default), --batch-size
// its `batch_size` (the widest forward pass; the executor's default), and
// --dynamic-batching turns on dynamic batching of /encode in the workers
// (uses_dynamic_batching), so concurrent requests share a forward pass
// (SentenceEncoder does that by default on CUDA, and in bfloat16 on a CPU
// with AMX; `off` turns it off).
// --cuda-graphs sets SentenceEncoder's `cuda_graphs: true` (CUDA only).
// --repeat posts the documents R times to the same Deployment, one result
// line each (the first pays for any shape the model has not seen yet).
//
// --uses serves another executor file instead of SentenceEncoder (e.g.
// TorchModel with all-MiniLM-L6-v2 exported by torch.export, as
// bench/encoder/run.sh's side f does); its `with:` then holds the model,
// dtype and batch size, and --dtype, --model-path and --batch-size are
// refused. Its handler must serve /encode with a 384-d embedding.
// Without --model-path the executor looks the model up itself (see
// FindDefaultModelPath in executors/sentence_encoder/sentence_embedder.h):
// $GANTRY_MODEL_PATH, then ./models/pypi/... as scripts/fetch_model.sh
// installs it, among others.
// The last line is machine-readable for bench/encoder/run.sh:
//   docs_per_s=<value> n=<docs> seconds=<post time> startup_seconds=<value> ...
#include <gantry/deployment.h>
#include <gantry/device.h>
#include <gantry/init.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

namespace {

constexpr std::string_view kSentence = "Using a GPU allows you to significantly speed up encoding.";
constexpr std::int64_t kDimension = 384;

struct Options {
  std::string device = "cpu";
  std::string dtype;
  std::string model_path;
  std::string uses;  // an executor YAML instead of SentenceEncoder
  int replicas = 1;
  long docs = 10000;
  int request_size = 32;
  bool progress = true;
  long batch_size = 0;           // 0: the executor's default
  int preferred_batch_size = 0;  // 0: no dynamic batching
  int batching_timeout_ms = 0;
  long repeat = 1;
  bool cuda_graphs = false;
  bool batching_off = false;  // off even where the executor batches by default
};

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--device cpu|cuda|cuda:N] [--dtype T] [--model-path DIR] [--replicas N] "
               "[--docs N] [--request-size N] [--no-progress] [--batch-size N] "
               "[--dynamic-batching PREFERRED:TIMEOUT_MS|off] [--repeat R] [--uses EXECUTOR.yml] "
               "[--cuda-graphs]\n",
               argv0);
  return 2;
}

// Parses an integer in [min, max]; false for anything else.
bool ParseInRange(const char* text, long min, long max, long* out) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < min || value > max) {
    return false;
  }
  *out = value;
  return true;
}

bool ParseArgs(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--no-progress") {
      options->progress = false;
      continue;
    }
    if (arg == "--cuda-graphs") {
      options->cuda_graphs = true;
      continue;
    }
    if (i + 1 >= argc) {
      return false;
    }
    const char* value = argv[++i];
    long number = 0;
    if (arg == "--device") {
      options->device = value;
    } else if (arg == "--dtype") {
      options->dtype = value;
    } else if (arg == "--model-path") {
      options->model_path = value;
    } else if (arg == "--uses") {
      options->uses = value;
    } else if (arg == "--replicas" && ParseInRange(value, 1, 64, &number)) {
      options->replicas = static_cast<int>(number);
    } else if (arg == "--docs" && ParseInRange(value, 1, 100000000, &number)) {
      options->docs = number;
    } else if (arg == "--request-size" && ParseInRange(value, 1, 100000, &number)) {
      options->request_size = static_cast<int>(number);
    } else if (arg == "--batch-size" && ParseInRange(value, 1, 100000, &number)) {
      options->batch_size = number;
    } else if (arg == "--repeat" && ParseInRange(value, 1, 1000, &number)) {
      options->repeat = number;
    } else if (arg == "--dynamic-batching" && std::string_view(value) == "off") {
      options->batching_off = true;
    } else if (arg == "--dynamic-batching") {
      const std::string_view text = value;
      const std::size_t colon = text.find(':');
      long preferred = 0;
      long timeout_ms = 0;
      if (colon == std::string_view::npos ||
          !ParseInRange(std::string(text.substr(0, colon)).c_str(), 1, 100000, &preferred) ||
          !ParseInRange(std::string(text.substr(colon + 1)).c_str(), 0, 60000, &timeout_ms)) {
        return false;
      }
      options->preferred_batch_size = static_cast<int>(preferred);
      options->batching_timeout_ms = static_cast<int>(timeout_ms);
    } else {
      return false;
    }
  }
  return true;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Every document must carry a finite float32 [384] embedding, and since all
// texts are equal, all embeddings must equal the first (a reply routed to the
// wrong document or a corrupted tensor would show up here). Returns the
// number of bad documents, describing the first few.
long CountBadDocs(const gantry::DocList& docs) {
  long bad = 0;
  std::span<const float> first;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const gantry::Doc& doc = docs[i];
    const gantry::Tensor* embedding = doc.embedding();
    std::string problem;
    if (doc.text() != kSentence) {
      problem = "text changed";
    } else if (embedding == nullptr) {
      problem = "no embedding";
    } else if (embedding->dtype() != gantry::DTypeOf<float>() || embedding->dim() != 1 ||
               embedding->shape()[0] != kDimension) {
      problem = "embedding is " + embedding->dtype() + " " + embedding->ShapeString() +
                ", expected float32 [384]";
    } else {
      const std::span<const float> values = embedding->Values<float>();
      if (first.empty()) {
        first = values;
      }
      double dot = 0;
      double norm = 0;
      double first_norm = 0;
      for (std::size_t k = 0; k < values.size(); ++k) {
        dot += static_cast<double>(values[k]) * first[k];
        norm += static_cast<double>(values[k]) * values[k];
        first_norm += static_cast<double>(first[k]) * first[k];
      }
      const double cosine = dot / std::sqrt(norm * first_norm);
      if (!std::isfinite(cosine) || cosine < 0.99999) {
        problem = "embedding differs from document 0's (cosine " + std::to_string(cosine) + ")";
      }
    }
    if (!problem.empty() && ++bad <= 5) {
      std::fprintf(stderr, "encode_10k: document %zu: %s\n", i, problem.c_str());
    }
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  // Worker replicas are this program, re-executed; Init runs them.
  gantry::Init(argc, argv);

  Options options;
  if (!ParseArgs(argc, argv, &options)) {
    return Usage(argv[0]);
  }
  if (!options.uses.empty() && (!options.dtype.empty() || !options.model_path.empty() ||
                                options.batch_size != 0 || options.cuda_graphs)) {
    std::fprintf(stderr,
                 "encode_10k: --dtype, --model-path, --batch-size and --cuda-graphs are "
                 "SentenceEncoder's; "
                 "with --uses, %s's `with:` sets them\n",
                 options.uses.c_str());
    return 2;
  }
  // Checked here so a typo fails before any worker starts.
  if (gantry::StatusOr<gantry::Device> device = gantry::Device::Parse(options.device);
      !device.ok()) {
    std::fprintf(stderr, "encode_10k: --device: %s\n", device.status().message().c_str());
    return 2;
  }

  gantry::DeploymentOptions deployment_options{
      .uses = options.uses.empty() ? std::string("SentenceEncoder") : options.uses,
      .name = "encoder",
      .replicas = options.replicas};
  deployment_options.uses_with.insert_or_assign("device", gantry::Value(options.device));
  if (!options.dtype.empty()) {
    deployment_options.uses_with.insert_or_assign("dtype", gantry::Value(options.dtype));
  }
  if (!options.model_path.empty()) {
    deployment_options.uses_with.insert_or_assign("model_path", gantry::Value(options.model_path));
  }
  if (options.cuda_graphs) {
    deployment_options.uses_with.insert_or_assign("cuda_graphs", gantry::Value(true));
  }
  if (options.batch_size != 0) {
    deployment_options.uses_with.insert_or_assign(
        "batch_size", gantry::Value(static_cast<std::int64_t>(options.batch_size)));
  }
  // SentenceEncoder binds /encode; an executor of --uses may serve it
  // through Jina's /default (TorchModel does).
  const std::string batched_endpoint = options.uses.empty() ? "/encode" : "/default";
  if (options.batching_off) {
    deployment_options.uses_dynamic_batching.insert_or_assign(
        batched_endpoint, gantry::DynamicBatching{.enabled = false});
  } else if (options.preferred_batch_size != 0) {
    deployment_options.uses_dynamic_batching.insert_or_assign(
        batched_endpoint,
        gantry::DynamicBatching{.preferred_batch_size = options.preferred_batch_size,
                                .timeout_ms = options.batching_timeout_ms});
  }

  const auto start = std::chrono::steady_clock::now();
  gantry::Deployment dep(std::move(deployment_options));
  if (!dep.ok()) {
    std::fprintf(stderr, "encode_10k: %s\n", dep.status().message().c_str());
    return 1;
  }
  const double startup_seconds = SecondsSince(start);

  gantry::DocList docs;
  docs.reserve(static_cast<std::size_t>(options.docs));
  for (long i = 0; i < options.docs; ++i) {
    docs.emplace_back(std::string(kSentence));
  }

  // As the result line reports it: the executor's default, off, or P:T.
  const std::string batching = options.batching_off ? "off"
                               : options.preferred_batch_size == 0
                                   ? "default"
                                   : std::to_string(options.preferred_batch_size) + ":" +
                                         std::to_string(options.batching_timeout_ms);
  for (long round = 0; round < options.repeat; ++round) {
    const auto post_start = std::chrono::steady_clock::now();
    gantry::StatusOr<gantry::DocList> result = dep.Post(
        "/encode", docs, {.request_size = options.request_size, .show_progress = options.progress});
    const double seconds = SecondsSince(post_start);
    if (!result.ok()) {
      std::fprintf(stderr, "encode_10k: %s\n", result.status().message().c_str());
      return 1;
    }
    if (result->size() != docs.size()) {
      std::fprintf(stderr, "encode_10k: posted %zu documents, got %zu back\n", docs.size(),
                   result->size());
      return 1;
    }
    const long bad = CountBadDocs(*result);

    std::printf("encoded %zu documents in %.2f s: %.1f docs/s (startup %.2f s)\n", result->size(),
                seconds, static_cast<double>(result->size()) / seconds, startup_seconds);
    for (const gantry::ReplicaInfo& replica : dep.replicas()) {
      std::printf("%s (pid %d, %s) served %llu requests\n", replica.name.c_str(), replica.pid,
                  replica.device.c_str(), static_cast<unsigned long long>(replica.requests));
    }
    if (bad != 0) {
      std::fprintf(stderr, "encode_10k: %ld of %zu documents failed the check\n", bad,
                   result->size());
      return 1;
    }
    std::printf("all %zu documents have a 384-d embedding\n", result->size());
    std::printf(
        "docs_per_s=%.1f n=%zu seconds=%.3f startup_seconds=%.3f replicas=%d request_size=%d "
        "device=%s dtype=%s batch_size=%ld dynamic_batching=%s\n",
        static_cast<double>(result->size()) / seconds, result->size(), seconds, startup_seconds,
        options.replicas, options.request_size, options.device.c_str(),
        options.dtype.empty() ? "float32" : options.dtype.c_str(), options.batch_size,
        batching.c_str());
  }
  return 0;
}
