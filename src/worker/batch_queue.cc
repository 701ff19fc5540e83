#include "worker/batch_queue.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <utility>
#include <vector>

namespace gantry::internal {

using Clock = std::chrono::steady_clock;

namespace {

// Smaller is more urgent; a queue without a level comes after every level.
int Urgency(int priority) { return priority <= 0 ? std::numeric_limits<int>::max() : priority; }

// Documents per handler call when `queued` wait: preferred_batch_size, or
// all of them with flush_all, never over max_batch_size, at least one.
std::size_t CallSize(const DynamicBatching& config, std::size_t queued) {
  std::size_t size = config.flush_all
                         ? queued
                         : static_cast<std::size_t>(std::max(1, config.preferred_batch_size));
  if (config.max_batch_size > 0) {
    size = std::min(size, static_cast<std::size_t>(config.max_batch_size));
  }
  return std::max<std::size_t>(size, 1);
}

// Whether `docs` documents with the longest of `longest` tokens overflow a
// call's `budget` (0: none).
bool OverBudget(std::int64_t budget, std::int64_t longest, std::size_t docs) {
  return budget > 0 && longest > 0 && longest > budget / static_cast<std::int64_t>(docs);
}

// Whether they fill it: one more document that long would not fit, so
// waiting for company gains nothing.
bool FillBudget(std::int64_t budget, std::int64_t longest, std::size_t docs) {
  return OverBudget(budget, longest, docs + 1);
}

}  // namespace

BatchQueueSet::BatchQueueSet(BatchQueueLimits limits) : limits_(limits) {}

BatchQueueSet::~BatchQueueSet() { Stop(); }

void BatchQueueSet::Stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
  }
  wake_.notify_all();
  // No Push starts the flusher once stopping_ is set, so reading it here is safe.
  if (flusher_.joinable()) {
    flusher_.join();
  }
}

std::uint64_t BatchQueueSet::calls() const {
  std::lock_guard lock(mutex_);
  return calls_;
}

std::size_t BatchQueueSet::queue_count() const {
  std::lock_guard lock(mutex_);
  return queues_.size();
}

std::uint64_t BatchQueueSet::overflow_requests() const {
  std::lock_guard lock(mutex_);
  return overflow_;
}

void BatchQueueSet::RecomputeLongest(Queue& queue) {
  queue.queued_longest = 0;
  for (const Pending* left : queue.pending) {
    queue.queued_longest = std::max(queue.queued_longest, left->longest);
  }
}

bool BatchQueueSet::EvictOneIdleLocked() {
  auto victim = queues_.end();
  for (auto it = queues_.begin(); it != queues_.end(); ++it) {
    if (it->second->users == 0 &&
        (victim == queues_.end() || it->second->last_used < victim->second->last_used)) {
      victim = it;
    }
  }
  if (victim == queues_.end()) {
    return false;
  }
  queues_.erase(victim);
  return true;
}

