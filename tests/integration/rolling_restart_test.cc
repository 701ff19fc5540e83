// Deployment::RollingRestart (gantry/deployment.h): every replica is
// replaced, one at a time, while requests keep coming, and none fails or
// loses a document; what only a restart can change is refused and the
// replicas stay; Stop ends a rolling restart in progress.
#include <gantry/deployment.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testutil/testutil.h"

namespace gantry {
namespace {

using ::testing::HasSubstr;
using Ms = std::chrono::milliseconds;

// TagExec tags each document with v = `value` and appends "|v" to its text.
DeploymentOptions Tagging(const std::string& value, int replicas) {
  return {.uses = "TagExec",
          .uses_with = {{"tag", Value("v")}, {"value", Value(value)}},
          .name = "rolling",
          .replicas = replicas};
}

std::set<pid_t> Pids(const Deployment& dep) {
  std::set<pid_t> pids;
  for (const ReplicaInfo& r : dep.replicas()) {
    pids.insert(r.pid);
  }
  return pids;
}

// Posts 8 documents at a time from one thread until Stop(), checking every
// reply: all documents back, in order, tagged; records the tags seen.
class Stream {
 public:
  explicit Stream(Deployment& dep)
      : thread_([this, &dep] {
          for (int n = 0; !stop_.load(); ++n) {
            DocList docs;
            for (int i = 0; i < 8; ++i) {
              docs.emplace_back(std::to_string(n) + "." + std::to_string(i));
            }
            StatusOr<DocList> out = dep.Post("/tag", docs, {.timeout = Ms(60000)});
            std::lock_guard lock(mutex_);
            if (!out.ok()) {
              failures_.push_back(out.status().ToString());
              continue;
            }
            bool whole = out->size() == docs.size();
            for (std::size_t i = 0; whole && i < docs.size(); ++i) {
              whole = (*out)[i].text() == std::string(docs[i].text()) + "|v";
            }
            if (!whole) {
              failures_.push_back("request " + std::to_string(n) + ": documents lost or changed");
              continue;
            }
            ++served_;
            last_tag_ = *(*out)[0].tags().at("v").AsText();
          }
        }) {}
  ~Stream() { Stop(); }

  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) {
      thread_.join();
    }
  }
  // Waits until `n` more requests were served (at most 30 s).
  bool ServeMore(int n) {
    const int target = served() + n;
    return testing::WaitUntil([&] { return served() >= target; }, Ms(30000));
  }
  int served() {
    std::lock_guard lock(mutex_);
    return served_;
  }
  std::string last_tag() {
    std::lock_guard lock(mutex_);
    return last_tag_;
  }
  std::vector<std::string> failures() {
    std::lock_guard lock(mutex_);
    return failures_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  int served_ = 0;                     // guarded by mutex_
  std::string last_tag_;               // guarded by mutex_
  std::vector<std::string> failures_;  // guarded by mutex_
  std::thread thread_;                 // last: starts once the rest is built
};

TEST(RollingRestartTest, EveryReplicaIsReplacedUnderAStreamAndNoRequestFails) {
  for (int replicas : {2, 1}) {
    SCOPED_TRACE(std::to_string(replicas) + " replicas");
    Deployment dep(Tagging("old", replicas));
    ASSERT_TRUE(dep.ok()) << dep.status();
    const std::set<pid_t> before = Pids(dep);
    Stream stream(dep);
    ASSERT_TRUE(stream.ServeMore(20));
    EXPECT_EQ(stream.last_tag(), "old");

    Status rolled = dep.RollingRestart(Tagging("new", replicas));
    ASSERT_TRUE(rolled.ok()) << rolled;
    ASSERT_TRUE(stream.ServeMore(20));
    stream.Stop();
    EXPECT_EQ(stream.last_tag(), "new");
    EXPECT_THAT(stream.failures(), ::testing::IsEmpty());
    const std::set<pid_t> after = Pids(dep);
    ASSERT_EQ(after.size(), static_cast<std::size_t>(replicas));
    for (pid_t pid : before) {
      EXPECT_FALSE(after.contains(pid)) << "replica process " << pid << " was not replaced";
      EXPECT_NE(::kill(pid, 0), 0) << "the old replica " << pid << " still runs";
    }
    for (const ReplicaInfo& r : dep.replicas()) {
      EXPECT_TRUE(r.available) << r.name;
    }
  }
}

TEST(RollingRestartTest, WhatOnlyARestartChangesIsRefusedAndTheReplicasStay) {
  Deployment dep(Tagging("old", 2));
  ASSERT_TRUE(dep.ok()) << dep.status();
  const std::set<pid_t> before = Pids(dep);

  DeploymentOptions port = Tagging("new", 2);
  port.port = 1;
  EXPECT_THAT(dep.RollingRestart(port).message(), HasSubstr("`port` changed"));
  EXPECT_THAT(dep.RollingRestart(Tagging("new", 3)).message(), HasSubstr("`replicas` changed"));
  EXPECT_THAT(dep.RollingRestart(port).message(),
              HasSubstr("it may change uses, uses_with, uses_metas, env, gpus, "
                        "uses_dynamic_batching, volumes, log_level, timeout_ready, "
                        "restart_backoff_initial, restart_backoff_max and max_init_failures)"));
  DeploymentOptions bad = Tagging("new", 2);
  bad.timeout_ready = Ms(-5);
  EXPECT_FALSE(dep.RollingRestart(bad).ok());
  // A constructor that throws: the first new replica fails, nothing is replaced.
  DeploymentOptions throws = Tagging("new", 2);
  throws.uses = "CtorFailExec";
  Status failed = dep.RollingRestart(throws);
  EXPECT_FALSE(failed.ok());
  EXPECT_THAT(failed.message(), HasSubstr("every replica still runs the old settings"));

  EXPECT_EQ(Pids(dep), before);
  StatusOr<DocList> out = dep.Post("/tag", DocList{Doc("x")});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*(*out)[0].tags().at("v").AsText(), "old");
}

