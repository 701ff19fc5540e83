// Dynamic batching by tokens (text-embeddings-inference's max_batch_tokens):
// a handler call holds at most the budget in padded tokens (its documents
// times the longest of them), requests share a call only while they fit, a
// queue whose requests fill the budget does not wait for its timeout, and a
// document over the budget goes through a call of its own.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "testutil/testutil.h"
#include "worker/batch_queue.h"

namespace gantry::internal {
namespace {

using ::testing::ElementsAre;

// Documents named by their token counts, and the counts to push with them.
DocList DocsOf(const std::vector<std::int64_t>& tokens, const std::string& prefix) {
  DocList docs;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    docs.push_back(Doc(prefix + std::to_string(i)));
  }
  return docs;
}

class BatchQueueTokensTest : public ::testing::Test {
 protected:
  void TearDown() override {
    Open();
    testing::JoinWithin(threads_, std::chrono::seconds(30), "the pushes");
  }

  // Each call's documents, in order; the first call waits for Open().
  BatchInvoke Recording() {
    return [this](DocList& docs) {
      std::vector<std::string> call;
      for (Doc& doc : docs) {
        call.emplace_back(doc.text());
        doc.set_text(std::string(doc.text()) + "!");
      }
      {
        std::lock_guard gate(gate_mutex_);  // held by the test until Open()
      }
      std::lock_guard lock(mutex_);
      calls_.push_back(call);
      return HandlerOutcome{};
    };
  }
  // Holds the next call (and so the flusher) until Open().
  void Close() { hold_ = std::unique_lock(gate_mutex_); }
  void Open() {
    if (hold_.owns_lock()) {
      hold_.unlock();
    }
  }
  std::vector<std::vector<std::string>> Calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }

