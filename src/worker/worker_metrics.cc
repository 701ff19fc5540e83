#include "worker/worker_metrics.h"

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "common/metrics_server.h"
#include "core/gpu_inventory.h"

namespace gantry::internal {

namespace {

constexpr std::string_view kNoEndpoint = "(none)";

// GPU memory, read from NVML (or GANTRY_FAKE_GPUS) when scraped, for the
// GPU the worker's device names (cuda:N is the N-th visible GPU). Triton's
// nv_gpu_memory_{used,total}_bytes; used is the whole GPU's, as NVML sees it.
class GpuMemoryCollectable final : public prometheus::Collectable {
 public:
  GpuMemoryCollectable(prometheus::Labels labels, std::size_t index)
      : labels_(std::move(labels)), index_(index) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    GpuInventory inventory = DiscoverGpus();
    if (index_ >= inventory.gpus.size()) {
      return {};
    }
    const GpuInfo& gpu = inventory.gpus[index_];
    auto gauge = [&](const char* name, const char* help, std::uint64_t value) {
      prometheus::ClientMetric metric;
      for (const auto& [key, label_value] : labels_) {
        metric.label.push_back({key, label_value});
      }
      metric.label.push_back({"gpu_uuid", gpu.uuid});
      metric.gauge.value = static_cast<double>(value);
      prometheus::MetricFamily family;
      family.name = name;
      family.help = help;
      family.type = prometheus::MetricType::Gauge;
      family.metric.push_back(std::move(metric));
      return family;
    };
    return {gauge("gantry_gpu_memory_used_bytes", "Memory used on the worker's GPU (all processes)",
                  gpu.memory_used_bytes),
            gauge("gantry_gpu_memory_total_bytes", "Memory of the worker's GPU",
                  gpu.memory_total_bytes)};
  }

 private:
  prometheus::Labels labels_;
  std::size_t index_;
};

}  // namespace

WorkerMetrics::WorkerMetrics(const std::string& deployment, const std::string& replica,
                             const std::vector<std::string>& endpoints, const Device& device)
    : registry_(std::make_shared<prometheus::Registry>()),
      failure_(prometheus::BuildCounter()
                   .Name("gantry_request_failure_total")
                   .Help("Requests the worker failed, by reason")
                   .Labels({{"deployment", deployment}, {"replica", replica}})
                   .Register(*registry_)) {
  const prometheus::Labels common = {{"deployment", deployment}, {"replica", replica}};
  auto& success = prometheus::BuildCounter()
                      .Name("gantry_request_success_total")
                      .Help("Requests the worker's handler answered without error")
                      .Labels(common)
                      .Register(*registry_);
  auto& docs = prometheus::BuildCounter()
                   .Name("gantry_inference_count_total")
                   .Help("Documents of the requests that succeeded")
                   .Labels(common)
                   .Register(*registry_);
  auto& executions = prometheus::BuildCounter()
                         .Name("gantry_inference_exec_count_total")
                         .Help("Handler executions (a dynamic batch is one)")
                         .Labels(common)
                         .Register(*registry_);
  auto& queue = prometheus::BuildHistogram()
                    .Name("gantry_queue_duration_seconds")
                    .Help("Time a request waited for the handler to start on it")
                    .Labels(common)
                    .Register(*registry_);
  auto& compute = prometheus::BuildHistogram()
                      .Name("gantry_compute_duration_seconds")
                      .Help("Time of one handler execution")
                      .Labels(common)
                      .Register(*registry_);
  auto& request = prometheus::BuildHistogram()
                      .Name("gantry_request_duration_seconds")
                      .Help(
                          "Time from a request's arrival in the worker's handler code to its "
                          "reply (decoding and encoding included)")
                      .Labels(common)
                      .Register(*registry_);
  auto& pending = prometheus::BuildGauge()
                      .Name("gantry_pending_requests")
                      .Help("Requests in the worker not yet answered")
                      .Labels(common)
                      .Register(*registry_);
  auto& delayed = prometheus::BuildCounter()
                      .Name("gantry_queue_delayed_total")
                      .Help(
                          "Requests that outlived their queue timeout and were served after the "
                          "others (dynamic batching's timeout_action: DELAY)")
                      .Labels(common)
                      .Register(*registry_);
  std::vector<std::string> labels = endpoints;
  labels.emplace_back(kNoEndpoint);
  for (const std::string& name : labels) {
    const prometheus::Labels label = {{"endpoint", name}};
    Endpoint entry;
    entry.label = name;
    entry.success = &success.Add(label);
    entry.docs = &docs.Add(label);
    entry.executions = &executions.Add(label);
    entry.queue = &queue.Add(label, LatencyBucketsSeconds());
    entry.compute = &compute.Add(label, LatencyBucketsSeconds());
    entry.request = &request.Add(label, LatencyBucketsSeconds());
    entry.pending = &pending.Add(label);
    entry.delayed = &delayed.Add(label);
    endpoints_.emplace(name, std::move(entry));
  }
  if (device.is_cuda()) {
    gpu_memory_ = std::make_shared<GpuMemoryCollectable>(
        common, device.has_index() ? static_cast<std::size_t>(device.index()) : 0);
  }
}

WorkerMetrics::Endpoint& WorkerMetrics::For(std::string_view endpoint) {
  auto it = endpoints_.find(endpoint);
  return it != endpoints_.end() ? it->second : endpoints_.find(kNoEndpoint)->second;
}

void WorkerMetrics::Failed(const Endpoint& endpoint, std::string_view reason) {
  // A handful of fixed reasons per endpoint: the family stays small.
  failure_.Add({{"endpoint", endpoint.label}, {"reason", std::string(reason)}}).Increment();
}

std::vector<std::shared_ptr<prometheus::Collectable>> WorkerMetrics::collectables() const {
  std::vector<std::shared_ptr<prometheus::Collectable>> out = {registry_};
  if (gpu_memory_) {
    out.push_back(gpu_memory_);
  }
  return out;
}

}  // namespace gantry::internal
