#include "gateway/gateway.h"

#include <grpcpp/alarm.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "common/grpc_options.h"
#include "common/metrics_server.h"
#include "common/sanitizer_handoff.h"
#include "common/tls.h"
#include "common/tracing.h"
#include "core/limits.h"
#include "core/logging.h"
#include "gateway/api_key.h"
#include "gateway/gateway_metrics.h"
#include "gateway/http_gateway.h"
#include "gateway/kserve_service.h"
#include "gateway/replica_pool.h"
#include "gateway/upstream.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "jina/jina.grpc.pb.h"
#include "worker/reflection_service.h"

namespace gantry::internal {
namespace {

constexpr char kCallMethod[] = "/jina.JinaRPC/Call";
constexpr char kSingleMethod[] = "/jina.JinaSingleDataRequestRPC/process_single_data";
// How often the gateway's health follows its upstream's readiness when the
// upstream does not say so itself (a Flow's steps).
constexpr std::chrono::milliseconds kHealthInterval{250};

using Clock = std::chrono::system_clock;

// What a request refused before it reached the upstream returns.
class RefusedCall final : public ForwardHandle {
 public:
  void Cancel() override {}
};

grpc::ByteBuffer SerializeToByteBuffer(const google::protobuf::Message& message) {
  std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

bool ParseFromByteBuffer(grpc::ByteBuffer* buffer, google::protobuf::Message* message) {
  grpc::ProtoBufferReader reader(buffer);
  return message->ParseFromZeroCopyStream(&reader);
}

}  // namespace

int ParsePrefetch(std::string_view text, int fallback) {
  long long value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc::result_out_of_range && ptr == end) {
    return kMaxPrefetch;
  }
  if (ec != std::errc() || ptr != end) {
    return fallback;
  }
  if (value <= 0 || value > kMaxPrefetch) {
    return kMaxPrefetch;
  }
  return static_cast<int>(value);
}

namespace {
class DataReactor;
}  // namespace

class Gateway::Impl {
 public:
  explicit Impl(GatewayOptions options) : options_(std::move(options)) {}

  Status Init();
  // Sends `request` to a replica; `done` runs once, on a gRPC thread or
  // (for a request that fails before any call) on the caller's. The handle
  // cancels it.
  std::shared_ptr<ForwardHandle> Forward(const grpc::ByteBuffer& request,
                                         Clock::time_point deadline, ForwardDone done);
  int prefetch() const { return options_.prefetch; }
  int port() const { return port_; }
  int http_port() const { return http_ ? http_->port() : -1; }
  const std::string& api_key() const { return options_.api_key; }
  int monitoring_port() const { return metrics_server_ ? metrics_server_->port() : -1; }
  std::shared_ptr<grpc::Channel> InProcessChannel() const {
    grpc::ChannelArguments args = MakeChannelArguments(options_.max_message_bytes);
    return server_->InProcessChannel(args);
  }
  // The replica pool of a Deployment's gateway; null for a Flow's.
  ReplicaPool* pool() const { return pool_.get(); }
  GatewayMetrics* metrics() const { return metrics_.get(); }
  void Shutdown(std::chrono::milliseconds grace);
  Status ReloadTls() {
    if (!tls_credentials_) {
      return FailedPreconditionError("the gateway serves no TLS");
    }
    GANTRY_RETURN_IF_ERROR(tls_credentials_->Reload());
    return http_ ? http_->ReloadTls() : OkStatus();
  }

  // Called by each data call's reactor when it starts: false once the
  // gateway is draining (the call is then refused). A registered reactor
  // calls Unregister when it is done.
  bool Register(DataReactor* reactor);
  // Where data calls count the bytes of the replies they hold.
  std::shared_ptr<std::atomic<std::int64_t>> bytes_in_flight() const { return bytes_in_flight_; }
  void Unregister(DataReactor* reactor);
  std::string ShuttingDownMessage() const {
    return "deployment '" + options_.deployment_name +
           "' is shutting down: no new requests are accepted";
  }

 private:
  class DataService;
  class DryRunService;
  class InfoService;

  // A request refused before any call: `done` runs now with RESOURCE_EXHAUSTED.
  std::shared_ptr<ForwardHandle> Refuse(const ForwardDone& done, const std::string& why);
  // Refuses new calls, tells every data call to finish once its requests in
  // flight are answered, and waits up to `grace` for them all to be done.
  void Drain(std::chrono::milliseconds grace);
  // A serialized request forwarded for HTTP and KServe; `done` runs once.
  HttpForwardCancel ForwardBytes(std::string request, Clock::time_point deadline,
                                 HttpForwardDone done);
  HttpForwardResult ForwardAndWait(std::string request, Clock::time_point deadline);
  // Serving health follows whether the upstream can take a request.
  void UpdateHealth();
  void HealthLoop();

