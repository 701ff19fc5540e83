// File: gantry/executor.h   (the registry behind GANTRY_REGISTER_EXECUTOR is
// src/core/registry.cc)
//
// Executors: user classes whose methods serve endpoints, the C++ counterpart
// of Jina's Executor and `@requests`.
//
//   class MyExec final : public gantry::Executor {
//     GANTRY_EXECUTOR(MyExec);           // YAML `jtype: MyExec`; leaves a public section
//    public:
//     explicit MyExec(const gantry::ExecutorContext& context);
//
//     GANTRY_REQUESTS(Encode, "/encode");  // Jina: @requests(on='/encode')
//     void Encode(gantry::DocList& docs, const gantry::Parameters& parameters);
//
//     GANTRY_REQUESTS(Other);              // Jina: bare @requests -> /default
//     gantry::Status Other(gantry::DocList& docs);
//   };
//   GANTRY_REGISTER_EXECUTOR(MyExec);      // in exactly one .cc file
//
// Dynamic batching (Jina's @dynamic_batching; see gantry/batching.h) is
// declared beside the handler, after its GANTRY_REQUESTS line:
//
//     GANTRY_DYNAMIC_BATCHING(Encode, {.preferred_batch_size = 32, .timeout_ms = 10});
//
// or only for replicas on a CUDA device, where one forward pass over many
// documents costs about what one over a few does (it replaces the line
// above there; YAML overrides either):
//
//     GANTRY_DYNAMIC_BATCHING_ON_GPU(Encode, {.preferred_batch_size = 256, .timeout_ms = 0});
//
// An executor whose best batching depends on what it found at start (its
// dtype, the CPU's matrix units) overrides DefaultBatching, which replaces
// either macro's choice; YAML overrides that too.
//
// A batched handler gets the documents of several requests in one DocList
// and must leave exactly as many documents as it got, in order.
//
// A handler may have a validator, which sees each request's documents on
// its own before they are queued or merged with other requests (Triton
// checks inputs against the model configuration the same way), so one
// client's malformed document fails only that client's request:
//
//     GANTRY_VALIDATE(Encode, CheckInputs);
//     gantry::Status CheckInputs(const gantry::DocList& docs,
//                                const gantry::Parameters& parameters) const;
//
// A non-OK status is the request's gRPC status (INVALID_ARGUMENT: HTTP 400),
// prefixed with executor and endpoint; the handler never sees the request.
// Validators run on the worker's gRPC threads, concurrently with each other
// and with handlers: they must only read what the constructor set.
//
// A batched handler may count tokens, so that its batches close by tokens
// as well as by documents (text-embeddings-inference's max_batch_tokens),
// under the same threading rule as validators, after the preparer (so it may
// count from what the preparer left):
//
//     GANTRY_BATCH_TOKENS(Encode, CountTokens);
//     gantry::StatusOr<gantry::BatchTokens> CountTokens(
//         const gantry::DocList& docs, const gantry::Parameters& parameters) const;
//
// A handler may have a preparer, which does a request's share of the work
// that does not need the handler's resources (a tokenizer, decoding an
// image) on the thread that received the request, before it is queued or
// handed to the handler. Requests are then prepared concurrently, while the
// handler runs earlier ones; on a GPU the handler's thread only feeds the
// device (text-embeddings-inference tokenizes in front of its batching queue
// the same way):
//
//     GANTRY_PREPARE(Encode, Tokenize);
//     gantry::Status Tokenize(gantry::DocList& docs,
//                             const gantry::Parameters& parameters) const;
//
// It leaves what it worked out with each document (Doc::set_prepared), which
// the handler reads back; the parameters are the ones the handler gets. A
// non-OK status is the request's reply, as a validator's is. Preparers run
// under the same threading rule as validators, after them.
//
// A handler returns void or gantry::Status and takes `DocList&`, optionally
// followed by `const Parameters&`; it edits the documents in place. It may
// throw: the exception becomes an error reply naming executor, endpoint and
// message, and the worker keeps serving. The constructor runs in the worker
// process and loads the model onto context.device; it may throw too, which
// fails the replica's start with that message.
//
// Where handlers run: in a worker with an OpenMP runtime loaded (any that
// links libtorch), on one thread of the worker's own, the constructor too,
// because libtorch's CPU kernels keep one OpenMP team per calling thread,
// and a team called from a new thread each time is started or woken again.
// An executor whose handlers and constructor run no OpenMP code (no
// libtorch, oneDNN or MKL work on the CPU: a router, a filter, a client of
// another service) may say so inside its class body:
//
//     GANTRY_HANDLERS_ON_RECEIVING_THREAD();
//
// The worker then calls its handlers on the thread that received each
// request (a batched handler: the thread that closed the batch), which
// saves two thread hand-offs a call, about a fifth of a one-hop call's
// latency on a small VM (docs/benchmarks.md). Calls still come one at a time.
//
// Thread safety: the worker calls one handler of an executor at a time (as
// Jina does for sync methods), so handlers need no locking of their own.
#ifndef GANTRY_EXECUTOR_H_
#define GANTRY_EXECUTOR_H_

