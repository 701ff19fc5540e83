#include "common/tracing.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "core/deployment_rules.h"
#include "opentelemetry/otlp_trace.grpc.pb.h"

namespace gantry::internal {
namespace {

namespace otlp = ::opentelemetry::proto::collector::trace::v1;

constexpr std::string_view kHttpScheme = "http://";
constexpr std::string_view kHttpsScheme = "https://";

bool AllZero(const std::uint8_t* bytes, std::size_t size) {
  for (std::size_t i = 0; i < size; ++i) {
    if (bytes[i] != 0) {
      return false;
    }
  }
  return true;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  return -1;  // W3C: lower-case hex only
}

// Reads 2 * N lower-case hex digits into `out`.
template <std::size_t N>
bool ReadHex(std::string_view text, std::array<std::uint8_t, N>& out) {
  if (text.size() != 2 * N) {
    return false;
  }
  for (std::size_t i = 0; i < N; ++i) {
    const int high = HexDigit(text[2 * i]);
    const int low = HexDigit(text[2 * i + 1]);
    if (high < 0 || low < 0) {
      return false;
    }
    out[i] = static_cast<std::uint8_t>(high * 16 + low);
  }
  return true;
}

template <std::size_t N>
void AppendHex(const std::array<std::uint8_t, N>& bytes, std::string& out) {
  constexpr char kDigits[] = "0123456789abcdef";
  for (std::uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
}

template <std::size_t N>
void FillRandom(std::array<std::uint8_t, N>& out) {
  thread_local std::mt19937_64 engine{std::random_device{}()};
  do {
    for (std::size_t i = 0; i < N; i += 8) {
      const std::uint64_t word = engine();
      std::memcpy(out.data() + i, &word, std::min<std::size_t>(8, N - i));
    }
  } while (AllZero(out.data(), N));  // all-zero ids are invalid
}

std::uint64_t UnixNanos(std::chrono::system_clock::time_point t) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

// "host:port" for gRPC, and whether it wants TLS.
std::pair<std::string, bool> ExporterTarget(const TracingOptions& options) {
  std::string_view host = options.exporter_host;
  bool tls = false;
  if (host.starts_with(kHttpsScheme)) {
    host.remove_prefix(kHttpsScheme.size());
    tls = true;
  } else if (host.starts_with(kHttpScheme)) {
    host.remove_prefix(kHttpScheme.size());
  }
  std::string target(host);
  // An IPv6 literal needs brackets before the port.
  if (target.find(':') != std::string::npos && !target.starts_with('[')) {
    target = "[" + target + "]";
  }
  return {target + ":" + std::to_string(options.exporter_port), tls};
}

thread_local std::optional<TraceContext> t_trace_context;

void SetAttribute(otlp::KeyValue* kv, std::string_view key, std::string_view value) {
  kv->set_key(std::string(key));
  kv->mutable_value()->set_string_value(std::string(value));
}

}  // namespace

Status ValidateTracingOptions(const TracingOptions& options) {
  GANTRY_RETURN_IF_ERROR(
      CheckIntOption(kTracesExporterPortRule, "traces_exporter_port", options.exporter_port));
  if (Status s = CheckTracesExporterHost(options.exporter_host); !s.ok()) {
    return InvalidArgumentError("traces_exporter_host: " + s.message());
  }
  return OkStatus();
}

std::optional<TraceContext> ParseTraceparent(std::string_view value) {
  // version "-" trace-id "-" parent-id "-" trace-flags; a later version may
  // append fields after another "-", which a version-00 reader ignores.
  if (value.size() < 55 || value[2] != '-' || value[35] != '-' || value[52] != '-') {
    return std::nullopt;
  }
  std::array<std::uint8_t, 1> version{};
  std::array<std::uint8_t, 1> flags{};
  TraceContext context;
  if (!ReadHex(value.substr(0, 2), version) || version[0] == 0xff ||
      !ReadHex(value.substr(3, 32), context.trace_id) ||
      !ReadHex(value.substr(36, 16), context.span_id) || !ReadHex(value.substr(53, 2), flags)) {
    return std::nullopt;
  }
  if ((version[0] == 0 && value.size() != 55) || (value.size() > 55 && value[55] != '-')) {
    return std::nullopt;
  }
  if (AllZero(context.trace_id.data(), context.trace_id.size()) ||
      AllZero(context.span_id.data(), context.span_id.size())) {
    return std::nullopt;
  }
  context.sampled = (flags[0] & 1) != 0;
  return context;
}

std::string FormatTraceparent(const TraceContext& context) {
  std::string out = "00-";
  AppendHex(context.trace_id, out);
  out.push_back('-');
  AppendHex(context.span_id, out);
  out += context.sampled ? "-01" : "-00";
  return out;
}

class Tracer::Impl {
 public:
  Impl(std::shared_ptr<grpc::Channel> channel, std::string target, std::string service_name,
       Limits limits)
      : stub_(otlp::TraceService::NewStub(std::move(channel))),
        target_(std::move(target)),
        service_name_(std::move(service_name)),
        limits_(limits),
        thread_([this] { Run(); }) {}

