// Replicas whose process dies are started again (gantry/deployment.h): a
// replica killed under load is replaced with no document lost, one that
// hangs (SIGSTOP) is found by its liveness checks, killed and replaced the
// same way, and one whose
// constructor fails on every restart is given up, with the reason reported.
#include <gantry/client.h>
#include <gantry/deployment.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "metrics_scrape.h"
#include "testutil/testutil.h"

namespace gantry {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using Ms = std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;
using testing::CountLines;
using testing::Since;
using testing::WaitUntil;

// Kill to serving again: backoff (100 ms) + re-exec of this binary + its
// health check. Measured 0.46-0.95 s on a shared 2-core machine (about 1 s
// under TSan); the bound leaves room for a loaded CI machine.
constexpr Ms kRespawnBound{10000};

// `count` documents "doc 0", "doc 1", ...
DocList NumberedDocs(int count) {
  DocList docs;
  for (int i = 0; i < count; ++i) {
    docs.emplace_back("doc " + std::to_string(i));
  }
  return docs;
}

// Posts `docs` to ChaosExec's /work in the background, `request_size` per
// request, each call sleeping `sleep_ms`.
std::future<StatusOr<DocList>> PostInBackground(Deployment& dep, const DocList& docs,
                                                int request_size, double sleep_ms) {
  return std::async(std::launch::async, [&dep, &docs, request_size, sleep_ms] {
    return dep.Post("/work", docs,
                    {.request_size = request_size,
                     .parameters = Parameters(Value::Dict{{"sleep_ms", Value(sleep_ms)}}),
                     .prefetch = 8,
                     .timeout = Ms(120000)});
  });
}

// Waits up to `bound` for replica 0 to be a process other than `victim`
// and in rotation; its pid, or 0.
pid_t AwaitSuccessor(Deployment& dep, pid_t victim, Ms bound) {
  pid_t successor = 0;
  const bool replaced = WaitUntil(
      [&] {
        ReplicaInfo r = dep.replicas()[0];
        successor = r.pid;
        return r.pid != victim && r.available;
      },
      bound);
  return replaced ? successor : 0;
}

// Every document of `sent` back exactly once, in order, done by ChaosExec;
// counts in `by_successor` those the process `successor` served.
::testing::AssertionResult EveryDocBackInOrder(const DocList& sent, const DocList& got,
                                               pid_t successor, std::size_t& by_successor) {
  if (got.size() != sent.size()) {
    return ::testing::AssertionFailure() << got.size() << " documents back of " << sent.size();
  }
  std::set<std::string> ids;
  by_successor = 0;
  for (std::size_t i = 0; i < sent.size(); ++i) {
    if (got[i].id() != sent[i].id() || got[i].text() != "done:doc " + std::to_string(i)) {
      return ::testing::AssertionFailure() << "document " << i << " came back as id " << got[i].id()
                                           << ", text '" << got[i].text() << "'";
    }
    ids.insert(std::string(got[i].id()));
    by_successor += *got[i].tags().at("pid").AsInt() == successor ? 1 : 0;
  }
  if (ids.size() != sent.size()) {
    return ::testing::AssertionFailure() << ids.size() << " distinct ids of " << sent.size();
  }
  return ::testing::AssertionSuccess();
}

TEST(RespawnTest, ReplicaKilledWhilePostingTenThousandDocsIsReplacedAndLosesNone) {
  testing::TempDir dir;
  std::string log = dir.File("calls.log");
  Deployment dep({.uses = "ChaosExec",
                  .uses_with = {{"log", log}},
                  .name = "respawn",
                  .replicas = 2,
                  .restart_backoff_initial = Ms(100)});
  ASSERT_TRUE(dep.ok()) << dep.status();
  const pid_t victim = dep.replicas()[0].pid;

  constexpr int kDocs = 10000;
  const DocList docs = NumberedDocs(kDocs);
  // 500 requests of 20 documents, 10 ms each: a few seconds, so the new
  // replica joins while the stream is still going (and few enough calls to
  // leave a TSan build's neighbours some CPU).
  std::future<StatusOr<DocList>> post = PostInBackground(dep, docs, 20, 10.0);
  ASSERT_TRUE(WaitUntil([&] { return CountLines(log) >= 25; }, Ms(20000)));
  const auto killed_at = SteadyClock::now();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);

