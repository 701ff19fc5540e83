#include "worker/request_handler.h"

#include <cxxabi.h>
#include <gantry/device_report.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <typeinfo>

#include "core/deployment_rules.h"
#include "core/doc_proto.h"
#include "core/gpu_inventory.h"
#include "core/logging.h"
#include "core/registry.h"
#include "core/value_json.h"
#include "google/protobuf/util/json_util.h"
#include "worker/legacy_document_schema.h"

namespace gantry::internal {
namespace {

std::string Demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && demangled ? std::string(demangled.get()) : std::string(name);
}

// The name of the exception in flight, inside a catch block.
std::string CurrentExceptionTypeName() {
  const std::type_info* type = abi::__cxa_current_exception_type();
  return type ? Demangle(type->name()) : "unknown exception";
}

void SetTimestamp(google::protobuf::Timestamp* ts) {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
  ts->set_seconds(nanos / 1000000000);
  ts->set_nanos(static_cast<std::int32_t>(nanos % 1000000000));
}

}  // namespace

StatusOr<std::unique_ptr<RequestHandler>> RequestHandler::Create(
    const std::string& jtype, const ExecutorContext& context, const std::string& runtime_name,
    const std::map<std::string, DynamicBatching>& batching) {
  const ExecutorType* type = FindExecutorType(jtype);
  if (type == nullptr) {
    return UnknownExecutorError(jtype);
  }
  const HandlerThread::Placement placement = type->handlers_on_receiving_thread
                                                 ? HandlerThread::Placement::kCaller
                                                 : HandlerThread::ForThisProcess();
  std::unique_ptr<RequestHandler> handler(new RequestHandler(placement));
  handler->jtype_ = jtype;
  handler->executor_name_ = context.name;
  handler->runtime_name_ = runtime_name;
  handler->routes_ = type->routes();
  for (std::size_t i = 0; i < handler->routes_.size(); ++i) {
    for (const std::string& endpoint : handler->routes_[i].endpoints) {
      auto [it, inserted] = handler->endpoint_routes_.emplace(endpoint, i);
      if (!inserted) {
        return InvalidArgumentError(
            "executor '" + jtype + "': endpoint '" + endpoint + "' is bound to both " +
            handler->routes_[it->second].method_name + " and " + handler->routes_[i].method_name);
      }
    }
  }
  handler->device_ = context.device;
  for (const auto& [key, config] : batching) {
    bool known = handler->endpoint_routes_.contains(key);
    for (const Route& route : handler->routes_) {
      known = known || route.method_name == key;
    }
    if (!known) {
      return InvalidArgumentError("executor '" + jtype + "': dynamic_batching key '" + key +
                                  "' names no endpoint or handler of this executor");
    }
  }
  // One of the two places where user exceptions are caught (the other is
  // Handle): a throwing constructor is a failed start, with its message.
  // It runs on the handler thread, as every call after it does: a
  // constructor that runs torch (a warm-up pass) would otherwise leave a
  // second OpenMP team behind, and with more OpenMP threads than cores
  // libgomp spins only briefly before it sleeps, so the handler's team then
  // slept and woke ~50 times a request (bf16: 0.85 of the bare model).
  Status created = OkStatus();
  // Executor::DefaultBatching of the handlers it answers for, asked right
  // after the constructor.
  std::map<std::string, DynamicBatching> executor_batching;
  handler->handler_thread_.Run([&] {
    const char* stage = "failed to initialise";
    try {
      handler->executor_ = type->create(context);
      stage = "failed to choose its dynamic batching";
      for (const Route& route : handler->routes_) {
        if (std::optional<DynamicBatching> chosen =
                handler->executor_->DefaultBatching(route.method_name)) {
          executor_batching.emplace(route.method_name, *chosen);
        }
      }
    } catch (const std::exception& e) {
      created = FailedPreconditionError("executor '" + jtype + "' " + stage + " on " +
                                        context.device.ToString() + ": " +
                                        CurrentExceptionTypeName() + ": " + e.what());
    } catch (...) {
      created =
          FailedPreconditionError("executor '" + jtype + "' " + stage + " on " +
                                  context.device.ToString() + ": " + CurrentExceptionTypeName());
    }
  });
  if (!created.ok()) {
    return created;
  }
  for (const auto& [method_name, config] : executor_batching) {
    if (!config.enabled) {
      continue;
    }
    if (Status valid = CheckDynamicBatching(config); !valid.ok()) {
      return InvalidArgumentError("executor '" + jtype + "': DefaultBatching(\"" + method_name +
                                  "\"): " + std::string(valid.message()));
    }
  }
  // Batching: the macro's (on a CUDA device the GPU macro's, if any), then
  // the executor's DefaultBatching, then YAML by handler name, then YAML by
  // endpoint (Jina: endpoint keys beat function names). "auto" lands on a
  // GPU when one is visible.
  const bool on_gpu =
      context.device.is_cuda() || (context.device.is_auto() && !DiscoverGpus().gpus.empty());
  for (const auto& [endpoint, index] : handler->endpoint_routes_) {
    const Route& route = handler->routes_[index];
    std::optional<DynamicBatching> config = route.batching;
    if (on_gpu && route.gpu_batching) {
      config = route.gpu_batching;
    }
    if (auto it = executor_batching.find(route.method_name); it != executor_batching.end()) {
      config = it->second;
    }
    if (auto it = batching.find(route.method_name); it != batching.end()) {
      config = it->second;
    }
    if (auto it = batching.find(endpoint); it != batching.end()) {
      config = it->second;
    }
    if (config && config->enabled) {
      handler->batching_.emplace(endpoint, *config);
      spdlog::info(
          "dynamic batching on {}: preferred_batch_size={} timeout_ms={} flush_all={} "
          "max_batch_size={} max_queue_size={}",
          endpoint, config->preferred_batch_size, config->timeout_ms, config->flush_all,
          config->max_batch_size, config->max_queue_size);
    }
  }
  if (type->handlers_on_receiving_thread) {
    spdlog::info(
        "executor '{}': handlers run on the thread that received each request "
        "(GANTRY_HANDLERS_ON_RECEIVING_THREAD)",
        jtype);
  }
  return handler;
}

