// The queue policy of dynamic batching through a real worker: a request
// the busy worker could not start within queue_timeout is refused without
// its handler running and counted (HTTP 504 over HTTP); an urgent request overtakes a queue of
// less urgent ones; a priority out of range is the client's error.
#include <gantry/deployment.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "integration/metrics_scrape.h"
#include "testutil/testutil.h"

namespace gantry {
namespace {

using ::testing::HasSubstr;

Parameters Params(Value::Dict values) { return Parameters(std::move(values)); }

// The handler call that served the one document of `reply`, or -1.
std::int64_t CallOf(const StatusOr<DocList>& reply) {
  if (!reply.ok() || reply->size() != 1) {
    return -1;
  }
  const std::int64_t* call = (*reply)[0].tags().at("call").AsInt();
  return call == nullptr ? -1 : *call;
}

// Posts one /slow request that sleeps `sleep_ms` in its handler from a
// thread of `threads`, into `busy`; true once the worker holds it (its
// flusher takes it at once), and a little later, so that what the test
// posts next queues behind it.
bool OccupyTheWorker(Deployment& dep, int metrics_port, double sleep_ms, StatusOr<DocList>& busy,
                     std::vector<std::thread>& threads) {
  threads.emplace_back([&dep, &busy, sleep_ms] {
    busy = dep.Post("/slow", DocList{Doc("busy")},
                    {.parameters = Params({{"sleep_ms", Value(sleep_ms)}})});
  });
  const bool held = testing::WaitUntil(
      [&] {
        return testing::Sum(testing::Scrape(metrics_port), "gantry_pending_requests",
                            "endpoint=\"/slow\"") >= 1;
      },
      std::chrono::milliseconds(20000));
  if (!held) {
    testing::JoinWithin(threads, std::chrono::seconds(60), "the busy post");
    return false;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  return true;
}

TEST(QueuePolicyTest, QueueTimeoutRefusesWhatTheBusyWorkerCouldNotStartAndCountsIt) {
  Deployment dep(
      {.uses = "BatchCountExec",
       .http_port = 0,
       .uses_dynamic_batching =
           {{"/slow", {.preferred_batch_size = 1, .timeout_ms = 0, .queue_timeout_ms = 300}}},
       .monitoring = true});
  ASSERT_TRUE(dep.ok()) << dep.status();
  // Call 1 opens the connections, which a sanitizer build makes slow.
  ASSERT_TRUE(dep.Post("/slow", DocList{Doc("warm-up")}).ok());
  const int metrics_port = dep.replicas()[0].monitoring_port;
  StatusOr<DocList> busy = DocList();
  std::vector<std::thread> threads;
  ASSERT_TRUE(OccupyTheWorker(dep, metrics_port, 2500, busy, threads));

  const auto start = std::chrono::steady_clock::now();
  StatusOr<DocList> late = dep.Post("/slow", DocList{Doc("late")});
  const auto waited = testing::Since(start);
  // Over HTTP the same refusal is a gateway timeout.
  httplib::Client http("127.0.0.1", dep.http_port());
  http.set_read_timeout(30, 0);
  auto late_http = http.Post("/slow", R"({"data": [{"text": "late"}]})", "application/json");
  testing::JoinWithin(threads, std::chrono::seconds(60), "the busy post");
  ASSERT_TRUE(late_http) << httplib::to_string(late_http.error());
  EXPECT_EQ(late_http->status, 504) << late_http->body;
  EXPECT_THAT(late_http->body, HasSubstr("queue_timeout 300 ms"));
  ASSERT_FALSE(late.ok()) << "served after " << waited.count() << " ms";
  EXPECT_THAT(late.status().message(), HasSubstr("queue_timeout 300 ms"));
  EXPECT_THAT(late.status().message(), HasSubstr("the handler did not run"));
  EXPECT_THAT(late.status().message(), HasSubstr("endpoint '/slow'"));
  EXPECT_LT(waited, std::chrono::milliseconds(2000)) << "refused only when the busy call ended";
  ASSERT_TRUE(busy.ok()) << busy.status();
  EXPECT_EQ(CallOf(busy), 2);

  // The refused requests never reached the handler: the next one is call 3.
  StatusOr<DocList> next = dep.Post("/slow", DocList{Doc("next")});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(CallOf(next), 3);

  const std::string metrics = testing::Scrape(metrics_port);
  EXPECT_EQ(testing::Sum(metrics, "gantry_request_failure_total", "reason=\"queue_timeout\""), 2)
      << metrics;
  EXPECT_EQ(testing::Sum(metrics, "gantry_request_success_total", "endpoint=\"/slow\""), 3);
}

// A warm-up call, one busy call, then four less urgent requests, then one
// urgent one: with priority levels the urgent one is the next call; without,
// the last.
std::int64_t UrgentCallAfterAQueueOfOthers(int priority_levels) {
  Deployment dep(
      {.uses = "BatchCountExec",
       .uses_dynamic_batching = {
           {"/slow",
            {.preferred_batch_size = 1, .timeout_ms = 0, .priority_levels = priority_levels}}}});
  EXPECT_TRUE(dep.ok()) << dep.status();
  if (!dep.ok()) {
    return -1;
  }
  // Call 1 opens the connections, which a sanitizer build makes slow.
  EXPECT_TRUE(dep.Post("/slow", DocList{Doc("warm-up")}).ok());
  std::vector<std::thread> threads;
  std::vector<StatusOr<DocList>> replies(6, DocList());
  threads.emplace_back([&] {
    replies[0] = dep.Post("/slow", DocList{Doc("busy")},
                          {.parameters = Params({{"sleep_ms", Value(1500.0)}})});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (std::size_t i = 1; i <= 4; ++i) {
    threads.emplace_back([&, i] {
      replies[i] = dep.Post("/slow", DocList{Doc("low")},
                            {.parameters = Params({{"sleep_ms", Value(50.0)}})});
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  threads.emplace_back([&] {
    replies[5] = dep.Post("/slow", DocList{Doc("urgent")},
                          {.parameters = Params({{"sleep_ms", Value(50.0)}, {"priority", 1.0}})});
  });
  testing::JoinWithin(threads, std::chrono::seconds(60), "the prioritised posts");
  for (const StatusOr<DocList>& reply : replies) {
    EXPECT_TRUE(reply.ok()) << reply.status();
  }
  return CallOf(replies[5]);
}

// allow_timeout_override: a client's `queue_timeout` parameter shortens
// its wait (and a bad one is its error); timeout_action DELAY serves a
// late request instead of refusing it.
TEST(QueuePolicyTest, AClientMayShortenItsQueueTimeoutAndDelayServesLateRequests) {
  for (const bool delay : {false, true}) {
    SCOPED_TRACE(delay ? "DELAY" : "REJECT");
    DynamicBatching slow{.preferred_batch_size = 1, .timeout_ms = 0, .queue_timeout_ms = 60000};
    slow.allow_timeout_override = true;
    if (delay) {
      slow.timeout_action = DynamicBatching::TimeoutAction::kDelay;
    }
    Deployment dep({.uses = "BatchCountExec",
                    .name = delay ? "qdelay" : "qreject",
                    .uses_dynamic_batching = {{"/slow", slow}},
                    .monitoring = true});
    ASSERT_TRUE(dep.ok()) << dep.status();
    ASSERT_TRUE(dep.Post("/slow", DocList{Doc("warm-up")}).ok());
    const int metrics_port = dep.replicas()[0].monitoring_port;
    StatusOr<DocList> busy = DocList();
    std::vector<std::thread> threads;
    ASSERT_TRUE(OccupyTheWorker(dep, metrics_port, 1500, busy, threads));
    StatusOr<DocList> late = dep.Post("/slow", DocList{Doc("late")},
                                      {.parameters = Params({{"queue_timeout", Value(200.0)}})});
    if (delay) {
      EXPECT_TRUE(late.ok()) << late.status();
    } else {
      // An executor's error reply, as the configured queue_timeout's.
      ASSERT_FALSE(late.ok());
      EXPECT_THAT(late.status().message(), HasSubstr("queue_timeout 200 ms"));
      EXPECT_THAT(late.status().message(), HasSubstr("the handler did not run"));
    }
    StatusOr<DocList> bad = dep.Post("/slow", DocList{Doc("bad")},
                                     {.parameters = Params({{"queue_timeout", Value("soon")}})});
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status();
    EXPECT_THAT(bad.status().message(), HasSubstr("'queue_timeout'"));
    testing::JoinWithin(threads, std::chrono::seconds(60), "the busy post");
    EXPECT_TRUE(busy.ok()) << busy.status();
    const std::string metrics = testing::Scrape(metrics_port);
    EXPECT_EQ(testing::Sum(metrics, "gantry_queue_delayed_total", "endpoint=\"/slow\""),
              delay ? 1 : 0)
        << metrics;
    if (!delay) {
      EXPECT_EQ(testing::Sum(metrics, "gantry_request_failure_total", "reason=\"queue_timeout\""),
                1)
          << metrics;
    }
  }
}

TEST(QueuePolicyTest, AnUrgentRequestOvertakesAQueueOfLessUrgentOnes) {
  // Call 1 warms up, call 2 is the busy one.
  EXPECT_EQ(UrgentCallAfterAQueueOfOthers(/*priority_levels=*/2), 3);
  // Without levels, `priority` is an ordinary parameter and arrival order rules.
  EXPECT_EQ(UrgentCallAfterAQueueOfOthers(/*priority_levels=*/0), 7);
}

TEST(QueuePolicyTest, APriorityOutOfRangeIsTheClientsErrorNamingTheRange) {
  Deployment dep(
      {.uses = "BatchCountExec",
       .uses_dynamic_batching = {
           {"/slow", {.preferred_batch_size = 1, .timeout_ms = 0, .priority_levels = 3}}}});
  ASSERT_TRUE(dep.ok()) << dep.status();
  for (double bad : {0.0, 4.0, 1.5}) {
    StatusOr<DocList> reply =
        dep.Post("/slow", DocList{Doc("x")}, {.parameters = Params({{"priority", bad}})});
    ASSERT_FALSE(reply.ok()) << bad;
    EXPECT_EQ(reply.status().code(), StatusCode::kInvalidArgument) << reply.status();
    EXPECT_THAT(reply.status().message(),
                HasSubstr("parameter 'priority' must be an integer from 1 (the most urgent) to 3"));
  }
  StatusOr<DocList> good =
      dep.Post("/slow", DocList{Doc("x")}, {.parameters = Params({{"priority", 3.0}})});
  EXPECT_TRUE(good.ok()) << good.status();
}

}  // namespace
}  // namespace gantry
