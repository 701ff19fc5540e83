// The queue policy of dynamic batching: a queue timeout withdraws a request
// whose handler has not started (and never runs it), a request already in
// a call is served whatever the timeout, and a more urgent level goes before
// a less urgent one, due or not.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "testutil/testutil.h"
#include "worker/batch_queue.h"

namespace gantry::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A handler that waits until the test opens the gate: the flusher is stuck
// in it meanwhile, as it is in a long forward pass.
struct Gate {
  std::mutex mutex;
  std::unique_lock<std::mutex> hold{mutex};
  BatchInvoke Blocked() {
    return [this](DocList& /*docs*/) {
      std::lock_guard wait(mutex);
      return HandlerOutcome{};
    };
  }
  void Open() {
    if (hold.owns_lock()) {
      hold.unlock();
    }
  }
};

// Records which queue's handler ran, in order.
struct CallLog {
  std::mutex mutex;
  std::vector<std::string> calls;
  BatchInvoke Recording(const std::string& name) {
    return [this, name](DocList& docs) {
      std::lock_guard lock(mutex);
      calls.push_back(name);
      for (Doc& doc : docs) {
        doc.set_text(std::string(doc.text()) + "!");
      }
      return HandlerOutcome{};
    };
  }
};

// A queue set whose flusher the test can hold in a gated call, with pushes
// from threads of their own, always opened and joined at the end.
class BatchQueuePolicyTest : public ::testing::Test {
 protected:
  void TearDown() override {
    gate_.Open();
    testing::JoinWithin(threads_, std::chrono::seconds(30), "the pushes");
  }

  // Holds the flusher in a call until gate_.Open().
  void OccupyFlusher() {
    threads_.emplace_back([this] {
      DocList first{Doc("first")};
      (void)set_.Push(
          "busy", kPlain, [this] { return gate_.Blocked(); }, "'/busy'", first);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the flusher is in it
  }

  // Pushes `docs` to queue `key` from a thread of its own; its handler
  // records `key` in log_.
  void PushInBackground(const std::string& key, const DynamicBatching& batching, DocList& docs,
                        int priority = 0) {
    threads_.emplace_back([this, key, batching, &docs, priority] {
      (void)set_.Push(
          key, batching, [this, key] { return log_.Recording(key); }, "'/e'", docs, priority);
    });
  }

  static constexpr DynamicBatching kPlain{.preferred_batch_size = 1, .timeout_ms = 0};
  BatchQueueSet set_;
  Gate gate_;
  CallLog log_;
  std::vector<std::thread> threads_;
};

TEST_F(BatchQueuePolicyTest, QueueTimeoutAnswersDeadlineExceededAndTheHandlerNeverRuns) {
  OccupyFlusher();

  const DynamicBatching timed{.preferred_batch_size = 1, .timeout_ms = 0, .queue_timeout_ms = 150};
  DocList late{Doc("late")};
  const auto start = std::chrono::steady_clock::now();
  HandlerOutcome outcome = set_.Push(
      "timed", timed, [&] { return log_.Recording("timed"); }, "'/timed'", late);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(outcome.status.code(), StatusCode::kDeadlineExceeded) << outcome.status;
  EXPECT_THAT(outcome.status.message(), HasSubstr("queue_timeout 150 ms"));
  EXPECT_THAT(outcome.status.message(), HasSubstr("the handler did not run"));
  EXPECT_EQ(outcome.refused, "queue_timeout");
  EXPECT_GE(waited, std::chrono::milliseconds(140));
  EXPECT_LT(waited, std::chrono::seconds(10)) << "the timeout waited for the busy flusher";
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].text(), "late");  // untouched

  gate_.Open();
  testing::JoinWithin(threads_, std::chrono::seconds(30), "the gated push");
  // The withdrawn request left nothing behind: the next one is served alone.
  DocList next{Doc("next")};
  HandlerOutcome served = set_.Push(
      "timed", timed, [&] { return log_.Recording("timed"); }, "'/timed'", next);
  EXPECT_TRUE(served.status.ok()) << served.status;
  EXPECT_EQ(next[0].text(), "next!");
  std::lock_guard lock(log_.mutex);
  EXPECT_THAT(log_.calls, ElementsAre("timed"));
}

// Triton's allow_timeout_override: the request's own queue timeout, with
// no timeout configured for the queue.
TEST_F(BatchQueuePolicyTest, ARequestsOwnQueueTimeoutRefusesIt) {
  OccupyFlusher();
  DocList late{Doc("late")};
  const auto start = std::chrono::steady_clock::now();
  HandlerOutcome outcome = set_.Push(
      "own", kPlain, [&] { return log_.Recording("own"); }, "'/own'", late, 0,
      /*queue_timeout_ms=*/100);
  EXPECT_EQ(outcome.status.code(), StatusCode::kDeadlineExceeded) << outcome.status;
  EXPECT_THAT(outcome.status.message(), HasSubstr("queue_timeout 100 ms"));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(90));
  EXPECT_EQ(late[0].text(), "late");
}

