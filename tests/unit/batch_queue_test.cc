// BatchQueue with plain threads: merging, splitting back, slicing, errors,
// the queue cap and the timeout. Bounds on time are generous on purpose.
#include "worker/batch_queue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include "testutil/testutil.h"

namespace gantry::internal {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

DocList Docs(int request, int n) {
  DocList docs;
  for (int i = 0; i < n; ++i) {
    docs.emplace_back(std::to_string(request) + "/" + std::to_string(i));
  }
  return docs;
}

// Records every call's size and upper-cases nothing: appends "!" to texts.
struct Recorder {
  std::mutex mutex;
  std::vector<std::size_t> sizes;
  BatchInvoke Invoke() {
    return [this](DocList& docs) {
      {
        std::lock_guard lock(mutex);
        sizes.push_back(docs.size());
      }
      for (Doc& doc : docs) {
        doc.set_text(std::string(doc.text()) + "!");
      }
      return HandlerOutcome{};
    };
  }
};

// Starts `requests` callers of `per_request` documents at once; returns
// each caller's outcome and documents.
struct Results {
  std::vector<HandlerOutcome> outcomes;
  std::vector<DocList> docs;
};
Results PushConcurrently(BatchQueue& queue, int requests, int per_request) {
  Results results;
  results.outcomes.resize(static_cast<std::size_t>(requests));
  for (int r = 0; r < requests; ++r) {
    results.docs.push_back(Docs(r, per_request));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < requests; ++r) {
    threads.emplace_back([&, r] {
      results.outcomes[static_cast<std::size_t>(r)] =
          queue.Push(results.docs[static_cast<std::size_t>(r)]);
    });
  }
  testing::JoinWithin(threads, std::chrono::seconds(60), "concurrent pushes");
  return results;
}

TEST(BatchQueueTest, MergesConcurrentRequestsAndSplitsThemBack) {
  Recorder recorder;
  BatchQueue queue({.preferred_batch_size = 16, .timeout_ms = 2000}, recorder.Invoke(), "test");
  Results results = PushConcurrently(queue, 64, 1);
  for (int r = 0; r < 64; ++r) {
    ASSERT_TRUE(results.outcomes[static_cast<std::size_t>(r)].status.ok());
    ASSERT_EQ(results.docs[static_cast<std::size_t>(r)].size(), 1u);
    EXPECT_EQ(results.docs[static_cast<std::size_t>(r)][0].text(), std::to_string(r) + "/0!");
  }
  // 64 documents at 16 per call: 4 calls when all arrive together, a few
  // more if the threads trickle in, never one per request.
  EXPECT_GE(queue.calls(), 4u);
  EXPECT_LE(queue.calls(), 16u);
  for (std::size_t size : recorder.sizes) {
    EXPECT_LE(size, 16u);
  }
}

TEST(BatchQueueTest, KeepsTheOrderOfEachRequestsDocuments) {
  Recorder recorder;
  BatchQueue queue({.preferred_batch_size = 5, .timeout_ms = 50}, recorder.Invoke(), "test");
  Results results = PushConcurrently(queue, 8, 7);  // requests straddle calls
  for (int r = 0; r < 8; ++r) {
    const DocList& docs = results.docs[static_cast<std::size_t>(r)];
    ASSERT_EQ(docs.size(), 7u);
    for (int i = 0; i < 7; ++i) {
      EXPECT_EQ(docs[static_cast<std::size_t>(i)].text(),
                std::to_string(r) + "/" + std::to_string(i) + "!");
    }
  }
  for (std::size_t size : recorder.sizes) {
    EXPECT_LE(size, 5u);
  }
}

TEST(BatchQueueTest, FlushAllAndMaxBatchSize) {
  Recorder recorder;
  BatchQueue queue(
      {.preferred_batch_size = 1000, .timeout_ms = 1000, .flush_all = true, .max_batch_size = 10},
      recorder.Invoke(), "test");
  Results results = PushConcurrently(queue, 4, 6);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(results.outcomes[static_cast<std::size_t>(r)].status.ok());
    const DocList& docs = results.docs[static_cast<std::size_t>(r)];
    ASSERT_EQ(docs.size(), 6u);
    EXPECT_EQ(docs[5].text(), std::to_string(r) + "/5!");
  }
  std::lock_guard lock(recorder.mutex);
  // Every document went through the handler exactly once, in calls of at
  // most max_batch_size.
  EXPECT_EQ(std::accumulate(recorder.sizes.begin(), recorder.sizes.end(), std::size_t{0}), 24u);
  for (std::size_t size : recorder.sizes) {
    EXPECT_LE(size, 10u);
  }
  // Requests were merged: no request has more than 6 documents, so a call
  // of 10 holds documents of two or more. All four arrive within the 1 s
  // window: flush_all makes them one batch, sliced 10 + 10 + 4.
  EXPECT_THAT(recorder.sizes, ::testing::Contains(10u));
  EXPECT_LE(recorder.sizes.size(), 4u);
}