#include <gantry/batching.h>
#include <gantry/device.h>
#include <gantry/document.h>
#include <gantry/status.h>
#include <gantry/version.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace gantry {

// Jina's names for the fallback endpoint and the dry-run probe.
inline constexpr std::string_view kDefaultEndpoint = "/default";
inline constexpr std::string_view kDryRunEndpoint = "_jina_dry_run_";

// What an executor's constructor receives.
struct ExecutorContext {
  // metas.name: the executor's name in logs and errors ("executor").
  std::string name = "executor";
  // The device this replica must use, already validated.
  Device device{};
  // `uses_with` / YAML `with:`, the constructor arguments.
  Parameters with{};
  // YAML `metas:` (name, description, workspace, ...).
  Value::Dict metas{};
  int replica_id = 0;
  int replicas = 1;
  // A directory this replica may write to; empty if none was configured.
  std::string workspace{};
  // The folder of the YAML file that configured this executor (absolute);
  // empty when it was configured from code. Relative paths in `with:`
  // resolve against it: see ResolvePath.
  std::string config_dir{};
  // The cap on one request or reply message (YAML `max_message_bytes`): a
  // handler whose reply could only be over it may refuse the request before
  // doing the work.
  std::int64_t max_message_bytes = std::int64_t{64} << 20;

  // `path` as the executor should open it: absolute paths unchanged,
  // relative ones under config_dir (or the working directory without one).
  std::string ResolvePath(std::string_view path) const;
};

// Base class of every executor.
class Executor {
 public:
  Executor() = default;
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  virtual ~Executor() = default;

  // Called once when the worker shuts down, after the last request (Jina's
  // close()). Not called if the constructor threw.
  virtual void Close() {}

  // The dynamic batching handler `method_name` should get, decided once the
  // constructor has run and knows its device, dtype and CPU: a value
  // replaces what GANTRY_DYNAMIC_BATCHING(_ON_GPU) declared (`enabled =
  // false` turns it off), nullopt keeps it. YAML's uses_dynamic_batching
  // overrides either. Called once per handler, on the handler thread, right
  // after the constructor; a value the YAML rules would refuse fails the
  // replica's start, naming the handler.
  virtual std::optional<DynamicBatching> DefaultBatching(std::string_view /*method_name*/) const {
    return std::nullopt;
  }
};

namespace internal {

// A handler bound to its endpoints, with the executor type erased.
struct Route {
  std::string method_name;
  std::vector<std::string> endpoints;
  std::function<Status(Executor&, DocList&, const Parameters&)> invoke;
  // Set by GANTRY_DYNAMIC_BATCHING; YAML may override it per endpoint.
  std::optional<DynamicBatching> batching{};
  // Set by GANTRY_DYNAMIC_BATCHING_ON_GPU: replaces `batching` on a CUDA
  // device; YAML may override it per endpoint.
  std::optional<DynamicBatching> gpu_batching{};
  // Set by GANTRY_VALIDATE: checks one request's documents before they are
  // queued; empty when the handler has none.
  std::function<Status(const Executor&, const DocList&, const Parameters&)> validate{};
  // Set by GANTRY_BATCH_TOKENS: counts one request's tokens before it is
  // queued, so that dynamic batching closes calls by tokens; empty when the
  // handler has none.
  std::function<StatusOr<BatchTokens>(const Executor&, const DocList&, const Parameters&)>
      count_tokens{};
  // Set by GANTRY_PREPARE: does one request's share of the handler's work
  // on its own thread before it is queued; empty when the handler has none.
  std::function<Status(const Executor&, DocList&, const Parameters&)> prepare{};
  // Set by GANTRY_BATCH_FAILURES_RETRIED_ALONE: a batched call that failed
  // runs each of its requests again alone.
  bool retry_failures_alone = false;
};

template <typename T>
class RouteCollector {
 public:
  explicit RouteCollector(std::vector<Route>* routes) : routes_(routes) {}

