// gantry_bench_batching [DEVICE] [DOCS] [RUNS] [PREFERRED] [TIMEOUT_MS] [EXECUTOR]
//
// The seed job: a Deployment of two EXECUTOR replicas (SentenceEncoder, or
// MyGPUExec to see the framework's own cost), DOCS copies of the seed sentence
// (10,000) posted to /encode in requests of 32, once as is and once with
// uses_dynamic_batching on /encode. Each mode runs RUNS times (best time
// kept); both are measured in the same process, so the printed ratio is
// what to compare across machines, not the absolute numbers.
#include <gantry/deployment.h>
#include <gantry/init.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

struct Run {
  double seconds = 0;
  bool ok = false;
  std::string each;  // every post's time, in order ("0.512 0.178 0.181")
};

Run Measure(const gantry::DeploymentOptions& options, int num_docs, int runs) {
  gantry::Deployment dep(options);
  if (!dep.ok()) {
    std::fprintf(stderr, "error: %s\n", dep.status().message().c_str());
    return {};
  }
  gantry::DocList docs;
  for (int i = 0; i < num_docs; ++i) {
    docs.emplace_back("Using a GPU allows you to significantly speed up encoding.");
  }
  // One warm-up post: connections, first allocations.
  (void)dep.Post("/encode", gantry::DocList{gantry::Doc("warm-up")});
  Run best{.seconds = 1e30, .ok = true, .each = {}};
  for (int r = 0; r < runs; ++r) {
    auto start = std::chrono::steady_clock::now();
    auto result = dep.Post("/encode", docs, {.request_size = 32});
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!result.ok() || result->size() != docs.size()) {
      std::fprintf(stderr, "error: %s\n",
                   result.ok() ? "wrong number of documents" : result.status().message().c_str());
      return {};
    }
    best.seconds = std::min(best.seconds, seconds);
    char text[32];
    std::snprintf(text, sizeof(text), "%s%.3f", best.each.empty() ? "" : " ", seconds);
    best.each += text;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  gantry::Init(argc, argv);
  std::string device = argc > 1 ? argv[1] : "cpu";
  int num_docs = argc > 2 ? std::atoi(argv[2]) : 10000;
  int runs = argc > 3 ? std::atoi(argv[3]) : 3;
  int preferred = argc > 4 ? std::atoi(argv[4]) : 256;
  int timeout_ms = argc > 5 ? std::atoi(argv[5]) : 5;
  std::string executor = argc > 6 ? argv[6] : "SentenceEncoder";

  gantry::DeploymentOptions base{
      .uses = executor, .uses_with = {{"device", device}}, .replicas = 2, .log_level = "warning"};
  // "Without" means without: off even where the executor batches by
  // default (SentenceEncoder on CUDA).
  base.uses_dynamic_batching = {{"/encode", {.enabled = false}}};
  gantry::DeploymentOptions batched = base;
  batched.uses_dynamic_batching = {
      {"/encode", {.preferred_batch_size = preferred, .timeout_ms = timeout_ms}}};

  Run plain = Measure(base, num_docs, runs);
  Run with = Measure(batched, num_docs, runs);
  if (!plain.ok || !with.ok) {
    return 1;
  }
  std::printf("seed job: %d docs, request_size 32, 2 x %s, device %s, best of %d\n", num_docs,
              executor.c_str(), device.c_str(), runs);
  std::printf("without dynamic batching: %.3f s  %.0f docs/s  (posts: %s s)\n", plain.seconds,
              num_docs / plain.seconds, plain.each.c_str());
  std::printf(
      "with dynamic batching (preferred_batch_size %d, timeout %d ms): %.3f s  %.0f "
      "docs/s  (posts: %s s)\n",
      preferred, timeout_ms, with.seconds, num_docs / with.seconds, with.each.c_str());
  std::printf("ratio (with / without throughput): %.2f\n", plain.seconds / with.seconds);
  return 0;
}
