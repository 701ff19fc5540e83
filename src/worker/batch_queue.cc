#include "worker/batch_queue.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace gantry::internal {

BatchQueue::BatchQueue(DynamicBatching config, BatchInvoke invoke, std::string where)
    : config_(config), invoke_(std::move(invoke)), where_(std::move(where)) {
  flusher_ = std::thread([this] { Run(); });
}

BatchQueue::~BatchQueue() { Stop(); }

void BatchQueue::Stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
  }
  wake_.notify_all();
  if (flusher_.joinable()) {
    flusher_.join();
  }
}

std::uint64_t BatchQueue::calls() const {
  std::lock_guard lock(mutex_);
  return calls_;
}

HandlerOutcome BatchQueue::Push(DocList& docs) {
  if (docs.empty()) {
    return {};
  }
  Pending pending{&docs, {}, false};
  std::unique_lock lock(mutex_);
  if (stopping_) {
    return {UnavailableError("the executor is shutting down"), ""};
  }
  // A request larger than the cap still goes through an empty queue, or it
  // could never be served.
  if (config_.max_queue_size > 0 && queued_docs_ > 0 &&
      queued_docs_ + docs.size() > static_cast<std::size_t>(config_.max_queue_size)) {
    spdlog::warn("{}: dynamic batching queue full ({} documents); refusing a request", where_,
                 queued_docs_);
    return {ResourceExhaustedError("the dynamic batching queue is full (" +
                                   std::to_string(queued_docs_) + " documents waiting, " +
                                   "max_queue_size " + std::to_string(config_.max_queue_size) +
                                   "); retry later"),
            ""};
  }
  if (queue_.empty()) {
    deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.timeout_ms);
  }
  queue_.push_back(&pending);
  queued_docs_ += docs.size();
  wake_.notify_all();
  done_.wait(lock, [&] { return pending.done; });
  return std::move(pending.outcome);
}

void BatchQueue::Run() {
  const auto preferred = static_cast<std::size_t>(std::max(1, config_.preferred_batch_size));
  std::unique_lock lock(mutex_);
  while (true) {
    if (queue_.empty()) {
      if (stopping_) {
        return;
      }
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      continue;
    }
    // Stopping flushes at once: shutdown drains what is queued.
    if (!stopping_ && queued_docs_ < preferred && std::chrono::steady_clock::now() < deadline_) {
      wake_.wait_until(lock, deadline_);
      continue;
    }
    std::deque<Pending*> batch;
    batch.swap(queue_);
    queued_docs_ = 0;
    lock.unlock();
    Flush(batch);
    lock.lock();
    for (Pending* pending : batch) {
      pending->done = true;
    }
    done_.notify_all();
  }
}

// Runs outside the lock: new requests queue up meanwhile and start the next
// batch's timer.
void BatchQueue::Flush(std::deque<Pending*>& batch) {
  // All documents in arrival order, each with the request it came from.
  std::vector<Doc> all;
  std::vector<std::size_t> owner;
  for (std::size_t r = 0; r < batch.size(); ++r) {
    for (Doc& doc : batch[r]->docs->docs()) {
      all.push_back(std::move(doc));
      owner.push_back(r);
    }
  }
  std::size_t chunk =
      config_.flush_all ? all.size() : std::size_t(std::max(1, config_.preferred_batch_size));
  if (config_.max_batch_size > 0) {
    chunk = std::min(chunk, static_cast<std::size_t>(config_.max_batch_size));
  }
  chunk = std::max<std::size_t>(chunk, 1);
  for (std::size_t begin = 0; begin < all.size(); begin += chunk) {
    const std::size_t end = std::min(all.size(), begin + chunk);
    DocList call(std::vector<Doc>(std::make_move_iterator(all.begin() + begin),
                                  std::make_move_iterator(all.begin() + end)));
    HandlerOutcome outcome = invoke_(call);
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
    if (!outcome.status.ok()) {
      for (std::size_t k = begin; k < end; ++k) {
        HandlerOutcome& mine = batch[owner[k]]->outcome;
        if (mine.status.ok()) {
          mine = outcome;
        }
      }
    }
  }
  // Each request gets its own documents back, in their order.
  for (Pending* pending : batch) {
    pending->docs->clear();
  }
  for (std::size_t k = 0; k < all.size(); ++k) {
    batch[owner[k]]->docs->push_back(std::move(all[k]));
  }
}

}  // namespace gantry::internal