// Triton's timeout_action DELAY: a request past its queue timeout is not
// refused but served after the requests that were waiting behind it.
TEST_F(BatchQueuePolicyTest, DelayServesATimedOutRequestAfterTheOthers) {
  OccupyFlusher();
  const DynamicBatching delayed{.preferred_batch_size = 1,
                                .timeout_ms = 0,
                                .timeout_action = DynamicBatching::TimeoutAction::kDelay};
  std::mutex order_mutex;
  std::vector<std::string> order;
  auto recording = [&] {
    return BatchInvoke([&](DocList& docs) {
      std::lock_guard lock(order_mutex);
      for (Doc& doc : docs) {
        order.emplace_back(doc.text());
      }
      return HandlerOutcome{};
    });
  };
  std::vector<DocList> docs = {DocList{Doc("a")}, DocList{Doc("b")}, DocList{Doc("c")}};
  std::vector<HandlerOutcome> outcomes(3);
  // a times out after 100 ms; b and c have no timeout.
  for (int i = 0; i < 3; ++i) {
    threads_.emplace_back([&, i] {
      outcomes[i] = set_.Push("delayed", delayed, recording, "'/d'", docs[i], 0,
                              /*queue_timeout_ms=*/i == 0 ? 100 : 0);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a is past its timeout
  gate_.Open();
  testing::JoinWithin(threads_, std::chrono::seconds(30), "the delayed pushes");
  for (const HandlerOutcome& outcome : outcomes) {
    EXPECT_TRUE(outcome.status.ok()) << outcome.status;
    EXPECT_TRUE(outcome.refused.empty());
  }
  EXPECT_TRUE(outcomes[0].delayed);
  EXPECT_FALSE(outcomes[1].delayed);
  EXPECT_FALSE(outcomes[2].delayed);
  std::lock_guard lock(order_mutex);
  EXPECT_THAT(order, ElementsAre("b", "c", "a"));
}

TEST_F(BatchQueuePolicyTest, ARequestWhoseCallStartedIsServedPastItsQueueTimeout) {
  const DynamicBatching timed{.preferred_batch_size = 1, .timeout_ms = 0, .queue_timeout_ms = 50};
  DocList docs{Doc("slow")};
  HandlerOutcome outcome = set_.Push(
      "slow", timed,
      [] {
        return BatchInvoke([](DocList& batch) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          batch[0].set_text("done");
          return HandlerOutcome{};
        });
      },
      "'/slow'", docs);
  EXPECT_TRUE(outcome.status.ok()) << outcome.status;
  EXPECT_TRUE(outcome.refused.empty());
  EXPECT_EQ(docs[0].text(), "done");
}

TEST_F(BatchQueuePolicyTest, TheMoreUrgentLevelGoesFirstWithoutWaitingForCompany) {
  OccupyFlusher();
  // Level 2 is full and due; level 1 would wait a minute for company, but a
  // more urgent request never waits behind less urgent work.
  const DynamicBatching levels{.preferred_batch_size = 1,
                               .timeout_ms = 60000,
                               .priority_levels = 2,
                               .default_priority_level = 2};
  std::vector<DocList> low(3, DocList{Doc("low")});
  for (DocList& docs : low) {
    PushInBackground("low", levels, docs, 2);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const DynamicBatching waiting{.preferred_batch_size = 100,
                                .timeout_ms = 60000,
                                .priority_levels = 2,
                                .default_priority_level = 2};
  DocList urgent{Doc("urgent")};
  std::promise<HandlerOutcome> promise;
  std::future<HandlerOutcome> urgent_outcome = promise.get_future();
  threads_.emplace_back([&] {
    promise.set_value(set_.Push(
        "high", waiting, [&] { return log_.Recording("high"); }, "'/e'", urgent, 1));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  gate_.Open();
  const bool answered =
      urgent_outcome.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  testing::JoinWithin(threads_, std::chrono::seconds(30), "the prioritised pushes");
  ASSERT_TRUE(answered) << "the urgent request waited for its batch timeout";
  EXPECT_TRUE(urgent_outcome.get().status.ok());
  EXPECT_EQ(urgent[0].text(), "urgent!");
  std::lock_guard lock(log_.mutex);
  // The three low requests went after it, one call of preferred_batch_size
  // 1 each.
  EXPECT_THAT(log_.calls, ElementsAre("high", "low", "low", "low"));
}

TEST_F(BatchQueuePolicyTest, WithoutLevelsTheOldestDueQueueGoesFirst) {
  OccupyFlusher();
  DocList a{Doc("a")};
  DocList b{Doc("b")};
  PushInBackground("a", kPlain, a);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  PushInBackground("b", kPlain, b);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  gate_.Open();
  testing::JoinWithin(threads_, std::chrono::seconds(30), "the pushes");
  std::lock_guard lock(log_.mutex);
  EXPECT_THAT(log_.calls, ElementsAre("a", "b"));
}

}  // namespace
}  // namespace gantry::internal
