// gantry_bench_priority [DEVICE] [SECONDS] [FLOOD_CLIENTS] [EXECUTOR]
//
// Latency of urgent requests under a flood of ordinary ones. One replica of
// EXECUTOR (SentenceEncoder) batches /encode (preferred_batch_size 32,
// timeout 5 ms); FLOOD_CLIENTS (8) clients post 32 documents at a time back
// to back, and a probe posts one document with `priority: 1` every 100 ms
// (at once after a slower answer), for SECONDS (20) after a 2 s warm-up.
// Run twice in the same process: without priority levels (the probe's
// `priority` is an ordinary parameter, so it has a queue of its own, served
// oldest first) and with priority_levels 2. Prints the probe's p50/p99/max,
// the flood's throughput and the ratio of the two p99s.
#include <gantry/deployment.h>
#include <gantry/init.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  bool ok = false;
  std::vector<double> probe_ms;  // sorted
  double flood_docs_per_s = 0;
  int failures = 0;
};

double Quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) {
    return 0;
  }
  const auto i = static_cast<std::size_t>(std::lround(q * static_cast<double>(sorted.size() - 1)));
  return sorted[std::min(i, sorted.size() - 1)];
}

Result Measure(const std::string& device, const std::string& executor, int priority_levels,
               int seconds, int flood_clients) {
  gantry::DeploymentOptions options{
      .uses = executor, .uses_with = {{"device", device}}, .replicas = 1, .log_level = "warning"};
  options.uses_dynamic_batching = {
      {"/encode",
       {.preferred_batch_size = 32, .timeout_ms = 5, .priority_levels = priority_levels}}};
  gantry::Deployment dep(options);
  if (!dep.ok()) {
    std::fprintf(stderr, "error: %s\n", dep.status().message().c_str());
    return {};
  }
  gantry::DocList batch;
  for (int i = 0; i < 32; ++i) {
    batch.emplace_back("Using a GPU allows you to significantly speed up encoding.");
  }
  std::atomic<bool> stop{false};
  std::atomic<bool> measuring{false};
  std::atomic<long> flood_docs{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < flood_clients; ++c) {
    threads.emplace_back([&] {
      while (!stop.load()) {
        auto out = dep.Post("/encode", batch, {.request_size = 32});
        if (!out.ok()) {
          ++failures;
        } else if (measuring.load()) {
          flood_docs += static_cast<long>(out->size());
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));  // warm-up: the queue fills
  measuring = true;
  Result result;
  const auto start = Clock::now();
  const auto end = start + std::chrono::seconds(seconds);
  gantry::Parameters urgent(gantry::Value::Dict{{"priority", gantry::Value(1.0)}});
  // One probe every 100 ms, or at once after a probe slower than that: a
  // fixed number of probes would stretch the run when they are slow.
  for (auto next = start; Clock::now() < end; next += std::chrono::milliseconds(100)) {
    std::this_thread::sleep_until(next);
    next = std::max(next, Clock::now());
    const auto sent = Clock::now();
    auto out = dep.Post("/encode", gantry::DocList{gantry::Doc("How urgent is this sentence?")},
                        {.parameters = urgent});
    if (!out.ok()) {
      ++failures;
      continue;
    }
    result.probe_ms.push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - sent).count());
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  measuring = false;
  stop = true;
  for (std::thread& t : threads) {
    t.join();
  }
  std::sort(result.probe_ms.begin(), result.probe_ms.end());
  result.flood_docs_per_s = static_cast<double>(flood_docs.load()) / elapsed;
  result.failures = failures.load();
  result.ok = !result.probe_ms.empty();
  return result;
}

void Print(const char* label, const Result& r) {
  std::printf(
      "%-26s probe p50 %7.1f ms  p99 %7.1f ms  max %7.1f ms  (%zu probes)  flood %6.0f docs/s"
      "  failures %d\n",
      label, Quantile(r.probe_ms, 0.5), Quantile(r.probe_ms, 0.99),
      r.probe_ms.empty() ? 0.0 : r.probe_ms.back(), r.probe_ms.size(), r.flood_docs_per_s,
      r.failures);
}

}  // namespace

int main(int argc, char** argv) {
  gantry::Init(argc, argv);
  const std::string device = argc > 1 ? argv[1] : "cpu";
  const int seconds = argc > 2 ? std::atoi(argv[2]) : 20;
  const int flood_clients = argc > 3 ? std::atoi(argv[3]) : 8;
  const std::string executor = argc > 4 ? argv[4] : "SentenceEncoder";
  if (seconds < 1 || flood_clients < 1) {
    std::fprintf(stderr, "usage: %s [DEVICE] [SECONDS >= 1] [FLOOD_CLIENTS >= 1] [EXECUTOR]\n",
                 argv[0]);
    return 2;
  }
  Result before = Measure(device, executor, /*priority_levels=*/0, seconds, flood_clients);
  Result after = Measure(device, executor, /*priority_levels=*/2, seconds, flood_clients);
  if (!before.ok || !after.ok) {
    std::fprintf(stderr, "error: no probe answered\n");
    return 1;
  }
  std::printf(
      "1 x %s on %s, /encode preferred_batch_size 32 timeout 5 ms, %d flood clients x 32 "
      "docs, a probe of 1 doc every 100 ms for %d s\n",
      executor.c_str(), device.c_str(), flood_clients, seconds);
  Print("without priority levels:", before);
  Print("with priority_levels 2:", after);
  std::printf(
      "probe p99 ratio (without / with): %.2f; flood throughput ratio (with / without): "
      "%.2f\n",
      Quantile(before.probe_ms, 0.99) / Quantile(after.probe_ms, 0.99),
      after.flood_docs_per_s / before.flood_docs_per_s);
  return before.failures + after.failures == 0 ? 0 : 1;
}
