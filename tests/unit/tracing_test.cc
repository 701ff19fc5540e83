#include "common/tracing.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "opentelemetry/otlp_trace.grpc.pb.h"

namespace gantry::internal {
namespace {

namespace otlp = ::opentelemetry::proto::collector::trace::v1;
using std::chrono::milliseconds;

constexpr char kW3cExample[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

TEST(TraceparentTest, ParsesAndFormatsTheW3cExample) {
  std::optional<TraceContext> context = ParseTraceparent(kW3cExample);
  ASSERT_TRUE(context.has_value());
  EXPECT_EQ(context->trace_id[0], 0x0a);
  EXPECT_EQ(context->trace_id[15], 0x9c);
  EXPECT_EQ(context->span_id[0], 0xb7);
  EXPECT_TRUE(context->sampled);
  EXPECT_EQ(FormatTraceparent(*context), kW3cExample);

  std::optional<TraceContext> unsampled =
      ParseTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00");
  ASSERT_TRUE(unsampled.has_value());
  EXPECT_FALSE(unsampled->sampled);
  // A later version may append fields; its first four are read.
  EXPECT_TRUE(ParseTraceparent("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-later")
                  .has_value());
}

TEST(TraceparentTest, RefusesWhatW3cCallsInvalid) {
  for (const char* bad : {
           "",
           "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",       // no flags
           "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",    // upper case
           "00-00000000000000000000000000000000-b7ad6b7169203331-01",    // zero trace id
           "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",    // zero span id
           "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",    // version ff
           "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",  // 00 has 4 fields
           "00-0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331-01",
           "00-0af7651916cd43dd8448eb211c8031zz-b7ad6b7169203331-01",
       }) {
    EXPECT_FALSE(ParseTraceparent(bad).has_value()) << bad;
  }
}

TEST(TraceparentTest, AChildKeepsItsParentsTraceAndSampling) {
  TraceContext root = Tracer::NewSpanContext(std::nullopt);
  EXPECT_TRUE(root.sampled);
  TraceContext child = Tracer::NewSpanContext(root);
  EXPECT_EQ(child.trace_id, root.trace_id);
  EXPECT_NE(child.span_id, root.span_id);
  root.sampled = false;
  EXPECT_FALSE(Tracer::NewSpanContext(root).sampled);
  EXPECT_NE(Tracer::NewSpanContext(std::nullopt).trace_id,
            Tracer::NewSpanContext(std::nullopt).trace_id);
}

TEST(TraceparentTest, AScopeSetsThisThreadsContextAndRestoresTheOuterOne) {
  EXPECT_FALSE(CurrentTraceContext().has_value());
  {
    const TraceContextScope outer(ParseTraceparent(kW3cExample));
    {
      const TraceContextScope inner(Tracer::NewSpanContext(std::nullopt));
      EXPECT_NE(FormatTraceparent(*CurrentTraceContext()), kW3cExample);
    }
    EXPECT_EQ(FormatTraceparent(*CurrentTraceContext()), kW3cExample);
    std::thread([] { EXPECT_FALSE(CurrentTraceContext().has_value()); }).join();
  }
  EXPECT_FALSE(CurrentTraceContext().has_value());
}

// An OTLP receiver in this process.
class Collector final : public otlp::TraceService::Service {
 public:
  grpc::Status Export(grpc::ServerContext* /*context*/,
                      const otlp::ExportTraceServiceRequest* request,
                      otlp::ExportTraceServiceResponse* /*response*/) override {
    std::lock_guard lock(mutex_);
    requests_.push_back(*request);
    return grpc::Status::OK;
  }
  std::vector<std::pair<std::string, otlp::Span>> Spans() {
    std::lock_guard lock(mutex_);
    std::vector<std::pair<std::string, otlp::Span>> out;
    for (const auto& request : requests_) {
      for (const auto& resource_spans : request.resource_spans()) {
        std::string service;
        for (const auto& kv : resource_spans.resource().attributes()) {
          if (kv.key() == "service.name") {
            service = kv.value().string_value();
          }
        }
        for (const auto& scope_spans : resource_spans.scope_spans()) {
          for (const auto& span : scope_spans.spans()) {
            out.emplace_back(service, span);
          }
        }
      }
    }
    return out;
  }
  // Waits (at most 10 s) until `n` spans arrived.
  std::vector<std::pair<std::string, otlp::Span>> WaitFor(std::size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (Spans().size() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    return Spans();
  }

 private:
  std::mutex mutex_;
  std::vector<otlp::ExportTraceServiceRequest> requests_;
};

class TracerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&collector_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<Tracer> Make(int port, Tracer::Limits limits) {
    auto tracer = Tracer::Create(
        {.enabled = true, .exporter_host = "http://127.0.0.1", .exporter_port = port}, "svc/rep-0",
        limits);
    EXPECT_TRUE(tracer.ok()) << tracer.status().ToString();
    return tracer.ok() ? std::move(tracer).value() : nullptr;
  }

  static SpanRecord Span(const std::string& name, std::optional<TraceContext> parent) {
    SpanRecord span;
    span.context = Tracer::NewSpanContext(parent);
    if (parent) {
      span.parent_span_id = parent->span_id;
    }
    span.name = name;
    span.kind = SpanKind::kServer;
    span.start = std::chrono::system_clock::now();
    span.end = span.start + milliseconds(3);
    return span;
  }

  Collector collector_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(TracerTest, SendsSpansAsOtlpWithTheirParentsAndStatus) {
  std::unique_ptr<Tracer> tracer = Make(port_, {.flush_interval = milliseconds(20)});
  ASSERT_NE(tracer, nullptr);
  const std::optional<TraceContext> client = ParseTraceparent(kW3cExample);
  SpanRecord parent = Span("gateway /encode", client);
  SpanRecord child = Span("handler Encode", parent.context);
  child.kind = SpanKind::kInternal;
  child.error = true;
  child.status_message = "it threw";
  child.string_attributes = {{"gantry.endpoint", "/encode"}};
  child.int_attributes = {{"gantry.docs", 7}};
  tracer->Record(parent);
  tracer->Record(child);
  auto spans = collector_.WaitFor(2);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].first, "svc/rep-0");
  const otlp::Span& sent_parent = spans[0].second;
  const otlp::Span& sent_child = spans[1].second;
  EXPECT_EQ(sent_parent.name(), "gateway /encode");
  EXPECT_EQ(sent_parent.kind(), otlp::Span::SPAN_KIND_SERVER);
  EXPECT_EQ(sent_parent.trace_id(),
            std::string(reinterpret_cast<const char*>(client->trace_id.data()), 16));
  EXPECT_EQ(sent_parent.parent_span_id(),
            std::string(reinterpret_cast<const char*>(client->span_id.data()), 8));
  EXPECT_EQ(sent_child.parent_span_id(), sent_parent.span_id());
  EXPECT_EQ(sent_child.kind(), otlp::Span::SPAN_KIND_INTERNAL);
  EXPECT_EQ(sent_child.status().code(), otlp::Status::STATUS_CODE_ERROR);
  EXPECT_EQ(sent_child.status().message(), "it threw");
  EXPECT_EQ(sent_child.end_time_unix_nano() - sent_child.start_time_unix_nano(), 3000000u);
  ASSERT_EQ(sent_child.attributes_size(), 2);
  EXPECT_EQ(sent_child.attributes(0).value().string_value(), "/encode");
  EXPECT_EQ(sent_child.attributes(1).value().int_value(), 7);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (tracer->sent() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(tracer->sent(), 2u);
  EXPECT_EQ(tracer->dropped(), 0u);
}

TEST_F(TracerTest, AnUnsampledTraceIsNotSentAndTheDestructorSendsWhatIsQueued) {
  // A flush interval longer than the test: only the destructor sends.
  std::unique_ptr<Tracer> tracer = Make(port_, {.flush_interval = std::chrono::seconds(60)});
  ASSERT_NE(tracer, nullptr);
  SpanRecord unsampled = Span(
      "not sampled", ParseTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"));
  tracer->Record(unsampled);
  tracer->Record(Span("sampled", std::nullopt));
  tracer.reset();
  auto spans = collector_.Spans();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].second.name(), "sampled");
}

TEST_F(TracerTest, ACollectorThatIsDownCostsSpansAndABoundedStop) {
  // A port nobody listens on: this test's server, shut down.
  const int port = port_;
  server_->Shutdown();
  std::unique_ptr<Tracer> tracer = Make(port, {.max_queued_spans = 3,
                                               .flush_interval = milliseconds(200),
                                               .export_timeout = milliseconds(300),
                                               .stop_timeout = milliseconds(300)});
  ASSERT_NE(tracer, nullptr);
  for (int i = 0; i < 10; ++i) {
    tracer->Record(Span("lost", std::nullopt));
  }
  // Beyond the queue's bound at once; the rest when the export fails.
  EXPECT_GE(tracer->dropped(), 7u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (tracer->dropped() < 10 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(tracer->dropped(), 10u);
  EXPECT_EQ(tracer->sent(), 0u);
  tracer->Record(Span("queued at stop", std::nullopt));
  const auto stop_started = std::chrono::steady_clock::now();
  tracer.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - stop_started, std::chrono::seconds(3));
}

TEST(TracingOptionsTest, RefusesABadHostOrPortByKey) {
  EXPECT_TRUE(ValidateTracingOptions({.enabled = true}).ok());
  EXPECT_TRUE(
      ValidateTracingOptions({.enabled = true, .exporter_host = "https://otel.example"}).ok());
  EXPECT_TRUE(ValidateTracingOptions({.enabled = true, .exporter_host = "::1"}).ok());
  for (const char* host : {"", "collector:4317", "http://", "a/b", "user@host", "a b"}) {
    Status s = ValidateTracingOptions({.enabled = true, .exporter_host = host});
    EXPECT_FALSE(s.ok()) << host;
    EXPECT_NE(s.message().find("traces_exporter_host"), std::string::npos) << s.message();
  }
  Status s = ValidateTracingOptions({.enabled = true, .exporter_port = 70000});
  EXPECT_NE(s.message().find("traces_exporter_port"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace gantry::internal