HandlerOutcome BatchQueueSet::Push(const std::string& key, const DynamicBatching& config,
                                   const std::function<BatchInvoke()>& make_invoke,
                                   const std::string& where, DocList& docs, int priority,
                                   int queue_timeout_ms, const BatchTokens* tokens,
                                   bool retry_alone) {
  if (docs.empty()) {
    return {};
  }
  Pending pending;
  pending.docs = &docs;
  if (tokens != nullptr && tokens->budget > 0 && tokens->per_document.size() == docs.size()) {
    pending.tokens = &tokens->per_document;
    pending.longest = *std::max_element(tokens->per_document.begin(), tokens->per_document.end());
  }
  std::unique_lock lock(mutex_);
  if (stopping_) {
    return {.status = UnavailableError("the executor is shutting down"),
            .exception_name = "",
            .started = {},
            .refused = ""};
  }
  auto it = queues_.find(key);
  if (it == queues_.end()) {
    if (queues_.size() >= limits_.max_queues && !EvictOneIdleLocked()) {
      // Every queue has requests waiting: serve this one alone, now.
      if (overflow_++ % 1000 == 0) {
        spdlog::warn(
            "{}: {} dynamic batching queues (one per parameter set) are busy, the most a worker "
            "keeps; a request with new parameters is served unbatched ({} so far)",
            where, limits_.max_queues, overflow_);
      }
      lock.unlock();
      Queue alone;
      alone.config = config;
      alone.invoke = make_invoke();
      alone.where = where;
      alone.retry_alone = retry_alone;
      std::deque<Pending*> batch{&pending};
      Flush(alone, batch, pending.tokens != nullptr ? tokens->budget : 0);
      return std::move(pending.outcome);
    }
    auto queue = std::make_unique<Queue>();
    queue->config = config;
    queue->invoke = make_invoke();
    queue->where = where;
    queue->retry_alone = retry_alone;
    queue->priority = priority;
    it = queues_.emplace(key, std::move(queue)).first;
    if (!flusher_.joinable()) {
      flusher_ = std::thread([this] { Run(); });
    }
  }
  Queue& queue = *it->second;
  // A request larger than the cap still goes through an empty queue, or it
  // could never be served.
  if (queue.config.max_queue_size > 0 && queue.queued_docs > 0 &&
      queue.queued_docs + docs.size() > static_cast<std::size_t>(queue.config.max_queue_size)) {
    spdlog::warn("{}: dynamic batching queue full ({} documents); refusing a request", where,
                 queue.queued_docs);
    return {.status = ResourceExhaustedError(
                "the dynamic batching queue is full (" + std::to_string(queue.queued_docs) +
                " documents waiting, max_queue_size " +
                std::to_string(queue.config.max_queue_size) + "); retry later"),
            .exception_name = "",
            .started = {},
            .refused = "queue_full"};
  }
  const auto now = Clock::now();
  pending.arrived = now;
  if (queue.pending.empty()) {
    queue.first_arrival = now;
    queue.deadline = now + std::chrono::milliseconds(queue.config.timeout_ms);
  }
  queue.pending.push_back(&pending);
  queue.queued_docs += docs.size();
  if (pending.tokens != nullptr) {
    queue.token_budget = tokens->budget;
    queue.queued_longest = std::max(queue.queued_longest, pending.longest);
  }
  ++queue.users;
  wake_.notify_all();
  if (queue_timeout_ms < 0) {
    queue_timeout_ms = queue.config.queue_timeout_ms;
  }
  const bool delay = queue.config.timeout_action == DynamicBatching::TimeoutAction::kDelay;
  if (queue_timeout_ms <= 0 ||
      pending.done_cv.wait_until(lock, now + std::chrono::milliseconds(queue_timeout_ms),
                                 [&] { return pending.done; })) {
    pending.done_cv.wait(lock, [&] { return pending.done; });
  } else if (pending.taken) {
    // Its handler call has started: the documents are the handler's now.
    pending.done_cv.wait(lock, [&] { return pending.done; });
  } else if (delay) {
    // To the back of its queue, behind every request waiting now, then
    // served whenever its turn comes.
    if (queue.pending.size() > 1) {
      WithdrawLocked(queue, pending);
      queue.pending.push_back(&pending);
      queue.queued_docs += docs.size();
      queue.queued_longest = std::max(queue.queued_longest, pending.longest);
    }
    pending.done_cv.wait(lock, [&] { return pending.done; });
    pending.outcome.delayed = true;
  } else {
    WithdrawLocked(queue, pending);
    const auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - now).count();
    pending.outcome = {
        .status = DeadlineExceededError("waited " + std::to_string(waited) +
                                        " ms in the dynamic batching queue, past " +
                                        "queue_timeout " + std::to_string(queue_timeout_ms) +
                                        " ms; the handler did not run on it; retry later"),
        .exception_name = "",
        .started = {},
        .refused = "queue_timeout"};
  }
  --queue.users;
  queue.last_used = Clock::now();
  if (queue.users == 0) {
    wake_.notify_all();  // the flusher may free it once idle
  }
  return std::move(pending.outcome);
}

void BatchQueueSet::WithdrawLocked(Queue& queue, Pending& pending) {
  // Queue timeouts mostly expire in arrival order, so the caller is at or
  // near the front: the search is short.
  auto it = std::find(queue.pending.begin(), queue.pending.end(), &pending);
  if (it == queue.pending.end()) {
    return;
  }
  const bool was_oldest = it == queue.pending.begin();
  queue.pending.erase(it);
  queue.queued_docs -= pending.docs->size();
  if (pending.longest >= queue.queued_longest) {
    RecomputeLongest(queue);
  }
  if (was_oldest && !queue.pending.empty()) {
    // The batch timer runs from the oldest request still queued.
    queue.first_arrival = queue.pending.front()->arrived;
    queue.deadline = queue.first_arrival + std::chrono::milliseconds(queue.config.timeout_ms);
  }
}