RequestHandler::~RequestHandler() { Close(); }

std::optional<DynamicBatching> RequestHandler::BatchingFor(std::string_view endpoint) const {
  auto it = batching_.find(endpoint);
  return it == batching_.end() ? std::nullopt : std::optional<DynamicBatching>(it->second);
}

std::map<std::string, std::string> RequestHandler::DeviceInfo() const {
  std::map<std::string, std::string> info;
  info["device"] = device_.ToString();
  if (device_.is_cuda()) {
    // Under the worker's CUDA_VISIBLE_DEVICES, cuda:N is the N-th visible
    // GPU, which DiscoverGpus lists in the same order.
    GpuInventory inventory = DiscoverGpus();
    std::size_t index = device_.has_index() ? static_cast<std::size_t>(device_.index()) : 0;
    if (index < inventory.gpus.size()) {
      const GpuInfo& gpu = inventory.gpus[index];
      info["device_name"] = gpu.name;
      info["device_uuid"] = gpu.uuid;
      info["device_memory_used_bytes"] = std::to_string(gpu.memory_used_bytes);
      info["device_memory_total_bytes"] = std::to_string(gpu.memory_total_bytes);
    } else {
      info["device_name"] = "unknown (" + DescribeVisibleGpus(inventory) + ")";
    }
  } else {
    info["device_name"] = "cpu";
  }
  DeviceCheckResult check = CheckRegisteredDevices(device_);
  info["device_tensors"] = std::to_string(check.tensors);
  std::string misplaced;
  for (const std::string& m : check.misplaced) {
    misplaced += (misplaced.empty() ? "" : "; ") + m;
  }
  info["device_misplaced"] = misplaced;
  return info;
}

std::uint64_t RequestHandler::BatchedCalls() const { return queues_.calls(); }

