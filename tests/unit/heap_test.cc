// KeepModelBuffersInHeap: blocks of a few MiB stay in the heap once it has
// run, and malloc tunables in the environment are left to stand.
#include <gantry/heap.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace gantry {
namespace {

// (The TSan build undefines __SANITIZE_THREAD__ and says GANTRY_TSAN: see
// CMakeLists.txt.)
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(GANTRY_TSAN)
constexpr bool kSanitizerMalloc = true;  // its own allocator; mallopt does nothing
#else
constexpr bool kSanitizerMalloc = false;
#endif

TEST(HeapTest, MallocTunablesInTheEnvironmentAreLeftToStand) {
  ASSERT_EQ(::setenv("GLIBC_TUNABLES", "glibc.malloc.check=0", 1), 0);
  EXPECT_EQ(KeepModelBuffersInHeap(), HeapTuning::kLeftToEnvironment);
  ASSERT_EQ(::unsetenv("GLIBC_TUNABLES"), 0);
}

TEST(HeapTest, BlocksOfAFewMebibytesStayInTheHeap) {
  const HeapTuning tuning = KeepModelBuffersInHeap();
#if !defined(__GLIBC__)
  EXPECT_EQ(tuning, HeapTuning::kUnsupported);
  GTEST_SKIP() << "not glibc's malloc";
#else
  if (kSanitizerMalloc) {
    GTEST_SKIP() << "a sanitizer's allocator ignores mallopt (KeepModelBuffersInHeap: "
                 << static_cast<int>(tuning) << ")";
  }
  ASSERT_EQ(tuning, HeapTuning::kApplied);
  // Below kModelMmapThresholdBytes, above glibc's starting 128 KiB: served
  // from the heap, not by an mmap of its own (mallinfo2's hblks counts those).
  const int mapped_before = static_cast<int>(::mallinfo2().hblks);
  std::vector<void*> blocks;
  for (std::size_t size : {std::size_t{256} << 10, std::size_t{4} << 20, std::size_t{24} << 20}) {
    void* block = std::malloc(size);
    ASSERT_NE(block, nullptr);
    std::memset(block, 1, size);
    blocks.push_back(block);
  }
  EXPECT_EQ(static_cast<int>(::mallinfo2().hblks), mapped_before);
  // Past it: mapped as before.
  void* huge = std::malloc(kModelMmapThresholdBytes + (1U << 20));
  ASSERT_NE(huge, nullptr);
  EXPECT_EQ(static_cast<int>(::mallinfo2().hblks), mapped_before + 1);
  std::free(huge);
  for (void* block : blocks) {
    std::free(block);
  }
#endif
}

#if defined(__GLIBC__)
// Whether every page of [block, block + bytes) is still mapped and in
// memory. mincore reads no byte of it, so it may ask of a freed block's
// address.
bool StillResident(std::uintptr_t block, std::size_t bytes) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const std::uintptr_t first = block / page * page;
  const std::uintptr_t end = block + bytes;
  std::vector<unsigned char> resident((end - first + page - 1) / page);
  // NOLINTNEXTLINE(performance-no-int-to-ptr): mincore takes the page's address
  if (::mincore(reinterpret_cast<void*>(first), end - first, resident.data()) != 0) {
    return false;  // ENOMEM: some of it is no longer mapped
  }
  for (unsigned char r : resident) {
    if ((r & 1U) == 0) {
      return false;
    }
  }
  return true;
}

// Writes a byte to every page of the block, as a product writing its output
// would; through a volatile pointer, so that the compiler cannot drop the
// stores to a block that is freed next.
void TouchEveryPage(void* block, std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  volatile unsigned char* bytes_of = static_cast<unsigned char*>(block);
  for (std::size_t i = 0; i < bytes; i += page) {
    bytes_of[i] = 2;
  }
}

// As a worker's handler thread does: a thread of its own loads weights that
// stay, then allocates and frees an activation of a few MiB pass after pass.
// In an arena of its own each activation took a fresh heap, unmapped again
// at free, and the next pass faulted all of its pages in anew. Returns the
// exit status for the test below: 0 when every freed activation stayed.
int RunModelThreadAndCountKeptActivations() {
  if (KeepModelBuffersInHeap() != HeapTuning::kApplied) {
    std::fprintf(stderr, "KeepModelBuffersInHeap did not apply\n");
    return 2;
  }
  constexpr std::size_t kWeightBytes = std::size_t{20} << 20;
  constexpr std::size_t kActivationBytes = std::size_t{6} << 20;
  constexpr int kPasses = 3;
  int passes_kept = 0;
  std::thread model_thread([&] {
    std::vector<void*> weights;
    for (int i = 0; i < 3; ++i) {
      void* weight = std::malloc(kWeightBytes);
      if (weight == nullptr) {
        break;
      }
      TouchEveryPage(weight, kWeightBytes);
      weights.push_back(weight);
    }
    for (int pass = 0; pass < kPasses && weights.size() == 3; ++pass) {
      void* activation = std::malloc(kActivationBytes);
      if (activation == nullptr) {
        break;
      }
      TouchEveryPage(activation, kActivationBytes);
      const auto address = reinterpret_cast<std::uintptr_t>(activation);
      std::free(activation);
      passes_kept += StillResident(address, kActivationBytes) ? 1 : 0;
    }
    for (void* weight : weights) {
      std::free(weight);
    }
  });
  model_thread.join();
  std::fprintf(stderr, "%d of %d freed activations stayed mapped\n", passes_kept, kPasses);
  return passes_kept == kPasses ? 0 : 1;
}
#endif

TEST(HeapTest, AThreadsFreedActivationStaysMappedBesideItsWeights) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "not glibc's malloc";
#else
  if (kSanitizerMalloc) {
    GTEST_SKIP() << "a sanitizer's allocator ignores mallopt";
  }
  // In a process of its own, started afresh: a thread of this one that has
  // exited left its arena on glibc's free list, and a new thread takes such
  // an arena before any limit is asked.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(RunModelThreadAndCountKeptActivations()), testing::ExitedWithCode(0),
              "3 of 3 freed activations stayed mapped");
#endif
}

}  // namespace
}  // namespace gantry