  ~Impl() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  void Record(SpanRecord span) {
    {
      std::lock_guard lock(mutex_);
      if (queue_.size() >= limits_.max_queued_spans) {
        ++dropped_;
        if (!warned_full_) {
          warned_full_ = true;
          spdlog::warn(
              "tracing: {} spans are waiting for the collector at {}; newer ones are "
              "dropped until it catches up",
              queue_.size(), target_);
        }
        return;
      }
      queue_.push_back(std::move(span));
      if (queue_.size() < limits_.max_spans_per_export) {
        return;
      }
    }
    wake_.notify_one();
  }

  std::uint64_t sent() const { return sent_.load(); }
  std::uint64_t dropped() const { return dropped_.load(); }

 private:
  void Run() {
    std::unique_lock lock(mutex_);
    // Once stopping, what is queued gets one bounded try.
    std::chrono::steady_clock::time_point give_up = std::chrono::steady_clock::time_point::max();
    for (;;) {
      if (!stopping_) {
        wake_.wait_for(lock, limits_.flush_interval, [this] {
          return stopping_ || queue_.size() >= limits_.max_spans_per_export;
        });
      }
      if (stopping_ && give_up == std::chrono::steady_clock::time_point::max()) {
        give_up = std::chrono::steady_clock::now() + limits_.stop_timeout;
      }
      if (queue_.empty()) {
        if (stopping_) {
          return;
        }
        continue;
      }
      std::vector<SpanRecord> batch;
      const std::size_t n = std::min(queue_.size(), limits_.max_spans_per_export);
      batch.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      warned_full_ = false;
      lock.unlock();
      const bool sent = Export(batch, give_up);
      lock.lock();
      if (stopping_ && (!sent || std::chrono::steady_clock::now() >= give_up)) {
        dropped_ += queue_.size();
        queue_.clear();
        return;
      }
    }
  }