  template <auto kMethod>
  void Add(std::string_view method_name, std::vector<std::string> endpoints) {
    using M = decltype(kMethod);
    constexpr bool kDocs = std::is_same_v<M, void (T::*)(DocList&)>;
    constexpr bool kDocsParams = std::is_same_v<M, void (T::*)(DocList&, const Parameters&)>;
    constexpr bool kStatusDocs = std::is_same_v<M, Status (T::*)(DocList&)>;
    constexpr bool kStatusDocsParams =
        std::is_same_v<M, Status (T::*)(DocList&, const Parameters&)>;
    static_assert(kDocs || kDocsParams || kStatusDocs || kStatusDocsParams,
                  "GANTRY_REQUESTS: a handler must be declared as "
                  "`void Name(gantry::DocList& docs)` or "
                  "`void Name(gantry::DocList& docs, const gantry::Parameters& parameters)`, "
                  "optionally returning gantry::Status instead of void");
    if (endpoints.empty()) {
      endpoints.emplace_back(kDefaultEndpoint);
    }
    Route route;
    route.method_name = std::string(method_name);
    route.endpoints = std::move(endpoints);
    route.invoke = [](Executor& executor, DocList& docs, const Parameters& parameters) -> Status {
      T& self = static_cast<T&>(executor);
      if constexpr (kDocs) {
        (self.*kMethod)(docs);
        return OkStatus();
      } else if constexpr (kDocsParams) {
        (self.*kMethod)(docs, parameters);
        return OkStatus();
      } else if constexpr (kStatusDocs) {
        return (self.*kMethod)(docs);
      } else {
        return (self.*kMethod)(docs, parameters);
      }
    };
    routes_->push_back(std::move(route));
  }

  // Attaches `batching` to the handler `method_name` (which the macro has
  // already checked exists as a member).
  void SetBatching(std::string_view method_name, DynamicBatching batching) {
    for (Route& route : *routes_) {
      if (route.method_name == method_name) {
        route.batching = batching;
      }
    }
  }

  // Attaches the const member `kValidator` to the handler `method_name`.
  template <auto kValidator>
  void SetValidator(std::string_view method_name) {
    static_assert(std::is_same_v<decltype(kValidator),
                                 Status (T::*)(const DocList&, const Parameters&) const>,
                  "GANTRY_VALIDATE: a validator must be declared as "
                  "`gantry::Status Name(const gantry::DocList& docs, "
                  "const gantry::Parameters& parameters) const`");
    for (Route& route : *routes_) {
      if (route.method_name == method_name) {
        route.validate = [](const Executor& executor, const DocList& docs,
                            const Parameters& parameters) -> Status {
          return (static_cast<const T&>(executor).*kValidator)(docs, parameters);
        };
      }
    }
  }

  // Attaches the const member `kCounter` to the handler `method_name`.
  template <auto kCounter>
  void SetTokenCounter(std::string_view method_name) {
    static_assert(std::is_same_v<decltype(kCounter), StatusOr<BatchTokens> (T::*)(
                                                         const DocList&, const Parameters&) const>,
                  "GANTRY_BATCH_TOKENS: a token counter must be declared as "
                  "`gantry::StatusOr<gantry::BatchTokens> Name(const gantry::DocList& docs, "
                  "const gantry::Parameters& parameters) const`");
    for (Route& route : *routes_) {
      if (route.method_name == method_name) {
        route.count_tokens = [](const Executor& executor, const DocList& docs,
                                const Parameters& parameters) -> StatusOr<BatchTokens> {
          return (static_cast<const T&>(executor).*kCounter)(docs, parameters);
        };
      }
    }
  }

