// The malloc of the programs that run models (cmake/GantryModelMalloc.cmake):
// this test is linked the way gantry-worker is, so it runs on the allocator
// a replica runs on, and gantry/heap.h must tell which one that is.
#include <gantry/heap.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

namespace gantry {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(GANTRY_TSAN)
constexpr bool kSanitizerMalloc = true;
#else
constexpr bool kSanitizerMalloc = false;
#endif

// Resident set of this process, from /proc/self/statm, in bytes.
std::int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t size = 0;
  std::int64_t resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

TEST(ModelMallocTest, TheProcessRunsOnTheMallocItWasLinkedWith) {
  const MallocKind kind = CurrentMalloc();
#if defined(GANTRY_MODEL_MALLOC_TCMALLOC)
  EXPECT_EQ(kind, MallocKind::kTcmalloc) << MallocKindName(kind);
  // glibc's thresholds do not apply to it.
  EXPECT_EQ(KeepModelBuffersInHeap(), HeapTuning::kUnsupported);
#else
  if (kSanitizerMalloc) {
    EXPECT_EQ(kind, MallocKind::kOther) << MallocKindName(kind);
  } else {
    EXPECT_EQ(kind, MallocKind::kGlibc) << MallocKindName(kind);
  }
#endif
}

TEST(ModelMallocTest, FreedBlocksGoBackToTheKernelWhenAsked) {
  if (kSanitizerMalloc) {
    GTEST_SKIP() << "a sanitizer's allocator keeps freed memory in quarantine";
  }
  KeepModelBuffersInHeap();  // as a worker starts: glibc then keeps such blocks
  // Activations of a few MiB each, 96 MiB in all, as a forward pass makes.
  constexpr std::size_t kBlock = std::size_t{4} << 20;
  constexpr int kBlocks = 24;
  std::vector<void*> blocks;
  for (int i = 0; i < kBlocks; ++i) {
    void* block = std::malloc(kBlock);
    ASSERT_NE(block, nullptr);
    std::memset(block, 1, kBlock);
    blocks.push_back(block);
  }
  const std::int64_t held = ResidentBytes();
  for (void* block : blocks) {
    std::free(block);
  }
  ReleaseFreeHeapMemory();
  const std::int64_t released = ResidentBytes();
  EXPECT_LT(released, held - std::int64_t{64 << 20})
      << MallocKindName(CurrentMalloc()) << ": " << held << " bytes resident with the blocks, "
      << released << " after they were freed and released";
}

}  // namespace
}  // namespace gantry