void RequestHandler::Close() {
  // Queued requests are served first (Jina's close() flushes the queues).
  queues_.Stop();
  std::lock_guard lock(executor_mutex_);
  if (closed_ || !executor_) {
    return;
  }
  closed_ = true;
  try {
    executor_->Close();
  } catch (const std::exception& e) {
    spdlog::error("executor '{}' Close() threw {}: {}", jtype_, CurrentExceptionTypeName(),
                  e.what());
  }
}

void RequestHandler::SetError(jina::DataRequestProto* request, const std::string& exception_name,
                              const std::string& message) const {
  auto* status = request->mutable_header()->mutable_status();
  status->set_code(jina::StatusProto::ERROR);
  status->set_description(message);
  auto* exception = status->mutable_exception();
  exception->set_name(exception_name);
  exception->add_args(message);
  exception->set_executor(jtype_);
}

HandlerOutcome RequestHandler::Invoke(const Route& route, DocList& docs,
                                      const Parameters& parameters,
                                      WorkerMetrics::Endpoint* measured,
                                      const std::function<bool()>* abandoned) {
  HandlerOutcome outcome;
  // The handler's own log lines carry the request's id.
  const std::string request_id = CurrentRequestId();
  handler_thread_.Run([&] {
    const RequestLogScope scope(request_id);
    outcome = InvokeOnHandlerThread(route, docs, parameters, measured, abandoned);
  });
  return outcome;
}