  const pid_t successor = AwaitSuccessor(dep, victim, kRespawnBound);
  ASSERT_NE(successor, 0) << "no new replica serving within " << kRespawnBound.count() << " ms";
  const Ms respawned_in = Since(killed_at);
  std::printf("[ measured ] killed replica replaced and back in rotation after %lld ms\n",
              static_cast<long long>(respawned_in.count()));
  EXPECT_LT(respawned_in, kRespawnBound);
  const std::size_t calls_at_respawn = CountLines(log);

  StatusOr<DocList> out = post.get();
  ASSERT_TRUE(out.ok()) << out.status();
  std::size_t by_successor = 0;
  ASSERT_TRUE(EveryDocBackInOrder(docs, *out, successor, by_successor));
  std::printf(
      "[ measured ] %zu of %d documents served by the new replica (%zu calls logged "
      "when it joined)\n",
      by_successor, kDocs, calls_at_respawn);

  ReplicaInfo replaced = dep.replicas()[0];
  EXPECT_EQ(replaced.restarts, 1);
  EXPECT_FALSE(replaced.failed);
  EXPECT_TRUE(replaced.error.empty()) << replaced.error;
  EXPECT_FALSE(testing::ProcessAlive(victim));
  // Back in rotation: the new process takes requests (round robin).
  auto more = dep.Post("/work", {Doc("a"), Doc("b"), Doc("c"), Doc("d")}, {.request_size = 1});
  ASSERT_TRUE(more.ok()) << more.status();
  std::size_t more_by_successor = 0;
  for (const Doc& doc : *more) {
    more_by_successor += *doc.tags().at("pid").AsInt() == successor ? 1 : 0;
  }
  EXPECT_GT(more_by_successor, 0u);
  EXPECT_TRUE(Client(dep.address()).Ping(Ms(5000)).ok());
}

// Both replicas killed at once, to be started again in 2 s: a request that
// comes while neither is in rotation waits at the gateway for the restart
// instead of failing. (Requests in flight on both when they die look to the
// gateway like a poison request's, and fail: poison_test.cc.)
TEST(RespawnTest, ARequestWaitsWhileEveryReplicaRestarts) {
  Deployment dep({.uses = "ChaosExec",
                  .name = "allkilled",
                  .replicas = 2,
                  .restart_backoff_initial = Ms(2000)});
  ASSERT_TRUE(dep.ok()) << dep.status();
  const std::vector<ReplicaInfo> victims = dep.replicas();
  for (const ReplicaInfo& r : victims) {
    ASSERT_EQ(::kill(r.pid, SIGKILL), 0) << r.name;
  }
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const ReplicaInfo& r : dep.replicas()) {
          if (r.available || testing::ProcessAlive(r.pid)) {
            return false;
          }
        }
        return true;
      },
      Ms(5000)));
  const auto sent_at = SteadyClock::now();
  auto out = dep.Post("/work", {Doc("a"), Doc("b")}, {.timeout = Ms(60000)});
  ASSERT_TRUE(out.ok()) << out.status();
  std::printf("[ measured ] with every replica restarting, served after %lld ms\n",
              static_cast<long long>(Since(sent_at).count()));
  EXPECT_EQ((*out)[0].text(), "done:a");
  for (const ReplicaInfo& r : dep.replicas()) {
    EXPECT_EQ(r.restarts, 1) << r.name;
  }
  // A request that may not wait that long still fails with the reason.
  for (const ReplicaInfo& r : dep.replicas()) {
    ASSERT_EQ(::kill(r.pid, SIGKILL), 0) << r.name;
  }
  ASSERT_TRUE(WaitUntil(
      [&] { return !dep.replicas()[0].available && !dep.replicas()[1].available; }, Ms(5000)));
  auto hurried = dep.Post("/work", {Doc("c")}, {.timeout = Ms(300)});
  ASSERT_FALSE(hurried.ok());
  EXPECT_EQ(hurried.status().code(), StatusCode::kDeadlineExceeded) << hurried.status();
}

// SIGSTOP to serving again: three missed liveness checks (3 x (200 + 1000)
// ms at most), then as kRespawnBound.
constexpr Ms kHungReplacedBound{15000};

