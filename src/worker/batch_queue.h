// Dynamic batching inside a worker (Jina's dynamic_batching): one queue per endpoint
// and parameter set. Callers (one gRPC thread per request) Push their
// documents and block; a flusher thread merges what is queued into handler
// calls of at most preferred_batch_size documents (or everything, with
// flush_all; never more than max_batch_size), as soon as
// preferred_batch_size documents wait or `timeout_ms` after the first one
// arrived, then hands each caller its own documents back, in order.
//
// With a token budget (requests pushed with BatchTokens), a call also holds
// at most `budget` padded tokens (documents times the longest): the flusher
// takes requests while they fit, a queue whose waiting requests fill the
// budget is due at once, and a request too large for one call is spread
// over several, as it is by documents. A document over the budget goes
// through a call of its own.
//
// A client chooses the parameters, so it chooses how many queues exist: the
// queues of one BatchQueueSet share a single flusher thread, at most
// `max_queues` of them exist at once, and a queue nobody used for
// `idle_timeout` is freed. One flusher costs nothing in throughput: the
// worker serialises handler calls anyway (Jina's one-request-at-a-time
// contract). A request for a new parameter set while `max_queues` queues
// have requests waiting is served at once on the caller's thread, as a
// batch of its own (still sliced to the batch size): it could not share a
// call with anyone anyway, so refusing it would fail legitimate clients
// (e.g. an id per request in the parameters) and gain nothing, and it holds
// no resource beyond the caller's own gRPC thread.
//
// Queue policy (Triton's): a queue has a priority level (1 most urgent),
// the flusher starts the most urgent queue that is due, and a queue more
// urgent than the one it would start goes first, due or not, as a partial
// batch: the worker is busy either way, so waiting for company would only
// delay it. The flusher takes one handler call's worth of requests at a
// time, so a backlog of one queue does not hold back a more urgent request
// (or an older queue) for longer than one call. With queue_timeout_ms, a
// caller whose documents were not taken into a handler call by then
// withdraws them itself and gets DEADLINE_EXCEEDED (timeout_action kReject)
// or moves them to the back of its queue, to be served in turn (kDelay);
// it does not depend on the flusher, which may be busy in a long call.
//
// No sockets and no protobuf: unit-tested with plain threads.
#ifndef GANTRY_WORKER_BATCH_QUEUE_H_
#define GANTRY_WORKER_BATCH_QUEUE_H_

#include <gantry/batching.h>
#include <gantry/document.h>
#include <gantry/status.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gantry::internal {

// What one handler call came to.
struct HandlerOutcome {
  Status status;
  // The C++ type of the exception the handler threw; empty if it returned.
  std::string exception_name;
  // When the handler started on (the first of) this request's documents;
  // unset when it never ran. For the queue-time metric.
  std::chrono::steady_clock::time_point started{};
  // Why the queue refused the request without running its handler
  // ("queue_full", "queue_timeout"); empty otherwise. For the failure metric.
  std::string refused;
  // It outlived its queue timeout and was served after the requests that
  // waited less (timeout_action DELAY). For the delayed-requests metric.
  bool delayed = false;
};

// Calls the handler on `docs` (edited in place). Must not throw.
using BatchInvoke = std::function<HandlerOutcome(DocList& docs)>;

struct BatchQueueLimits {
  // Queues (endpoint and parameter set) alive at once, per worker.
  std::size_t max_queues = 64;
  // A queue with nothing waiting is freed after this long unused.
  std::chrono::milliseconds idle_timeout{5000};
};

// Every batch queue of one worker, keyed by endpoint and parameter set.
// Thread safety: all methods are safe for concurrent use.
class BatchQueueSet {
 public:
  explicit BatchQueueSet(BatchQueueLimits limits = {});
  ~BatchQueueSet();
  BatchQueueSet(const BatchQueueSet&) = delete;
  BatchQueueSet& operator=(const BatchQueueSet&) = delete;

  // Queues `docs` on the queue named `key` and blocks until they went
  // through the handler; then `docs` holds the handler's output for them.
  // A new queue takes `config`, `where` (the prefix of its messages,
  // "executor 'X' (x/rep-0) endpoint '/e'") and the handler from
  // `make_invoke`, called only then. An error (a throwing handler, a wrong
  // number of documents back) is returned to every caller whose documents
  // were in the failing call. RESOURCE_EXHAUSTED when the queue holds
  // max_queue_size documents already; DEADLINE_EXCEEDED when
  // config.queue_timeout_ms passed before its documents went into a call;
  // UNAVAILABLE after Stop. `priority` (1 the most urgent; 0 as the least
  // urgent of all) is the new queue's level; the key must tell levels apart.
  // `queue_timeout_ms` >= 0 is this request's own queue timeout (0: none)
  // instead of the queue's config.queue_timeout_ms. Past it, the queue's
  // timeout_action rejects the request or moves it to the back of the queue.
  // `tokens`, when it has a budget, holds one count per document of `docs`
  // and must outlive the call; the queue's budget is the latest request's.
  // `retry_alone` (the new queue's): a call of several requests that failed
  // runs each of them again alone, each getting its own outcome; the handler
  // must leave documents it failed on fit to be handled again.
  HandlerOutcome Push(const std::string& key, const DynamicBatching& config,
                      const std::function<BatchInvoke()>& make_invoke, const std::string& where,
                      DocList& docs, int priority = 0, int queue_timeout_ms = -1,
                      const BatchTokens* tokens = nullptr, bool retry_alone = false);

