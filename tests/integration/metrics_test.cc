// Prometheus metrics through real processes: a Deployment with monitoring
// on, requests posted through its gateway, then GET /metrics on the gateway
// and on each replica, read back as numbers. tests/interop/
// test_metrics_prometheus.py scrapes the same endpoints with a real
// Prometheus server.
#include <gantry/client.h>
#include <gantry/config.h>
#include <gantry/deployment.h>
#include <gantry/flow.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "integration/metrics_scrape.h"
#include "testutil/testutil.h"

namespace gantry {
namespace {

using testing::Scrape;
using testing::Sum;

double SumOverReplicas(const Deployment& dep, const std::string& name, const std::string& label) {
  double total = 0;
  for (const ReplicaInfo& replica : dep.replicas()) {
    double value = Sum(Scrape(replica.monitoring_port), name, label);
    total += std::isnan(value) ? 0 : value;
  }
  return total;
}

TEST(MetricsTest, CountersMatchWhatWasPostedAndBatchesAreCountedOnce) {
  Deployment dep({.uses = "BatchCountExec", .replicas = 2, .monitoring = true});
  ASSERT_TRUE(dep.ok()) << dep.status();
  ASSERT_GT(dep.monitoring_port(), 0);
  for (const ReplicaInfo& replica : dep.replicas()) {
    ASSERT_GT(replica.monitoring_port, 0) << replica.name;
  }
  // 32 single-document requests at once on the batched endpoint; 5
  // requests of 3 documents, one after another, on the unbatched one.
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (int i = 0; i < 32; ++i) {
    threads.emplace_back([&] {
      if (!dep.Post("/count", DocList{Doc("x")}, {.request_size = 1}).ok()) {
        ++failed;
      }
    });
  }
  testing::JoinWithin(threads, std::chrono::seconds(60), "32 concurrent Posts");
  ASSERT_EQ(failed.load(), 0);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(
        dep.Post("/plain", DocList{Doc("a"), Doc("b"), Doc("c")}, {.request_size = 3}).ok());
  }

  const std::string gateway = Scrape(dep.monitoring_port());
  EXPECT_EQ(Sum(gateway, "gantry_gateway_request_success_total", "endpoint=\"/count\""), 32)
      << gateway;
  EXPECT_EQ(Sum(gateway, "gantry_gateway_request_success_total", "endpoint=\"/plain\""), 5);
  EXPECT_EQ(Sum(gateway, "gantry_gateway_request_duration_seconds_count", "endpoint=\"/plain\""),
            5);
  EXPECT_EQ(Sum(gateway, "gantry_gateway_pending_requests", "endpoint=\"/count\""), 0);
  EXPECT_EQ(Sum(gateway, "gantry_replica_restarts_total", "replica=\"executor/rep-1\""), 0);