  // Sends one batch; false (the spans counted as dropped) when it failed.
  bool Export(const std::vector<SpanRecord>& batch, std::chrono::steady_clock::time_point give_up) {
    otlp::ExportTraceServiceRequest request;
    otlp::ResourceSpans* resource_spans = request.add_resource_spans();
    SetAttribute(resource_spans->mutable_resource()->add_attributes(), "service.name",
                 service_name_);
    SetAttribute(resource_spans->mutable_resource()->add_attributes(), "service.version",
                 GANTRY_VERSION);
    otlp::ScopeSpans* scope_spans = resource_spans->add_scope_spans();
    scope_spans->mutable_scope()->set_name("gantry");
    scope_spans->mutable_scope()->set_version(GANTRY_VERSION);
    for (const SpanRecord& record : batch) {
      otlp::Span* span = scope_spans->add_spans();
      span->set_trace_id(record.context.trace_id.data(), record.context.trace_id.size());
      span->set_span_id(record.context.span_id.data(), record.context.span_id.size());
      if (!AllZero(record.parent_span_id.data(), record.parent_span_id.size())) {
        span->set_parent_span_id(record.parent_span_id.data(), record.parent_span_id.size());
      }
      span->set_name(record.name);
      span->set_kind(static_cast<otlp::Span::SpanKind>(static_cast<int>(record.kind)));
      span->set_start_time_unix_nano(UnixNanos(record.start));
      span->set_end_time_unix_nano(UnixNanos(record.end));
      span->set_flags(record.context.sampled ? 1 : 0);
      for (const auto& [key, value] : record.string_attributes) {
        SetAttribute(span->add_attributes(), key, value);
      }
      for (const auto& [key, value] : record.int_attributes) {
        otlp::KeyValue* kv = span->add_attributes();
        kv->set_key(key);
        kv->mutable_value()->set_int_value(value);
      }
      if (record.error) {
        span->mutable_status()->set_code(otlp::Status::STATUS_CODE_ERROR);
        span->mutable_status()->set_message(record.status_message);
      }
    }
    grpc::ClientContext context;
    auto deadline = std::chrono::system_clock::now() + limits_.export_timeout;
    if (give_up != std::chrono::steady_clock::time_point::max()) {
      deadline = std::min(deadline, std::chrono::system_clock::now() +
                                        (give_up - std::chrono::steady_clock::now()));
    }
    context.set_deadline(deadline);
    otlp::ExportTraceServiceResponse response;
    const grpc::Status status = stub_->Export(&context, request, &response);
    if (!status.ok()) {
      dropped_ += batch.size();
      if (!failing_) {
        failing_ = true;
        spdlog::warn(
            "tracing: the collector at {} did not take {} spans ({}: {}); spans are "
            "dropped until it does",
            target_, batch.size(), static_cast<int>(status.error_code()), status.error_message());
      }
      return false;
    }
    if (failing_) {
      failing_ = false;
      spdlog::info("tracing: the collector at {} takes spans again", target_);
    }
    const std::int64_t rejected = response.partial_success().rejected_spans();
    if (rejected > 0) {
      spdlog::warn("tracing: the collector at {} rejected {} of {} spans: {}", target_, rejected,
                   batch.size(), response.partial_success().error_message());
    }
    sent_ += batch.size() - static_cast<std::size_t>(std::max<std::int64_t>(0, rejected));
    dropped_ += static_cast<std::size_t>(std::max<std::int64_t>(0, rejected));
    return true;
  }

  std::unique_ptr<otlp::TraceService::Stub> stub_;
  const std::string target_;
  const std::string service_name_;
  const Limits limits_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<SpanRecord> queue_;  // guarded by mutex_
  bool stopping_ = false;         // guarded by mutex_
  bool warned_full_ = false;      // guarded by mutex_
  bool failing_ = false;          // the export thread's own
  std::atomic<std::uint64_t> sent_{0};
  std::atomic<std::uint64_t> dropped_{0};
  std::thread thread_;  // last: starts once the rest is built
};

StatusOr<std::unique_ptr<Tracer>> Tracer::Create(const TracingOptions& options,
                                                 std::string service_name, Limits limits) {
  if (Status s = ValidateTracingOptions(options); !s.ok()) {
    return s;
  }
  auto [target, tls] = ExporterTarget(options);
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      tls ? grpc::SslCredentials(grpc::SslCredentialsOptions())
          : grpc::InsecureChannelCredentials();
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(target, credentials);
  spdlog::info("tracing: sending spans of {} to the OTLP collector at {}{}", service_name, target,
               tls ? " (TLS)" : "");
  return std::unique_ptr<Tracer>(new Tracer(
      std::make_unique<Impl>(std::move(channel), target, std::move(service_name), limits)));
}

Tracer::Tracer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tracer::~Tracer() = default;

TraceContext Tracer::NewSpanContext(const std::optional<TraceContext>& parent) {
  TraceContext context;
  if (parent) {
    context.trace_id = parent->trace_id;
    context.sampled = parent->sampled;
  } else {
    FillRandom(context.trace_id);
  }
  FillRandom(context.span_id);
  return context;
}

void Tracer::Record(SpanRecord span) {
  if (span.context.sampled) {
    impl_->Record(std::move(span));
  }
}

std::uint64_t Tracer::sent() const { return impl_->sent(); }
std::uint64_t Tracer::dropped() const { return impl_->dropped(); }

TraceContextScope::TraceContextScope(std::optional<TraceContext> context)
    : previous_(std::exchange(t_trace_context, context)) {}

TraceContextScope::~TraceContextScope() { t_trace_context = previous_; }

std::optional<TraceContext> CurrentTraceContext() { return t_trace_context; }

}  // namespace gantry::internal
