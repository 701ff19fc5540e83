#include "common/metrics_server.h"

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <utility>

#include "common/grpc_options.h"
#include "common/http_server.h"

namespace gantry::internal {

const std::vector<double>& LatencyBucketsSeconds() {
  static const std::vector<double> buckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                              0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                              1,      2.5,     5,      10,    30,     60};
  return buckets;
}

MetricsServer::MetricsServer() = default;

StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& host, int port,
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables) {
  if (port < 0 || port > 65535) {
    return InvalidArgumentError("port_monitoring: expected 0 to 65535, got " +
                                std::to_string(port));
  }
  std::unique_ptr<MetricsServer> out(new MetricsServer());
  out->collectables_ = std::move(collectables);
  HttpServerOptions options;
  options.host = host;
  options.port = port;
  options.name = "metrics";
  // A scrape is a bodiless GET; nothing else is read.
  options.max_body_bytes = 1024;
  options.max_connections = 256;
  options.header_timeout = std::chrono::seconds(5);
  options.idle_timeout = std::chrono::seconds(120);  // Prometheus keeps its connection
  options.write_timeout = std::chrono::seconds(10);
  options.io_threads = 1;
  MetricsServer* self = out.get();
  auto started = HttpServer::Start(
      std::move(options), [self](const HttpRequest& request, const HttpRespond& respond) {
        HttpResponse response;
        if (request.method != "GET" || request.path != "/metrics") {
          response.status = 404;
          response.content_type = "text/plain; charset=utf-8";
          response.body = "metrics are at GET /metrics\n";
          respond(std::move(response));
          return;
        }
        std::vector<prometheus::MetricFamily> families;
        for (const auto& collectable : self->collectables_) {
          auto collected = collectable->Collect();
          families.insert(families.end(), std::make_move_iterator(collected.begin()),
                          std::make_move_iterator(collected.end()));
        }
        response.content_type = "text/plain; version=0.0.4; charset=utf-8";
        response.body = prometheus::TextSerializer().Serialize(families);
        respond(std::move(response));
      });
  if (!started.ok()) {
    return UnavailableError("metrics: cannot listen on " + JoinHostPort(host, port) +
                            " (port_monitoring: port in use or address not available)");
  }
  out->server_ = std::move(started).value();
  out->port_ = out->server_->port();
  return out;
}

MetricsServer::~MetricsServer() {
  if (server_) {
    server_->Shutdown(std::chrono::seconds(5));
  }
}

}  // namespace gantry::internal
