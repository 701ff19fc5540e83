// HandlerThread: one thread that runs every handler call of a worker, in
// the order they were handed to it.
//
// Why: libtorch's CPU kernels parallelise with OpenMP, and OpenMP keeps a
// team of threads per calling thread. Handler calls made straight from
// gRPC's thread pool came from a different thread almost every time, so
// each call woke (or first created) another team while the last one's
// threads were still spinning down: on 2 cores with 2 intra-op threads a
// Deployment reached 0.76 of the bare model. From one thread, every call
// reuses one warm team (docs/benchmarks-encoder.md, "Thread counts").
// In a process without an OpenMP runtime there is no team to keep warm,
// and the hand-off (two thread wake-ups a call, tens of microseconds each
// on a small VM) buys nothing: there a HandlerThread made with
// ForThisProcess() runs each task on its caller's thread.
//
// Thread safety: Run is safe for concurrent use; the destructor, which
// runs what is queued and joins the thread, must not overlap a Run. With
// Placement::kCaller, tasks of concurrent Runs may overlap (callers that
// need one at a time hold their own lock, as RequestHandler does).
#ifndef GANTRY_WORKER_HANDLER_THREAD_H_
#define GANTRY_WORKER_HANDLER_THREAD_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace gantry::internal {

class HandlerThread {
 public:
  enum class Placement {
    kOwnThread,  // every task on one thread of its own, in order
    kCaller,     // each task on the thread that called Run
  };
  // kOwnThread where an OpenMP runtime is loaded into this process
  // (libtorch's libgomp, or Intel's libiomp), else kCaller.
  static Placement ForThisProcess();

  explicit HandlerThread(Placement placement = Placement::kOwnThread);
  ~HandlerThread();
  HandlerThread(const HandlerThread&) = delete;
  HandlerThread& operator=(const HandlerThread&) = delete;

  // Runs `task` on the handler thread and returns once it has run. `task`
  // must not throw (handler calls catch their own exceptions).
  void Run(const std::function<void()>& task);

 private:
  // Lives on its caller's stack until `done`. Each caller waits on its own
  // condition variable: one shared by all woke every waiting gRPC thread at
  // each finished call (60 wake-ups per call with 64 requests in flight),
  // and those wake-ups preempted the intra-op threads of the next call.
  struct Task {
    const std::function<void()>* run = nullptr;
    bool done = false;                // guarded by mutex_
    std::condition_variable done_cv;  // notified under mutex_, so it outlives the notify
  };
  void Loop();

  std::mutex mutex_;
  std::condition_variable wake_;  // a task was queued, or stopping_
  std::deque<Task*> queue_;       // guarded by mutex_
  bool stopping_ = false;         // guarded by mutex_
  std::thread thread_;            // not started for Placement::kCaller
};

}  // namespace gantry::internal

#endif  // GANTRY_WORKER_HANDLER_THREAD_H_