  // Attaches the const member `kPreparer` to the handler `method_name`.
  template <auto kPreparer>
  void SetPreparer(std::string_view method_name) {
    static_assert(
        std::is_same_v<decltype(kPreparer), Status (T::*)(DocList&, const Parameters&) const>,
        "GANTRY_PREPARE: a preparer must be declared as "
        "`gantry::Status Name(gantry::DocList& docs, const gantry::Parameters& parameters) "
        "const`");
    for (Route& route : *routes_) {
      if (route.method_name == method_name) {
        route.prepare = [](const Executor& executor, DocList& docs,
                           const Parameters& parameters) -> Status {
          return (static_cast<const T&>(executor).*kPreparer)(docs, parameters);
        };
      }
    }
  }

  // The same, for replicas on a CUDA device only.
  void SetGpuBatching(std::string_view method_name, DynamicBatching batching) {
    for (Route& route : *routes_) {
      if (route.method_name == method_name) {
        route.gpu_batching = batching;
      }
    }
  }
  void SetRetryFailuresAlone(std::string_view method_name) {
    for (Route& route : *routes_) {
      if (route.method_name == method_name) {
        route.retry_failures_alone = true;
      }
    }
  }

 private:
  std::vector<Route>* routes_;
};

template <typename T>
using RouteHookFn = void (*)(RouteCollector<T>&);

// The hooks of T's GANTRY_REQUESTS lines, in declaration order.
template <typename T>
std::vector<RouteHookFn<T>>& RouteHooks() {
  static std::vector<RouteHookFn<T>> hooks;
  return hooks;
}

template <typename T>
struct RouteHook {
  explicit RouteHook(RouteHookFn<T> fn) { RouteHooks<T>().push_back(fn); }
};

// GANTRY_DYNAMIC_BATCHING lines run after every GANTRY_REQUESTS line, so
// the two may come in either order.
template <typename T>
std::vector<RouteHookFn<T>>& BatchingHooks() {
  static std::vector<RouteHookFn<T>> hooks;
  return hooks;
}

template <typename T>
struct BatchingHook {
  explicit BatchingHook(RouteHookFn<T> fn) { BatchingHooks<T>().push_back(fn); }
};

// One registered executor type.
struct ExecutorType {
  std::string name;
  // Where GANTRY_REGISTER_EXECUTOR stands, for duplicate-name errors.
  std::string source_file;
  std::function<std::unique_ptr<Executor>(const ExecutorContext&)> create;
  std::function<std::vector<Route>()> routes;
  // GANTRY_HANDLERS_ON_RECEIVING_THREAD: the type runs no OpenMP code.
  bool handlers_on_receiving_thread = false;
};

// Aborts, naming both source files, if the name is taken (a build error,
// not input).
void RegisterExecutorType(ExecutorType type);

}  // namespace internal
}  // namespace gantry

// Called by every registrar before it touches any other Gantry symbol, with
// the ABI version its code was compiled against: a plugin built against
// another Gantry must not call into this one with differently laid out
// types. C linkage and C types, so that the call itself is version-proof.
// Returns false (and records why, for the plugin loader) on a mismatch.
extern "C" bool gantry_accept_executor_abi(const char* abi_version, const char* source_file);

// The ABI version, exported from every program and plugin that registers an
// executor (weak, so one copy per library), for the loader's dlsym.
extern "C" __attribute__((weak, used,
                          visibility("default"))) inline const char gantry_plugin_abi_version[] =
    GANTRY_PLUGIN_ABI_VERSION;

