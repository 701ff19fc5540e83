// Request tracing: W3C trace context (`traceparent`) read from clients and
// passed from the gateway to the workers, and spans sent to an OpenTelemetry
// collector over OTLP/gRPC (the TraceService/Export call).
//
// There is no OpenTelemetry C++ SDK in Debian, so this is a small exporter
// of our own, not an SDK: spans are recorded whole (name, kind, parent,
// start, end, a few attributes, status), sampling follows the parent's
// sampled flag (every trace without a parent is sampled, as Jina traces
// every request when tracing is on), spans are batched by a background
// thread and dropped, counted and logged, when the collector cannot keep
// up. docs/tracing.md lists the spans and their attributes.
#ifndef GANTRY_COMMON_TRACING_H_
#define GANTRY_COMMON_TRACING_H_

#include <gantry/status.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gantry::internal {

// Where and whether a process sends its spans (YAML `tracing`,
// `traces_exporter_host`, `traces_exporter_port`, as Jina names them).
struct TracingOptions {
  bool enabled = false;
  // A host name or address, optionally with "http://" (plain gRPC) or
  // "https://" (gRPC over TLS with the system's roots) in front.
  std::string exporter_host = "localhost";
  int exporter_port = 4317;  // OTLP/gRPC's port
};

// Checks the host (core/deployment_rules.h CheckTracesExporterHost) and
// the port (1 to 65535), naming the key at fault.
Status ValidateTracingOptions(const TracingOptions& options);

// One span's place in a trace: W3C trace context level 1.
struct TraceContext {
  std::array<std::uint8_t, 16> trace_id{};
  std::array<std::uint8_t, 8> span_id{};
  bool sampled = true;
};

// The context a `traceparent` header or metadata value gives, or nullopt
// when it is missing or malformed (then the request starts a trace of its
// own, as W3C says a receiver does).
std::optional<TraceContext> ParseTraceparent(std::string_view value);

// "00-<trace id>-<span id>-<flags>".
std::string FormatTraceparent(const TraceContext& context);

// The metadata key and HTTP header (lower case, as gRPC wants it).
inline constexpr char kTraceparentKey[] = "traceparent";

enum class SpanKind { kInternal = 1, kServer = 2, kClient = 3 };

// One finished span, as sent.
struct SpanRecord {
  TraceContext context;
  // Zero when the span is a trace's root.
  std::array<std::uint8_t, 8> parent_span_id{};
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  std::chrono::system_clock::time_point start;
  std::chrono::system_clock::time_point end;
  std::vector<std::pair<std::string, std::string>> string_attributes;
  std::vector<std::pair<std::string, std::int64_t>> int_attributes;
  bool error = false;
  std::string status_message;  // with error
};

// Records the spans of one process and sends them to the collector.
// Thread safety: safe for concurrent use; the destructor sends what is
// queued (waiting at most Limits::stop_timeout) and must not race other
// calls.
class Tracer {
 public:
  struct Limits {
    std::size_t max_queued_spans = 4096;  // more are dropped (and counted)
    std::size_t max_spans_per_export = 512;
    std::chrono::milliseconds flush_interval{500};
    std::chrono::milliseconds export_timeout{5000};
    // How long the destructor may spend sending what is still queued.
    std::chrono::milliseconds stop_timeout{2000};
  };

  // `service_name` is the OTLP resource's service.name ("gateway",
  // "encoder/rep-0"). Does not connect: a collector that is down only
  // costs dropped spans, logged once per outage.
  static StatusOr<std::unique_ptr<Tracer>> Create(const TracingOptions& options,
                                                  std::string service_name, Limits limits);
  static StatusOr<std::unique_ptr<Tracer>> Create(const TracingOptions& options,
                                                  std::string service_name) {
    return Create(options, std::move(service_name), Limits{});
  }
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // A new span's context: a child of `parent` (same trace, new span id,
  // the parent's sampled flag) or, without one, the root of a new sampled
  // trace.
  static TraceContext NewSpanContext(const std::optional<TraceContext>& parent);

  // Queues a finished span unless its trace is not sampled.
  void Record(SpanRecord span);

  // Spans sent, and dropped (queue full or export failed), so far.
  std::uint64_t sent() const;
  std::uint64_t dropped() const;

 private:
  class Impl;
  explicit Tracer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// While alive, this thread's incoming trace context is `context` (what the
// client sent, or the gateway's span once it has one): the gateway's
// forwarding code reads it with CurrentTraceContext() without every call
// in between carrying it. Scopes nest.
// Thread safety: per thread; construct and destroy on the same thread.
class TraceContextScope {
 public:
  explicit TraceContextScope(std::optional<TraceContext> context);
  ~TraceContextScope();
  TraceContextScope(const TraceContextScope&) = delete;
  TraceContextScope& operator=(const TraceContextScope&) = delete;

 private:
  std::optional<TraceContext> previous_;
};

// The context of the innermost TraceContextScope on this thread, if any.
std::optional<TraceContext> CurrentTraceContext();

}  // namespace gantry::internal

#endif  // GANTRY_COMMON_TRACING_H_
