// The batch queues of a worker are bounded whatever parameters clients send:
// one flusher thread for all, at most max_queues queues, idle ones freed,
// and requests beyond the cap served (unbatched) rather than queued.
#include <dirent.h>
#include <gantry/executor.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/doc_proto.h"
#include "testutil/testutil.h"
#include "worker/batch_queue.h"
#include "worker/request_handler.h"

namespace batch_set_test {

// Batched, one document per call: every request is flushed at once.
class BatchedUnitExec final : public gantry::Executor {
  GANTRY_EXECUTOR(BatchedUnitExec);
  explicit BatchedUnitExec(const gantry::ExecutorContext& /*context*/) {}
  GANTRY_REQUESTS(Tag, "/tag");
  GANTRY_DYNAMIC_BATCHING(Tag, {.preferred_batch_size = 1, .timeout_ms = 1});
  void Tag(gantry::DocList& docs, const gantry::Parameters& parameters) {
    for (gantry::Doc& doc : docs) {
      doc.set_text(std::string(doc.text()) + ":" + parameters.GetString("id"));
    }
  }
};
GANTRY_REGISTER_EXECUTOR(BatchedUnitExec);

}  // namespace batch_set_test

namespace gantry::internal {
namespace {

using ::testing::HasSubstr;

// Threads of this process: entries of /proc/self/task.
int ThreadCount() {
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) {
    return -1;
  }
  int n = 0;
  while (dirent* entry = ::readdir(dir)) {
    n += entry->d_name[0] != '.' ? 1 : 0;
  }
  ::closedir(dir);
  return n;
}

// Samples the thread count (and `also`, if given) until stopped; keeps the
// highest values seen.
class PeakSampler {
 public:
  explicit PeakSampler(std::function<std::size_t()> also = nullptr) : also_(std::move(also)) {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        peak_threads_ = std::max(peak_threads_.load(), ThreadCount());
        if (also_) {
          peak_also_ = std::max(peak_also_.load(), also_());
        }
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
    });
  }
  ~PeakSampler() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) {
      thread_.join();
    }
  }
  int peak_threads() const { return peak_threads_.load(); }
  std::size_t peak_also() const { return peak_also_.load(); }

 private:
  std::function<std::size_t()> also_;
  std::atomic<bool> stop_{false};
  std::atomic<int> peak_threads_{0};
  std::atomic<std::size_t> peak_also_{0};
  std::thread thread_;
};

BatchInvoke AppendKey(const std::string& key) {
  return [key](DocList& docs) {
    for (Doc& doc : docs) {
      doc.set_text(std::string(doc.text()) + ":" + key);
    }
    return HandlerOutcome{};
  };
}

constexpr int kParameterSets = 10000;
constexpr int kCallers = 16;

TEST(BatchQueueSetTest, TenThousandParameterSetsKeepThreadsAndQueuesBounded) {
  BatchQueueSet set({.max_queues = 64, .idle_timeout = std::chrono::milliseconds(200)});
  const DynamicBatching config{.preferred_batch_size = 4, .timeout_ms = 1};
  const int before = ThreadCount();
  PeakSampler sampler([&] { return set.queue_count(); });
  std::atomic<int> good{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int i = c; i < kParameterSets; i += kCallers) {
        const std::string key = "/e\n{\"id\":" + std::to_string(i) + "}";
        DocList docs{Doc("d" + std::to_string(i))};
        HandlerOutcome outcome = set.Push(
            key, config, [&] { return AppendKey(key); }, "endpoint '/e'", docs);
        if (outcome.status.ok() && docs.size() == 1 &&
            docs[0].text() == "d" + std::to_string(i) + ":" + key) {
          ++good;
        }
      }
    });
  }
  testing::JoinWithin(callers, std::chrono::seconds(120), "10,000 pushes");
  sampler.Stop();
  EXPECT_EQ(good.load(), kParameterSets);
  // Callers + the sampler + one flusher; never a thread per parameter set.
  const int extra = sampler.peak_threads() - before;
  RecordProperty("threads_before", before);
  RecordProperty("threads_peak", sampler.peak_threads());
  std::printf("threads before %d, peak %d (%d callers, 1 sampler); peak queues %zu\n", before,
              sampler.peak_threads(), kCallers, sampler.peak_also());
  EXPECT_LE(extra, kCallers + 1 + 1 + 2);
  EXPECT_LE(sampler.peak_also(), 64u);
  EXPECT_LE(set.queue_count(), 64u);
  // Idle queues are freed: all of them, within a bounded wait.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (set.queue_count() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(set.queue_count(), 0u) << "idle queues were not freed within 10 s";
  EXPECT_EQ(set.calls(), static_cast<std::uint64_t>(kParameterSets));
}

TEST(BatchQueueSetTest, AtTheCapIdleQueuesAreReusedNotRefused) {
  BatchQueueSet set({.max_queues = 2, .idle_timeout = std::chrono::hours(1)});
  for (int i = 0; i < 100; ++i) {
    const std::string key = "k" + std::to_string(i);
    DocList docs{Doc("x")};
    HandlerOutcome outcome = set.Push(
        key, {.preferred_batch_size = 1, .timeout_ms = 0}, [&] { return AppendKey(key); },
        "endpoint '/e'", docs);
    ASSERT_TRUE(outcome.status.ok()) << outcome.status;
    EXPECT_EQ(docs[0].text(), "x:" + key);
  }
  EXPECT_LE(set.queue_count(), 2u);
  EXPECT_EQ(set.overflow_requests(), 0u);
}

