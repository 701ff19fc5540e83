// The logic of a worker, without sockets: routes a DataRequestProto to the
// executor's handler and turns the result (or the handler's exception) into
// the reply Jina expects. Tested in-process; worker_service.cc wires it to
// gRPC.
//
// Endpoints with dynamic batching (GANTRY_DYNAMIC_BATCHING or YAML) go
// through a batch queue per endpoint and parameter set (a BatchQueueSet:
// bounded, one flusher thread), so concurrent requests are merged into one
// handler call.
//
// Thread safety: Handle is safe for concurrent use; handler calls are
// serialised (Jina's one-request-at-a-time contract) and all made on one
// thread of the handler's own (worker/handler_thread.h).
#ifndef GANTRY_WORKER_REQUEST_HANDLER_H_
#define GANTRY_WORKER_REQUEST_HANDLER_H_

#include <gantry/executor.h>
#include <gantry/status.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/tracing.h"
#include "core/limits.h"
#include "jina/jina.pb.h"
#include "worker/batch_queue.h"
#include "worker/handler_thread.h"
#include "worker/worker_metrics.h"

namespace gantry::internal {

class RequestHandler {
 public:
  // Creates the executor of type `jtype` (the constructor runs here). A
  // constructor exception becomes the returned status. `batching` (keyed by
  // endpoint or handler name; endpoint keys win) overrides the executor's
  // GANTRY_DYNAMIC_BATCHING; a key that names neither is an error.
  static StatusOr<std::unique_ptr<RequestHandler>> Create(
      const std::string& jtype, const ExecutorContext& context, const std::string& runtime_name,
      const std::map<std::string, DynamicBatching>& batching = {});
  ~RequestHandler();

  // What Handle made of one request.
  struct Result {
    // InvalidArgument when the request itself is malformed: documents that
    // do not decode or fail validation (tensor shape/buffer mismatch,
    // nesting too deep), parameters nested too deep. The caller answers
    // with this gRPC status and sends no reply.
    Status status;
    // The reply carries an executor error in its header, Jina style (the
    // caller sets trailing `is-error: true`): a handler exception or error
    // status, an unknown endpoint, or a reply over the message cap.
    bool is_error = false;
  };

  // Processes `request` in place: on return it is the reply (when
  // result.status is OK). A reply that would exceed `max_message_bytes`
  // becomes an error reply naming the executor, endpoint and size.
  // `abandoned`, if set, is asked once the handler could run (unbatched
  // endpoints): true skips it, as nobody waits for the answer any more.
  // With a tracer attached, the request's spans (executor, queue, handler)
  // are recorded as children of `traceparent` (the caller's W3C trace
  // context; empty or malformed: a trace of their own).
  Result Handle(jina::DataRequestProto* request,
                std::int64_t max_message_bytes = kDefaultMaxMessageBytes,
                const std::function<bool()>& abandoned = {}, std::string_view traceparent = {});

  // Endpoints (with "_jina_dry_run_") and their JSON schemas, for
  // endpoint_discovery.
  void FillEndpoints(jina::EndpointsProto* endpoints) const;

  // Calls the executor's Close() once; later requests get an error.
  void Close();

  // Records every request from now on in `metrics` (which must outlive this
  // handler). Call before the first Handle.
  void AttachMetrics(WorkerMetrics* metrics) { metrics_ = metrics; }
  // Records every request's spans with `tracer` (which must outlive this
  // handler). Call before the first Handle.
  void AttachTracer(Tracer* tracer) { tracer_ = tracer; }
  // The endpoints the executor's handlers are bound to.
  std::vector<std::string> Endpoints() const;

  const std::string& executor_name() const { return executor_name_; }
  const std::string& jtype() const { return jtype_; }
  const std::string& runtime_name() const { return runtime_name_; }
  const Device& device() const { return device_; }