// The supervisor restarts a replica that dies after a rolling restart from
// the new settings, the restart settings included.
TEST(RollingRestartTest, AReplicaThatDiesAfterwardsStartsAgainFromTheNewSettings) {
  DeploymentOptions old_settings = Tagging("old", 1);
  old_settings.restart_backoff_initial = Ms(60000);  // the old back-off: not within this test
  old_settings.restart_backoff_max = Ms(60000);
  Deployment dep(std::move(old_settings));
  ASSERT_TRUE(dep.ok()) << dep.status();
  DeploymentOptions new_settings = Tagging("new", 1);
  new_settings.restart_backoff_initial = Ms(100);
  Status rolled = dep.RollingRestart(new_settings);
  ASSERT_TRUE(rolled.ok()) << rolled;
  const pid_t rolled_pid = dep.replicas().at(0).pid;
  ASSERT_EQ(::kill(rolled_pid, SIGKILL), 0);
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        const std::vector<ReplicaInfo> replicas = dep.replicas();
        return replicas.at(0).pid != rolled_pid && replicas.at(0).available;
      },
      Ms(30000)));
  StatusOr<DocList> out = dep.Post("/tag", DocList{Doc("x")}, {.timeout = Ms(30000)});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*(*out)[0].tags().at("v").AsText(), "new");
}

TEST(RollingRestartTest, StopEndsARollingRestartInProgress) {
  testing::TempDir dir;
  Deployment dep(Tagging("old", 1));
  ASSERT_TRUE(dep.ok()) << dep.status();
  // The new replica takes 30 s to start; Stop comes first.
  std::future<Status> rolling = std::async(std::launch::async, [&] {
    return dep.RollingRestart({.uses = "SlowStartExec",
                               .uses_with = {{"slow_flag", dir.File("slow")}, {"slow_ms", 30000}},
                               .name = "rolling",
                               .replicas = 1});
  });
  ASSERT_TRUE(
      testing::WaitUntil([&] { return std::filesystem::exists(dir.File("slow")); }, Ms(20000)));
  const auto stop_started = std::chrono::steady_clock::now();
  dep.Stop();
  // The starting replica is killed, not waited for.
  EXPECT_LT(testing::Since(stop_started), Ms(6000));
  ASSERT_EQ(rolling.wait_for(Ms(5000)), std::future_status::ready);
  EXPECT_THAT(rolling.get().message(), HasSubstr("stopping"));
}

}  // namespace
}  // namespace gantry