  HandlerOutcome Push(const DynamicBatching& batching, DocList& docs, const BatchTokens& tokens) {
    return set_.Push(
        "e", batching, [this] { return Recording(); }, "'/e'", docs, 0, -1, &tokens);
  }
  void PushInBackground(const DynamicBatching& batching, DocList& docs, const BatchTokens& tokens) {
    threads_.emplace_back([this, batching, &docs, &tokens] {
      HandlerOutcome outcome = Push(batching, docs, tokens);
      EXPECT_TRUE(outcome.status.ok()) << outcome.status;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // queued in this order
  }

  BatchQueueSet set_;
  std::mutex gate_mutex_;
  std::unique_lock<std::mutex> hold_;
  std::mutex mutex_;
  std::vector<std::vector<std::string>> calls_;
  std::vector<std::thread> threads_;
};

constexpr DynamicBatching kWide{.preferred_batch_size = 100, .timeout_ms = 0};

TEST_F(BatchQueueTokensTest, ARequestIsSpreadOverCallsThatFitTheBudget) {
  const BatchTokens tokens{.budget = 60, .per_document = {10, 10, 10, 30, 5, 5}};
  DocList docs = DocsOf(tokens.per_document, "d");
  HandlerOutcome outcome = Push(kWide, docs, tokens);
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  // 3 x 10 fit; a 30 would make 4 x 30 = 120. Then 30 + 5 (2 x 30 = 60),
  // then the last 5.
  EXPECT_THAT(Calls(), ElementsAre(ElementsAre("d0", "d1", "d2"), ElementsAre("d3", "d4"),
                                   ElementsAre("d5")));
  ASSERT_EQ(docs.size(), 6u);
  for (std::size_t i = 0; i < docs.size(); ++i) {
    EXPECT_EQ(docs[i].text(), "d" + std::to_string(i) + "!");  // in order, each handled
  }
}

TEST_F(BatchQueueTokensTest, RequestsShareACallOnlyWhileTheirPaddedTokensFit) {
  Close();
  const BatchTokens busy_tokens{.budget = 80, .per_document = {1}};
  DocList busy = DocsOf(busy_tokens.per_document, "busy");
  PushInBackground(kWide, busy, busy_tokens);  // the flusher waits in this call
  const BatchTokens a_tokens{.budget = 80, .per_document = {20, 20}};
  const BatchTokens b_tokens{.budget = 80, .per_document = {20}};
  const BatchTokens c_tokens{.budget = 80, .per_document = {40}};
  DocList a = DocsOf(a_tokens.per_document, "a");
  DocList b = DocsOf(b_tokens.per_document, "b");
  DocList c = DocsOf(c_tokens.per_document, "c");
  PushInBackground(kWide, a, a_tokens);
  PushInBackground(kWide, b, b_tokens);
  PushInBackground(kWide, c, c_tokens);
  Open();
  testing::JoinWithin(threads_, std::chrono::seconds(30), "the pushes");
  // a and b: 3 x 20 = 60; with c, 4 x 40 = 160 over 80. Without the budget
  // all three would share one call.
  EXPECT_THAT(Calls(),
              ElementsAre(ElementsAre("busy0"), ElementsAre("a0", "a1", "b0"), ElementsAre("c0")));
  EXPECT_EQ(c[0].text(), "c0!");
}

TEST_F(BatchQueueTokensTest, WithoutABudgetTheSameRequestsShareOneCall) {
  Close();
  const BatchTokens none{};
  DocList busy = DocsOf({1}, "busy");
  PushInBackground(kWide, busy, none);
  DocList a = DocsOf({20, 20}, "a");
  DocList b = DocsOf({20}, "b");
  DocList c = DocsOf({40}, "c");
  PushInBackground(kWide, a, none);
  PushInBackground(kWide, b, none);
  PushInBackground(kWide, c, none);
  Open();
  testing::JoinWithin(threads_, std::chrono::seconds(30), "the pushes");
  EXPECT_THAT(Calls(), ElementsAre(ElementsAre("busy0"), ElementsAre("a0", "a1", "b0", "c0")));
}

TEST_F(BatchQueueTokensTest, RequestsThatFillTheBudgetDoNotWaitForTheTimeout) {
  const DynamicBatching slow{.preferred_batch_size = 1000, .timeout_ms = 20000};
  // 3 x 30 tokens: a fourth document that long would not fit 100.
  const BatchTokens full{.budget = 100, .per_document = {30, 30, 30}};
  DocList docs = DocsOf(full.per_document, "f");
  const auto start = std::chrono::steady_clock::now();
  HandlerOutcome outcome = Push(slow, docs, full);
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10))
      << "a full batch waited for its timeout";

  // One that leaves room waits for company until the timeout.
  const DynamicBatching short_wait{.preferred_batch_size = 1000, .timeout_ms = 300};
  const BatchTokens room{.budget = 100, .per_document = {10}};
  DocList alone = DocsOf(room.per_document, "r");
  const auto second = std::chrono::steady_clock::now();
  outcome = set_.Push(
      "other", short_wait, [this] { return Recording(); }, "'/e'", alone, 0, -1, &room);
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  EXPECT_GE(std::chrono::steady_clock::now() - second, std::chrono::milliseconds(250));
}

TEST_F(BatchQueueTokensTest, ADocumentOverTheBudgetGoesThroughACallOfItsOwn) {
  const BatchTokens tokens{.budget = 100, .per_document = {5, 500, 5, 5}};
  DocList docs = DocsOf(tokens.per_document, "d");
  HandlerOutcome outcome = Push(kWide, docs, tokens);
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  EXPECT_THAT(Calls(), ElementsAre(ElementsAre("d0"), ElementsAre("d1"), ElementsAre("d2", "d3")));
}

TEST_F(BatchQueueTokensTest, DocumentCountStillBoundsACall) {
  const DynamicBatching two{.preferred_batch_size = 2, .timeout_ms = 0};
  const BatchTokens tokens{.budget = 1000, .per_document = {1, 1, 1}};
  DocList docs = DocsOf(tokens.per_document, "d");
  HandlerOutcome outcome = Push(two, docs, tokens);
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  EXPECT_THAT(Calls(), ElementsAre(ElementsAre("d0", "d1"), ElementsAre("d2")));
}

}  // namespace
}  // namespace gantry::internal
