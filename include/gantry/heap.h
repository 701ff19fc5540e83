// File: gantry/heap.h
//
// glibc malloc's settings for a process that runs tensor models on a CPU.
//
// glibc serves a block of 128 KiB or more with its own mmap, unmapped again
// at free, and gives the free top of its heap back to the kernel past a
// second threshold. It raises both only as such blocks are freed, to at most
// 32 MiB and 64 MiB. A model's activations, megabytes each and allocated
// afresh on every forward pass, meanwhile fault their pages in again pass
// after pass: on a 2-core Xeon with AMX, an int8 encoder at 128 documents a
// pass spent a quarter of its CPU time in the kernel doing so. Starting at
// those ceilings keeps the blocks in the heap; a process that frees large
// blocks may reach the same settings by itself, so it may keep no more
// memory than glibc would let it keep anyway.
//
// Every gantry-worker does this before its executor is constructed; a
// program that runs a model itself (a benchmark, an embedding of the model
// without a worker) calls it first.
//
// Thread safety: safe for concurrent use (glibc's mallopt takes its locks).
#ifndef GANTRY_HEAP_H_
#define GANTRY_HEAP_H_

#include <cstddef>

namespace gantry {

// glibc's own ceilings for its adaptive thresholds (64-bit).
inline constexpr std::size_t kModelMmapThresholdBytes = 32U << 20;
inline constexpr std::size_t kModelTrimThresholdBytes = 64U << 20;

// What KeepModelBuffersInHeap did.
enum class HeapTuning {
  kApplied,            // both thresholds set
  kLeftToEnvironment,  // MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or
                       // GLIBC_TUNABLES is set: the user's settings stand
  kUnsupported,        // not glibc's malloc, or it refused
};

// Sets glibc's mmap threshold to kModelMmapThresholdBytes and its trim
// threshold to kModelTrimThresholdBytes, unless the environment sets malloc
// tunables. Idempotent.
HeapTuning KeepModelBuffersInHeap();

}  // namespace gantry

#endif  // GANTRY_HEAP_H_
