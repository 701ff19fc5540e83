// Requests that kill replicas: a poison request is retried once, not on
// every replica, and a replica killed from outside loses no document.
// ChaosExec (test_executors.cc) exits abruptly on a document "poison".
#include <gantry/client.h>
#include <gantry/deployment.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <functional>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testutil/testutil.h"

namespace gantry {
namespace {

using ::testing::HasSubstr;
using Ms = std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

using testing::WaitUntil;

// These tests look at replicas while they are dead: respawn (tested in
// respawn_test.cc) is put off past the end of the test.
constexpr Ms kNoRespawnWithinTest{600000};

// ChaosExec's call log lines that name `text`.
int CallsWith(const std::string& log, const std::string& text) {
  std::string content = testing::ReadFile(log);
  int count = 0;
  std::size_t start = 0;
  while (start < content.size()) {
    std::size_t end = content.find('\n', start);
    if (end == std::string::npos) {
      end = content.size();
    }
    std::string line = content.substr(start, end - start);
    if (line.size() > text.size() && line.ends_with(" " + text)) {
      ++count;
    }
    start = end + 1;
  }
  return count;
}

// "doc 0" .. "doc <count - 1>" posted to ChaosExec's /work in the
// background, one per request, `prefetch` in flight, each call sleeping
// `sleep_ms`.
std::future<StatusOr<DocList>> StreamInBackground(Deployment& dep, const DocList& docs,
                                                  double sleep_ms, int prefetch) {
  return std::async(std::launch::async, [&dep, &docs, sleep_ms, prefetch] {
    return dep.Post("/work", docs,
                    {.request_size = 1,
                     .parameters = Parameters(Value::Dict{{"sleep_ms", Value(sleep_ms)}}),
                     .prefetch = prefetch,
                     .timeout = Ms(120000)});
  });
}

DocList NumberedDocs(int count) {
  DocList docs;
  for (int i = 0; i < count; ++i) {
    docs.emplace_back("doc " + std::to_string(i));
  }
  return docs;
}

TEST(PoisonTest, PoisonRequestIsTriedOnTwoReplicasNotAll) {
  testing::TempDir dir;
  std::string log = dir.File("calls.log");
  Deployment dep({.uses = "ChaosExec",
                  .uses_with = {{"log", log}},
                  .name = "pois",
                  .replicas = 3,
                  .restart_backoff_initial = kNoRespawnWithinTest,
                  .restart_backoff_max = kNoRespawnWithinTest});
  ASSERT_TRUE(dep.ok()) << dep.status();
  auto good = dep.Post("/work", {Doc("a"), Doc("b")}, {.request_size = 1});
  ASSERT_TRUE(good.ok()) << good.status();

  auto out = dep.Post("/work", {Doc("poison")}, {.timeout = Ms(20000)});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kUnavailable) << out.status();
  EXPECT_THAT(out.status().message(), HasSubstr("the request killed replica pois/rep-"));
  EXPECT_THAT(out.status().message(), HasSubstr("not retried again"));
  EXPECT_EQ(CallsWith(log, "poison"), 2) << testing::ReadFile(log);

  // Two replicas died and left rotation; the third serves on, and the
  // deployment is still healthy. (A socket closes a moment before its
  // process is gone.)
  std::vector<ReplicaInfo> replicas = dep.replicas();
  auto count_dead = [&] {
    int n = 0;
    for (const ReplicaInfo& r : replicas) {
      n += testing::ProcessAlive(r.pid) ? 0 : 1;
    }
    return n;
  };
  EXPECT_TRUE(WaitUntil([&] { return count_dead() == 2; }, Ms(5000)));
  int dead = 0;
  for (const ReplicaInfo& r : replicas) {
    if (!testing::ProcessAlive(r.pid)) {
      ++dead;
      EXPECT_FALSE(r.available) << r.name;
      EXPECT_THAT(out.status().message(), HasSubstr(r.name + " (" + r.address + ")"));
    }
  }
  EXPECT_EQ(dead, 2);
  auto after = dep.Post("/work", {Doc("c"), Doc("d"), Doc("e")}, {.request_size = 1});
  ASSERT_TRUE(after.ok()) << after.status();
  // A generous bound: this asks "serving?", not "how fast?" (TSan, -j2).
  EXPECT_TRUE(Client(dep.address()).Ping(Ms(5000)).ok());
}

TEST(PoisonTest, PoisonThatKillsBothReplicasLeavesAnHonestDeployment) {
  testing::TempDir dir;
  std::string log = dir.File("calls.log");
  Deployment dep({.uses = "ChaosExec",
                  .uses_with = {{"log", log}},
                  .name = "pair",
                  .replicas = 2,
                  .restart_backoff_initial = kNoRespawnWithinTest,
                  .restart_backoff_max = kNoRespawnWithinTest});
  ASSERT_TRUE(dep.ok()) << dep.status();
  ASSERT_TRUE(dep.Post("/work", {Doc("a"), Doc("b")}, {.request_size = 1}).ok());

  auto out = dep.Post("/work", {Doc("poison")}, {.timeout = Ms(20000)});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kUnavailable) << out.status();
  std::vector<ReplicaInfo> replicas = dep.replicas();
  for (const ReplicaInfo& r : replicas) {
    EXPECT_THAT(out.status().message(), HasSubstr(r.name + " (" + r.address + ")"));
    EXPECT_FALSE(r.available) << r.name;
  }
  EXPECT_THAT(out.status().message(), HasSubstr("not retried again"));
  EXPECT_EQ(CallsWith(log, "poison"), 2) << testing::ReadFile(log);