  GatewayOptions options_;
  // Where every data request goes: options_.upstream, or pool_.
  std::shared_ptr<Upstream> upstream_;
  std::shared_ptr<ReplicaPool> pool_;
  std::unique_ptr<DataService> data_service_;
  std::unique_ptr<DryRunService> dry_run_service_;
  std::unique_ptr<InfoService> info_service_;
  std::unique_ptr<ReflectionService> reflection_service_;
  std::unique_ptr<KServeService> kserve_service_;
  // Null without TLS; outlives server_, which reads its files.
  std::unique_ptr<ReloadableServerCredentials> tls_credentials_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpGateway> http_;
  // Null without monitoring. Shared with each request's completion, which
  // may in principle run after the gateway is gone.
  std::shared_ptr<GatewayMetrics> metrics_;
  // Null without tracing; shared with each request's completion as
  // metrics_ is.
  std::shared_ptr<Tracer> tracer_;
  // Bytes of requests forwarded and not yet answered, and of replies not yet
  // written to their clients (kGatewayMessagesInFlight); shared with each
  // request's completion and each data call, as metrics_ is.
  std::shared_ptr<std::atomic<std::int64_t>> bytes_in_flight_ =
      std::make_shared<std::atomic<std::int64_t>>(0);
  // Data requests forwarded and not yet answered, when
  // max_concurrent_requests bounds them; shared as bytes_in_flight_ is.
  std::shared_ptr<std::atomic<int>> requests_in_flight_ = std::make_shared<std::atomic<int>>(0);
  std::unique_ptr<MetricsServer> metrics_server_;
  int port_ = 0;
  std::once_flag shutdown_once_;

  // Serialises SetServingStatus so that the last answer set is current.
  std::mutex health_mutex_;
  bool serving_ = true;  // guarded by health_mutex_
  std::mutex health_loop_mutex_;
  std::condition_variable health_loop_wake_;
  bool stop_health_loop_ = false;  // guarded by health_loop_mutex_
  std::thread health_loop_;