  EXPECT_EQ(SumOverReplicas(dep, "gantry_request_success_total", "endpoint=\"/count\""), 32);
  EXPECT_EQ(SumOverReplicas(dep, "gantry_inference_count_total", "endpoint=\"/count\""), 32);
  EXPECT_EQ(SumOverReplicas(dep, "gantry_inference_count_total", "endpoint=\"/plain\""), 15);
  EXPECT_EQ(SumOverReplicas(dep, "gantry_inference_exec_count_total", "endpoint=\"/plain\""), 5);
  // Batched: documents / executions is the average batch, well above 1.
  const double executions =
      SumOverReplicas(dep, "gantry_inference_exec_count_total", "endpoint=\"/count\"");
  RecordProperty("count_executions", std::to_string(executions));
  EXPECT_GE(executions, 2);
  EXPECT_LE(executions, 16);
  EXPECT_EQ(SumOverReplicas(dep, "gantry_compute_duration_seconds_count", "endpoint=\"/count\""),
            executions);
  // Every request waited for its batch, so each has a queue time.
  EXPECT_EQ(SumOverReplicas(dep, "gantry_queue_duration_seconds_count", "endpoint=\"/count\""), 32);
  EXPECT_EQ(SumOverReplicas(dep, "gantry_request_duration_seconds_count", "endpoint=\"/count\""),
            32);
  EXPECT_EQ(SumOverReplicas(dep, "gantry_pending_requests", "endpoint=\"/count\""), 0);
}

TEST(MetricsTest, FailuresAreCountedByCodeAndReason) {
  Deployment dep({.uses = "FailingExec", .monitoring = true});
  ASSERT_TRUE(dep.ok()) << dep.status();
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(dep.Post("/encode", DocList{Doc("boom")}).ok());
  }
  const std::string gateway = Scrape(dep.monitoring_port());
  EXPECT_EQ(Sum(gateway, "gantry_gateway_request_failure_total", "code=\"EXECUTOR_ERROR\""), 3)
      << gateway;
  EXPECT_EQ(SumOverReplicas(dep, "gantry_request_failure_total", "reason=\"handler\""), 3);
  EXPECT_EQ(SumOverReplicas(dep, "gantry_request_success_total", "endpoint=\"/encode\""), 0);
}

// A gRPC client's deadline that passes while its request runs is counted as
// DEADLINE_EXCEEDED, as the client hears it, not as a cancel.
TEST(MetricsTest, AClientsDeadlineIsCountedAsDeadlineExceeded) {
  testing::TempDir dir;
  Deployment dep(
      {.uses = "ChaosExec", .uses_with = {{"log", dir.File("calls.log")}}, .monitoring = true});
  ASSERT_TRUE(dep.ok()) << dep.status();
  const PostOptions slow{.parameters = Parameters(Value::Dict{{"sleep_ms", Value(2000.0)}}),
                         .timeout = std::chrono::milliseconds(300)};
  for (int i = 0; i < 2; ++i) {
    StatusOr<DocList> result = Client(dep.address()).Post("/work", {Doc("slow")}, slow);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), StatusCode::kDeadlineExceeded) << result.status();
  }
  // The gateway counts a call once its replica's try has ended too, which
  // may be just after the client heard of its deadline.
  std::string gateway;
  gantry::testing::WaitUntil(
      [&] {
        gateway = Scrape(dep.monitoring_port());
        return Sum(gateway, "gantry_gateway_request_failure_total", "code=\"DEADLINE_EXCEEDED\"") >=
               2;
      },
      std::chrono::seconds(10));
  EXPECT_EQ(Sum(gateway, "gantry_gateway_request_failure_total", "code=\"DEADLINE_EXCEEDED\""), 2)
      << gateway;
  const double cancelled =
      Sum(gateway, "gantry_gateway_request_failure_total", "code=\"CANCELLED\"");
  EXPECT_TRUE(std::isnan(cancelled) || cancelled == 0) << gateway;
}

TEST(MetricsTest, ClientChosenEndpointsCannotGrowTheGatewaysLabels) {
  Deployment dep({.uses = "EchoExec", .monitoring = true});
  ASSERT_TRUE(dep.ok()) << dep.status();
  // EchoExec has a default handler: every endpoint is served.
  for (int i = 0; i < 80; ++i) {
    ASSERT_TRUE(dep.Post("/made-up-" + std::to_string(i), DocList{Doc("x")}).ok());
  }
  // Valid UTF-8 (a proto3 string must be), but not a printable label.
  ASSERT_TRUE(dep.Post(std::string("/bad\n\x7f"), DocList{Doc("x")}).ok());
  const std::string gateway = Scrape(dep.monitoring_port());
  std::size_t labels = 0;
  std::istringstream lines(gateway);
  for (std::string line; std::getline(lines, line);) {
    labels += line.starts_with("gantry_gateway_request_success_total{") ? 1 : 0;
  }
  EXPECT_EQ(labels, 65u) << gateway;  // 64 endpoints, then "(other)"
  EXPECT_EQ(Sum(gateway, "gantry_gateway_request_success_total", "endpoint=\"(other)\""), 17);
  // Workers label by the handler an endpoint reached, never by the request.
  EXPECT_EQ(SumOverReplicas(dep, "gantry_request_success_total", "endpoint=\"/default\""), 81);
}

