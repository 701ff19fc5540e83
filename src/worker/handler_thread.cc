#include "worker/handler_thread.h"

#include <dlfcn.h>

namespace gantry::internal {

HandlerThread::Placement HandlerThread::ForThisProcess() {
  // Every OpenMP runtime exports omp_get_max_threads; a library loaded with
  // the program (libtorch's libgomp), or with an executor plugin (loaded
  // RTLD_GLOBAL before any RequestHandler is made), is in the global scope
  // dlsym searches.
  return dlsym(RTLD_DEFAULT, "omp_get_max_threads") != nullptr ? Placement::kOwnThread
                                                               : Placement::kCaller;
}

HandlerThread::HandlerThread(Placement placement) {
  if (placement == Placement::kOwnThread) {
    thread_ = std::thread([this] { Loop(); });
  }
}

HandlerThread::~HandlerThread() {
  if (!thread_.joinable()) {
    return;  // Placement::kCaller: nothing was ever queued
  }
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void HandlerThread::Run(const std::function<void()>& task) {
  // Without a thread (kCaller), or already on it: queueing would wait for
  // itself.
  if (!thread_.joinable() || std::this_thread::get_id() == thread_.get_id()) {
    task();
    return;
  }
  Task queued;
  queued.run = &task;
  std::unique_lock lock(mutex_);
  queue_.push_back(&queued);
  wake_.notify_one();
  queued.done_cv.wait(lock, [&] { return queued.done; });
}

void HandlerThread::Loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) {
      return;  // stopping, and nothing left to run
    }
    Task* task = queue_.front();
    queue_.pop_front();
    lock.unlock();
    (*task->run)();
    lock.lock();
    task->done = true;
    // Under the lock: the caller cannot return and destroy `task` before
    // this notify has finished.
    task->done_cv.notify_one();
  }
}

}  // namespace gantry::internal
