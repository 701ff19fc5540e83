// Bounds on what a client can make Gantry allocate or recurse over. Every
// size computed from client data is checked against these (or the
// configured message cap) before anything is allocated.
#pragma once

#include <cstdint>

namespace gantry::internal {

// Default cap on one request or reply message, gateway and workers alike
// (YAML `max_message_bytes`, CLI `--max-message-bytes`). Tens of MB, in line
// with TEI's payload limit and Triton's practice; never unlimited.
inline constexpr std::int64_t kDefaultMaxMessageBytes = std::int64_t{64} << 20;

// Deepest nesting accepted in client data: JSON bodies, `tags` and
// `parameters` Structs, nested documents (chunks, matches). protobuf's own
// parser stops at 100 levels of message nesting too.
inline constexpr int kMaxNestingDepth = 100;

// Upper bound on a client's `__prefetch__` (requests in flight on one Call
// stream); larger values are clamped.
inline constexpr int kMaxPrefetch = 1000;

// Data calls (unary requests and open Call streams) one worker holds at once;
// more are refused with RESOURCE_EXHAUSTED. Each holds one of gRPC's
// sync-server threads while it waits for the handler or a batch, so without a
// bound a flood grew a thread and ~300 KB per call. Above kMaxPrefetch, so that
// one client stream's full window through the gateway is never refused; TEI
// refuses past 512 (`--max-concurrent-requests`).
inline constexpr int kMaxWorkerCallsInFlight = 1024;

// KServe ModelInfer calls one gateway holds at once (a sync service: each
// holds a gateway thread until its replica answers); more are refused with
// RESOURCE_EXHAUSTED.
inline constexpr int kMaxKServeCallsInFlight = 1024;

// Bytes of requests in flight and of replies not yet written to their
// clients that a gateway holds at once, in messages of the cap
// (`max_message_bytes`): 1 GiB at the default. A request that would pass it
// is refused with RESOURCE_EXHAUSTED, except when nothing else is held. A
// request holds its bytes until its replica answers, a reply until it is
// written, and a callback service has no thread per call to bound them
// otherwise.
inline constexpr std::int64_t kGatewayMessagesInFlight = 16;

// Threads gRPC may run for a server's sync services beyond the calls
// admitted above: room to refuse the next calls with a message, and to
// answer the small services (discovery, info, reflection) meanwhile. Past it
// calls wait for a thread, or gRPC answers RESOURCE_EXHAUSTED itself. Each
// refused call holds a thread while its answer is written, so a burst of
// refusals needs more room than the pollers alone (32 lost that race).
inline constexpr int kSpareServerThreads = 64;

// Sync-server threads a worker (data calls) or a gateway (ModelInfer) keeps
// waiting for the next call once their call is answered (gRPC's
// MAX_POLLERS; its default of 2 made nearly every call of a client with 64
// in flight start a thread and end one). They stay until the server stops;
// each idle one is a stack of a few pages.
inline constexpr int kIdleSyncServerThreads = 64;

}  // namespace gantry::internal
