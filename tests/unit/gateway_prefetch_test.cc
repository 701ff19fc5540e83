// The bound on a client's `__prefetch__` metadata, and the gateway settings
// Deployment, Flow and `gantry gateway` derive (gateway/gateway.h).
#include <gtest/gtest.h>

#include "core/limits.h"
#include "core/option_table.h"
#include "gateway/gateway.h"

namespace gantry::internal {
namespace {

TEST(ParsePrefetchTest, KeepsNumbersWithinTheBound) {
  EXPECT_EQ(ParsePrefetch("1", 50), 1);
  EXPECT_EQ(ParsePrefetch("64", 50), 64);
  EXPECT_EQ(ParsePrefetch(std::to_string(kMaxPrefetch), 50), kMaxPrefetch);
}

TEST(ParsePrefetchTest, ClampsLargeAndUnlimitedToTheBound) {
  EXPECT_EQ(ParsePrefetch(std::to_string(kMaxPrefetch + 1), 50), kMaxPrefetch);
  EXPECT_EQ(ParsePrefetch("2147483648", 50), kMaxPrefetch);
  EXPECT_EQ(ParsePrefetch("99999999999999999999999", 50), kMaxPrefetch);
  // Jina's prefetch 0 means "no limit": the bound is the limit.
  EXPECT_EQ(ParsePrefetch("0", 50), kMaxPrefetch);
  EXPECT_EQ(ParsePrefetch("-5", 50), kMaxPrefetch);
  EXPECT_EQ(ParsePrefetch("-99999999999999999999999", 50), kMaxPrefetch);
}

TEST(ParsePrefetchTest, IgnoresWhatIsNotANumber) {
  EXPECT_EQ(ParsePrefetch("", 50), 50);
  EXPECT_EQ(ParsePrefetch("ten", 50), 50);
  EXPECT_EQ(ParsePrefetch("12abc", 50), 50);
  EXPECT_EQ(ParsePrefetch(" 12", 50), 50);
}

TEST(GatewayOptionsOfTest, DeploymentAndFlowDeriveTheSameSettings) {
  DeploymentOptions deployment{.name = "enc",
                               .port = 1234,
                               .host = "0.0.0.0",
                               .http_port = 1235,
                               .tls = {.cert_file = "c.pem", .key_file = "k.pem"},
                               .max_message_bytes = 4096,
                               .max_concurrent_requests = 7,
                               .monitoring = true,
                               .port_monitoring = 1236};
  GatewayOptions g = GatewayOptionsOf(deployment);
  EXPECT_EQ(g.deployment_name, "enc");
  EXPECT_EQ(g.host, "0.0.0.0");
  EXPECT_EQ(g.port, 1234);
  EXPECT_EQ(g.http_port, 1235);
  EXPECT_EQ(g.tls.cert_file, "c.pem");
  EXPECT_EQ(g.max_message_bytes, 4096);
  EXPECT_EQ(g.max_concurrent_requests, 7);
  EXPECT_EQ(g.monitoring_port, 1236);

  FlowOptions flow{.name = "f",
                   .port = 1234,
                   .host = "0.0.0.0",
                   .http_port = 1235,
                   .max_message_bytes = 4096,
                   .max_concurrent_requests = 7,
                   .monitoring = false,
                   .port_monitoring = 1236};
  GatewayOptions f = GatewayOptionsOf(DeploymentOptionsOfFlow(flow));
  EXPECT_EQ(f.deployment_name, "f");
  EXPECT_EQ(f.host, g.host);
  EXPECT_EQ(f.port, g.port);
  EXPECT_EQ(f.http_port, g.http_port);
  EXPECT_EQ(f.max_message_bytes, g.max_message_bytes);
  EXPECT_EQ(f.max_concurrent_requests, g.max_concurrent_requests);
  EXPECT_EQ(f.monitoring_port, -1) << "metrics are off unless monitoring is on";
  EXPECT_FALSE(f.tls.enabled());
}

}  // namespace
}  // namespace gantry::internal