TEST(BatchQueueSetTest, BeyondTheCapARequestIsServedAloneInSlices) {
  BatchQueueSet set({.max_queues = 2, .idle_timeout = std::chrono::hours(1)});
  const DynamicBatching config{.preferred_batch_size = 2, .timeout_ms = 0};
  std::mutex gate;
  std::unique_lock hold(gate);  // queue "a"'s handler blocks until we let go
  auto blocked = [&] {
    return BatchInvoke([&](DocList& /*docs*/) {
      std::lock_guard wait(gate);
      return HandlerOutcome{};
    });
  };
  std::vector<std::thread> threads;
  DocList a{Doc("a")};
  DocList b{Doc("b")};
  threads.emplace_back([&] { (void)set.Push("a", config, blocked, "endpoint '/e'", a); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // The flusher is stuck in a's handler, so b waits: both queues are busy.
  threads.emplace_back([&] { (void)set.Push("b", config, blocked, "endpoint '/e'", b); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));

  std::mutex sizes_mutex;
  std::vector<std::size_t> sizes;
  auto recording = [&] {
    return BatchInvoke([&](DocList& docs) {
      std::lock_guard lock(sizes_mutex);
      sizes.push_back(docs.size());
      for (Doc& doc : docs) {
        doc.set_text(std::string(doc.text()) + "!");
      }
      return HandlerOutcome{};
    });
  };
  DocList c{Doc("c0"), Doc("c1"), Doc("c2"), Doc("c3"), Doc("c4")};
  std::promise<HandlerOutcome> promise;
  std::future<HandlerOutcome> served = promise.get_future();
  threads.emplace_back(
      [&] { promise.set_value(set.Push("c", config, recording, "endpoint '/e'", c)); });
  const bool answered = served.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  hold.unlock();
  testing::JoinWithin(threads, std::chrono::seconds(30), "pushes after the gate opened");
  ASSERT_TRUE(answered) << "a request beyond the cap waited behind the busy queues";
  EXPECT_TRUE(served.get().status.ok());
  ASSERT_EQ(c.size(), 5u);
  EXPECT_EQ(c[4].text(), "c4!");
  EXPECT_THAT(sizes, ::testing::ElementsAre(2u, 2u, 1u));
  EXPECT_EQ(set.overflow_requests(), 1u);
  EXPECT_LE(set.queue_count(), 2u);
}

TEST(BatchQueueSetTest, StopDrainsEveryQueueThenRefuses) {
  BatchQueueSet set;
  const DynamicBatching config{.preferred_batch_size = 100, .timeout_ms = 60000};
  std::vector<std::thread> threads;
  std::vector<DocList> docs(3);
  std::atomic<int> good{0};
  for (int i = 0; i < 3; ++i) {
    docs[static_cast<std::size_t>(i)].emplace_back("x");
    threads.emplace_back([&, i] {
      const std::string key = "k" + std::to_string(i);
      if (set.Push(
                 key, config, [&] { return AppendKey(key); }, "endpoint '/e'",
                 docs[static_cast<std::size_t>(i)])
              .status.ok()) {
        ++good;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  {
    testing::Watchdog watchdog(std::chrono::seconds(30), "Stop with three queues waiting");
    set.Stop();
  }
  testing::JoinWithin(threads, std::chrono::seconds(30), "pushes drained by Stop");
  EXPECT_EQ(good.load(), 3);
  DocList late{Doc("late")};
  EXPECT_EQ(set.Push(
                   "k0", config, [] { return AppendKey("k0"); }, "endpoint '/e'", late)
                .status.code(),
            StatusCode::kUnavailable);
}

// The defect as a client saw it: a new parameter value per request made a
// queue and a thread per request, never freed.
TEST(BatchQueueSetTest, RequestHandlerWithTenThousandParameterValuesKeepsThreadsBounded) {
  ExecutorContext context;
  context.name = "tagger";
  auto handler = RequestHandler::Create("BatchedUnitExec", context, "tagger/rep-0");
  ASSERT_TRUE(handler.ok()) << handler.status();
  const int before = ThreadCount();
  PeakSampler sampler;
  std::atomic<int> good{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int i = c; i < kParameterSets; i += kCallers) {
        jina::DataRequestProto request;
        request.mutable_header()->set_exec_endpoint("/tag");
        (*request.mutable_parameters()->mutable_fields())["id"].set_string_value(std::to_string(i));
        DocListToProto(DocList{Doc("d")}, request.mutable_data()->mutable_docs());
        RequestHandler::Result result = (*handler)->Handle(&request);
        if (result.status.ok() && !result.is_error) {
          auto docs = TakeDocListFromProto(request.mutable_data()->mutable_docs());
          if (docs.ok() && docs->size() == 1 && (*docs)[0].text() == "d:" + std::to_string(i)) {
            ++good;
          }
        }
      }
    });
  }
  testing::JoinWithin(callers, std::chrono::seconds(120), "10,000 requests");
  sampler.Stop();
  std::printf("RequestHandler: threads before %d, peak %d (%d callers, 1 sampler)\n", before,
              sampler.peak_threads(), kCallers);
  RecordProperty("handler_threads_before", before);
  RecordProperty("handler_threads_peak", sampler.peak_threads());
  EXPECT_EQ(good.load(), kParameterSets);
  EXPECT_LE(sampler.peak_threads() - before, kCallers + 1 + 1 + 2);
  EXPECT_EQ((*handler)->BatchedCalls(), static_cast<std::uint64_t>(kParameterSets));
}

}  // namespace
}  // namespace gantry::internal
