#include <gantry/heap.h>

#include <cstdlib>
#include <initializer_list>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace gantry {

HeapTuning KeepModelBuffersInHeap() {
  for (const char* variable :
       {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX", "GLIBC_TUNABLES"}) {
    if (std::getenv(variable) != nullptr) {
      return HeapTuning::kLeftToEnvironment;
    }
  }
#if defined(__GLIBC__)
  // Setting either threshold also stops glibc from moving them afterwards.
  if (::mallopt(M_MMAP_THRESHOLD, static_cast<int>(kModelMmapThresholdBytes)) == 1 &&
      ::mallopt(M_TRIM_THRESHOLD, static_cast<int>(kModelTrimThresholdBytes)) == 1 &&
      ::mallopt(M_ARENA_MAX, 1) == 1) {
    return HeapTuning::kApplied;
  }
#endif
  return HeapTuning::kUnsupported;
}

}  // namespace gantry