TEST(MetricsTest, TargetsFileFollowsARestartedReplica) {
  testing::TempDir tmp;
  const std::string targets = tmp.path() + "/targets.json";
  Deployment dep({.uses = "EchoExec",
                  .replicas = 2,
                  .restart_backoff_initial = std::chrono::milliseconds(50),
                  .monitoring = true,
                  .monitoring_targets_file = targets});
  ASSERT_TRUE(dep.ok()) << dep.status();
  auto groups = nlohmann::json::parse(testing::ReadFile(targets));
  ASSERT_EQ(groups.size(), 3u) << groups.dump();
  EXPECT_EQ(groups[0]["labels"]["gantry_role"], "gateway");
  EXPECT_EQ(groups[0]["targets"][0], "127.0.0.1:" + std::to_string(dep.monitoring_port()));
  const ReplicaInfo before = dep.replicas()[1];
  EXPECT_EQ(groups[2]["targets"][0], "127.0.0.1:" + std::to_string(before.monitoring_port));
  EXPECT_EQ(groups[2]["labels"]["replica"], "executor/rep-1");

  ASSERT_EQ(::kill(before.pid, SIGKILL), 0);
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        ReplicaInfo now = dep.replicas()[1];
        return now.restarts == 1 && now.available && now.monitoring_port > 0;
      },
      std::chrono::seconds(30)));
  const ReplicaInfo after = dep.replicas()[1];
  groups = nlohmann::json::parse(testing::ReadFile(targets));
  ASSERT_EQ(groups.size(), 3u) << groups.dump();
  EXPECT_EQ(groups[2]["targets"][0], "127.0.0.1:" + std::to_string(after.monitoring_port));
  EXPECT_EQ(Sum(Scrape(dep.monitoring_port()), "gantry_replica_restarts_total",
                "replica=\"executor/rep-1\""),
            1);
  EXPECT_FALSE(std::isnan(Sum(Scrape(after.monitoring_port), "gantry_pending_requests", "")));
}

TEST(MetricsTest, MonitoringKeysInYamlAndTheirErrors) {
  testing::TempDir tmp;
  const std::string good = tmp.path() + "/good.yml";
  testing::WriteFile(good,
                     "jtype: Deployment\nwith:\n  uses: EchoExec\n  monitoring: true\n"
                     "  port_monitoring: 0\n  monitoring_targets_file: t.json\n");
  auto options = LoadDeploymentConfig(good);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->monitoring);
  EXPECT_EQ(options->monitoring_targets_file, tmp.path() + "/t.json");

  const std::string bad_bool = tmp.path() + "/bad_bool.yml";
  testing::WriteFile(bad_bool, "jtype: Deployment\nwith:\n  uses: EchoExec\n  monitoring: 3\n");
  auto not_bool = LoadDeploymentConfig(bad_bool);
  ASSERT_FALSE(not_bool.ok());
  EXPECT_THAT(not_bool.status().message(), ::testing::HasSubstr("bad_bool.yml:4"));
  EXPECT_THAT(not_bool.status().message(), ::testing::HasSubstr("monitoring"));
  EXPECT_THAT(not_bool.status().message(), ::testing::HasSubstr("expected true or false"));

  const std::string bad_port = tmp.path() + "/bad_port.yml";
  testing::WriteFile(bad_port,
                     "jtype: Deployment\nwith:\n  uses: EchoExec\n  port_monitoring: 70000\n");
  auto port = LoadDeploymentConfig(bad_port);
  ASSERT_FALSE(port.ok());
  EXPECT_THAT(port.status().message(), ::testing::HasSubstr("port_monitoring"));
  EXPECT_THAT(port.status().message(), ::testing::HasSubstr("0 to 65535"));
}

