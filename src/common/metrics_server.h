// Prometheus metrics in the text exposition format at GET /metrics on an
// HTTP port of their own, as Jina's `monitoring: true` / `port_monitoring`
// and Triton's metrics port serve them. prometheus-cpp keeps the metrics
// and writes the format; common/http_server.h (the HTTP gateway's server,
// on one I/O thread here) serves it. Not prometheus-cpp's own exposer: its civetweb asks for a 100
// KiB thread stack, which glibc refuses with EINVAL once libtorch has enabled AMX in the process
// (the minimum stack grows with the signal frame), so it could not start in a worker.
//
// Thread safety: safe for concurrent use (prometheus-cpp's metrics are
// atomic; the server is immutable once started).
#ifndef GANTRY_COMMON_METRICS_SERVER_H_
#define GANTRY_COMMON_METRICS_SERVER_H_

#include <gantry/status.h>

#include <memory>
#include <string>
#include <vector>

namespace prometheus {
class Collectable;
}  // namespace prometheus

namespace gantry::internal {

class HttpServer;

// Histogram buckets for request, queue and handler times, in seconds:
// 100 µs to 60 s, roughly three per decade.
const std::vector<double>& LatencyBucketsSeconds();

class MetricsServer {
 public:
  // Serves `collectables` (registries, and metrics read at each scrape) on
  // host:port (port 0: any free one), on one thread; keeps them alive. A
  // port that cannot be bound is an error naming it.
  static StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& host, int port,
      std::vector<std::shared_ptr<prometheus::Collectable>> collectables);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsServer();
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

}  // namespace gantry::internal

#endif  // GANTRY_COMMON_METRICS_SERVER_H_