  // Runs everything queued through the handler, then refuses new pushes
  // and joins the flusher. Idempotent.
  void Stop();

  // Handler calls made so far (by freed queues too).
  std::uint64_t calls() const;
  // Queues alive now.
  std::size_t queue_count() const;
  // Requests served unqueued because max_queues queues were busy.
  std::uint64_t overflow_requests() const;

 private:
  // Lives on its caller's stack until `done`. Each caller waits on its own
  // condition variable, so a flush wakes only the callers it served, not
  // every request still queued (see HandlerThread::Task).
  struct Pending {
    DocList* docs = nullptr;
    // One count per document, or null without a token budget.
    const std::vector<std::int64_t>* tokens = nullptr;
    std::int64_t longest = 0;  // the most tokens of any of its documents
    HandlerOutcome outcome;
    std::chrono::steady_clock::time_point arrived{};
    bool taken = false;               // in a batch being flushed; guarded by mutex_
    bool done = false;                // guarded by mutex_
    std::condition_variable done_cv;  // notified under mutex_, so it outlives the notify
  };
  struct Queue {
    DynamicBatching config;
    BatchInvoke invoke;
    std::string where;
    bool retry_alone = false;
    std::deque<Pending*> pending;
    std::size_t queued_docs = 0;
    // Padded tokens one call may hold (0: no budget), and the longest
    // document waiting, for the due rule.
    std::int64_t token_budget = 0;
    std::int64_t queued_longest = 0;
    // 1 the most urgent; 0 (no priorities) sorts after every level.
    int priority = 0;
    // When the oldest queued request must go, whatever the batch size.
    std::chrono::steady_clock::time_point deadline{};
    std::chrono::steady_clock::time_point first_arrival{};
    std::chrono::steady_clock::time_point last_used{};
    // Callers between queueing and return; the queue is not freed meanwhile.
    int users = 0;
  };

  void Run();
  // The queue the flusher should run now, or null (see the file comment).
  Queue* PickLocked(std::chrono::steady_clock::time_point now,
                    std::chrono::steady_clock::time_point& next_wake);
  // Takes `pending` out of `queue` after its queue timeout; under mutex_.
  void WithdrawLocked(Queue& queue, Pending& pending);
  // Takes one handler call's worth of requests off the front of `queue`.
  static std::deque<Pending*> TakeCallLocked(Queue& queue);
  // Sets queue.queued_longest from the requests still waiting; under mutex_.
  static void RecomputeLongest(Queue& queue);
  // Frees the least recently used queue nobody waits on; false if none.
  bool EvictOneIdleLocked();
  // Runs `batch` of `queue` through its handler, outside the lock, in calls
  // of at most `token_budget` padded tokens (0: no budget).
  void Flush(Queue& queue, std::deque<Pending*>& batch, std::int64_t token_budget);
  // One handler call on all[begin, end); the documents go back into `all`.
  HandlerOutcome RunCall(Queue& queue, std::vector<Doc>& all, std::size_t begin, std::size_t end,
                         bool* returned = nullptr);
  static void Settle(std::deque<Pending*>& batch, const std::vector<std::size_t>& owner,
                     std::size_t begin, std::size_t end, const HandlerOutcome& outcome);

  const BatchQueueLimits limits_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;                          // the flusher: work arrived, or stop
  std::map<std::string, std::unique_ptr<Queue>> queues_;  // guarded by mutex_
  bool stopping_ = false;                                 // guarded by mutex_
  std::uint64_t calls_ = 0;                               // guarded by mutex_
  std::uint64_t overflow_ = 0;                            // guarded by mutex_
  std::thread flusher_;                                   // started by the first Push, under mutex_
};

// One queue on its own (one endpoint, one parameter set).
// Thread safety: Push and Stop are safe for concurrent use.
class BatchQueue {
 public:
  // `where` prefixes error messages ("executor 'X' (x/rep-0) endpoint '/e'");
  // `retry_alone` as BatchQueueSet::Push's.
  BatchQueue(DynamicBatching config, BatchInvoke invoke, std::string where,
             bool retry_alone = false);
  BatchQueue(const BatchQueue&) = delete;
  BatchQueue& operator=(const BatchQueue&) = delete;

  // As BatchQueueSet::Push.
  HandlerOutcome Push(DocList& docs);
  // As BatchQueueSet::Stop.
  void Stop() { set_.Stop(); }
  // Handler calls made so far.
  std::uint64_t calls() const { return set_.calls(); }

 private:
  const DynamicBatching config_;
  const BatchInvoke invoke_;
  const std::string where_;
  const bool retry_alone_;
  BatchQueueSet set_;
};

}  // namespace gantry::internal

#endif  // GANTRY_WORKER_BATCH_QUEUE_H_
