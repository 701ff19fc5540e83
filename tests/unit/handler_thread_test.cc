// HandlerThread with plain threads: calls run one at a time on one thread,
// and a finished call wakes only the caller that handed it over.
#include "worker/handler_thread.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace gantry::internal {
namespace {

// Voluntary context switches of the calling thread: each time it slept.
long VoluntarySwitchesOfThisThread() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_nvcsw;
}

// Holds the handler thread until Open().
class Gate {
 public:
  void WaitOpen() {
    std::unique_lock lock(mutex_);
    entered_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return open_; });
  }
  void WaitEntered() {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, std::chrono::seconds(30), [&] { return entered_; });
  }
  void Open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool entered_ = false;
  bool open_ = false;
};

TEST(HandlerThreadTest, CallsFromManyThreadsRunOneAtATimeOnOneThread) {
  HandlerThread handler_thread;
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  std::mutex ids_mutex;
  std::vector<std::thread::id> ran_on;
  std::vector<std::thread> callers;
  for (int i = 0; i < 16; ++i) {
    callers.emplace_back([&] {
      handler_thread.Run([&] {
        if (running.fetch_add(1) != 0) {
          overlapped = true;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        {
          std::lock_guard lock(ids_mutex);
          ran_on.push_back(std::this_thread::get_id());
        }
        running.fetch_sub(1);
      });
    });
  }
  for (std::thread& caller : callers) {
    caller.join();
  }
  ASSERT_EQ(ran_on.size(), 16u);
  EXPECT_FALSE(overlapped);
  for (const std::thread::id& id : ran_on) {
    EXPECT_EQ(id, ran_on.front());
  }
}

TEST(HandlerThreadTest, AFinishedCallWakesOnlyItsOwnCaller) {
  // A worker's gRPC threads wait here, one per request in flight. With one
  // condition variable for all of them, each finished call woke every
  // waiter: the k-th caller in line slept and woke k times, N^2/2 in all,
  // and those wake-ups took the cores from the next call's intra-op threads.
  constexpr int kCallers = 32;
  HandlerThread handler_thread;
  Gate gate;
  std::thread holder([&] { handler_thread.Run([&] { gate.WaitOpen(); }); });
  gate.WaitEntered();

  std::atomic<int> queued{0};
  std::vector<long> sleeps(kCallers, 0);
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      const long before = VoluntarySwitchesOfThisThread();
      queued.fetch_add(1);
      // Long enough that the waiters behind it are back asleep when it ends.
      handler_thread.Run([] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
      sleeps[static_cast<std::size_t>(i)] = VoluntarySwitchesOfThisThread() - before;
    });
  }
  for (int i = 0; i < 3000 && queued.load() < kCallers; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Bounded: a caller not yet asleep in Run by now only weakens the check.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  gate.Open();
  holder.join();
  for (std::thread& caller : callers) {
    caller.join();
  }
  long total = 0;
  for (long s : sleeps) {
    total += s;
  }
  // Each caller sleeps once waiting for its call, and perhaps once more on
  // the mutex; woken by every finished call it would be about 32 * 31 / 2.
  EXPECT_LT(total, 4 * kCallers) << "callers slept " << total << " times in all";
}

TEST(HandlerThreadTest, CallerPlacementRunsEachTaskOnItsCallersThreadAndReturnsAfterIt) {
  HandlerThread handler_thread(HandlerThread::Placement::kCaller);
  std::vector<std::thread::id> ran_on(4);
  std::vector<std::thread::id> callers_ids(4);
  std::vector<char> finished_before_return(4, 0);  // not vector<bool>: its bits share words
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i) {
    callers.emplace_back([&, i] {
      const auto n = static_cast<std::size_t>(i);
      callers_ids[n] = std::this_thread::get_id();
      bool finished = false;
      handler_thread.Run([&] {
        ran_on[n] = std::this_thread::get_id();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        finished = true;
      });
      finished_before_return[n] = finished;
    });
  }
  for (std::thread& caller : callers) {
    caller.join();
  }
  for (std::size_t i = 0; i < callers.size(); ++i) {
    EXPECT_EQ(ran_on[i], callers_ids[i]) << "task " << i;
    EXPECT_TRUE(finished_before_return[i]) << "task " << i;
  }
}

TEST(HandlerThreadTest, OwnThreadPlacementIsTakenWhereverOpenMpIsLoaded) {
  // This test binary links no libtorch; an OpenMP runtime is here only if
  // the toolchain put one in (e.g. -fopenmp). Either way the choice follows
  // what the dynamic linker can find, which is what keeps a libtorch
  // worker's OpenMP team on one thread.
  const bool openmp_here = dlsym(RTLD_DEFAULT, "omp_get_max_threads") != nullptr;
  EXPECT_EQ(HandlerThread::ForThisProcess(),
            openmp_here ? HandlerThread::Placement::kOwnThread : HandlerThread::Placement::kCaller);
}

}  // namespace
}  // namespace gantry::internal