HandlerOutcome RequestHandler::InvokeOnHandlerThread(const Route& route, DocList& docs,
                                                     const Parameters& parameters,
                                                     WorkerMetrics::Endpoint* measured,
                                                     const std::function<bool()>* abandoned) {
  HandlerOutcome outcome;
  std::lock_guard lock(executor_mutex_);
  if (closed_) {
    outcome.status = UnavailableError("the executor is shutting down");
    return outcome;
  }
  if (abandoned != nullptr && *abandoned && (*abandoned)()) {
    outcome.status = CancelledError("cancelled or past its deadline before the handler ran");
    return outcome;
  }
  outcome.started = std::chrono::steady_clock::now();
  // Counted however the call ends (Triton counts executions the same way).
  struct Measure {
    WorkerMetrics::Endpoint* measured;
    std::chrono::steady_clock::time_point started;
    ~Measure() {
      if (measured != nullptr) {
        measured->executions->Increment();
        measured->compute->Observe(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
      }
    }
  } measure{measured, outcome.started};
  try {
    outcome.status = route.invoke(*executor_, docs, parameters);
  } catch (const std::exception& e) {
    outcome.exception_name = CurrentExceptionTypeName();
    outcome.status = UnknownError(e.what());
  } catch (...) {
    outcome.exception_name = CurrentExceptionTypeName();
    outcome.status = UnknownError("non-standard exception");
  }
  return outcome;
}

namespace {

// The priority is one of the parameters, so each level has queues of its
// own (the key); the queue set only needs to know which level it is.
StatusOr<int> PriorityLevel(const DynamicBatching& config, const Parameters& parameters) {
  if (config.priority_levels <= 0) {
    return 0;
  }
  const int lowest = config.priority_levels;
  const Value* asked = parameters.Find("priority");
  if (asked == nullptr) {
    return config.default_priority_level > 0 && config.default_priority_level <= lowest
               ? config.default_priority_level
               : lowest;
  }
  // Protobuf's Struct carries every number as a double.
  double level = 0;
  if (!asked->ToNumber(&level) || level < 1 || level > lowest || level != std::floor(level)) {
    return InvalidArgumentError(
        "parameter 'priority' must be an integer from 1 (the most urgent) to " +
        std::to_string(lowest) + " (priority_levels), got " +
        ValueDictToJson(Value::Dict{{"priority", *asked}}));
  }
  return static_cast<int>(level);
}

// A request's own queue timeout, with allow_timeout_override: its
// `queue_timeout` parameter (ms), taken out of `parameters`, no longer than
// the endpoint's; -1 (the endpoint's) without one.
StatusOr<int> RequestQueueTimeout(const DynamicBatching& config, Parameters& parameters) {
  constexpr int kMaxRequestQueueTimeoutMs = 24 * 3600 * 1000;
  if (!config.allow_timeout_override) {
    return -1;
  }
  const Value* asked = parameters.Find("queue_timeout");
  if (asked == nullptr) {
    return -1;
  }
  double ms = 0;
  if (!asked->ToNumber(&ms) || ms < 1 || ms > kMaxRequestQueueTimeoutMs || ms != std::floor(ms)) {
    return InvalidArgumentError(
        "parameter 'queue_timeout' must be a whole number of milliseconds from 1 to " +
        std::to_string(kMaxRequestQueueTimeoutMs) + ", got " +
        ValueDictToJson(Value::Dict{{"queue_timeout", *asked}}));
  }
  parameters.mutable_values().erase("queue_timeout");
  const int own = static_cast<int>(ms);
  return config.queue_timeout_ms > 0 ? std::min(own, config.queue_timeout_ms) : own;
}

// The handler's token counter on one request (no budget without one),
// checked: one count per document, none negative.
StatusOr<BatchTokens> CountTokens(const Route& route, const Executor& executor, const DocList& docs,
                                  const Parameters& parameters) {
  if (!route.count_tokens) {
    return BatchTokens{};
  }
  StatusOr<BatchTokens> tokens = InternalError("no count");
  try {
    tokens = route.count_tokens(executor, docs, parameters);
  } catch (const std::exception& e) {
    return InternalError(std::string("token counter threw: ") + e.what());
  }
  if (!tokens.ok() || tokens->budget <= 0) {
    return tokens;
  }
  const std::vector<std::int64_t>& counts = tokens->per_document;
  if (counts.size() != docs.size() ||
      std::any_of(counts.begin(), counts.end(), [](std::int64_t n) { return n < 0; })) {
    return InternalError("token counter of '" + route.method_name + "' returned " +
                         std::to_string(counts.size()) + " counts for " +
                         std::to_string(docs.size()) + " documents, or a negative count");
  }
  return tokens;
}

}  // namespace

// Jina keys its queues by endpoint and json.dumps(parameters,
// sort_keys=True); Value::Dict is ordered, so its JSON is canonical too.
HandlerOutcome RequestHandler::PushBatched(const std::string& endpoint,
                                           const DynamicBatching& batching, std::size_t route_index,
                                           const Parameters& parameters, const std::string& where,
                                           DocList& docs, WorkerMetrics::Endpoint* measured,
                                           int priority, int queue_timeout_ms,
                                           const BatchTokens* tokens) {
  std::string key = endpoint + '\n' + ValueDictToJson(parameters.values());
  const Route* route = &routes_[route_index];
  auto make_invoke = [this, route, &parameters, measured] {
    return BatchInvoke([this, route, parameters, measured](DocList& batch) {
      return Invoke(*route, batch, parameters, measured);
    });
  };
  return queues_.Push(key, batching, make_invoke, where, docs, priority, queue_timeout_ms, tokens,
                      route->retry_failures_alone);
}

bool RequestHandler::SetReplyDocs(jina::DataRequestProto* request, const DocList& docs,
                                  std::int64_t max_message_bytes, const std::string& where) const {
  auto* data = request->mutable_data();
  // The decoded proto entries were emptied by the move: clear them.
  data->clear_docs_bytes();
  data->mutable_docs()->Clear();
  DocListToProto(docs, data->mutable_docs());
  // Checked before gRPC serialises it: over the cap gRPC would fail the
  // call with a bare RESOURCE_EXHAUSTED, and past 2 GiB protobuf aborts.
  const std::size_t size = request->ByteSizeLong();
  if (max_message_bytes <= 0 || size <= static_cast<std::uint64_t>(max_message_bytes)) {
    return false;
  }
  data->mutable_docs()->Clear();
  std::string message = where + ": reply of " + std::to_string(size) + " bytes exceeds the " +
                        std::to_string(max_message_bytes) + "-byte message cap";
  spdlog::warn("{}", message);
  SetError(request, "ReplyTooLarge", message);
  return true;
}

RequestHandler::Result RequestHandler::Handle(jina::DataRequestProto* request,
                                              std::int64_t max_message_bytes,
                                              const std::function<bool()>& abandoned,
                                              std::string_view traceparent) {
  if (tracer_ == nullptr) {
    return HandleUntraced(request, max_message_bytes, abandoned, nullptr);
  }
  const std::optional<TraceContext> parent = ParseTraceparent(traceparent);
  const auto start = std::chrono::system_clock::now();
  const auto steady_start = std::chrono::steady_clock::now();
  // Copied now: the handler may edit the request in place.
  const std::string endpoint = request->header().exec_endpoint();
  const std::string request_id = request->header().request_id();
  HandleTimes times;
  Result result = HandleUntraced(request, max_message_bytes, abandoned, &times);
  const auto end = std::chrono::system_clock::now();
  auto at = [&](std::chrono::steady_clock::time_point t) {
    return start +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(t - steady_start);
  };

  SpanRecord executor;
  executor.context = Tracer::NewSpanContext(parent);
  if (parent) {
    executor.parent_span_id = parent->span_id;
  }
  executor.name = "executor " + endpoint;
  executor.kind = SpanKind::kServer;
  executor.start = start;
  executor.end = end;
  executor.string_attributes = {{"gantry.request_id", PrintableForLog(request_id)},
                                {"gantry.endpoint", PrintableForLog(endpoint)},
                                {"gantry.executor", jtype_},
                                {"gantry.replica", runtime_name_}};
  executor.int_attributes = {{"gantry.docs", static_cast<std::int64_t>(times.docs)}};
  if (!result.status.ok()) {
    executor.error = true;
    executor.status_message = PrintableForLog(result.status.ToString(), 1024);
  } else if (result.is_error) {
    executor.error = true;
    executor.status_message = PrintableForLog(request->header().status().description(), 1024);
  }
  if (times.started != std::chrono::steady_clock::time_point{}) {
    SpanRecord queue;
    queue.context = Tracer::NewSpanContext(executor.context);
    queue.parent_span_id = executor.context.span_id;
    queue.name = "queue";
    queue.start = start;
    queue.end = at(times.started);
    queue.string_attributes = {{"gantry.batched", times.batched ? "true" : "false"}};
    SpanRecord handler;
    handler.context = Tracer::NewSpanContext(executor.context);
    handler.parent_span_id = executor.context.span_id;
    handler.name = "handler " + times.handler;
    handler.start = queue.end;
    handler.end = at(times.handled);
    handler.error = executor.error;
    handler.status_message = executor.status_message;
    tracer_->Record(std::move(queue));
    tracer_->Record(std::move(handler));
  }
  tracer_->Record(std::move(executor));
  return result;
}

RequestHandler::Result RequestHandler::HandleUntraced(jina::DataRequestProto* request,
                                                      std::int64_t max_message_bytes,
                                                      const std::function<bool()>& abandoned,
                                                      HandleTimes* times) {
  const auto arrived = std::chrono::steady_clock::now();
  const RequestLogScope log_scope(request->header().request_id());
  Result result;
  auto* route_proto = request->add_routes();
  route_proto->set_executor(executor_name_);
  SetTimestamp(route_proto->mutable_start_time());

  const std::string& endpoint = request->header().exec_endpoint();
  if (endpoint == kDryRunEndpoint) {
    SetTimestamp(route_proto->mutable_end_time());
    return result;
  }
  auto it = endpoint_routes_.find(endpoint);
  if (it == endpoint_routes_.end()) {
    it = endpoint_routes_.find(kDefaultEndpoint);
  }
  std::string where =
      "executor '" + jtype_ + "' (" + runtime_name_ + ") endpoint '" + endpoint + "'";
  if (it == endpoint_routes_.end()) {
    std::string known;
    for (const auto& [name, index] : endpoint_routes_) {
      known += known.empty() ? "" : ", ";
      known += name;
    }
    std::string message = where +
                          ": no handler for this endpoint and no default handler; "
                          "endpoints: " +
                          (known.empty() ? "(none)" : known);
    SetError(request, "EndpointNotFound", message);
    SetTimestamp(route_proto->mutable_end_time());
    result.is_error = true;
    if (metrics_ != nullptr) {
      metrics_->Failed(metrics_->For(""), "endpoint_not_found");
    }
    return result;
  }
  const Route& route = routes_[it->second];
  // Batched and counted under the endpoint the handler is bound to
  // ("/default" for unknown endpoints), as Jina does.
  const std::string& bound = it->first;
  WorkerMetrics::Endpoint* measured = metrics_ != nullptr ? &metrics_->For(bound) : nullptr;
  // The request is pending until it returns, and its time observed then.
  struct Pending {
    WorkerMetrics::Endpoint* measured;
    std::chrono::steady_clock::time_point arrived;
    explicit Pending(WorkerMetrics::Endpoint* m, std::chrono::steady_clock::time_point a)
        : measured(m), arrived(a) {
      if (measured != nullptr) {
        measured->pending->Increment();
      }
    }
    ~Pending() {
      if (measured != nullptr) {
        measured->pending->Decrement();
        measured->request->Observe(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - arrived).count());
      }
    }
    Pending(const Pending&) = delete;
    Pending& operator=(const Pending&) = delete;
  } pending(measured, arrived);
  auto failed = [&](std::string_view reason) {
    if (measured != nullptr) {
      metrics_->Failed(*measured, reason);
    }
  };

  // Decode documents: Jina writers use `docs`, readers accept `docs_bytes`.
  // Malformed input is the client's error, answered as a gRPC
  // INVALID_ARGUMENT rather than an executor error reply.
  auto* data = request->mutable_data();
  DecodeLimits limits;
  if (max_message_bytes > 0) {
    limits.max_tensor_bytes = static_cast<std::uint64_t>(max_message_bytes);
  }
  StatusOr<DocList> docs = DocList();
  if (data->has_docs_bytes()) {
    docs = DocListFromBytes(data->docs_bytes(), limits);
  } else if (data->has_docs()) {
    docs = TakeDocListFromProto(data->mutable_docs(), limits);
  }
  if (!docs.ok()) {
    result.status = docs.status().WithPrefix(where);
    failed("invalid_argument");
    return result;
  }
  StatusOr<Value::Dict> parameter_values = StructToDict(request->parameters());
  if (!parameter_values.ok()) {
    result.status = parameter_values.status().WithPrefix(where + ": parameters");
    failed("invalid_argument");
    return result;
  }
  Parameters parameters(std::move(parameter_values).value());
  // Jina: parameters[<executor name>] (a dict) is merged over the rest.
  if (const Value* own = parameters.Find(executor_name_); own != nullptr && own->AsDict()) {
    Value::Dict merged = *own->AsDict();
    for (auto& [key, value] : merged) {
      parameters.mutable_values().insert_or_assign(key, value);
    }
  }

  // Runs one of the handler's hooks on this request alone (`what`:
  // "validator" or "preparer"); false once it failed the request.
  auto hook_passed = [&](const char* what, const auto& hook) -> bool {
    Status status;
    try {
      status = hook();
    } catch (const std::exception& e) {
      status = InternalError(std::string(what) + " threw: " + e.what());
    }
    if (status.ok()) {
      return true;
    }
    result.status = status.WithPrefix(where);
    failed(status.code() == StatusCode::kInvalidArgument ? "invalid_argument" : what);
    return false;
  };
  // The request on its own, before it can share a call with anyone else's.
  if (route.validate &&
      !hook_passed("validator", [&] { return route.validate(*executor_, *docs, parameters); })) {
    return result;
  }
  // The request's share of the handler's work, on this thread, with the
  // parameters the handler gets.
  auto prepare = [&]() -> bool {
    return !route.prepare ||
           hook_passed("preparer", [&] { return route.prepare(*executor_, *docs, parameters); });
  };

  HandlerOutcome outcome;
  const std::size_t doc_count = docs->size();
  if (auto batching = batching_.find(bound); batching != batching_.end()) {
    StatusOr<int> priority = PriorityLevel(batching->second, parameters);
    StatusOr<int> queue_timeout = RequestQueueTimeout(batching->second, parameters);
    if (!priority.ok() || !queue_timeout.ok()) {
      result.status =
          (priority.ok() ? queue_timeout.status() : priority.status()).WithPrefix(where);
      failed("invalid_argument");
      return result;
    }
    if (!prepare()) {
      return result;
    }
    StatusOr<BatchTokens> tokens = CountTokens(route, *executor_, *docs, parameters);
    if (!tokens.ok()) {
      result.status = tokens.status().WithPrefix(where);
      failed(tokens.status().code() == StatusCode::kInvalidArgument ? "invalid_argument"
                                                                    : "validator");
      return result;
    }
    outcome = PushBatched(bound, batching->second, it->second, parameters, where, *docs, measured,
                          *priority, *queue_timeout, &*tokens);
  } else {
    if (!prepare()) {
      return result;
    }
    outcome = Invoke(route, *docs, parameters, measured, &abandoned);
  }
  if (times != nullptr) {
    times->handler = route.method_name;
    times->started = outcome.started;
    times->handled = std::chrono::steady_clock::now();
    times->docs = doc_count;
    times->batched = batching_.find(bound) != batching_.end();
  }
  if (measured != nullptr && outcome.started != std::chrono::steady_clock::time_point{}) {
    measured->queue->Observe(std::chrono::duration<double>(outcome.started - arrived).count());
  }
  if (measured != nullptr && outcome.delayed) {
    measured->delayed->Increment();
  }
  Status status = std::move(outcome.status);
  const bool threw = !outcome.exception_name.empty();
  const std::string& exception_name = outcome.exception_name;
  SetTimestamp(route_proto->mutable_end_time());
  if (!status.ok()) {
    std::string message = where + ": " + (threw ? exception_name + ": " : "") +
                          (threw ? status.message() : status.ToString());
    spdlog::warn("{}", message);
    // The request's docs go back as the handler left them (Jina returns the
    // request); over the cap they are dropped.
    if (!SetReplyDocs(request, *docs, max_message_bytes, where)) {
      SetError(request, threw ? exception_name : std::string(StatusCodeName(status.code())),
               message);
    }
    result.is_error = true;
    failed(!outcome.refused.empty()                  ? std::string_view(outcome.refused)
           : status.code() == StatusCode::kCancelled ? "cancelled"
                                                     : "handler");
    return result;
  }
  result.is_error = SetReplyDocs(request, *docs, max_message_bytes, where);
  if (result.is_error) {
    failed("reply_too_large");
  } else if (measured != nullptr) {
    measured->success->Increment();
    measured->docs->Increment(static_cast<double>(doc_count));
  }
  return result;
}

