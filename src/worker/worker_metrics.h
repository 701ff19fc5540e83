// A worker's Prometheus metrics (common/metrics_server.h serves them), per
// endpoint its handlers are bound to: requests that succeeded and failed,
// documents processed, handler executions (documents / executions is the
// average batch), the time a request waited for the handler (behind other
// requests or in its batch queue), the handler's time per execution, the
// whole request's time in the worker, and requests in flight; for a CUDA
// worker, its GPU's memory used and total, read at each scrape.
// docs/metrics.md lists every name and its Triton and Jina counterpart.
//
// Labels come from the executor's own endpoints, never from the request: an
// endpoint the executor lacks counts under the handler it falls back to
// ("/default") or under "(none)".
//
// Thread safety: safe for concurrent use; the endpoint table is fixed at
// construction.
#ifndef GANTRY_WORKER_WORKER_METRICS_H_
#define GANTRY_WORKER_WORKER_METRICS_H_

#include <gantry/device.h>
#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gantry::internal {

class WorkerMetrics {
 public:
  // The counters of one endpoint.
  struct Endpoint {
    prometheus::Counter* success = nullptr;
    prometheus::Counter* docs = nullptr;
    prometheus::Counter* executions = nullptr;
    prometheus::Histogram* queue = nullptr;
    prometheus::Histogram* compute = nullptr;
    prometheus::Histogram* request = nullptr;
    prometheus::Gauge* pending = nullptr;
    prometheus::Counter* delayed = nullptr;
    std::string label;
  };

  // `endpoints`: every endpoint the executor serves; `device` adds the GPU
  // memory gauges when it is a CUDA device.
  WorkerMetrics(const std::string& deployment, const std::string& replica,
                const std::vector<std::string>& endpoints, const Device& device);

  // The entry of a bound endpoint, or of "(none)".
  Endpoint& For(std::string_view endpoint);
  // A failed request; `reason` is one of a few fixed words
  // ("invalid_argument", "handler", "cancelled", "endpoint_not_found",
  // "reply_too_large", "queue_full", "queue_timeout").
  void Failed(const Endpoint& endpoint, std::string_view reason);

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  // What the metrics server serves: the registry, and the GPU gauges.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<prometheus::Collectable> gpu_memory_;  // null off CUDA
  prometheus::Family<prometheus::Counter>& failure_;
  std::map<std::string, Endpoint, std::less<>> endpoints_;  // fixed after construction
};

}  // namespace gantry::internal

#endif  // GANTRY_WORKER_WORKER_METRICS_H_