  // Live data calls, for draining.
  std::mutex reactors_mutex_;
  std::condition_variable reactors_done_;
  std::set<DataReactor*> reactors_;  // guarded by reactors_mutex_
  bool draining_ = false;            // guarded by reactors_mutex_
  // Set once draining starts: health stays NOT_SERVING from then on.
  std::atomic<bool> stopping_{false};
};

// ---- Data path: Call and process_single_data as raw bytes -------------------

namespace {

class DataReactor final : public grpc::ServerGenericBidiReactor {
 public:
  DataReactor(Gateway::Impl* gateway, grpc::GenericCallbackServerContext* context)
      : gateway_(gateway), context_(context) {
    const std::string& method = context->method();
    const bool known = method == kSingleMethod || method == kCallMethod;
    const grpc::Status authorized = CheckGrpcApiKey(*context, gateway->api_key());
    // Outside mutex_: Drain takes the gateway's reactor lock, then ours.
    const bool registered = known && authorized.ok() && gateway->Register(this);
    // Held to the end, so that OnDone, on another thread, sees what is set
    // here on every path.
    std::lock_guard lock(mutex_);
    if (!known) {
      RefuseLocked(
          grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "gateway does not serve " + method));
      return;
    }
    if (!authorized.ok()) {
      RefuseLocked(authorized);
      return;
    }
    if (!registered) {
      RefuseLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, gateway->ShuttingDownMessage()));
      return;
    }
    registered_ = true;
    gateway_bytes_ = gateway->bytes_in_flight();
    unary_ = method == kSingleMethod;
    prefetch_ = gateway->prefetch();
    const auto& metadata = context->client_metadata();
    if (auto it = metadata.find("__prefetch__"); it != metadata.end()) {
      prefetch_ = ParsePrefetch(std::string_view(it->second.data(), it->second.size()), prefetch_);
    }
    if (auto it = metadata.find("__results_in_order__"); it != metadata.end()) {
      in_order_ = it->second == "true";
    }
    if (auto it = metadata.find(kTraceparentKey); it != metadata.end()) {
      trace_ = ParseTraceparent(std::string_view(it->second.data(), it->second.size()));
    }
    StartReadLocked();
  }

  // The gateway is shutting down: read no more requests (one that arrives
  // is refused), and finish once those in flight are answered and written,
  // with UNAVAILABLE if the client could still have sent more.
  void BeginDrain() {
    std::lock_guard lock(mutex_);
    draining_ = true;
    if (!reads_done_ && final_status_.ok()) {
      final_status_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, gateway_->ShuttingDownMessage());
    }
    MaybeFinishLocked();
  }

  void OnReadDone(bool ok) override {
    std::unique_lock lock(mutex_);
    reading_ = false;
    if (refusal_) {
      // What a refused call sends is read and dropped until it half-closes.
      if (ok && !finished_ && ++refused_reads_ < kMaxRefusedReads) {
        reading_ = true;
        StartRead(&read_buffer_);
      } else {
        FinishRefusalLocked();
      }
      return;
    }
    if (!ok || failed_ || draining_) {
      reads_done_ = true;
      MaybeFinishLocked();
      return;
    }
    std::uint64_t sequence = next_sequence_++;
    ++in_flight_;
    calls_[sequence] = nullptr;               // its handle is stored once Forward returns
    grpc::ByteBuffer request = read_buffer_;  // a reference-counted copy
    if (unary_) {
      reads_done_ = true;
    }
    // Forward may complete inline (no replica available): not under mutex_.
    lock.unlock();
    const TraceContextScope trace_scope(trace_);
    std::shared_ptr<ForwardHandle> call = gateway_->Forward(
        request, context_->deadline(),
        [this, sequence](ForwardResult result) { OnForwardDone(sequence, std::move(result)); });
    lock.lock();
    if (auto it = calls_.find(sequence); it != calls_.end()) {
      it->second = call;
      if (failed_) {
        lock.unlock();
        call->Cancel();
        lock.lock();
      }
    }
    StartReadLocked();
    MaybeFinishLocked();
  }

  void OnWriteDone(bool ok) override {
    std::vector<std::shared_ptr<ForwardHandle>> to_cancel;
    {
      std::lock_guard lock(mutex_);
      writing_ = false;
      current_write_.Clear();
      ReleaseReplyBytesLocked(current_write_bytes_);
      current_write_bytes_ = 0;
      if (!ok) {
        // The client is gone: drop what is queued, stop its requests on the
        // workers and wind down.
        failed_ = true;
        write_queue_.clear();
        pending_in_order_.clear();
        ReleaseReplyBytesLocked(reply_bytes_held_);
        to_cancel = TakeCallsLocked();
      }
      StartWriteLocked();
      StartReadLocked();
      MaybeFinishLocked();
    }
    CancelAll(to_cancel);
  }

  // The client cancelled or its deadline passed: its requests in flight on
  // the workers are cancelled so that they stop occupying replicas.
  void OnCancel() override {
    std::vector<std::shared_ptr<ForwardHandle>> to_cancel;
    {
      std::lock_guard lock(mutex_);
      failed_ = true;
      to_cancel = TakeCallsLocked();
    }
    CancelAll(to_cancel);
  }

  void OnDone() override {
    // gRPC's callback API hands ownership of a reactor back to it here: no
    // other callback of this reactor can run after OnDone. OnForwardDone is
    // not one of them (it runs on a worker call's thread) and may have called
    // Finish under mutex_: it must have let go of mutex_ before the delete.
    bool registered = false;
    std::shared_ptr<RefusalTimer> refusal;
    {
      std::lock_guard lock(mutex_);
      registered = registered_;
      refusal = std::move(refusal_);
      // Replies a failed call never wrote, and a unary reply sent with its status.
      ReleaseReplyBytesLocked(reply_bytes_held_);
    }
    if (refusal) {
      // Its alarm may be firing now: once this returns, it cannot reach us.
      std::lock_guard lock(refusal->mutex);
      refusal->reactor = nullptr;
    }
    if (registered) {
      gateway_->Unregister(this);
    }
    delete this;
  }

 private:
  // A call refused before its first request (unknown method, wrong API key,
  // shutting down) still reads what the client sends, up to its half-close,
  // before it finishes: grpc's asyncio client (Jina's) reports INTERNAL
  // "Internal error from Core" instead of the server's status when one of its
  // writes lands after that status (grpc/grpc#36066). Bounded in messages and
  // time, so that a client waiting for replies before it half-closes is not
  // kept waiting.
  static constexpr int kMaxRefusedReads = 16;
  static constexpr std::chrono::milliseconds kRefusalReadTime{1000};
  struct RefusalTimer {
    std::mutex mutex;
    DataReactor* reactor = nullptr;  // null once the reactor is done
    grpc::Alarm alarm;
  };

  void RefuseLocked(grpc::Status status) {
    final_status_ = std::move(status);
    refusal_ = std::make_shared<RefusalTimer>();
    refusal_->reactor = this;
    // A weak reference: the alarm's callback lives as long as the alarm, which
    // lives in the state it would otherwise keep alive.
    std::weak_ptr<RefusalTimer> weak = refusal_;
    refusal_->alarm.Set(std::chrono::system_clock::now() + kRefusalReadTime, [weak](bool fired) {
      std::shared_ptr<RefusalTimer> timer = weak.lock();
      if (!fired || !timer) {
        return;
      }
      std::lock_guard timer_lock(timer->mutex);
      if (timer->reactor != nullptr) {
        std::lock_guard lock(timer->reactor->mutex_);
        timer->reactor->FinishRefusalLocked();
      }
    });
    reading_ = true;
    StartRead(&read_buffer_);
  }

  void FinishRefusalLocked() {
    if (!finished_) {
      finished_ = true;
      Finish(final_status_);
    }
  }

  void OnForwardDone(std::uint64_t sequence, ForwardResult result) {
    std::vector<std::shared_ptr<ForwardHandle>> to_cancel;
    {
      std::lock_guard lock(mutex_);
      --in_flight_;
      calls_.erase(sequence);
      if (!result.status.ok()) {
        // As Jina's gateway: the call ends with the worker's error code, and
        // the other requests of the stream are not worth finishing.
        if (final_status_.ok()) {
          final_status_ = result.status;
        }
        failed_ = true;
        to_cancel = TakeCallsLocked();
      } else if (!failed_) {
        if (unary_ && result.is_error) {
          context_->AddTrailingMetadata("is-error", "true");
        }
        HoldReplyBytesLocked(result.reply);
        if (in_order_) {
          pending_in_order_.emplace(sequence, std::move(result.reply));
          while (!pending_in_order_.empty() &&
                 pending_in_order_.begin()->first == next_write_sequence_) {
            write_queue_.push_back(std::move(pending_in_order_.begin()->second));
            pending_in_order_.erase(pending_in_order_.begin());
            ++next_write_sequence_;
          }
        } else {
          write_queue_.push_back(std::move(result.reply));
        }
      }
      StartWriteLocked();
      StartReadLocked();
      MaybeFinishLocked();
    }
    CancelAll(to_cancel);
  }

  std::vector<std::shared_ptr<ForwardHandle>> TakeCallsLocked() {
    std::vector<std::shared_ptr<ForwardHandle>> out;
    for (auto& [sequence, call] : calls_) {
      if (call) {
        out.push_back(call);
      }
    }
    return out;
  }

  // Outside mutex_: a cancelled call may complete inline.
  static void CancelAll(const std::vector<std::shared_ptr<ForwardHandle>>& calls) {
    for (const auto& call : calls) {
      call->Cancel();
    }
  }

  // Reads the next request while fewer than prefetch_ are unanswered or
  // answered and not yet written: a client that reads no replies must stop
  // being read, or its replies pile up here without bound.
  void StartReadLocked() {
    if (reading_ || reads_done_ || failed_ || draining_ ||
        UndeliveredLocked() >= static_cast<std::size_t>(prefetch_)) {
      return;
    }
    reading_ = true;
    StartRead(&read_buffer_);
  }

  // Replies held until written count against the gateway's bytes in flight,
  // so that clients slow to read them hold back new requests everywhere.
  void HoldReplyBytesLocked(const grpc::ByteBuffer& reply) {
    const auto bytes = static_cast<std::int64_t>(reply.Length());
    reply_bytes_held_ += bytes;
    gateway_bytes_->fetch_add(bytes);
  }
  void ReleaseReplyBytesLocked(std::int64_t bytes) {
    if (bytes > 0) {
      reply_bytes_held_ -= bytes;
      gateway_bytes_->fetch_sub(bytes);
    }
  }

  std::size_t UndeliveredLocked() const {
    return static_cast<std::size_t>(in_flight_) + pending_in_order_.size() + write_queue_.size() +
           (writing_ ? 1 : 0);
  }

  void StartWriteLocked() {
    if (writing_ || write_queue_.empty()) {
      return;
    }
    writing_ = true;
    current_write_ = write_queue_.front();
    current_write_bytes_ = static_cast<std::int64_t>(current_write_.Length());
    write_queue_.erase(write_queue_.begin());
    if (unary_ && reads_done_ && in_flight_ == 0 && write_queue_.empty()) {
      // The one reply of a unary call goes out with its status in one batch,
      // as gRPC's own unary methods send them: a write and then a Finish would
      // wait for the write's callback, one more thread wake-up per request.
      // No OnWriteDone follows; OnDone releases the reply's bytes.
      finished_ = true;
      StartWriteAndFinish(&current_write_, grpc::WriteOptions(), final_status_);
      return;
    }
    StartWrite(&current_write_);
  }

  void MaybeFinishLocked() {
    if (finished_ || in_flight_ > 0 || writing_ || !write_queue_.empty()) {
      return;
    }
    // A failed stream ends without waiting for the client's next message: a
    // client whose prefetch window is full would wait for replies forever.
    // A read still pending then completes with ok=false.
    if (!failed_ && !draining_ && (!reads_done_ || reading_ || !pending_in_order_.empty())) {
      return;
    }
    finished_ = true;
    Finish(final_status_);
  }

  Gateway::Impl* gateway_;
  grpc::GenericCallbackServerContext* context_;
  // Whether the gateway counts this call among its live ones (under mutex_).
  bool registered_ = false;
  bool unary_ = false;
  bool in_order_ = false;
  int prefetch_ = kMaxPrefetch;
  // The client's W3C trace context (`traceparent` metadata), for every
  // request of the call; set in the constructor.
  std::optional<TraceContext> trace_;

  std::mutex mutex_;
  grpc::ByteBuffer read_buffer_;
  grpc::ByteBuffer current_write_;
  std::int64_t current_write_bytes_ = 0;
  // Bytes of the replies queued or being written, also counted in
  // gateway_bytes_ (null for a call refused at construction).
  std::int64_t reply_bytes_held_ = 0;
  std::shared_ptr<std::atomic<std::int64_t>> gateway_bytes_;
  std::vector<grpc::ByteBuffer> write_queue_;
  std::map<std::uint64_t, grpc::ByteBuffer> pending_in_order_;
  // Requests in flight, by sequence; null until Forward has returned.
  std::map<std::uint64_t, std::shared_ptr<ForwardHandle>> calls_;
  std::uint64_t next_sequence_ = 0;
  std::uint64_t next_write_sequence_ = 0;
  int in_flight_ = 0;
  bool reading_ = false;
  bool reads_done_ = false;
  bool writing_ = false;
  bool failed_ = false;
  bool draining_ = false;
  bool finished_ = false;
  grpc::Status final_status_;
  // Set for a refused call (see RefuseLocked).
  std::shared_ptr<RefusalTimer> refusal_;
  int refused_reads_ = 0;
};

}  // namespace