namespace gantry {
namespace internal {

template <typename T>
struct ExecutorRegistrar {
  explicit ExecutorRegistrar(const char* source_file) {
    // The literal, not the exported array: in a plugin, a reference to the
    // array would bind to the loading program's copy.
    if (!gantry_accept_executor_abi(GANTRY_PLUGIN_ABI_VERSION, source_file)) {
      return;
    }
    static_assert(std::is_base_of_v<Executor, T>,
                  "GANTRY_REGISTER_EXECUTOR: the class must derive publicly from gantry::Executor");
    static_assert(std::is_constructible_v<T, const ExecutorContext&>,
                  "GANTRY_REGISTER_EXECUTOR: the class needs a public constructor "
                  "`explicit T(const gantry::ExecutorContext& context)`");
    ExecutorType type;
    type.name = std::string(T::kName);
    type.source_file = source_file;
    type.create = [](const ExecutorContext& context) -> std::unique_ptr<Executor> {
      return std::make_unique<T>(context);
    };
    if constexpr (requires { T::kGantryHandlersOnReceivingThread; }) {
      type.handlers_on_receiving_thread = T::kGantryHandlersOnReceivingThread;
    }
    type.routes = [] {
      std::vector<Route> routes;
      RouteCollector<T> collector(&routes);
      for (RouteHookFn<T> hook : RouteHooks<T>()) {
        hook(collector);
      }
      for (RouteHookFn<T> hook : BatchingHooks<T>()) {
        hook(collector);
      }
      return routes;
    };
    RegisterExecutorType(std::move(type));
  }
};

}  // namespace internal

// Describes a registered executor type (for `gantry executors` and errors).
struct ExecutorTypeInfo {
  std::string name;
  std::string source_file;
  // endpoint -> handler method name, "/default" included when bound.
  std::vector<std::pair<std::string, std::string>> endpoints;
  // Declared with GANTRY_HANDLERS_ON_RECEIVING_THREAD.
  bool handlers_on_receiving_thread = false;
};

// Registered executor types, sorted by name.
std::vector<ExecutorTypeInfo> RegisteredExecutors();
// True if this program registered `name`.
bool IsExecutorRegistered(std::string_view name);

}  // namespace gantry

// Inside the class body: names the executor type (YAML `jtype:`). Leaves the
// class in a public section.
#define GANTRY_EXECUTOR(Type) \
 public:                      \
  using GantrySelf = Type;    \
  static constexpr std::string_view kName = #Type

// Inside the class body of an executor that runs no OpenMP code: the worker
// calls its handlers on the thread that received each request instead of
// on a thread of its own (see "Where handlers run" above). Leaves the class
// in a public section, as GANTRY_EXECUTOR does (the registrar reads it).
#define GANTRY_HANDLERS_ON_RECEIVING_THREAD() \
 public:                                      \
  static constexpr bool kGantryHandlersOnReceivingThread = true

// Beside a handler's declaration: binds it to the listed endpoints, or to
// "/default" when none are listed. One line per handler.
#define GANTRY_REQUESTS(method, ...)                                                         \
  static void GantryRoute_##method(::gantry::internal::RouteCollector<GantrySelf>& routes) { \
    routes.template Add<&GantrySelf::method>(#method, {__VA_ARGS__});                        \
  }                                                                                          \
  inline static const ::gantry::internal::RouteHook<GantrySelf> gantry_route_hook_##method { \
    &GantrySelf::GantryRoute_##method                                                        \
  }

// Beside a handler's GANTRY_REQUESTS line: batches its endpoints'
// requests. The second argument is a gantry::DynamicBatching initializer,
// e.g. {.preferred_batch_size = 32, .timeout_ms = 10}.
#define GANTRY_DYNAMIC_BATCHING(method, ...)                                                       \
  static void GantryBatching_##method(::gantry::internal::RouteCollector<GantrySelf>& routes) {    \
    static_cast<void>(&GantrySelf::method); /* names a member handler */                           \
    routes.SetBatching(#method, ::gantry::DynamicBatching __VA_ARGS__);                            \
  }                                                                                                \
  inline static const ::gantry::internal::BatchingHook<GantrySelf> gantry_batching_hook_##method { \
    &GantrySelf::GantryBatching_##method                                                           \
  }

// As GANTRY_DYNAMIC_BATCHING, for replicas on a CUDA device only (there it
// replaces GANTRY_DYNAMIC_BATCHING's settings; elsewhere it does nothing).
#define GANTRY_DYNAMIC_BATCHING_ON_GPU(method, ...)                                                \
  static void GantryGpuBatching_##method(::gantry::internal::RouteCollector<GantrySelf>& routes) { \
    static_cast<void>(&GantrySelf::method); /* names a member handler */                           \
    routes.SetGpuBatching(#method, ::gantry::DynamicBatching __VA_ARGS__);                         \
  }                                                                                                \
  inline static const ::gantry::internal::BatchingHook<GantrySelf>                                 \
      gantry_gpu_batching_hook_##method {                                                          \
    &GantrySelf::GantryGpuBatching_##method                                                        \
  }