TEST(RespawnTest, HungReplicaUnderOneHundredThousandDocsIsKilledAndReplacedAndLosesNone) {
  testing::TempDir dir;
  std::string log = dir.File("calls.log");
  Deployment dep({.uses = "ChaosExec",
                  .uses_with = {{"log", log}},
                  .name = "hung",
                  .replicas = 2,
                  .restart_backoff_initial = Ms(100),
                  .liveness_period = Ms(200),
                  // Under TSan on a loaded 2-core machine a healthy worker's
                  // answer can take a few hundred ms.
                  .liveness_timeout = Ms(1000),
                  .liveness_failure_threshold = 3,
                  .monitoring = true});
  ASSERT_TRUE(dep.ok()) << dep.status();
  const pid_t victim = dep.replicas()[0].pid;

  constexpr int kDocs = 100000;
  const DocList docs = NumberedDocs(kDocs);
  // 500 requests of 200 documents, 5 ms each.
  std::future<StatusOr<DocList>> post = PostInBackground(dep, docs, 200, 5.0);
  ASSERT_TRUE(WaitUntil([&] { return CountLines(log) >= 30; }, Ms(30000)));
  const auto stopped_at = SteadyClock::now();
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);

  const pid_t successor = AwaitSuccessor(dep, victim, kHungReplacedBound);
  ASSERT_NE(successor, 0) << "the stopped replica was not replaced within "
                          << kHungReplacedBound.count() << " ms";
  const Ms replaced_in = Since(stopped_at);
  std::printf("[ measured ] stopped replica killed, replaced and back in rotation after %lld ms\n",
              static_cast<long long>(replaced_in.count()));

  StatusOr<DocList> out = post.get();
  ASSERT_TRUE(out.ok()) << out.status();
  std::size_t by_successor = 0;
  ASSERT_TRUE(EveryDocBackInOrder(docs, *out, successor, by_successor));
  std::printf("[ measured ] %zu of %d documents served by the new replica\n", by_successor, kDocs);

  ReplicaInfo replaced = dep.replicas()[0];
  EXPECT_EQ(replaced.restarts, 1);
  EXPECT_FALSE(replaced.failed);
  EXPECT_TRUE(WaitUntil([&] { return !testing::ProcessAlive(victim); }, Ms(5000)))
      << "the stopped process was not killed and reaped";
  EXPECT_TRUE(dep.replicas()[1].available);

  const std::string metrics = testing::Scrape(dep.monitoring_port());
  EXPECT_EQ(testing::Sum(metrics, "gantry_replica_unresponsive_total", "replica=\"hung/rep-0\""), 1)
      << metrics;
  EXPECT_EQ(testing::Sum(metrics, "gantry_replica_unresponsive_total", "replica=\"hung/rep-1\""),
            0);
  EXPECT_EQ(testing::Sum(metrics, "gantry_replica_restarts_total", "replica=\"hung/rep-0\""), 1);
}

TEST(RespawnTest, WithLivenessChecksOffAHungReplicaIsLeftAlone) {
  Deployment dep({.uses = "ChaosExec",
                  .name = "hung-off",
                  .replicas = 2,
                  .liveness_period = Ms(100),
                  .liveness_timeout = Ms(100),
                  .liveness_failure_threshold = 0});
  ASSERT_TRUE(dep.ok()) << dep.status();
  const pid_t victim = dep.replicas()[0].pid;
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  std::this_thread::sleep_for(Ms(1500));
  EXPECT_EQ(dep.replicas()[0].pid, victim);
  EXPECT_EQ(dep.replicas()[0].restarts, 0);
  EXPECT_TRUE(testing::ProcessAlive(victim));
  ASSERT_EQ(::kill(victim, SIGCONT), 0);
  EXPECT_TRUE(dep.Post("/work", {Doc("a"), Doc("b")}, {.request_size = 1}).ok());
}