TEST(BatchQueueTest, TimeoutFlushesAPartialBatch) {
  Recorder recorder;
  BatchQueue queue({.preferred_batch_size = 1000, .timeout_ms = 100}, recorder.Invoke(), "test");
  DocList docs = Docs(0, 1);
  auto start = Clock::now();
  HandlerOutcome outcome = queue.Push(docs);
  auto elapsed = Clock::now() - start;
  EXPECT_TRUE(outcome.status.ok());
  EXPECT_EQ(docs[0].text(), "0/0!");
  EXPECT_GE(elapsed, std::chrono::milliseconds(90));  // waited for company
  EXPECT_LT(elapsed, std::chrono::seconds(10));       // but not forever
}

// What a handler that throws on document "1/0" comes to.
HandlerOutcome CannotEncode() {
  return {.status = UnknownError("cannot encode 1/0"),
          .exception_name = "std::runtime_error",
          .started = {},
          .refused = ""};
}

TEST(BatchQueueTest, AnErrorReachesEveryRequestOfTheFailingCall) {
  std::atomic<int> calls{0};
  BatchQueue queue(
      {.preferred_batch_size = 4, .timeout_ms = 2000},
      [&](DocList& docs) {
        ++calls;
        for (const Doc& doc : docs) {
          if (doc.text() == "1/0") {
            return CannotEncode();
          }
        }
        return HandlerOutcome{};
      },
      "test");
  Results results = PushConcurrently(queue, 4, 1);
  int failed = 0;
  for (const HandlerOutcome& outcome : results.outcomes) {
    if (!outcome.status.ok()) {
      ++failed;
      EXPECT_THAT(outcome.status.message(), HasSubstr("cannot encode 1/0"));
      EXPECT_EQ(outcome.exception_name, "std::runtime_error");
    }
  }
  EXPECT_GE(failed, 1);
  EXPECT_FALSE(results.outcomes[1].status.ok());
}

// Declared retried alone: the failing call's requests run again one by one,
// so only the request the handler cannot take fails.
TEST(BatchQueueTest, RetriedAloneOnlyTheRequestTheHandlerCannotTakeFails) {
  std::mutex mutex;
  std::vector<std::size_t> sizes;
  BatchQueue queue(
      {.preferred_batch_size = 4, .timeout_ms = 2000},
      [&](DocList& docs) {
        {
          std::lock_guard lock(mutex);
          sizes.push_back(docs.size());
        }
        // As the declaration asks, a failing call leaves its documents as
        // they came.
        for (const Doc& doc : docs) {
          if (doc.text() == "1/0") {
            return CannotEncode();
          }
        }
        for (Doc& doc : docs) {
          doc.set_text(std::string(doc.text()) + "!");
        }
        return HandlerOutcome{};
      },
      "test", /*retry_alone=*/true);
  Results results = PushConcurrently(queue, 4, 2);
  for (std::size_t r = 0; r < results.outcomes.size(); ++r) {
    SCOPED_TRACE("request " + std::to_string(r));
    if (r == 1) {
      EXPECT_THAT(results.outcomes[r].status.message(), HasSubstr("cannot encode 1/0"));
      EXPECT_EQ(results.outcomes[r].exception_name, "std::runtime_error");
      continue;
    }
    ASSERT_TRUE(results.outcomes[r].status.ok()) << results.outcomes[r].status;
    ASSERT_EQ(results.docs[r].size(), 2u);
    // Handled once, by the call that succeeded.
    EXPECT_EQ(results.docs[r][1].text(), std::to_string(r) + "/1!");
  }
  std::lock_guard lock(mutex);
  ASSERT_FALSE(sizes.empty());
  EXPECT_GT(sizes.size(), 1u) << "the failing call was not retried";
}

