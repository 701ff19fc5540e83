// Ordering that ThreadSanitizer cannot see, stated to it. gRPC's callback
// servers run our handlers on gRPC's process-wide threads, which outlive any
// one server; libgrpc (Debian's, uninstrumented) orders a server's set-up
// before its first handler, but TSan sees none of that. A thread left over
// from an earlier server in the same process then looks as if it raced with
// the set-up of the next. No-ops outside the TSan build.
#ifndef GANTRY_COMMON_SANITIZER_HANDOFF_H_
#define GANTRY_COMMON_SANITIZER_HANDOFF_H_

// GANTRY_TSAN: set by CMakeLists.txt in the TSan build (which must undefine
// __SANITIZE_THREAD__, see there).
#ifdef GANTRY_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace gantry::internal {

// PublishToGrpcThreads: called once everything gRPC's threads will read of
// `object` is set up, before the server that hands it to them starts.
// ReceiveOnGrpcThread: called first in every handler that gRPC runs on its
// own threads, with the object published (the service itself: reading a
// member to find another object would already be the access TSan flags).
#ifdef GANTRY_TSAN
inline void PublishToGrpcThreads(void* object) { __tsan_release(object); }
inline void ReceiveOnGrpcThread(void* object) { __tsan_acquire(object); }
#else
inline void PublishToGrpcThreads(void* /*object*/) {}
inline void ReceiveOnGrpcThread(void* /*object*/) {}
#endif

}  // namespace gantry::internal

#endif  // GANTRY_COMMON_SANITIZER_HANDOFF_H_