BatchQueueSet::Queue* BatchQueueSet::PickLocked(Clock::time_point now,
                                                Clock::time_point& next_wake) {
  // Of two queues, the more urgent, then the one waiting longer, so that
  // none of one level starves.
  auto before = [](const Queue* best, const Queue& queue) {
    return best == nullptr || Urgency(queue.priority) < Urgency(best->priority) ||
           (Urgency(queue.priority) == Urgency(best->priority) &&
            queue.first_arrival < best->first_arrival);
  };
  Queue* due = nullptr;
  Queue* most_urgent = nullptr;
  for (auto it = queues_.begin(); it != queues_.end();) {
    Queue& queue = *it->second;
    if (!queue.pending.empty()) {
      const auto preferred =
          static_cast<std::size_t>(std::max(1, queue.config.preferred_batch_size));
      // Stopping flushes at once: shutdown drains what is queued.
      if (stopping_ || queue.queued_docs >= preferred || now >= queue.deadline ||
          FillBudget(queue.token_budget, queue.queued_longest, queue.queued_docs)) {
        if (before(due, queue)) {
          due = &queue;
        }
      } else {
        next_wake = std::min(next_wake, queue.deadline);
      }
      if (before(most_urgent, queue)) {
        most_urgent = &queue;
      }
    } else if (queue.users == 0) {
      const auto idle_until = queue.last_used + limits_.idle_timeout;
      if (now >= idle_until) {
        it = queues_.erase(it);
        continue;
      }
      next_wake = std::min(next_wake, idle_until);
    }
    ++it;
  }
  if (due == nullptr) {
    return nullptr;
  }
  return Urgency(most_urgent->priority) < Urgency(due->priority) ? most_urgent : due;
}

std::deque<BatchQueueSet::Pending*> BatchQueueSet::TakeCallLocked(Queue& queue) {
  const std::size_t call_size = CallSize(queue.config, queue.queued_docs);
  std::deque<Pending*> batch;
  std::size_t taken_docs = 0;
  std::int64_t longest = 0;
  while (!queue.pending.empty()) {
    Pending* next = queue.pending.front();
    const std::size_t docs = taken_docs + next->docs->size();
    // The first request always goes (Flush spreads it over calls); later
    // ones while the call has room, by documents and by padded tokens.
    if (!batch.empty() &&
        (taken_docs >= call_size ||
         OverBudget(queue.token_budget, std::max(longest, next->longest), docs))) {
      break;
    }
    queue.pending.pop_front();
    next->taken = true;  // its call starts: a queue timeout no longer withdraws it
    taken_docs = docs;
    longest = std::max(longest, next->longest);
    batch.push_back(next);
  }
  queue.queued_docs -= taken_docs;
  if (longest >= queue.queued_longest) {
    RecomputeLongest(queue);
  }
  return batch;
}

void BatchQueueSet::Run() {
  std::unique_lock lock(mutex_);
  while (true) {
    auto next_wake = Clock::time_point::max();
    const auto now = Clock::now();
    Queue* ready = PickLocked(now, next_wake);
    if (ready != nullptr) {
      // One handler call's worth of requests (all of them with flush_all),
      // so that between calls a more urgent or older queue is looked at
      // again; what stays is due at once, as it was when picked.
      std::deque<Pending*> batch = TakeCallLocked(*ready);
      const std::int64_t token_budget = ready->token_budget;
      if (!ready->pending.empty()) {
        ready->first_arrival = ready->pending.front()->arrived;
        ready->deadline = std::min(ready->deadline, now);
      }
      // `ready` stays alive: its callers wait, so users > 0.
      lock.unlock();
      Flush(*ready, batch, token_budget);
      lock.lock();
      for (Pending* pending : batch) {
        pending->done = true;
        pending->done_cv.notify_one();
      }
      continue;
    }
    if (stopping_) {
      return;  // nothing is queued: every due queue was flushed above
    }
    if (next_wake == Clock::time_point::max()) {
      wake_.wait(lock);
    } else {
      wake_.wait_until(lock, next_wake);
    }
  }
}

