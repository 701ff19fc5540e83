// The metrics' pieces without processes: reading the endpoint out of a
// request's bytes, the gateway's bound on endpoint labels, and the worker's
// labels that come from the executor, never the request.
#include <gmock/gmock.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <cstdlib>
#include <string>

#include "gateway/gateway_metrics.h"
#include "jina/jina.pb.h"
#include "worker/worker_metrics.h"

namespace gantry::internal {
namespace {

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string Exposition(const prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

TEST(ExecEndpointOfTest, ReadsTheHeaderWhereverItIsAndSkipsTheDocuments) {
  jina::DataRequestProto request;
  for (int i = 0; i < 100; ++i) {
    (*request.mutable_data()->mutable_docs()->add_docs()->mutable_data())["id"].set_text(
        "doc-" + std::to_string(i));
  }
  request.mutable_header()->set_exec_endpoint("/encode");
  EXPECT_EQ(ExecEndpointOf(Buffer(request.SerializeAsString())), "/encode");

  // Fields in another order than Jina writes them: documents first.
  jina::DataRequestProto docs_only;
  *docs_only.mutable_data() = request.data();
  jina::DataRequestProto header_only;
  header_only.mutable_header()->set_exec_endpoint("/late");
  EXPECT_EQ(ExecEndpointOf(Buffer(docs_only.SerializeAsString() + header_only.SerializeAsString())),
            "/late");
}

TEST(ExecEndpointOfTest, GarbageAndOversizedHeadersGiveNoEndpoint) {
  EXPECT_EQ(ExecEndpointOf(Buffer("")), "");
  EXPECT_EQ(ExecEndpointOf(Buffer("\xff\xff\xff\xff")), "");
  // Field 1, length-delimited, declaring 10 MB that are not there.
  EXPECT_EQ(ExecEndpointOf(Buffer(std::string("\x0a\x80\xad\xe2\x04", 5))), "");
  jina::DataRequestProto huge;
  huge.mutable_header()->set_exec_endpoint(std::string(std::size_t{100} * 1024, 'e'));
  EXPECT_EQ(ExecEndpointOf(Buffer(huge.SerializeAsString())), "");
}

TEST(GatewayMetricsTest, EndpointLabelsAreBoundedAndPrintable) {
  GatewayMetrics metrics("dep", {"dep/rep-0"});
  for (int i = 0; i < 100; ++i) {
    metrics.End(metrics.Begin("/e" + std::to_string(i)), 0, false);
  }
  metrics.End(metrics.Begin("/bad\xff"), 0, false);
  metrics.End(metrics.Begin("/e0"), 14, false);  // UNAVAILABLE
  metrics.End(metrics.Begin("/e1"), 0, true);    // an executor error reply
  const std::string text = Exposition(*metrics.registry());
  EXPECT_THAT(
      text,
      ::testing::HasSubstr(
          R"m(gantry_gateway_request_success_total{deployment="dep",endpoint="(other)"} 37)m"));
  EXPECT_THAT(text,
              ::testing::HasSubstr(R"(deployment="dep",code="UNAVAILABLE",endpoint="/e0"} 1)"));
  EXPECT_THAT(text,
              ::testing::HasSubstr(R"(deployment="dep",code="EXECUTOR_ERROR",endpoint="/e1"} 1)"));
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("/e64\"")));
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("\xff")));
}

TEST(WorkerMetricsTest, UnknownEndpointsCountUnderNoneAndCpuHasNoGpuGauges) {
  WorkerMetrics metrics("dep", "dep/rep-0", {"/encode", "/default"}, Device::Cpu());
  EXPECT_EQ(metrics.For("/encode").label, "/encode");
  EXPECT_EQ(metrics.For("/anything").label, "(none)");
  metrics.For("/encode").success->Increment();
  metrics.Failed(metrics.For("/nothing"), "endpoint_not_found");
  ASSERT_EQ(metrics.collectables().size(), 1u);
  const std::string text = Exposition(*metrics.registry());
  EXPECT_THAT(
      text,
      ::testing::HasSubstr(
          R"(gantry_request_success_total{deployment="dep",replica="dep/rep-0",endpoint="/encode"} 1)"));
  EXPECT_THAT(text, ::testing::HasSubstr(R"m(endpoint="(none)",reason="endpoint_not_found")m"));
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("gantry_gpu_memory")));
}

TEST(WorkerMetricsTest, CudaWorkerReportsItsGpusMemoryAtEachScrape) {
  ::setenv("GANTRY_FAKE_GPUS", "Fake A100,Fake H100", 1);
  WorkerMetrics metrics("dep", "dep/rep-0", {"/encode"}, Device::Cuda(1));
  ASSERT_EQ(metrics.collectables().size(), 2u);
  auto families = metrics.collectables()[1]->Collect();
  ::unsetenv("GANTRY_FAKE_GPUS");
  ASSERT_EQ(families.size(), 2u);
  EXPECT_EQ(families[0].name, "gantry_gpu_memory_used_bytes");
  EXPECT_EQ(families[1].name, "gantry_gpu_memory_total_bytes");
  ASSERT_EQ(families[1].metric.size(), 1u);
  // cuda:1 is the second visible GPU; fake GPUs report no memory.
  bool labelled = false;
  for (const auto& label : families[1].metric[0].label) {
    labelled = labelled || (label.name == "gpu_uuid" && label.value == "GPU-fake-1");
  }
  EXPECT_TRUE(labelled);
  EXPECT_EQ(families[1].metric[0].gauge.value, 0);
}

}  // namespace
}  // namespace gantry::internal