class Gateway::Impl::DataService final : public grpc::CallbackGenericService {
 public:
  explicit DataService(Gateway::Impl* gateway) : gateway_(gateway) {}
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    ReceiveOnGrpcThread(this);
    return new DataReactor(gateway_, context);
  }

 private:
  Gateway::Impl* gateway_;
};

// ---- dry_run and _status ---------------------------------------------------

class Gateway::Impl::DryRunService final : public jina::JinaGatewayDryRunRPC::CallbackService {
 public:
  explicit DryRunService(Gateway::Impl* gateway) : gateway_(gateway) {}
  // Sends one empty document to the dry-run endpoint through a replica, as
  // Jina's gateway does, and reports whether it came back clean.
  grpc::ServerUnaryReactor* dry_run(grpc::CallbackServerContext* context,
                                    const google::protobuf::Empty* /*request*/,
                                    jina::StatusProto* reply) override {
    ReceiveOnGrpcThread(this);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (grpc::Status s = CheckGrpcApiKey(*context, gateway_->api_key()); !s.ok()) {
      reactor->Finish(s);
      return reactor;
    }
    jina::DataRequestProto probe;
    probe.mutable_header()->set_request_id("dry-run");
    probe.mutable_header()->set_exec_endpoint("_jina_dry_run_");
    probe.mutable_data()->mutable_docs()->add_docs();
    gateway_->Forward(SerializeToByteBuffer(probe), context->deadline(),
                      [reactor, reply](ForwardResult result) {
                        if (!result.status.ok()) {
                          reply->set_code(jina::StatusProto::ERROR);
                          reply->set_description(result.status.error_message());
                        } else if (result.is_error) {
                          jina::DataRequestProto answer;
                          ParseFromByteBuffer(&result.reply, &answer);
                          *reply = answer.header().status();
                        } else {
                          reply->set_code(jina::StatusProto::SUCCESS);
                        }
                        reactor->Finish(grpc::Status::OK);
                      });
    return reactor;
  }