  // The batching in force for `endpoint`, if any (for logs and tests).
  std::optional<DynamicBatching> BatchingFor(std::string_view endpoint) const;
  // The executor's device, its name and memory (from NVML, as the parent
  // sees GPUs; used is the whole GPU's) and the registered tensors checked:
  // keys device, device_name, device_memory_used_bytes,
  // device_memory_total_bytes, device_tensors, device_misplaced.
  std::map<std::string, std::string> DeviceInfo() const;
  // Handler calls made by the batch queues so far.
  std::uint64_t BatchedCalls() const;

 private:
  explicit RequestHandler(HandlerThread::Placement placement) : handler_thread_(placement) {}
  // When the parts of one request happened, for its spans.
  struct HandleTimes {
    std::string handler;  // the handler's method name; empty when none ran
    std::chrono::steady_clock::time_point started{};  // the handler began (unset: never)
    std::chrono::steady_clock::time_point handled{};  // the handler's outcome came back
    std::size_t docs = 0;
    bool batched = false;
  };
  // Handle without spans; fills `times` when given.
  Result HandleUntraced(jina::DataRequestProto* request, std::int64_t max_message_bytes,
                        const std::function<bool()>& abandoned, HandleTimes* times);
  void SetError(jina::DataRequestProto* request, const std::string& exception_name,
                const std::string& message) const;
  // Encodes `docs` as the reply's documents, or, when the reply would then
  // exceed `max_message_bytes`, drops them and makes the reply an error.
  // Returns true if the reply became an error.
  bool SetReplyDocs(jina::DataRequestProto* request, const DocList& docs,
                    std::int64_t max_message_bytes, const std::string& where) const;
  // One serialised handler call, made on handler_thread_; exceptions
  // become the outcome. `measured`, if set, counts the execution and its
  // time.
  HandlerOutcome Invoke(const Route& route, DocList& docs, const Parameters& parameters,
                        WorkerMetrics::Endpoint* measured,
                        const std::function<bool()>* abandoned = nullptr);
  HandlerOutcome InvokeOnHandlerThread(const Route& route, DocList& docs,
                                       const Parameters& parameters,
                                       WorkerMetrics::Endpoint* measured,
                                       const std::function<bool()>* abandoned);
  // Through the batch queue of `endpoint` and `parameters`, whose batching
  // settings are `batching`; `queue_timeout_ms` as BatchQueueSet::Push.
  HandlerOutcome PushBatched(const std::string& endpoint, const DynamicBatching& batching,
                             std::size_t route_index, const Parameters& parameters,
                             const std::string& where, DocList& docs,
                             WorkerMetrics::Endpoint* measured, int priority, int queue_timeout_ms,
                             const BatchTokens* tokens);

  std::string jtype_;
  std::string executor_name_;
  std::string runtime_name_;
  std::vector<internal::Route> routes_;
  // endpoint -> index into routes_
  std::map<std::string, std::size_t, std::less<>> endpoint_routes_;
  // endpoint -> batching in force (only batched endpoints).
  std::map<std::string, DynamicBatching, std::less<>> batching_;
  Device device_;
  // Keyed by endpoint + parameters (as JSON); stopped by Close.
  BatchQueueSet queues_;
  std::mutex executor_mutex_;
  std::unique_ptr<Executor> executor_;  // guarded by executor_mutex_ for calls
  bool closed_ = false;                 // guarded by executor_mutex_
  WorkerMetrics* metrics_ = nullptr;    // set before serving
  Tracer* tracer_ = nullptr;            // set before serving
  // Every handler call runs here (worker/handler_thread.h says why), or
  // on its caller's thread in a process without OpenMP or for an executor
  // declared GANTRY_HANDLERS_ON_RECEIVING_THREAD.
  // Declared last: it stops, after what is queued, before the executor goes.
  HandlerThread handler_thread_;
};

}  // namespace gantry::internal

#endif  // GANTRY_WORKER_REQUEST_HANDLER_H_
