#include <dlfcn.h>
#include <gantry/heap.h>

#include <cstdlib>
#include <initializer_list>
#include <optional>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace gantry {
namespace {

void* FindSymbol(const char* name) { return ::dlsym(RTLD_DEFAULT, name); }

}  // namespace

MallocKind CurrentMalloc() {
  // The malloc every library's calls resolve to, against each allocator's
  // own name for it (both export malloc as an alias of that function).
  void* const malloc_in_use = FindSymbol("malloc");
  if (malloc_in_use != nullptr && malloc_in_use == FindSymbol("tc_malloc")) {
    return MallocKind::kTcmalloc;
  }
  if (malloc_in_use != nullptr && malloc_in_use == FindSymbol("__libc_malloc")) {
    return MallocKind::kGlibc;
  }
  return MallocKind::kOther;
}

const char* MallocKindName(MallocKind kind) {
  switch (kind) {
    case MallocKind::kGlibc:
      return "glibc";
    case MallocKind::kTcmalloc:
      return "tcmalloc";
    case MallocKind::kOther:
      break;
  }
  return "other";
}

void ReleaseFreeHeapMemory() {
  switch (CurrentMalloc()) {
    case MallocKind::kTcmalloc:
      if (void* release = FindSymbol("MallocExtension_ReleaseFreeMemory"); release != nullptr) {
        reinterpret_cast<void (*)()>(release)();
      }
      return;
    case MallocKind::kGlibc:
#if defined(__GLIBC__)
      ::malloc_trim(0);
#endif
      return;
    case MallocKind::kOther:
      return;
  }
}

namespace {

// Why glibc's settings are not ours to make: the user set malloc's tunables
// (theirs stand), or another malloc serves the process (tcmalloc exports a
// mallopt that does nothing, and glibc's heap is next to unused); nullopt
// when they are.
std::optional<HeapTuning> NotOursToTune() {
  for (const char* variable :
       {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX", "GLIBC_TUNABLES"}) {
    if (std::getenv(variable) != nullptr) {
      return HeapTuning::kLeftToEnvironment;
    }
  }
  if (CurrentMalloc() != MallocKind::kGlibc) {
    return HeapTuning::kUnsupported;
  }
  return std::nullopt;
}

}  // namespace

HeapTuning KeepModelBuffersInHeap() {
  if (const std::optional<HeapTuning> not_ours = NotOursToTune()) {
    return *not_ours;
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

HeapTuning ReturnMessageBuffersWhenFreed() {
  if (const std::optional<HeapTuning> not_ours = NotOursToTune()) {
    return *not_ours;
  }
#if defined(__GLIBC__)
  // Setting it also stops glibc from raising it.
  if (::mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMessageMmapThresholdBytes)) == 1) {
    return HeapTuning::kApplied;
  }
#endif
  return HeapTuning::kUnsupported;
}

}  // namespace gantry