TEST(RespawnTest, WithMinReadyTheDeploymentServesBeforeItsSlowReplicaJoins) {
  testing::TempDir dir;
  Deployment dep({.uses = "SlowStartExec",
                  .uses_with = {{"slow_flag", dir.File("slow")}, {"slow_ms", 4000}},
                  .name = "partial",
                  .replicas = 3,
                  .min_ready = 2});
  ASSERT_TRUE(dep.ok()) << dep.status();
  std::vector<ReplicaInfo> replicas = dep.replicas();
  int starting = 0;
  std::set<pid_t> ready_pids;
  for (const ReplicaInfo& r : replicas) {
    EXPECT_NE(r.starting, r.available) << r.name;
    starting += r.starting ? 1 : 0;
    if (r.available) {
      ready_pids.insert(r.pid);
    }
  }
  ASSERT_EQ(starting, 1) << "the slow replica is still in its constructor";
  EXPECT_TRUE(Client(dep.address()).Ping(Ms(5000)).ok()) << "health is SERVING with two of three";

  DocList docs;
  for (int i = 0; i < 12; ++i) {
    docs.emplace_back("doc " + std::to_string(i));
  }
  StatusOr<DocList> early = dep.Post("/", docs, {.request_size = 1});
  ASSERT_TRUE(early.ok()) << early.status();
  for (const Doc& doc : *early) {
    EXPECT_TRUE(ready_pids.contains(static_cast<pid_t>(*doc.tags().at("pid").AsInt())))
        << "only the ready replicas serve";
  }

  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const ReplicaInfo& r : dep.replicas()) {
          if (!r.available) {
            return false;
          }
        }
        return true;
      },
      Ms(30000)))
      << "the slow replica did not join";
  for (const ReplicaInfo& r : dep.replicas()) {
    EXPECT_FALSE(r.starting) << r.name;
    EXPECT_EQ(r.restarts, 0) << r.name << ": a slow first start is not a restart";
  }
  std::set<pid_t> pids;
  for (int round = 0; round < 3; ++round) {
    StatusOr<DocList> later = dep.Post("/", docs, {.request_size = 1});
    ASSERT_TRUE(later.ok()) << later.status();
    for (const Doc& doc : *later) {
      pids.insert(static_cast<pid_t>(*doc.tags().at("pid").AsInt()));
    }
  }
  EXPECT_EQ(pids.size(), 3u) << "all three replicas serve once the slow one is ready";
}

TEST(RespawnTest, MinReadyAboveReplicasIsRefused) {
  Deployment dep({.uses = "EchoExec", .name = "too-many", .replicas = 2, .min_ready = 3});
  ASSERT_FALSE(dep.ok());
  EXPECT_EQ(dep.status().message(), "deployment 'too-many': min_ready 3 is more than replicas (2)");
}

TEST(RespawnTest, CrashLoopingReplicaIsGivenUpWithItsErrorAndTheOtherServesOn) {
  testing::TempDir dir;
  const std::string flag = dir.File("broken");
  Deployment dep({.uses = "CrashLoopExec",
                  .uses_with = {{"fail_flag", flag}},
                  .name = "loop",
                  .replicas = 2,
                  .restart_backoff_initial = Ms(50),
                  .restart_backoff_max = Ms(200),
                  .max_init_failures = 3});
  ASSERT_TRUE(dep.ok()) << dep.status();
  const std::vector<ReplicaInfo> before = dep.replicas();

  // From now on every start of the executor fails in its constructor.
  testing::WriteFile(flag, "x");
  ASSERT_EQ(::kill(before[0].pid, SIGKILL), 0);
  ASSERT_TRUE(WaitUntil([&] { return dep.replicas()[0].failed; }, Ms(30000)))
      << "replica 0 was never given up; restarts: " << dep.replicas()[0].restarts;
  ReplicaInfo given_up = dep.replicas()[0];
  EXPECT_EQ(given_up.name, "loop/rep-0");
  EXPECT_EQ(given_up.restarts, 3);
  EXPECT_FALSE(given_up.available);
  EXPECT_THAT(given_up.error,
              AllOf(HasSubstr("failed to start 3 times in a row (max_init_failures)"),
                    HasSubstr("weights file is corrupt (crash-loop test)")));

  // Not restarted forever: several backoff periods later, still 3.
  std::this_thread::sleep_for(Ms(1000));
  EXPECT_EQ(dep.replicas()[0].restarts, 3);

  // The other replica serves on, and the deployment is healthy.
  Client client(dep.address());
  EXPECT_TRUE(client.Ping(Ms(5000)).ok());
  auto out = dep.Post("/", {Doc("a"), Doc("b"), Doc("c")}, {.request_size = 1});
  ASSERT_TRUE(out.ok()) << out.status();
  for (const Doc& doc : *out) {
    EXPECT_EQ(*doc.tags().at("pid").AsInt(), before[1].pid);
  }

  // With the last one gone too, a request says which replicas were given
  // up and why.
  ASSERT_EQ(::kill(before[1].pid, SIGKILL), 0);
  ASSERT_TRUE(WaitUntil([&] { return dep.replicas()[1].failed; }, Ms(30000)));
  EXPECT_TRUE(WaitUntil([&] { return !client.Ping(Ms(500)).ok(); }, Ms(5000)));
  auto none = dep.Post("/", {Doc("x")}, {.timeout = Ms(10000)});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable) << none.status();
  EXPECT_THAT(
      none.status().message(),
      AllOf(HasSubstr("no replica is available"), HasSubstr("replica loop/rep-0 was given up"),
            HasSubstr("replica loop/rep-1 was given up"),
            HasSubstr("weights file is corrupt (crash-loop test)")));
}