 private:
  Gateway::Impl* gateway_;
};

class Gateway::Impl::InfoService final : public jina::JinaInfoRPC::CallbackService {
 public:
  grpc::ServerUnaryReactor* _status(grpc::CallbackServerContext* context,
                                    const google::protobuf::Empty* /*request*/,
                                    jina::JinaInfoProto* reply) override {
    (*reply->mutable_jina())["gantry"] = GANTRY_VERSION;
    (*reply->mutable_jina())["protocol"] = "jina-3.x/docarray-v2";
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

// ---- Forwarding ------------------------------------------------------------

Status Gateway::Impl::Init() {
  if (options_.replica_addresses.empty() && !options_.upstream) {
    return InvalidArgumentError("gateway needs at least one replica address");
  }
  upstream_ = options_.upstream;
  if (!upstream_) {
    ReplicaPoolOptions pool;
    pool.deployment_name = options_.deployment_name;
    pool.replica_addresses = options_.replica_addresses;
    pool.replica_names = options_.replica_names;
    // timeout_send bounds the whole request in Forward, so the pool's
    // per-try bound (retried on expiry) stays off.
    pool.links = GrpcReplicaLinks(options_.max_message_bytes);
    pool.on_rotation_change = [this] { UpdateHealth(); };
    pool.liveness_period = options_.liveness_period;
    pool.liveness_timeout = options_.liveness_timeout;
    pool.liveness_failure_threshold = options_.liveness_failure_threshold;
    pool.hold_while_restarting = options_.hold_while_restarting;
    // metrics_ is set below, before the pool's threads start.
    pool.on_unresponsive = [this](std::size_t index) {
      if (metrics_) {
        metrics_->ReplicaUnresponsive(index);
      }
    };
    pool_ = std::make_shared<ReplicaPool>(std::move(pool));
    upstream_ = pool_;
  }
  if (options_.tracing.enabled) {
    GANTRY_ASSIGN_OR_RETURN(
        tracer_, Tracer::Create(options_.tracing, options_.deployment_name + "/gateway"));
  }
  if (options_.monitoring_port >= 0) {
    metrics_ = std::make_shared<GatewayMetrics>(
        options_.deployment_name, pool_ ? pool_->names() : std::vector<std::string>{});
    auto server =
        MetricsServer::Start(options_.host, options_.monitoring_port, {metrics_->registry()});
    if (!server.ok()) {
      return server.status().WithPrefix("gateway");
    }
    metrics_server_ = std::move(server).value();
  }
  options_.prefetch = std::clamp(options_.prefetch, 1, kMaxPrefetch);

  data_service_ = std::make_unique<DataService>(this);
  dry_run_service_ = std::make_unique<DryRunService>(this);
  info_service_ = std::make_unique<InfoService>();
  // The gateway's clients are people and tools (grpcurl), not Jina's
  // gateway, so every service is listed, health included.
  reflection_service_ = std::make_unique<ReflectionService>(std::vector<std::string>{
      "jina.JinaRPC", "jina.JinaSingleDataRequestRPC", "jina.JinaGatewayDryRunRPC",
      "jina.JinaInfoRPC", "inference.GRPCInferenceService", "grpc.health.v1.Health",
      ReflectionService::Name()});
  if (options_.models.empty()) {
    options_.models.emplace(options_.deployment_name, "/encode");
  }
  kserve_service_ = std::make_unique<KServeService>(
      options_.models,
      [this](std::string request, Clock::time_point deadline) {
        return ForwardAndWait(std::move(request), deadline);
      },
      [this] { return upstream_->Available(); },
      static_cast<std::uint64_t>(options_.max_message_bytes), options_.signature, options_.api_key);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(builder, options_.max_message_bytes);
  // Caps the threads of the sync services (KServe, reflection); the Jina
  // services are callbacks and hold no thread while they wait.
  BoundSyncServerThreads(builder, "gantry-gateway", kMaxKServeCallsInFlight);
  std::string address = JoinHostPort(options_.host, options_.port);
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (options_.tls.enabled()) {
    GANTRY_ASSIGN_OR_RETURN(tls_credentials_, ReloadableServerCredentials::Create(options_.tls));
    credentials = tls_credentials_->credentials();
  }
  builder.AddListeningPort(address, credentials, &port_);
  builder.RegisterService(dry_run_service_.get());
  builder.RegisterService(info_service_.get());
  builder.RegisterService(reflection_service_.get());
  builder.RegisterService(kserve_service_.get());
  builder.RegisterCallbackGenericService(data_service_.get());
  // The callback services run on gRPC's threads, which may predate this
  // gateway (see common/sanitizer_handoff.h); the sync ones get threads of
  // their own, made below.
  PublishToGrpcThreads(data_service_.get());
  PublishToGrpcThreads(dry_run_service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    return UnavailableError("gateway cannot listen on " + address +
                            " (port in use or address not available)");
  }
  if (options_.http_port >= 0) {
    HttpGatewayOptions http_options;
    http_options.host = options_.host;
    http_options.port = options_.http_port;
    http_options.info = {{"gantry", GANTRY_VERSION}, {"protocol", "jina-3.x/docarray-v2"}};
    http_options.max_message_bytes = options_.max_message_bytes;
    http_options.tls = options_.tls;
    http_options.models = options_.models;
    http_options.ready = [this] { return upstream_->Available(); };
    http_options.signature = options_.signature;
    http_options.api_key = options_.api_key;
    http_options.max_concurrent_requests = options_.max_concurrent_requests;
    http_options.cors = options_.cors;
    http_options.max_client_batch_size = options_.max_client_batch_size;
    auto http = HttpGateway::Start(
        std::move(http_options),
        [this](std::string request, Clock::time_point deadline, HttpForwardDone done) {
          return ForwardBytes(std::move(request), deadline, std::move(done));
        });
    if (!http.ok()) {
      return http.status().WithPrefix("gateway");
    }
    http_ = std::move(http).value();
  }
  if (pool_) {
    pool_->Start();
  }
  health_loop_ = std::thread([this] { HealthLoop(); });
  return OkStatus();
}

HttpForwardCancel Gateway::Impl::ForwardBytes(std::string request, Clock::time_point deadline,
                                              HttpForwardDone done) {
  // HTTP, OpenAI and KServe requests are refused like Jina calls once the
  // gateway drains; those already forwarded finish (the HTTP server's and
  // the gRPC server's shutdowns wait for their answers).
  if (stopping_.load()) {
    HttpForwardResult refused;
    refused.grpc_code = static_cast<int>(grpc::StatusCode::UNAVAILABLE);
    refused.grpc_message = ShuttingDownMessage();
    done(std::move(refused));
    return {};
  }
  // The slice owns the string: a request of tens of MB is not copied again.
  auto* bytes = new std::string(std::move(request));
  grpc::Slice slice(
      bytes->data(), bytes->size(), [](void* owned) { delete static_cast<std::string*>(owned); },
      bytes);
  std::shared_ptr<ForwardHandle> handle = Forward(
      grpc::ByteBuffer(&slice, 1), deadline, [done = std::move(done)](ForwardResult result) {
        HttpForwardResult out;
        out.grpc_code = static_cast<int>(result.status.error_code());
        out.grpc_message = result.status.error_message();
        out.is_error = result.is_error;
        {
          std::vector<grpc::Slice> slices;
          if (result.status.ok() && result.reply.Dump(&slices).ok()) {
            out.reply.reserve(result.reply.Length());
            for (const grpc::Slice& s : slices) {
              out.reply.append(reinterpret_cast<const char*>(s.begin()), s.size());
            }
          }
        }
        // The reply is held once, as `out.reply`, while it is answered.
        result.reply.Clear();
        done(std::move(out));
      });
  return [handle = std::move(handle)] {
    if (handle) {
      handle->Cancel();
    }
  };
}

HttpForwardResult Gateway::Impl::ForwardAndWait(std::string request, Clock::time_point deadline) {
  auto promise = std::make_shared<std::promise<HttpForwardResult>>();
  std::future<HttpForwardResult> future = promise->get_future();
  ForwardBytes(std::move(request), deadline,
               [promise](HttpForwardResult result) { promise->set_value(std::move(result)); });
  return future.get();
}

bool Gateway::Impl::Register(DataReactor* reactor) {
  std::lock_guard lock(reactors_mutex_);
  if (draining_) {
    return false;
  }
  reactors_.insert(reactor);
  return true;
}

void Gateway::Impl::Unregister(DataReactor* reactor) {
  std::lock_guard lock(reactors_mutex_);
  reactors_.erase(reactor);
  if (reactors_.empty()) {
    reactors_done_.notify_all();
  }
}

void Gateway::Impl::Drain(std::chrono::milliseconds grace) {
  stopping_.store(true);
  {
    std::lock_guard lock(health_mutex_);
    serving_ = false;
    if (server_ != nullptr) {
      if (auto* health = server_->GetHealthCheckService()) {
        health->SetServingStatus(false);
      }
    }
  }
  std::unique_lock lock(reactors_mutex_);
  draining_ = true;
  const std::size_t live = reactors_.size();
  // Under reactors_mutex_ no reactor can be deleted (Unregister comes first).
  for (DataReactor* reactor : reactors_) {
    reactor->BeginDrain();
  }
  auto start = std::chrono::steady_clock::now();
  bool drained = reactors_done_.wait_for(lock, grace, [this] { return reactors_.empty(); });
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  if (drained) {
    spdlog::info("deployment '{}': drained {} open call(s) in {} ms", options_.deployment_name,
                 live, took.count());
  } else {
    spdlog::warn("deployment '{}': {} call(s) still open after timeout_drain ({} ms); cancelling",
                 options_.deployment_name, reactors_.size(), grace.count());
  }
}

void Gateway::Impl::Shutdown(std::chrono::milliseconds grace) {
  std::call_once(shutdown_once_, [&] {
    if (http_) {
      http_->Shutdown(grace);
    }
    if (server_) {
      Drain(grace);
    }
    {
      std::lock_guard lock(health_loop_mutex_);
      stop_health_loop_ = true;
    }
    health_loop_wake_.notify_all();
    if (health_loop_.joinable()) {
      health_loop_.join();
    }
    if (pool_) {
      pool_->Stop();
    }
    if (!server_) {
      return;
    }
    if (auto* health = server_->GetHealthCheckService()) {
      health->Shutdown();
    }
    // What the drain left is cancelled now.
    server_->Shutdown(Clock::now());
    server_->Wait();
    // Every call's OnDone has run, the last Unregister under this lock;
    // taking it orders those writes before the destructor frees reactors_
    // (libgrpc's own ordering is invisible to TSan).
    std::lock_guard lock(reactors_mutex_);
  });
}

void Gateway::Impl::UpdateHealth() {
  std::lock_guard lock(health_mutex_);
  if (stopping_.load()) {
    return;
  }
  const bool any = upstream_->Available();
  if (any == serving_ || !server_) {
    return;
  }
  serving_ = any;
  if (auto* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(any);
  }
  if (!any) {
    spdlog::error("'{}': {}; health is NOT_SERVING", options_.deployment_name,
                  upstream_->WhyUnavailable());
  } else {
    spdlog::info("'{}': a replica is available again; health is SERVING", options_.deployment_name);
  }
}

void Gateway::Impl::HealthLoop() {
  std::unique_lock lock(health_loop_mutex_);
  while (!health_loop_wake_.wait_for(lock, kHealthInterval, [this] { return stop_health_loop_; })) {
    lock.unlock();
    UpdateHealth();
    lock.lock();
  }
}

namespace {

// `done`, which first hands `amount` back to `counter`: what an admitted
// request took of a gateway-wide bound.
template <typename T>
ForwardDone Releasing(std::shared_ptr<std::atomic<T>> counter, T amount, ForwardDone done) {
  return [counter = std::move(counter), amount, done = std::move(done)](ForwardResult result) {
    counter->fetch_sub(amount);
    done(std::move(result));
  };
}

}  // namespace

std::shared_ptr<ForwardHandle> Gateway::Impl::Refuse(const ForwardDone& done,
                                                     const std::string& why) {
  ForwardResult result;
  result.status = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, why);
  done(std::move(result));
  return std::make_shared<RefusedCall>();
}

std::shared_ptr<ForwardHandle> Gateway::Impl::Forward(const grpc::ByteBuffer& request,
                                                      Clock::time_point deadline,
                                                      ForwardDone done) {
  // The client's trace context, and once this gateway records a span, the
  // span's: what the replicas' spans hang from.
  std::optional<TraceContext> trace = CurrentTraceContext();
  if (metrics_ || options_.access_log || tracer_) {
    RequestHeaderFields header = HeaderFieldsOf(request);
    if (tracer_) {
      SpanRecord span;
      span.context = Tracer::NewSpanContext(trace);
      if (trace) {
        span.parent_span_id = trace->span_id;
      }
      span.name = "gateway " + PrintableForLog(header.exec_endpoint);
      span.kind = SpanKind::kServer;
      span.start = Clock::now();
      span.string_attributes = {{"gantry.request_id", PrintableForLog(header.request_id)},
                                {"gantry.endpoint", PrintableForLog(header.exec_endpoint)},
                                {"gantry.deployment", options_.deployment_name}};
      trace = span.context;
      done = [tracer = tracer_, span = std::move(span),
              done = std::move(done)](ForwardResult result) mutable {
        span.end = Clock::now();
        const grpc::StatusCode code = result.status.error_code();
        span.int_attributes = {{"rpc.grpc.status_code", static_cast<std::int64_t>(code)}};
        if (code != grpc::StatusCode::OK) {
          span.error = true;
          span.status_message = std::string(StatusCodeName(static_cast<StatusCode>(code))) + ": " +
                                PrintableForLog(result.status.error_message(), 1024);
        } else if (result.is_error) {
          span.error = true;
          span.status_message = "the executor answered with an error";
        }
        tracer->Record(std::move(span));
        done(std::move(result));
      };
    }
    if (metrics_) {
      GatewayMetrics::Request measured = metrics_->Begin(header.exec_endpoint);
      done = [metrics = metrics_, measured, done = std::move(done)](ForwardResult result) {
        metrics->End(measured, static_cast<int>(result.status.error_code()), result.is_error);
        done(std::move(result));
      };
    }
    if (options_.access_log) {
      done = [header = std::move(header), bytes = static_cast<std::int64_t>(request.Length()),
              start = std::chrono::steady_clock::now(),
              done = std::move(done)](ForwardResult result) {
        const int code = static_cast<int>(result.status.error_code());
        LogAccess(
            {.request_id = header.request_id,
             .endpoint = header.exec_endpoint,
             .status = code == 0 && result.is_error ? std::string_view("EXECUTOR_ERROR")
                                                    : StatusCodeName(static_cast<StatusCode>(code)),
             .duration_ms =
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count(),
             .request_bytes = bytes});
        done(std::move(result));
      };
    }
  }
  // Counted by the metrics above when refused here.
  if (const int limit = options_.max_concurrent_requests; limit > 0) {
    if (requests_in_flight_->fetch_add(1) >= limit) {
      requests_in_flight_->fetch_sub(1);
      return Refuse(done, "gateway of deployment '" + options_.deployment_name +
                              "' is busy: max_concurrent_requests is " + std::to_string(limit) +
                              " and that many requests are in flight; retry later");
    }
    done = Releasing(requests_in_flight_, 1, std::move(done));
  }
  const auto size = static_cast<std::int64_t>(request.Length());
  const std::int64_t budget = kGatewayMessagesInFlight * options_.max_message_bytes;
  const std::int64_t before = bytes_in_flight_->fetch_add(size);
  // One request alone always goes, whatever its size (up to the cap).
  if (before > 0 && before + size > budget) {
    bytes_in_flight_->fetch_sub(size);
    return Refuse(done, "gateway of deployment '" + options_.deployment_name +
                            "' is busy: " + std::to_string(before) +
                            " bytes of requests in flight and of replies not yet delivered are "
                            "held, and this " +
                            std::to_string(size) + "-byte request would pass the " +
                            std::to_string(budget) + " it holds at once (" +
                            std::to_string(kGatewayMessagesInFlight) +
                            " x max_message_bytes); retry later");
  }
  done = Releasing(bytes_in_flight_, size, std::move(done));
  // timeout_send bounds the request end to end, retries included.
  if (const std::chrono::milliseconds send = options_.timeout_send; send.count() > 0) {
    if (const Clock::time_point bound = Clock::now() + send; bound < deadline) {
      deadline = bound;
      done = [send, done = std::move(done)](ForwardResult result) {
        if (result.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
          result.status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                       "timeout_send (" + std::to_string(send.count()) +
                                           " ms) ran out: " + result.status.error_message());
        }
        done(std::move(result));
      };
    }
  }
  const TraceContextScope trace_scope(trace);
  return upstream_->Forward(request, deadline, std::move(done));
}