TEST(BatchQueueTest, TheHandlerMustKeepTheNumberOfDocuments) {
  BatchQueue queue(
      {.preferred_batch_size = 1, .timeout_ms = 0},
      [](DocList& docs) {
        docs.emplace_back("extra");
        return HandlerOutcome{};
      },
      "test");
  DocList docs = Docs(0, 1);
  HandlerOutcome outcome = queue.Push(docs);
  EXPECT_EQ(outcome.status.code(), StatusCode::kInternal);
  EXPECT_THAT(outcome.status.message(),
              HasSubstr("requires the handler to return as many documents as it got: got 1, "
                        "returned 2"));
}

TEST(BatchQueueTest, AFullQueueRefusesWithResourceExhausted) {
  std::mutex gate;
  std::unique_lock hold(gate);  // the handler blocks until we let go
  BatchQueue queue(
      {.preferred_batch_size = 1, .timeout_ms = 0, .max_queue_size = 2},
      [&](DocList& /*docs*/) {
        std::lock_guard wait(gate);
        return HandlerOutcome{};
      },
      "test");
  // The first request goes to the (blocked) handler; two more fill the queue.
  std::vector<std::thread> threads;
  std::vector<DocList> docs{Docs(0, 1), Docs(1, 1), Docs(2, 1)};
  threads.emplace_back([&] { (void)queue.Push(docs[0]); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  threads.emplace_back([&] { (void)queue.Push(docs[1]); });
  threads.emplace_back([&] { (void)queue.Push(docs[2]); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // If the queue wrongly accepted it, this push would wait on the blocked
  // handler forever: bound it.
  DocList more = Docs(3, 1);
  std::promise<HandlerOutcome> refused_promise;
  std::future<HandlerOutcome> refused = refused_promise.get_future();
  threads.emplace_back([&] { refused_promise.set_value(queue.Push(more)); });
  const bool answered = refused.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  hold.unlock();  // lets every push finish, whatever happened above
  testing::JoinWithin(threads, std::chrono::seconds(30), "pushes after the gate opened");
  ASSERT_TRUE(answered) << "a push to a full queue was not refused within 10 s";
  HandlerOutcome outcome = refused.get();  // ready: bounded above
  EXPECT_EQ(outcome.status.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(outcome.status.message(), HasSubstr("max_queue_size 2"));
}

TEST(BatchQueueTest, StopServesWhatIsQueuedThenRefuses) {
  Recorder recorder;
  BatchQueue queue({.preferred_batch_size = 1000, .timeout_ms = 60000}, recorder.Invoke(), "test");
  DocList docs = Docs(0, 2);
  HandlerOutcome outcome;
  std::thread caller([&] { outcome = queue.Push(docs); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto start = Clock::now();
  {
    testing::Watchdog watchdog(std::chrono::seconds(30), "Stop and the queued push");
    queue.Stop();
    caller.join();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));  // not the 60 s timeout
  EXPECT_TRUE(outcome.status.ok());
  EXPECT_EQ(docs[1].text(), "0/1!");
  DocList late = Docs(1, 1);
  EXPECT_EQ(queue.Push(late).status.code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gantry::internal