// First starts are retried as later ones are: a crash before the replica
// was ever ready costs a backoff, not the Deployment.
TEST(RespawnTest, AFirstStartThatCrashesIsRetriedAndTheDeploymentBecomesReady) {
  testing::TempDir dir;
  Deployment dep({.uses = "FirstStartCrashExec",
                  .uses_with = {{"crash_flag", dir.File("crashed-once")}},
                  .name = "flaky",
                  .restart_backoff_initial = Ms(50),
                  .max_init_failures = 3});
  ASSERT_TRUE(dep.ok()) << dep.status();
  const ReplicaInfo replica = dep.replicas()[0];
  EXPECT_EQ(replica.restarts, 1);
  EXPECT_FALSE(replica.failed);
  auto out = dep.Post("/work", {Doc("x")});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].text(), "served:x");
}

TEST(RespawnTest, AFirstStartThatHangsIsKilledAtTimeoutReadyAndRetried) {
  testing::TempDir dir;
  Deployment dep({.uses = "FirstStartCrashExec",
                  .uses_with = {{"crash_flag", dir.File("hung-once")}, {"hang", true}},
                  .name = "stuck",
                  // Long enough for a sanitizer build's second start.
                  .timeout_ready = Ms(15000),
                  .restart_backoff_initial = Ms(50),
                  .max_init_failures = 3});
  ASSERT_TRUE(dep.ok()) << dep.status();
  EXPECT_EQ(dep.replicas()[0].restarts, 1);
  auto out = dep.Post("/work", {Doc("y")});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].text(), "served:y");
}

TEST(RespawnTest, AFirstStartThatAlwaysCrashesFailsAfterMaxInitFailuresNamingHow) {
  const auto start = SteadyClock::now();
  Deployment dep({.uses = "FirstStartCrashExec",
                  .uses_with = {{"always", true}},
                  .name = "doomed",
                  .restart_backoff_initial = Ms(50),
                  .restart_backoff_max = Ms(200),
                  .max_init_failures = 3});
  ASSERT_FALSE(dep.ok());
  EXPECT_EQ(dep.status().code(), StatusCode::kInternal) << dep.status();
  EXPECT_THAT(dep.status().message(),
              AllOf(HasSubstr("replica doomed/rep-0"), HasSubstr("exited with code 4"),
                    HasSubstr("before it was ready"),
                    HasSubstr("3 failed starts in a row, max_init_failures 3")));
  EXPECT_LT(Since(start), Ms(60000));
}

// A constructor error would fail every time: no retry, whatever the backoff.
TEST(RespawnTest, AConstructorErrorOnTheFirstStartFailsAtOnce) {
  testing::TempDir dir;
  const std::string flag = dir.File("broken");
  testing::WriteFile(flag, "x");
  const auto start = SteadyClock::now();
  Deployment dep({.uses = "CrashLoopExec",
                  .uses_with = {{"fail_flag", flag}},
                  .restart_backoff_initial = Ms(20000),
                  .restart_backoff_max = Ms(20000),
                  .max_init_failures = 5});
  ASSERT_FALSE(dep.ok());
  EXPECT_EQ(dep.status().code(), StatusCode::kFailedPrecondition) << dep.status();
  EXPECT_THAT(dep.status().message(), HasSubstr("weights file is corrupt (crash-loop test)"));
  EXPECT_LT(Since(start), Ms(20000)) << "the start was retried after a backoff";
}

}  // namespace
}  // namespace gantry