// Beside a handler's GANTRY_REQUESTS line, for a handler that changes
// nothing but its documents, and leaves them fit to be handled again when it
// throws: when a call that dynamic batching merged from several requests
// fails, each request runs again alone, so that one request the handler
// cannot take (an input that makes the model throw) fails alone and never
// the requests batched with it. Without it every request of the call gets
// the error, as in Jina.
#define GANTRY_BATCH_FAILURES_RETRIED_ALONE(method)                                               \
  static void GantryRetryAlone_##method(::gantry::internal::RouteCollector<GantrySelf>& routes) { \
    static_cast<void>(&GantrySelf::method); /* names a member handler */                          \
    routes.SetRetryFailuresAlone(#method);                                                        \
  }                                                                                               \
  inline static const ::gantry::internal::BatchingHook<GantrySelf>                                \
      gantry_retry_alone_hook_##method {                                                          \
    &GantrySelf::GantryRetryAlone_##method                                                        \
  }

// Beside a handler's GANTRY_REQUESTS line: `validator`, a const member
// `Status validator(const DocList&, const Parameters&) const`, checks each
// request's documents before they reach the handler (see above).
#define GANTRY_VALIDATE(method, validator)                                                         \
  static void GantryValidate_##method(::gantry::internal::RouteCollector<GantrySelf>& routes) {    \
    static_cast<void>(&GantrySelf::method); /* names a member handler */                           \
    routes.template SetValidator<&GantrySelf::validator>(#method);                                 \
  }                                                                                                \
  inline static const ::gantry::internal::BatchingHook<GantrySelf> gantry_validate_hook_##method { \
    &GantrySelf::GantryValidate_##method                                                           \
  }

// Beside a handler's GANTRY_REQUESTS line: `preparer`, a const member
// `Status preparer(DocList&, const Parameters&) const`, does each request's
// share of the handler's work on its own thread (see above).
#define GANTRY_PREPARE(method, preparer)                                                          \
  static void GantryPrepare_##method(::gantry::internal::RouteCollector<GantrySelf>& routes) {    \
    static_cast<void>(&GantrySelf::method); /* names a member handler */                          \
    routes.template SetPreparer<&GantrySelf::preparer>(#method);                                  \
  }                                                                                               \
  inline static const ::gantry::internal::BatchingHook<GantrySelf> gantry_prepare_hook_##method { \
    &GantrySelf::GantryPrepare_##method                                                           \
  }

// Beside a dynamically batched handler's GANTRY_REQUESTS line: `counter`, a
// const member `StatusOr<BatchTokens> counter(const DocList&, const
// Parameters&) const`, counts each request's tokens on its own thread
// before it is queued; its batches then close before their padded tokens
// pass the counter's budget (gantry/batching.h). An error it returns is the
// request's reply. Unbatched handlers ignore it.
#define GANTRY_BATCH_TOKENS(method, counter)                                                       \
  static void GantryBatchTokens_##method(::gantry::internal::RouteCollector<GantrySelf>& routes) { \
    static_cast<void>(&GantrySelf::method); /* names a member handler */                           \
    routes.template SetTokenCounter<&GantrySelf::counter>(#method);                                \
  }                                                                                                \
  inline static const ::gantry::internal::BatchingHook<GantrySelf>                                 \
      gantry_batch_tokens_hook_##method {                                                          \
    &GantrySelf::GantryBatchTokens_##method                                                        \
  }

// In one .cc file per executor: adds the type to the registry at start-up
// (and so exports gantry_plugin_abi_version from the library).
#define GANTRY_REGISTER_EXECUTOR(Type) \
  static const ::gantry::internal::ExecutorRegistrar<Type> gantry_registrar_##Type(__FILE__)

#endif  // GANTRY_EXECUTOR_H_
