// KeepModelBuffersInHeap: blocks of a few MiB stay in the heap once it has
// run, and malloc tunables in the environment are left to stand.
#include <gantry/heap.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
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

}  // namespace
}  // namespace gantry
