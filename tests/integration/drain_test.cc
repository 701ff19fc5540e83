// Graceful shutdown of an embedded Deployment (gantry/deployment.h): the
// gateway stops accepting (UNAVAILABLE), requests in flight finish within
// timeout_drain, then the workers stop. The CLI's SIGTERM path is in
// cli_test.cc.
#include <gantry/client.h>
#include <gantry/deployment.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "testutil/testutil.h"

namespace gantry {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using Ms = std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;
using testing::CountLines;
using testing::Since;
using testing::WaitUntil;

PostOptions Slow(Ms sleep) {
  return {.parameters =
              Parameters(Value::Dict{{"sleep_ms", Value(static_cast<double>(sleep.count()))}}),
          .timeout = Ms(60000)};
}

TEST(DrainTest, DestructorFinishesRequestsInFlightAndRefusesNewOnes) {
  testing::TempDir dir;
  const std::string log = dir.File("calls.log");
  auto dep = std::make_unique<Deployment>(DeploymentOptions{.uses = "ChaosExec",
                                                            .uses_with = {{"log", log}},
                                                            .name = "drain",
                                                            .replicas = 2,
                                                            .timeout_drain = Ms(20000)});
  ASSERT_TRUE(dep->ok()) << dep->status();
  const std::string address = dep->address();
  std::vector<pid_t> workers;
  for (const ReplicaInfo& r : dep->replicas()) {
    workers.push_back(r.pid);
  }

  // Four requests of 3 s each (two per replica, which runs one at a time):
  // long enough that all four are in flight together even on a slow machine.
  constexpr int kInFlight = 4;
  std::vector<StatusOr<DocList>> results(kInFlight, InternalError("not run"));
  std::vector<std::thread> posters;
  // When each post ended, for a failure's message.
  std::vector<Ms> ended(kInFlight, Ms(0));
  const auto posts_start = SteadyClock::now();
  for (int t = 0; t < kInFlight; ++t) {
    posters.emplace_back([&, t] {
      // Connected first (a bounded retry): what is tested is the drain, and
      // once in CI one of the four channels' first connect failed at once
      // ("failed to connect to all addresses"), which fails a call fast.
      Client client(address);
      WaitUntil([&] { return client.Ping(Ms(2000)).ok(); }, Ms(10000));
      results[static_cast<std::size_t>(t)] =
          client.Post("/work", {Doc("inflight " + std::to_string(t))}, Slow(Ms(3000)));
      ended[static_cast<std::size_t>(t)] = Since(posts_start);
    });
  }
  // No ASSERT while threads run: they are joined (bounded) first.
  EXPECT_TRUE(WaitUntil(
      [&] {
        int in_flight = 0;
        for (const ReplicaInfo& r : dep->replicas()) {
          in_flight += r.in_flight;
        }
        return in_flight == kInFlight && CountLines(log) >= 2;
      },
      Ms(20000)));

  Ms stop_took{0};
  std::vector<std::thread> stopper;
  stopper.emplace_back([&] {
    auto start = SteadyClock::now();
    dep.reset();  // the destructor: drain, then stop the workers
    stop_took = Since(start);
  });
  // Once draining, health says NOT_SERVING and new requests are refused.
  Client late(address);
  EXPECT_TRUE(WaitUntil([&] { return !late.Ping(Ms(500)).ok(); }, Ms(5000)));
  auto refused = late.Post("/work", {Doc("late")}, {.timeout = Ms(5000)});
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("deployment 'drain' is shutting down"));

  testing::JoinWithin(posters, Ms(30000), "posts in flight");
  testing::JoinWithin(stopper, Ms(30000), "the destructor");
  for (int t = 0; t < kInFlight; ++t) {
    const auto& result = results[static_cast<std::size_t>(t)];
    ASSERT_TRUE(result.ok()) << "request " << t << " was in flight and lost, "
                             << ended[static_cast<std::size_t>(t)].count()
                             << " ms after the posts began: " << result.status();
    EXPECT_EQ((*result)[0].text(), "done:inflight " + std::to_string(t));
  }
  std::printf("[ measured ] destructor with %d requests of 3 s in flight took %lld ms\n", kInFlight,
              static_cast<long long>(stop_took.count()));
  EXPECT_LT(stop_took, Ms(20000));
  // The late request never reached a worker.
  EXPECT_EQ(testing::ReadFile(log).find(" late"), std::string::npos);
  for (pid_t pid : workers) {
    EXPECT_FALSE(testing::ProcessAlive(pid)) << pid;
  }
}

TEST(DrainTest, RequestsPastTimeoutDrainAreCancelled) {
  testing::TempDir dir;
  const std::string log = dir.File("calls.log");
  Deployment dep({.uses = "ChaosExec",
                  .uses_with = {{"log", log}},
                  .name = "short",
                  .replicas = 1,
                  .timeout_drain = Ms(300)});
  ASSERT_TRUE(dep.ok()) << dep.status();
  StatusOr<DocList> result = InternalError("not run");
  std::vector<std::thread> poster;
  poster.emplace_back(
      [&] { result = Client(dep.address()).Post("/work", {Doc("long")}, Slow(Ms(20000))); });
  EXPECT_TRUE(WaitUntil([&] { return CountLines(log) >= 1; }, Ms(20000)));
  auto start = SteadyClock::now();
  dep.Stop();
  Ms took = Since(start);
  testing::JoinWithin(poster, Ms(20000), "the cancelled post");
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().code(), AnyOf(StatusCode::kCancelled, StatusCode::kUnavailable))
      << result.status();
  std::printf("[ measured ] Stop with a 20 s request in flight and timeout_drain 300 ms: %lld ms\n",
              static_cast<long long>(took.count()));
  // timeout_drain, then the worker's own stop (SIGTERM; SIGKILL after its
  // grace): far less than the 20 s request.
  EXPECT_LT(took, Ms(15000));
}

// Replicas stuck in a handler are SIGKILLed one grace after the SIGTERM,
// all of them together: a stop that waited the grace for each in turn took
// 24 s for three and would outlast an orchestrator's grace period.
TEST(DrainTest, StuckReplicasShareOneGraceBeforeTheyAreKilled) {
  testing::TempDir dir;
  const std::string log = dir.File("calls.log");
  Deployment dep({.uses = "ChaosExec",
                  .uses_with = {{"log", log}},
                  .name = "stuck",
                  .replicas = 3,
                  .timeout_drain = Ms(300)});
  ASSERT_TRUE(dep.ok()) << dep.status();
  constexpr int kStuck = 3;
  std::vector<StatusOr<DocList>> results(kStuck, InternalError("not run"));
  std::vector<std::thread> posters;
  for (int t = 0; t < kStuck; ++t) {
    posters.emplace_back([&, t] {
      results[t] = Client(dep.address()).Post("/work", {Doc("long")}, Slow(Ms(60000)));
    });
  }
  // One call at a time per replica: three calls logged, three replicas busy.
  ASSERT_TRUE(WaitUntil([&] { return CountLines(log) >= kStuck; }, Ms(20000)));
  const auto start = SteadyClock::now();
  dep.Stop();
  const Ms took = Since(start);
  testing::JoinWithin(posters, Ms(20000), "the posts cut short");
  for (const StatusOr<DocList>& result : results) {
    EXPECT_FALSE(result.ok());
  }
  std::printf("[ measured ] Stop with three replicas stuck in 60 s calls: %lld ms\n",
              static_cast<long long>(took.count()));
  // timeout_drain and one 8 s grace, not three.
  EXPECT_LT(took, Ms(15000));
}

}  // namespace
}  // namespace gantry
