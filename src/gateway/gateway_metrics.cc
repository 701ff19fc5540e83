#include "gateway/gateway_metrics.h"

#include <gantry/status.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "common/metrics_server.h"
#include "jina/jina.pb.h"

namespace gantry::internal {

namespace {

using WireFormat = google::protobuf::internal::WireFormatLite;

// DataRequestProto.header and HeaderProto.exec_endpoint (proto/jina/jina.proto).
constexpr int kHeaderField = 1;
// A header is a few short strings; one larger than this is not read.
constexpr std::uint32_t kMaxHeaderBytes = 64 * 1024;

constexpr std::string_view kOtherEndpoint = "(other)";

bool IsLabelSafe(std::string_view endpoint) {
  return endpoint.size() <= kMaxEndpointLabelBytes &&
         std::all_of(endpoint.begin(), endpoint.end(),
                     [](char c) { return c >= 0x20 && c < 0x7f; });
}

}  // namespace

RequestHeaderFields HeaderFieldsOf(const grpc::ByteBuffer& request) {
  grpc::ByteBuffer copy = request;  // shares the slices
  grpc::ProtoBufferReader reader(&copy);
  google::protobuf::io::CodedInputStream input(&reader);
  // The header is the first field Jina writes, but any order is legal.
  while (std::uint32_t tag = input.ReadTag()) {
    if (WireFormat::GetTagFieldNumber(tag) == kHeaderField &&
        WireFormat::GetTagWireType(tag) == WireFormat::WIRETYPE_LENGTH_DELIMITED) {
      std::uint32_t length = 0;
      if (!input.ReadVarint32(&length) || length > kMaxHeaderBytes) {
        return {};
      }
      std::string bytes;
      if (!input.ReadString(&bytes, static_cast<int>(length))) {
        return {};
      }
      jina::HeaderProto header;
      if (!header.ParseFromString(bytes)) {
        return {};
      }
      return {.exec_endpoint = header.exec_endpoint(), .request_id = header.request_id()};
    }
    if (!WireFormat::SkipField(&input, tag)) {
      return {};
    }
  }
  return {};
}

std::string ExecEndpointOf(const grpc::ByteBuffer& request) {
  return HeaderFieldsOf(request).exec_endpoint;
}

struct GatewayMetrics::Endpoint {
  prometheus::Counter* success = nullptr;
  prometheus::Histogram* duration = nullptr;
  prometheus::Gauge* pending = nullptr;
  std::string label;
};

GatewayMetrics::GatewayMetrics(const std::string& deployment,
                               const std::vector<std::string>& replica_names)
    : registry_(std::make_shared<prometheus::Registry>()),
      success_(prometheus::BuildCounter()
                   .Name("gantry_gateway_request_success_total")
                   .Help("Requests the gateway answered with OK and no executor error")
                   .Labels({{"deployment", deployment}})
                   .Register(*registry_)),
      failure_(prometheus::BuildCounter()
                   .Name("gantry_gateway_request_failure_total")
                   .Help("Requests that failed, by gRPC code (EXECUTOR_ERROR: the executor "
                         "answered with an error reply)")
                   .Labels({{"deployment", deployment}})
                   .Register(*registry_)),
      duration_(prometheus::BuildHistogram()
                    .Name("gantry_gateway_request_duration_seconds")
                    .Help("Time from a request's arrival at the gateway to its answer, retries "
                          "included")
                    .Labels({{"deployment", deployment}})
                    .Register(*registry_)),
      pending_(prometheus::BuildGauge()
                   .Name("gantry_gateway_pending_requests")
                   .Help("Requests forwarded to a replica and not yet answered")
                   .Labels({{"deployment", deployment}})
                   .Register(*registry_)) {
  auto& restarts = prometheus::BuildCounter()
                       .Name("gantry_replica_restarts_total")
                       .Help("Times a replica's process was started again after it died")
                       .Labels({{"deployment", deployment}})
                       .Register(*registry_);
  auto& given_up = prometheus::BuildGauge()
                       .Name("gantry_replica_given_up")
                       .Help(
                           "1 once a replica failed max_init_failures starts in a row and is "
                           "not started again")
                       .Labels({{"deployment", deployment}})
                       .Register(*registry_);
  auto& unresponsive =
      prometheus::BuildCounter()
          .Name("gantry_replica_unresponsive_total")
          .Help(
              "Times a replica answered none of liveness_failure_threshold health checks in a "
              "row and was taken out of rotation (and, in a Deployment, killed and restarted)")
          .Labels({{"deployment", deployment}})
          .Register(*registry_);
  for (const std::string& name : replica_names) {
    restarts_.push_back(&restarts.Add({{"replica", name}}));
    unresponsive_.push_back(&unresponsive.Add({{"replica", name}}));
    given_up_.push_back(&given_up.Add({{"replica", name}}));
  }
}

GatewayMetrics::~GatewayMetrics() = default;

GatewayMetrics::Endpoint& GatewayMetrics::EndpointFor(std::string_view endpoint) {
  std::lock_guard lock(mutex_);
  if (auto it = endpoints_.find(endpoint); it != endpoints_.end()) {
    return *it->second;
  }
  std::string_view label = endpoint;
  if (!IsLabelSafe(endpoint) || endpoints_.size() >= kMaxEndpointLabels) {
    label = kOtherEndpoint;
    if (auto it = endpoints_.find(label); it != endpoints_.end()) {
      return *it->second;
    }
  }
  auto entry = std::make_unique<Endpoint>();
  entry->label = std::string(label);
  const prometheus::Labels labels = {{"endpoint", entry->label}};
  entry->success = &success_.Add(labels);
  entry->duration = &duration_.Add(labels, LatencyBucketsSeconds());
  entry->pending = &pending_.Add(labels);
  Endpoint& out = *entry;
  endpoints_.emplace(entry->label, std::move(entry));
  return out;
}

GatewayMetrics::Request GatewayMetrics::Begin(std::string_view endpoint) {
  Request request;
  request.endpoint_ = &EndpointFor(endpoint);
  request.start_ = std::chrono::steady_clock::now();
  request.endpoint_->pending->Increment();
  return request;
}

void GatewayMetrics::End(const Request& request, int code, bool is_error) {
  Endpoint& endpoint = *request.endpoint_;
  endpoint.pending->Decrement();
  endpoint.duration->Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - request.start_).count());
  if (code == 0 && !is_error) {
    endpoint.success->Increment();
    return;
  }
  // Codes are 17 at most (one more for executor errors): the family stays
  // small; Family::Add returns the existing counter for known labels.
  const std::string reason = code == 0 ? std::string("EXECUTOR_ERROR")
                                       : std::string(StatusCodeName(static_cast<StatusCode>(code)));
  failure_.Add({{"endpoint", endpoint.label}, {"code", reason}}).Increment();
}

void GatewayMetrics::ReplicaGivenUp(std::size_t index) {
  if (index < given_up_.size()) {
    given_up_[index]->Set(1);
  }
}

void GatewayMetrics::ReplicaUnresponsive(std::size_t index) {
  if (index < unresponsive_.size()) {
    unresponsive_[index]->Increment();
  }
}

void GatewayMetrics::ReplicaRestarted(std::size_t index) {
  if (index < restarts_.size()) {
    restarts_[index]->Increment();
  }
}

}  // namespace gantry::internal