std::vector<std::string> RequestHandler::Endpoints() const {
  std::vector<std::string> out;
  for (const auto& [endpoint, index] : endpoint_routes_) {
    out.push_back(endpoint);
  }
  return out;
}

void RequestHandler::FillEndpoints(jina::EndpointsProto* endpoints) const {
  auto* schemas = endpoints->mutable_schemas()->mutable_fields();
  // The schema is a constant of ours, so parsing it cannot fail.
  static const google::protobuf::Struct* const kLegacyModel = [] {
    auto* model = new google::protobuf::Struct();
    (void)google::protobuf::util::JsonStringToMessage(kLegacyDocumentSchema, model);
    return model;
  }();
  auto add = [&](const std::string& endpoint) {
    endpoints->add_endpoints(endpoint);
    google::protobuf::Value& entry = (*schemas)[endpoint];
    auto* fields = entry.mutable_struct_value()->mutable_fields();
    for (const char* side : {"input", "output"}) {
      auto* io = (*fields)[side].mutable_struct_value()->mutable_fields();
      (*io)["name"].set_string_value("LegacyDocument");
      *(*io)["model"].mutable_struct_value() = *kLegacyModel;
    }
    (*fields)["is_generator"].set_bool_value(false);
    (*fields)["is_singleton_doc"].set_bool_value(false);
    auto* params = (*fields)["parameters"].mutable_struct_value()->mutable_fields();
    (*params)["name"].set_null_value(google::protobuf::NULL_VALUE);
    (*params)["model"].set_null_value(google::protobuf::NULL_VALUE);
  };
  add(std::string(kDryRunEndpoint));
  for (const auto& [endpoint, index] : endpoint_routes_) {
    add(endpoint);
  }
}

}  // namespace gantry::internal