  // Nothing is left to serve: the gateway says so. A generous deadline: a
  // new channel's first call took over a second under TSan.
  Status ping = Client(dep.address()).Ping(Ms(5000));
  EXPECT_FALSE(ping.ok());
  EXPECT_THAT(ping.message(), HasSubstr("not serving"));
  auto start = SteadyClock::now();
  auto next = dep.Post("/work", {Doc("good")}, {.timeout = Ms(30000)});
  auto took = std::chrono::duration_cast<Ms>(SteadyClock::now() - start);
  EXPECT_EQ(next.status().code(), StatusCode::kUnavailable) << next.status();
  EXPECT_THAT(next.status().message(), HasSubstr("no replica is available"));
  // Well before the deadline: refused, not queued (not a latency figure).
  EXPECT_LT(took, Ms(5000));
  EXPECT_EQ(CallsWith(log, "good"), 0);
}

// A poison request arrives while good ones are in flight on both replicas:
// it kills the replica it is on with the good requests beside it, then the
// other. The good ones are retried one at a time, wait for a replica to
// come back when both are restarting, and are all served; only the poison
// request fails.
TEST(PoisonTest, RequestsBesideAPoisonAreServedAndOnlyThePoisonFails) {
  testing::TempDir dir;
  std::string log = dir.File("calls.log");
  Deployment dep({.uses = "ChaosExec",
                  .uses_with = {{"log", log}},
                  .name = "beside",
                  .replicas = 2,
                  .restart_backoff_initial = Ms(100)});
  ASSERT_TRUE(dep.ok()) << dep.status();
  const std::vector<ReplicaInfo> before = dep.replicas();
  constexpr int kDocs = 300;
  const DocList docs = NumberedDocs(kDocs);
  std::future<StatusOr<DocList>> stream = StreamInBackground(dep, docs, 20.0, 8);
  ASSERT_TRUE(WaitUntil([&] { return CallsWith(log, "doc 20") > 0; }, Ms(20000)));
  auto poison = dep.Post(
      "/work", {Doc("poison")},
      {.parameters = Parameters(Value::Dict{{"sleep_ms", Value(20.0)}}), .timeout = Ms(60000)});
  ASSERT_FALSE(poison.ok());
  EXPECT_EQ(poison.status().code(), StatusCode::kUnavailable) << poison.status();
  EXPECT_THAT(poison.status().message(), HasSubstr("the request killed replica beside/rep-"));
  EXPECT_EQ(CallsWith(log, "poison"), 2) << testing::ReadFile(log);

  StatusOr<DocList> out = stream.get();
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), static_cast<std::size_t>(kDocs));
  for (int i = 0; i < kDocs; ++i) {
    EXPECT_EQ((*out)[static_cast<std::size_t>(i)].text(), "done:doc " + std::to_string(i));
  }
  for (const ReplicaInfo& r : before) {
    EXPECT_FALSE(testing::ProcessAlive(r.pid)) << r.name << " was not the poison's victim";
  }
  EXPECT_TRUE(WaitUntil(
      [&] {
        for (const ReplicaInfo& r : dep.replicas()) {
          if (!r.available || r.restarts != 1) {
            return false;
          }
        }
        return true;
      },
      Ms(20000)));
}

TEST(PoisonTest, ReplicaKilledMidStreamLosesNoDocument) {
  testing::TempDir dir;
  std::string log = dir.File("calls.log");
  Deployment dep({.uses = "ChaosExec",
                  .uses_with = {{"log", log}},
                  .name = "kill",
                  .replicas = 2,
                  .restart_backoff_initial = kNoRespawnWithinTest,
                  .restart_backoff_max = kNoRespawnWithinTest});
  ASSERT_TRUE(dep.ok()) << dep.status();
  pid_t victim = dep.replicas()[0].pid;
  constexpr int kDocs = 300;
  const DocList docs = NumberedDocs(kDocs);
  std::future<StatusOr<DocList>> post = StreamInBackground(dep, docs, 5.0, 16);
  // Mid-stream: once the victim has served a few requests.
  ASSERT_TRUE(WaitUntil([&] { return CallsWith(log, "doc 20") + CallsWith(log, "doc 21") > 0; },
                        Ms(20000)));
  auto killed_at = SteadyClock::now();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_TRUE(WaitUntil([&] { return !dep.replicas()[0].available; }, Ms(5000)));
  std::printf("[ measured ] killed replica out of rotation after %lld ms\n",
              static_cast<long long>(
                  std::chrono::duration_cast<Ms>(SteadyClock::now() - killed_at).count()));
  StatusOr<DocList> out = post.get();
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), static_cast<std::size_t>(kDocs));
  for (int i = 0; i < kDocs; ++i) {
    EXPECT_EQ((*out)[static_cast<std::size_t>(i)].text(), "done:doc " + std::to_string(i));
  }
  std::vector<ReplicaInfo> replicas = dep.replicas();
  EXPECT_FALSE(replicas[0].available);
  EXPECT_TRUE(replicas[1].available);
  // A generous bound: this asks "serving?", not "how fast?" (TSan, -j2).
  EXPECT_TRUE(Client(dep.address()).Ping(Ms(5000)).ok());
}

}  // namespace
}  // namespace gantry