TEST(MetricsTest, AMetricsPortInUseFailsTheStartNamingIt) {
  Deployment first({.uses = "EchoExec", .monitoring = true});
  ASSERT_TRUE(first.ok()) << first.status();
  Deployment second(
      {.uses = "EchoExec", .monitoring = true, .port_monitoring = first.monitoring_port()});
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), ::testing::HasSubstr("port_monitoring"));
  EXPECT_THAT(second.status().message(),
              ::testing::HasSubstr(std::to_string(first.monitoring_port())));
}

TEST(MetricsTest, AGivenUpReplicaShowsInTheGatewaysMetrics) {
  testing::TempDir dir;
  const std::string flag = dir.File("broken");
  Deployment dep({.uses = "CrashLoopExec",
                  .uses_with = {{"fail_flag", flag}},
                  .name = "loop",
                  .replicas = 2,
                  .restart_backoff_initial = std::chrono::milliseconds(50),
                  .restart_backoff_max = std::chrono::milliseconds(200),
                  .max_init_failures = 2,
                  .monitoring = true});
  ASSERT_TRUE(dep.ok()) << dep.status();
  testing::WriteFile(flag, "x");
  ASSERT_EQ(::kill(dep.replicas()[0].pid, SIGKILL), 0);
  ASSERT_TRUE(
      testing::WaitUntil([&] { return dep.replicas()[0].failed; }, std::chrono::seconds(30)));
  const std::string gateway = Scrape(dep.monitoring_port());
  EXPECT_EQ(Sum(gateway, "gantry_replica_given_up", "replica=\"loop/rep-0\""), 1) << gateway;
  EXPECT_EQ(Sum(gateway, "gantry_replica_given_up", "replica=\"loop/rep-1\""), 0);
  EXPECT_EQ(Sum(gateway, "gantry_replica_restarts_total", "replica=\"loop/rep-0\""), 2);
}

TEST(MetricsTest, AFlowWithMonitoringCountsAtItsGatewayAndInEveryStep) {
  FlowOptions options;
  options.name = "pipeline";
  options.monitoring = true;
  for (const char* name : {"first", "second"}) {
    FlowStep step;
    step.deployment.name = name;
    step.deployment.uses = "EchoExec";
    options.executors.push_back(std::move(step));
  }
  Flow flow(std::move(options));
  ASSERT_TRUE(flow.ok()) << flow.status();
  ASSERT_GT(flow.monitoring_port(), 0);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(flow.Post("/echo", DocList{Doc("a"), Doc("b")}, {.request_size = 2}).ok());
  }
  EXPECT_EQ(Sum(Scrape(flow.monitoring_port()), "gantry_gateway_request_success_total",
                "endpoint=\"/echo\""),
            6);
  for (const char* step : {"first", "second"}) {
    double docs = 0;
    for (const ReplicaInfo& replica : flow.replicas(step)) {
      ASSERT_GT(replica.monitoring_port, 0) << step;
      docs += Sum(Scrape(replica.monitoring_port), "gantry_inference_count_total",
                  "endpoint=\"/echo\"");
    }
    EXPECT_EQ(docs, 12) << step;
  }
}

// cpp-httplib sets SO_REUSEPORT by default: before common/http_listen.h,
// a second HTTP gateway on a port in use started, and the kernel split the
// clients between two unrelated deployments.
TEST(MetricsTest, AnHttpPortInUseFailsTheStartInsteadOfSharingIt) {
  Deployment first({.uses = "EchoExec", .http_port = 0});
  ASSERT_TRUE(first.ok()) << first.status();
  Deployment second({.uses = "EchoExec", .http_port = first.http_port()});
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), ::testing::HasSubstr(std::to_string(first.http_port())));
}

}  // namespace
}  // namespace gantry
