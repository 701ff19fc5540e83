// Dynamic batching inside a worker (protocol.md 3.2): one BatchQueue per
// endpoint and parameter set. Callers (one gRPC thread per request) Push
// their documents and block; a flusher thread merges what is queued into
// handler calls of at most preferred_batch_size documents (or everything,
// with flush_all; never more than max_batch_size), as soon as
// preferred_batch_size documents wait or `timeout_ms` after the first one
// arrived, then hands each caller its own documents back, in order.
// No sockets and no protobuf: unit-tested with plain threads.
//
// Thread safety: Push and Stop are safe for concurrent use.
#ifndef GANTRY_WORKER_BATCH_QUEUE_H_
#define GANTRY_WORKER_BATCH_QUEUE_H_

#include <gantry/batching.h>
#include <gantry/document.h>
#include <gantry/status.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace gantry::internal {

// What one handler call came to.
struct HandlerOutcome {
  Status status;
  // The C++ type of the exception the handler threw; empty if it returned.
  std::string exception_name;
};

// Calls the handler on `docs` (edited in place). Must not throw.
using BatchInvoke = std::function<HandlerOutcome(DocList& docs)>;

class BatchQueue {
 public:
  // `where` prefixes error messages ("executor 'X' (x/rep-0) endpoint '/e'").
  BatchQueue(DynamicBatching config, BatchInvoke invoke, std::string where);
  ~BatchQueue();
  BatchQueue(const BatchQueue&) = delete;
  BatchQueue& operator=(const BatchQueue&) = delete;

  // Queues `docs` and blocks until they went through the handler; then
  // `docs` holds the handler's output for them. An error (a throwing
  // handler, a wrong number of documents back) is returned to every caller
  // whose documents were in the failing call. RESOURCE_EXHAUSTED when the
  // queue holds max_queue_size documents already; UNAVAILABLE after Stop.
  HandlerOutcome Push(DocList& docs);

  // Runs everything queued through the handler, then refuses new pushes
  // and joins the flusher. Idempotent.
  void Stop();

  // Handler calls made so far.
  std::uint64_t calls() const;

 private:
  struct Pending {
    DocList* docs;
    HandlerOutcome outcome;
    bool done = false;
  };

  void Run();
  void Flush(std::deque<Pending*>& batch);

  const DynamicBatching config_;
  const BatchInvoke invoke_;
  const std::string where_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;  // the flusher: work arrived, or stop
  std::condition_variable done_;  // callers: a flush finished
  std::deque<Pending*> queue_;    // guarded by mutex_
  std::size_t queued_docs_ = 0;   // guarded by mutex_
  // When the oldest queued request must go, whatever the batch size.
  std::chrono::steady_clock::time_point deadline_{};  // guarded by mutex_
  bool stopping_ = false;                             // guarded by mutex_
  std::uint64_t calls_ = 0;                           // guarded by mutex_
  std::thread flusher_;
};

}  // namespace gantry::internal

#endif  // GANTRY_WORKER_BATCH_QUEUE_H_
