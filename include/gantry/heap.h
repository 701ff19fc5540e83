// File: gantry/heap.h
//
// glibc malloc's settings for a process that runs tensor models on a CPU,
// and for a gateway (at the end).
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
// The thresholds hold only for the process's main arena. Every other thread
// that allocates gets an arena of its own, made of heaps of at most 64 MiB,
// and glibc unmaps such a heap as soon as all its blocks are free, whatever
// the trim threshold. A worker runs the model on a thread of its own, whose
// first heap fills with the weights it loads: every activation of a few
// MiB then took a fresh heap and gave it back, and a bfloat16 encoder's
// worker faulted up to 150,000 pages in per 8,192 documents, more or fewer
// from run to run with where its weights had landed (the bare model, on the
// main thread, next to none). So every thread allocates from the
// main arena (glibc's arena_max 1); threads that allocate small blocks keep
// taking them from their own per-thread cache without a lock.
//
// Every gantry-worker does this before its executor is constructed; a
// program that runs a model itself (a benchmark, an embedding of the model
// without a worker) calls it first. The programs Gantry builds to run models
// are linked with tcmalloc instead (cmake/GantryModelMalloc.cmake), which
// keeps freed blocks per size by itself; there this does nothing.
//
// Thread safety: safe for concurrent use (glibc's mallopt takes its locks).
#ifndef GANTRY_HEAP_H_
#define GANTRY_HEAP_H_

#include <cstddef>

namespace gantry {

// glibc's own ceilings for its adaptive thresholds (64-bit).
inline constexpr std::size_t kModelMmapThresholdBytes = 32U << 20;
inline constexpr std::size_t kModelTrimThresholdBytes = 64U << 20;

// Which malloc serves this process.
enum class MallocKind {
  kGlibc,
  kTcmalloc,  // gperftools' (linked, or LD_PRELOAD)
  kOther,     // a sanitizer's, jemalloc, ...
};
MallocKind CurrentMalloc();
const char* MallocKindName(MallocKind kind);

// Gives the memory the allocator holds free back to the kernel: tcmalloc's
// ReleaseFreeMemory, glibc's malloc_trim; nothing for another malloc. For
// after a load whose transient buffers a long-lived process keeps no use for.
void ReleaseFreeHeapMemory();

// What KeepModelBuffersInHeap or ReturnMessageBuffersWhenFreed did.
enum class HeapTuning {
  kApplied,            // the settings it makes are set
  kLeftToEnvironment,  // MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_,
                       // MALLOC_ARENA_MAX or GLIBC_TUNABLES is set: the
                       // user's settings stand
  kUnsupported,        // not glibc's malloc (CurrentMalloc), or it refused
};

// Sets glibc's mmap threshold to kModelMmapThresholdBytes, its trim
// threshold to kModelTrimThresholdBytes and its arena limit to one, unless
// the environment sets malloc tunables. Call it before the process starts
// threads: a thread that has allocated keeps the arena it has. Idempotent.
HeapTuning KeepModelBuffersInHeap();

// The mmap threshold for a process that holds client messages, not models.
inline constexpr std::size_t kMessageMmapThresholdBytes = 1U << 20;

// Fixes glibc's mmap threshold at kMessageMmapThresholdBytes, unless the
// environment sets malloc tunables. A gateway holds each message (up to the
// message cap, tens of MiB, a few copies while it converts one) only until
// it is answered; once glibc has raised its threshold past such a block,
// the block is carved from a heap instead, and a gateway that had converted
// one 30 MB body held 150 MB from then on. With the threshold fixed, every
// block of a MiB or more is mapped for itself and unmapped when freed; the
// small blocks that nearly every request is made of are unaffected.
HeapTuning ReturnMessageBuffersWhenFreed();

}  // namespace gantry

#endif  // GANTRY_HEAP_H_