// all[begin, end) through the handler, and back into `all` when it returned
// as many documents as it got (`*returned`).
HandlerOutcome BatchQueueSet::RunCall(Queue& queue, std::vector<Doc>& all, std::size_t begin,
                                      std::size_t end, bool* returned) {
  DocList call(std::vector<Doc>(std::make_move_iterator(all.begin() + begin),
                                std::make_move_iterator(all.begin() + end)));
  HandlerOutcome outcome = queue.invoke(call);
  {
    std::lock_guard lock(mutex_);
    ++calls_;
  }
  if (outcome.status.ok() && call.size() != end - begin) {
    outcome.status = InternalError(
        "dynamic batching requires the handler to return as many documents as it got: got " +
        std::to_string(end - begin) + ", returned " + std::to_string(call.size()));
  }
  if (call.size() == end - begin) {
    std::move(call.docs().begin(), call.docs().end(), all.begin() + begin);
  }
  if (returned != nullptr) {
    *returned = call.size() == end - begin;
  }
  return outcome;
}

// The requests owning documents [begin, end) take `outcome`: its error, or
// the time their handler started.
void BatchQueueSet::Settle(std::deque<Pending*>& batch, const std::vector<std::size_t>& owner,
                           std::size_t begin, std::size_t end, const HandlerOutcome& outcome) {
  for (std::size_t k = begin; k < end; ++k) {
    HandlerOutcome& mine = batch[owner[k]]->outcome;
    if (!outcome.status.ok() && mine.status.ok()) {
      mine = outcome;
    } else if (mine.started == std::chrono::steady_clock::time_point{}) {
      mine.started = outcome.started;
    }
  }
}

// Runs outside the lock: new requests queue up meanwhile and start the next
// batch's timer.
void BatchQueueSet::Flush(Queue& queue, std::deque<Pending*>& batch, std::int64_t token_budget) {
  const DynamicBatching& config = queue.config;
  // All documents in arrival order, each with the request it came from.
  std::vector<Doc> all;
  std::vector<std::size_t> owner;
  std::vector<std::int64_t> tokens;  // per document; 0 without a count
  for (std::size_t r = 0; r < batch.size(); ++r) {
    std::vector<Doc>& docs = batch[r]->docs->docs();
    for (std::size_t d = 0; d < docs.size(); ++d) {
      all.push_back(std::move(docs[d]));
      owner.push_back(r);
      tokens.push_back(batch[r]->tokens != nullptr ? (*batch[r]->tokens)[d] : 0);
    }
  }
  const std::size_t chunk = CallSize(config, all.size());
  for (std::size_t begin = 0, end = 0; begin < all.size(); begin = end) {
    // At most `chunk` documents, and as many as fit the token budget; at
    // least one.
    std::int64_t longest = tokens[begin];
    for (end = begin + 1; end < all.size() && end - begin < chunk; ++end) {
      const std::int64_t wider = std::max(longest, tokens[end]);
      if (OverBudget(token_budget, wider, end - begin + 1)) {
        break;
      }
      longest = wider;
    }
    const bool several = owner[begin] != owner[end - 1];  // a request's documents are adjacent
    bool returned = false;
    HandlerOutcome outcome = RunCall(queue, all, begin, end, &returned);
    if (!outcome.status.ok() && several && returned && queue.retry_alone) {
      // One request the handler could not take fails alone: each runs again
      // on its own (the handler left the documents fit for it).
      for (std::size_t from = begin; from < end;) {
        std::size_t to = from + 1;
        while (to < end && owner[to] == owner[from]) {
          ++to;
        }
        // A request whose earlier documents failed already is not run again.
        Settle(batch, owner, from, to,
               batch[owner[from]]->outcome.status.ok() ? RunCall(queue, all, from, to) : outcome);
        from = to;
      }
      continue;
    }
    Settle(batch, owner, begin, end, outcome);
  }
  // Each request gets its own documents back, in their order.
  for (Pending* pending : batch) {
    pending->docs->clear();
  }
  for (std::size_t k = 0; k < all.size(); ++k) {
    batch[owner[k]]->docs->push_back(std::move(all[k]));
  }
}

BatchQueue::BatchQueue(DynamicBatching config, BatchInvoke invoke, std::string where,
                       bool retry_alone)
    : config_(config),
      invoke_(std::move(invoke)),
      where_(std::move(where)),
      retry_alone_(retry_alone),
      set_(BatchQueueLimits{.max_queues = 1, .idle_timeout = std::chrono::hours(24)}) {}

HandlerOutcome BatchQueue::Push(DocList& docs) {
  return set_.Push(
      where_, config_, [this] { return invoke_; }, where_, docs, /*priority=*/0,
      /*queue_timeout_ms=*/-1, /*tokens=*/nullptr, retry_alone_);
}

}  // namespace gantry::internal
