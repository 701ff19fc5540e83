#include "common/metrics_server.h"

#include <httplib.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <utility>

#include "common/grpc_options.h"
#include "common/http_listen.h"

namespace gantry::internal {

namespace {
// Prometheus scrapes one target at a time; the second thread answers a
// curl beside it. Anything more waits in cpp-httplib's queue.
constexpr std::size_t kThreads = 2;
}  // namespace

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
  out->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *out->server_;
  server.new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  UseExclusivePort(server);
  // A scrape is a bodiless GET; nothing else is read.
  server.set_payload_max_length(1024);
  server.set_read_timeout(5, 0);
  server.set_write_timeout(5, 0);
  server.set_keep_alive_max_count(100);
  MetricsServer* self = out.get();
  server.Get("/metrics", [self](const httplib::Request&, httplib::Response& res) {
    std::vector<prometheus::MetricFamily> families;
    for (const auto& collectable : self->collectables_) {
      auto collected = collectable->Collect();
      families.insert(families.end(), std::make_move_iterator(collected.begin()),
                      std::make_move_iterator(collected.end()));
    }
    res.set_content(prometheus::TextSerializer().Serialize(families),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  const std::string address = JoinHostPort(host, port);
  out->port_ =
      port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (out->port_ <= 0) {
    return UnavailableError("metrics: cannot listen on " + address +
                            " (port_monitoring: port in use or address not available)");
  }
  out->thread_ = std::thread([self] {
    self->server_->listen_after_bind();
    self->listen_returned_.store(true);
  });
  // As the HTTP gateway: cpp-httplib's stop() does nothing until the listen
  // loop runs, so Start returns once it runs.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!server.is_running() && !self->listen_returned_.load()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return UnavailableError("metrics: " + address + " did not start listening within 10 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return out;
}

MetricsServer::~MetricsServer() {
  if (thread_.joinable()) {
    while (!listen_returned_.load()) {
      server_->stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    thread_.join();
  }
}

}  // namespace gantry::internal
