// File: gantry/batching.h   (implemented by the worker's BatchQueue,
// src/worker/batch_queue.cc)
//
// Dynamic batching of one endpoint (Jina's @dynamic_batching): requests from
// concurrent callers are queued, merged into one handler call and split back,
// each caller getting its own documents, in order. One queue per endpoint
// and parameter set: requests with different parameters never share a call.
//
// Declared beside the handler (gantry/executor.h):
//
//   GANTRY_REQUESTS(Encode, "/encode");
//   GANTRY_DYNAMIC_BATCHING(Encode, {.preferred_batch_size = 32, .timeout_ms = 10});
//
// or in YAML: `dynamic_batching:` in an executor file, `uses_dynamic_batching:`
// in a Deployment's `with:`, keyed by endpoint ("/encode") or handler name
// ("Encode"); endpoint keys win over handler names, YAML over the macro.
//
// Batches close by tokens too when the handler has a token counter
// (GANTRY_BATCH_TOKENS, gantry/executor.h) that gives a budget: a handler
// call then holds at most `budget` padded tokens (its documents times the
// longest of them), TEI's max_batch_tokens, whatever preferred_batch_size
// allows.
//
// Thread safety: value types.
#ifndef GANTRY_BATCHING_H_
#define GANTRY_BATCHING_H_

#include <cstdint>
#include <vector>

namespace gantry {

struct DynamicBatching {
  // Flush as soon as this many documents are queued (Jina's
  // preferred_batch_size); also the largest handler call unless flush_all.
  int preferred_batch_size = 4;
  // Flush a partial batch this long after its first request arrived (Jina's
  // `timeout`, in ms; its default is 10000).
  int timeout_ms = 10000;
  // Hand everything queued to one handler call instead of slices of
  // preferred_batch_size (Jina >= 3.27).
  bool flush_all = false;
  // Triton-style hard cap on documents per handler call; 0: none beyond the
  // rule above.
  int max_batch_size = 0;
  // Documents that may wait in one queue; a request that would exceed it is
  // refused with RESOURCE_EXHAUSTED. 0: unbounded (Jina's behaviour).
  int max_queue_size = 0;
  // A request that waited this long in the queue without being taken into a
  // handler call is answered DEADLINE_EXCEEDED, its handler never run
  // (Triton's default_timeout_microseconds with timeout_action REJECT, in
  // ms). 0: a request waits as long as it takes (Jina's behaviour).
  int queue_timeout_ms = 0;
  // Priority levels (Triton's priority_levels): a request's `priority`
  // parameter, 1 the most urgent to priority_levels the least, picks its
  // queue; while a more urgent request waits, no less urgent batch starts,
  // and a more urgent one does not wait for company. 0: no priorities, a
  // `priority` parameter is an ordinary one.
  int priority_levels = 0;
  // The level of a request without `priority`; 0: the least urgent,
  // priority_levels.
  int default_priority_level = 0;
  // What a request past queue_timeout_ms gets (Triton's timeout_action):
  // kReject answers DEADLINE_EXCEEDED without running the handler; kDelay
  // serves it after the requests of its queue that have not timed out.
  enum class TimeoutAction { kReject, kDelay };
  TimeoutAction timeout_action = TimeoutAction::kReject;
  // A request's `queue_timeout` parameter (ms, 1 to 24 h) may shorten
  // queue_timeout_ms for that request, never lengthen it (Triton's
  // allow_timeout_override); the parameter is then the queue's, neither
  // the handler's nor part of the batching key.
  bool allow_timeout_override = false;
  // False turns batching off for this endpoint (Jina's use_dynamic_batching),
  // e.g. to override the macro from YAML.
  bool enabled = true;
};

// What a token counter (GANTRY_BATCH_TOKENS) says of one request, before it
// is queued.
struct BatchTokens {
  // The most padded tokens (documents times the longest of them) one
  // handler call may hold. 0: no budget; per_document may then be empty.
  std::int64_t budget = 0;
  // Each document's tokens, in order, as the handler will count them. A
  // document over the budget goes through a call of its own, where the
  // handler may refuse it.
  std::vector<std::int64_t> per_document;
};

}  // namespace gantry

#endif  // GANTRY_BATCHING_H_
