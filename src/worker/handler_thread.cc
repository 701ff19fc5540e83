#include "worker/handler_thread.h"

namespace gantry::internal {

HandlerThread::HandlerThread() : thread_([this] { Loop(); }) {}

HandlerThread::~HandlerThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void HandlerThread::Run(const std::function<void()>& task) {
  if (std::this_thread::get_id() == thread_.get_id()) {
    task();  // already on it: queueing would wait for itself
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