// ---- Gateway ---------------------------------------------------------------

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Gateway::~Gateway() { Shutdown(std::chrono::milliseconds(1000)); }

GatewayOptions GatewayOptionsOf(const DeploymentOptions& options) {
  GatewayOptions gateway;
  gateway.host = options.host;
  gateway.port = options.port;
  gateway.deployment_name = options.name;
  gateway.http_port = options.http_port;
  gateway.max_message_bytes = options.max_message_bytes;
  gateway.max_concurrent_requests = options.max_concurrent_requests;
  gateway.max_client_batch_size = options.max_client_batch_size;
  gateway.models = options.models;
  gateway.tls = options.tls;
  gateway.api_key = options.api_key;
  gateway.timeout_send = options.timeout_send;
  gateway.cors = options.cors;
  gateway.access_log = options.access_log;
  gateway.tracing = {.enabled = options.tracing,
                     .exporter_host = options.traces_exporter_host,
                     .exporter_port = options.traces_exporter_port};
  gateway.monitoring_port = options.monitoring ? options.port_monitoring : -1;
  gateway.liveness_period = options.liveness_period;
  gateway.liveness_timeout = options.liveness_timeout;
  gateway.liveness_failure_threshold = options.liveness_failure_threshold;
  return gateway;
}

StatusOr<std::unique_ptr<Gateway>> Gateway::Start(GatewayOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  GANTRY_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

int Gateway::port() const { return impl_->port(); }

int Gateway::http_port() const { return impl_->http_port(); }

int Gateway::monitoring_port() const { return impl_->monitoring_port(); }

std::shared_ptr<grpc::Channel> Gateway::InProcessChannel() const {
  return impl_->InProcessChannel();
}

std::vector<ReplicaState> Gateway::ReplicaStates() const {
  return impl_->pool() ? impl_->pool()->States() : std::vector<ReplicaState>{};
}

void Gateway::Shutdown(std::chrono::milliseconds grace) { impl_->Shutdown(grace); }

Status Gateway::ReloadTls() { return impl_->ReloadTls(); }

void Gateway::ReplicaDown(std::size_t index, const std::string& why,
                          std::optional<std::chrono::milliseconds> restart_in) {
  if (impl_->pool()) {
    impl_->pool()->ReplicaDown(index, why, restart_in);
  }
}

void Gateway::ReplicaRestarting(std::size_t index) {
  if (impl_->metrics()) {
    impl_->metrics()->ReplicaRestarted(index);
  }
  if (impl_->pool()) {
    impl_->pool()->ReplicaStarting(index);
  }
}

void Gateway::ReplicaRestarted(std::size_t index, const std::string& address) {
  if (impl_->pool()) {
    impl_->pool()->ReplicaRestarted(index, address);
  }
}

std::shared_ptr<const ReplicaLink> Gateway::ReplicaReplaced(std::size_t index,
                                                            const std::string& address) {
  return impl_->pool() ? impl_->pool()->ReplicaReplaced(index, address) : nullptr;
}

void Gateway::ReplicaGivenUp(std::size_t index, const std::string& why) {
  if (impl_->metrics()) {
    impl_->metrics()->ReplicaGivenUp(index);
  }
  if (impl_->pool()) {
    impl_->pool()->ReplicaGivenUp(index, why);
  }
}

std::vector<UnresponsiveReplica> Gateway::TakeUnresponsive() {
  return impl_->pool() ? impl_->pool()->TakeUnresponsive() : std::vector<UnresponsiveReplica>{};
}

}  // namespace gantry::internal
