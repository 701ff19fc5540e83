#include "gateway/gateway.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
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
#include "core/limits.h"
#include "gateway/gateway_metrics.h"
#include "gateway/http_gateway.h"
#include "gateway/kserve_service.h"
#include "gateway/upstream.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "jina/jina.grpc.pb.h"
#include "worker/reflection_service.h"

namespace gantry::internal {
namespace {

constexpr char kCallMethod[] = "/jina.JinaRPC/Call";
constexpr char kSingleMethod[] = "/jina.JinaSingleDataRequestRPC/process_single_data";
// How often replicas are health-checked, and how long one check may take. A
// replica out of rotation is back within about one interval of recovering.
constexpr std::chrono::milliseconds kProbeInterval{250};
constexpr std::chrono::milliseconds kProbeTimeout{500};
// Tries of one request that may end with its replica dropping the
// connection: the second such end is final (see gateway.h).
constexpr int kMaxReplicasKilledPerRequest = 2;

using Clock = std::chrono::system_clock;

// Where one replica's process listens. Replaced whole when the Deployment
// starts the replica again on a new port; a call keeps the endpoint it was
// sent on until it completes.
struct Endpoint {
  Endpoint(std::string where, std::int64_t max_message_bytes)
      : address(std::move(where)),
        channel(MakeChannel(address, max_message_bytes)),
        stub(std::make_unique<grpc::GenericStub>(channel)),
        health(grpc::health::v1::Health::NewStub(channel)) {}
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;
};

struct Replica {
  std::string name;
  std::atomic<int> in_flight{0};
  std::atomic<std::uint64_t> served{0};
  // In rotation: cleared by a transport failure or by the supervisor, set by
  // a passing probe of the current endpoint (under `mutex`, read anywhere).
  std::atomic<bool> available{true};

  mutable std::mutex mutex;
  // Shared with the calls in flight on it.
  std::shared_ptr<Endpoint> endpoint;  // guarded by mutex
  // The supervisor says the process is gone: not probed until restarted.
  bool down = false;  // guarded by mutex
  // Non-empty once the supervisor gave the replica up: why.
  std::string given_up;  // guarded by mutex

  std::shared_ptr<Endpoint> CurrentEndpoint() const {
    std::lock_guard lock(mutex);
    return endpoint;
  }
  std::string Describe() const { return Describe(*CurrentEndpoint()); }
  std::string Describe(const Endpoint& on) const { return name + " (" + on.address + ")"; }
};

// gRPC reports a replica it could not connect to ("failed to connect to all
// addresses", "Connection refused") with the same code as one that dropped
// a call mid-way; only the latter may have been killed by the request.
bool NeverConnected(const grpc::Status& status) {
  const std::string& message = status.error_message();
  return message.find("failed to connect") != std::string::npos ||
         message.find("Failed to connect") != std::string::npos ||
         message.find("Connection refused") != std::string::npos;
}

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

// One request on its way to a replica, across retries. Cancel() may come
// from any thread; the rest is touched by one attempt at a time.
class ForwardCall final : public ForwardHandle {
 public:
  // Cancels the attempt in flight and prevents further ones.
  void Cancel() override {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    if (context_) {
      context_->TryCancel();
    }
  }

 private:
  friend class Gateway::Impl;

  // A fresh context for the next attempt, or null once cancelled.
  grpc::ClientContext* NewContext() {
    std::lock_guard lock(mutex_);
    if (cancelled_) {
      return nullptr;
    }
    context_ = std::make_unique<grpc::ClientContext>();
    return context_.get();
  }
  bool cancelled() {
    std::lock_guard lock(mutex_);
    return cancelled_;
  }
  // Called by the thread that starts an attempt, after it set the fields
  // below, and by the thread its completion runs on, before it reads them.
  // gRPC orders the two already; passing through mutex_ says so in code
  // that ThreadSanitizer can check (gRPC's own ordering it cannot see).
  void HandOver() { std::lock_guard lock(mutex_); }

  grpc::ByteBuffer request_;
  grpc::ByteBuffer reply_;
  // The client's deadline; time_point::max() when it set none.
  Clock::time_point client_deadline_ = Clock::time_point::max();
  // Whether the attempt in flight runs under timeout_send rather than the
  // client's deadline.
  bool send_timeout_bound_ = false;
  int attempt_ = 0;
  std::size_t replica_ = 0;
  // The replica's endpoint the attempt in flight was sent on.
  std::shared_ptr<Endpoint> endpoint_;
  // Replicas that dropped the connection in the middle of this request, as
  // "name (address)".
  std::vector<std::string> killed_;
  ForwardDone done_;

  std::mutex mutex_;
  std::unique_ptr<grpc::ClientContext> context_;  // guarded by mutex_
  bool cancelled_ = false;                        // guarded by mutex_
};

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
  int monitoring_port() const { return metrics_server_ ? metrics_server_->port() : -1; }
  std::shared_ptr<grpc::Channel> InProcessChannel() const {
    grpc::ChannelArguments args = MakeChannelArguments(options_.max_message_bytes);
    return server_->InProcessChannel(args);
  }
  std::vector<ReplicaState> States() const {
    std::vector<ReplicaState> out;
    for (const auto& r : replicas_) {
      out.push_back({r->served.load(), r->in_flight.load(), r->available.load()});
    }
    return out;
  }
  void Shutdown(std::chrono::milliseconds grace);
  void ReplicaDown(std::size_t index, const std::string& why);
  void ReplicaRestarting(std::size_t index) {
    if (metrics_) {
      metrics_->ReplicaRestarted(index);
    }
  }
  void ReplicaRestarted(std::size_t index, const std::string& address);
  void ReplicaGivenUp(std::size_t index, const std::string& why);

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

  void Attempt(std::shared_ptr<ForwardCall> call);
  void OnAttemptDone(std::shared_ptr<ForwardCall> call, grpc::Status status);
  void Finish(const std::shared_ptr<ForwardCall>& call, grpc::Status status);
  // A request refused before any call: `done` runs now with RESOURCE_EXHAUSTED.
  std::shared_ptr<ForwardHandle> Refuse(ForwardDone done, const std::string& why);
  // Refuses new calls, tells every data call to finish once its requests in
  // flight are answered, and waits up to `grace` for them all to be done.
  void Drain(std::chrono::milliseconds grace);
  HttpForwardResult ForwardAndWait(const std::string& request,
                                   Clock::time_point deadline = Clock::time_point::max());
  bool AnyReplicaAvailable() const;
  // An available replica other than those `call` already failed on, or
  // nullopt when none is left.
  std::optional<std::size_t> PickReplica(const ForwardCall& call);
  // Takes `replica` out of rotation if `on` is still its endpoint (a late
  // failure of a replaced process must not take its successor out).
  void MarkOut(Replica& replica, const Endpoint& on, const std::string& why);
  void UpdateHealth();
  void ProbeLoop();
  void ProbeAll();
  std::string NoReplicaMessage() const;

  GatewayOptions options_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::atomic<std::size_t> round_robin_{0};
  int max_attempts_ = 1;
  std::unique_ptr<DataService> data_service_;
  std::unique_ptr<DryRunService> dry_run_service_;
  std::unique_ptr<InfoService> info_service_;
  std::unique_ptr<ReflectionService> reflection_service_;
  std::unique_ptr<KServeService> kserve_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpGateway> http_;
  // Null without monitoring. Shared with each request's completion, which
  // may in principle run after the gateway is gone.
  std::shared_ptr<GatewayMetrics> metrics_;
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
  std::mutex probe_mutex_;
  std::condition_variable probe_wake_;
  bool stop_probing_ = false;  // guarded by probe_mutex_
  // A replica was restarted: probe now rather than at the next interval.
  bool probe_now_ = false;  // guarded by probe_mutex_
  std::thread prober_;

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
    // Outside mutex_: Drain takes the gateway's reactor lock, then ours.
    const bool registered = known && gateway->Register(this);
    // Held to the end, so that OnDone, on another thread, sees what is set
    // here on every path.
    std::lock_guard lock(mutex_);
    if (!known) {
      Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "gateway does not serve " + method));
      return;
    }
    if (!registered) {
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, gateway->ShuttingDownMessage()));
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
    {
      std::lock_guard lock(mutex_);
      registered = registered_;
      ReleaseReplyBytesLocked(reply_bytes_held_);  // replies a failed call never wrote
    }
    if (registered) {
      gateway_->Unregister(this);
    }
    delete this;
  }

 private:
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
  for (std::size_t i = 0; i < options_.replica_addresses.size(); ++i) {
    auto replica = std::make_unique<Replica>();
    replica->name = i < options_.replica_names.size()
                        ? options_.replica_names[i]
                        : options_.deployment_name + "/rep-" + std::to_string(i);
    replica->endpoint =
        std::make_shared<Endpoint>(options_.replica_addresses[i], options_.max_message_bytes);
    replicas_.push_back(std::move(replica));
  }
  max_attempts_ = std::max<int>(3, static_cast<int>(replicas_.size())) + 1;
  if (options_.monitoring_port >= 0) {
    std::vector<std::string> names;
    for (const auto& r : replicas_) {
      names.push_back(r->name);
    }
    metrics_ = std::make_shared<GatewayMetrics>(options_.deployment_name, names);
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
      [this](const std::string& request, Clock::time_point deadline) {
        return ForwardAndWait(request, deadline);
      },
      [this] { return AnyReplicaAvailable(); },
      static_cast<std::uint64_t>(options_.max_message_bytes), options_.signature);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(builder, options_.max_message_bytes);
  // Caps the threads of the sync services (KServe, reflection); the Jina
  // services are callbacks and hold no thread while they wait.
  grpc::ResourceQuota quota("gantry-gateway");
  quota.SetMaxThreads(kMaxKServeCallsInFlight + kSpareServerThreads);
  builder.SetResourceQuota(quota);
  std::string address = JoinHostPort(options_.host, options_.port);
  GANTRY_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                          MakeServerCredentials(options_.tls));
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
    auto http = HttpGateway::Start(
        options_.host, options_.http_port,
        [this](const std::string& request) { return ForwardAndWait(request); },
        {{"gantry", GANTRY_VERSION}, {"protocol", "jina-3.x/docarray-v2"}},
        options_.max_message_bytes, options_.tls, options_.models,
        [this] { return AnyReplicaAvailable(); }, options_.signature);
    if (!http.ok()) {
      return http.status().WithPrefix("gateway");
    }
    http_ = std::move(http).value();
  }
  prober_ = std::thread([this] { ProbeLoop(); });
  return OkStatus();
}

bool Gateway::Impl::AnyReplicaAvailable() const {
  if (options_.upstream) {
    return options_.upstream->Available();
  }
  for (const auto& r : replicas_) {
    if (r->available.load()) {
      return true;
    }
  }
  return false;
}

HttpForwardResult Gateway::Impl::ForwardAndWait(const std::string& request,
                                                Clock::time_point deadline) {
  // HTTP, OpenAI and KServe requests are refused like Jina calls once the
  // gateway drains; those already forwarded finish (the gRPC server's and
  // cpp-httplib's shutdowns wait for their handlers).
  if (stopping_.load()) {
    HttpForwardResult refused;
    refused.grpc_code = static_cast<int>(grpc::StatusCode::UNAVAILABLE);
    refused.grpc_message = ShuttingDownMessage();
    return refused;
  }
  grpc::Slice slice(request);
  auto promise = std::make_shared<std::promise<HttpForwardResult>>();
  std::future<HttpForwardResult> future = promise->get_future();
  Forward(grpc::ByteBuffer(&slice, 1), deadline, [promise](const ForwardResult& result) {
    HttpForwardResult out;
    out.grpc_code = static_cast<int>(result.status.error_code());
    out.grpc_message = result.status.error_message();
    out.is_error = result.is_error;
    std::vector<grpc::Slice> slices;
    if (result.status.ok() && result.reply.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) {
        out.reply.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    promise->set_value(std::move(out));
  });
  return future.get();
}

std::optional<std::size_t> Gateway::Impl::PickReplica(const ForwardCall& call) {
  std::size_t n = replicas_.size();
  std::size_t start = round_robin_.fetch_add(1, std::memory_order_relaxed) % n;
  std::optional<std::size_t> best;
  std::optional<std::size_t> previous;
  for (std::size_t k = 0; k < n; ++k) {
    std::size_t i = (start + k) % n;
    if (!replicas_[i]->available.load()) {
      continue;
    }
    // A retry goes to another replica when there is one.
    if (call.attempt_ > 0 && i == call.replica_) {
      previous = i;
      continue;
    }
    if (!best || replicas_[i]->in_flight.load() < replicas_[*best]->in_flight.load()) {
      best = i;
    }
  }
  return best ? best : previous;
}

std::string Gateway::Impl::NoReplicaMessage() const {
  std::string message = "deployment '" + options_.deployment_name +
                        "': no replica is available (all " + std::to_string(replicas_.size()) +
                        " are out of rotation after failing; they rejoin when their health check "
                        "passes)";
  for (const auto& replica : replicas_) {
    std::lock_guard lock(replica->mutex);
    if (!replica->given_up.empty()) {
      message += "; replica " + replica->name + " was given up: " + replica->given_up;
    }
  }
  return message;
}

void Gateway::Impl::MarkOut(Replica& replica, const Endpoint& on, const std::string& why) {
  {
    std::lock_guard lock(replica.mutex);
    if (replica.endpoint.get() != &on || !replica.available.exchange(false)) {
      return;
    }
  }
  spdlog::warn("deployment '{}': replica {} leaves rotation: {}", options_.deployment_name,
               replica.Describe(on), why);
  UpdateHealth();
}

void Gateway::Impl::ReplicaDown(std::size_t index, const std::string& why) {
  Replica& replica = *replicas_.at(index);
  bool was_available = false;
  {
    std::lock_guard lock(replica.mutex);
    replica.down = true;
    was_available = replica.available.exchange(false);
  }
  if (was_available) {
    spdlog::warn("deployment '{}': replica {} leaves rotation: {}", options_.deployment_name,
                 replica.Describe(), why);
    UpdateHealth();
  }
}

void Gateway::Impl::ReplicaRestarted(std::size_t index, const std::string& address) {
  Replica& replica = *replicas_.at(index);
  auto endpoint = std::make_shared<Endpoint>(address, options_.max_message_bytes);
  {
    std::lock_guard lock(replica.mutex);
    replica.endpoint = std::move(endpoint);
    replica.down = false;
    replica.available.store(false);  // until its health check passes
  }
  {
    std::lock_guard lock(probe_mutex_);
    probe_now_ = true;
  }
  probe_wake_.notify_all();
}

void Gateway::Impl::ReplicaGivenUp(std::size_t index, const std::string& why) {
  if (metrics_) {
    metrics_->ReplicaGivenUp(index);
  }
  Replica& replica = *replicas_.at(index);
  {
    std::lock_guard lock(replica.mutex);
    replica.down = true;
    replica.given_up = why;
    replica.available.store(false);
  }
  UpdateHealth();
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
      http_->Shutdown();
    }
    if (server_) {
      Drain(grace);
    }
    {
      std::lock_guard lock(probe_mutex_);
      stop_probing_ = true;
    }
    probe_wake_.notify_all();
    if (prober_.joinable()) {
      prober_.join();
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
  bool any = false;
  for (const auto& r : replicas_) {
    any = any || r->available.load();
  }
  if (options_.upstream) {
    any = options_.upstream->Available();
  }
  if (any == serving_ || !server_) {
    return;
  }
  serving_ = any;
  if (auto* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(any);
  }
  if (!any && options_.upstream) {
    spdlog::error("'{}': a step has no replica in rotation; health is NOT_SERVING",
                  options_.deployment_name);
  } else if (!any) {
    spdlog::error("{}; health is NOT_SERVING", NoReplicaMessage());
  } else {
    spdlog::info("deployment '{}': a replica is available again; health is SERVING",
                 options_.deployment_name);
  }
}

// Health-checks every replica: one out of rotation rejoins when it answers
// SERVING; one in rotation leaves when it cannot be reached or answers
// NOT_SERVING (a slow answer from a busy replica is not a failure).
void Gateway::Impl::ProbeLoop() {
  std::unique_lock lock(probe_mutex_);
  while (true) {
    probe_wake_.wait_for(lock, kProbeInterval, [this] { return stop_probing_ || probe_now_; });
    if (stop_probing_) {
      return;
    }
    probe_now_ = false;
    lock.unlock();
    ProbeAll();
    lock.lock();
  }
}

void Gateway::Impl::ProbeAll() {
  if (options_.upstream) {
    // A Flow's gateway has no replicas: its health follows its steps'.
    UpdateHealth();
    return;
  }
  for (auto& replica : replicas_) {
    std::shared_ptr<Endpoint> endpoint;
    {
      std::lock_guard lock(replica->mutex);
      if (replica->down) {
        continue;  // the supervisor reports when it is back
      }
      endpoint = replica->endpoint;
    }
    grpc::ClientContext context;
    context.set_deadline(Clock::now() + kProbeTimeout);
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status status = endpoint->health->Check(&context, request, &response);
    bool serving =
        status.ok() && response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
    if (serving && !replica->available.load()) {
      {
        std::lock_guard lock(replica->mutex);
        if (replica->down || replica->endpoint != endpoint) {
          continue;  // replaced or gone while it was probed
        }
        replica->available.store(true);
      }
      spdlog::info("deployment '{}': replica {} passed its health check; back in rotation",
                   options_.deployment_name, replica->Describe(*endpoint));
      UpdateHealth();
    } else if (!serving && (status.ok() || status.error_code() == grpc::StatusCode::UNAVAILABLE)) {
      MarkOut(*replica, *endpoint,
              status.ok() ? "health check answered NOT_SERVING"
                          : "health check failed: " + status.error_message());
    }
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

std::shared_ptr<ForwardHandle> Gateway::Impl::Refuse(ForwardDone done, const std::string& why) {
  auto refused = std::make_shared<ForwardCall>();
  refused->done_ = std::move(done);
  Finish(refused, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, why));
  return refused;
}

std::shared_ptr<ForwardHandle> Gateway::Impl::Forward(const grpc::ByteBuffer& request,
                                                      Clock::time_point deadline,
                                                      ForwardDone done) {
  if (metrics_) {
    GatewayMetrics::Request measured = metrics_->Begin(ExecEndpointOf(request));
    done = [metrics = metrics_, measured, done = std::move(done)](ForwardResult result) {
      metrics->End(measured, static_cast<int>(result.status.error_code()), result.is_error);
      done(std::move(result));
    };
  }
  // Counted by the metrics above when refused here.
  if (const int limit = options_.max_concurrent_requests; limit > 0) {
    if (requests_in_flight_->fetch_add(1) >= limit) {
      requests_in_flight_->fetch_sub(1);
      return Refuse(std::move(done), "gateway of deployment '" + options_.deployment_name +
                                         "' is busy: max_concurrent_requests is " +
                                         std::to_string(limit) +
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
    return Refuse(std::move(done),
                  "gateway of deployment '" + options_.deployment_name +
                      "' is busy: " + std::to_string(before) +
                      " bytes of requests in flight and of replies not yet delivered are "
                      "held, and this " +
                      std::to_string(size) + "-byte request would pass the " +
                      std::to_string(budget) + " it holds at once (" +
                      std::to_string(kGatewayMessagesInFlight) +
                      " x max_message_bytes); retry later");
  }
  done = Releasing(bytes_in_flight_, size, std::move(done));
  if (options_.upstream) {
    return options_.upstream->Forward(request, deadline, std::move(done));
  }
  auto call = std::make_shared<ForwardCall>();
  call->request_ = request;
  call->client_deadline_ = deadline;
  call->done_ = std::move(done);
  Attempt(call);
  return call;
}

void Gateway::Impl::Finish(const std::shared_ptr<ForwardCall>& call, grpc::Status status) {
  ForwardResult result;
  result.status = std::move(status);
  call->done_(std::move(result));
}

void Gateway::Impl::Attempt(std::shared_ptr<ForwardCall> call) {
  std::optional<std::size_t> picked = PickReplica(*call);
  if (!picked) {
    std::string message = NoReplicaMessage();
    if (!call->killed_.empty()) {
      message += "; this request's replica " + call->killed_.front() +
                 " dropped the connection while processing it";
    }
    Finish(call, grpc::Status(grpc::StatusCode::UNAVAILABLE, message));
    return;
  }
  Clock::time_point now = Clock::now();
  if (call->client_deadline_ <= now) {
    Finish(call, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                              "deployment '" + options_.deployment_name +
                                  "': the request's deadline passed before it could be sent"));
    return;
  }
  grpc::ClientContext* context = call->NewContext();
  if (context == nullptr) {
    Finish(call, grpc::Status(grpc::StatusCode::CANCELLED,
                              "deployment '" + options_.deployment_name +
                                  "': the request was cancelled by its client"));
    return;
  }
  call->replica_ = *picked;
  Replica& replica = *replicas_[call->replica_];
  call->endpoint_ = replica.CurrentEndpoint();
  replica.in_flight.fetch_add(1);
  Clock::time_point deadline = call->client_deadline_;
  call->send_timeout_bound_ = false;
  if (options_.timeout_send.count() > 0 && now + options_.timeout_send < deadline) {
    deadline = now + options_.timeout_send;
    call->send_timeout_bound_ = true;
  }
  if (deadline != Clock::time_point::max()) {
    context->set_deadline(deadline);
  }
  call->reply_.Clear();
  ForwardCall* raw = call.get();
  raw->HandOver();
  raw->endpoint_->stub->UnaryCall(context, kSingleMethod, grpc::StubOptions(), &raw->request_,
                                  &raw->reply_,
                                  [this, call = std::move(call)](grpc::Status status) mutable {
                                    OnAttemptDone(std::move(call), std::move(status));
                                  });
}

void Gateway::Impl::OnAttemptDone(std::shared_ptr<ForwardCall> call, grpc::Status status) {
  call->HandOver();
  Replica& replica = *replicas_[call->replica_];
  replica.in_flight.fetch_sub(1);
  const std::string where = "deployment '" + options_.deployment_name + "': ";
  const std::string described = replica.Describe(*call->endpoint_);
  if (status.ok()) {
    replica.served.fetch_add(1);
    ForwardResult result;
    const auto& trailers = call->context_->GetServerTrailingMetadata();
    auto it = trailers.find("is-error");
    result.is_error = it != trailers.end() && it->second == "true";
    result.reply = call->reply_;
    call->done_(result);
    return;
  }
  if (call->cancelled()) {
    Finish(call, grpc::Status(grpc::StatusCode::CANCELLED,
                              where + "the request was cancelled by its client"));
    return;
  }
  const bool past_deadline = Clock::now() >= call->client_deadline_;
  const bool can_try_again = call->attempt_ + 1 < max_attempts_ && !past_deadline;
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE: {
      // A transport failure: the replica is down or dying.
      MarkOut(replica, *call->endpoint_, status.error_message());
      if (!NeverConnected(status)) {
        call->killed_.push_back(described);
      }
      if (call->killed_.size() >= static_cast<std::size_t>(kMaxReplicasKilledPerRequest)) {
        std::string names;
        for (std::size_t i = 0; i < call->killed_.size(); ++i) {
          names += i == 0 ? "" : (i + 1 == call->killed_.size() ? " and " : ", ");
          names += call->killed_[i];
        }
        status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              where + "the request killed replica " + names +
                                  " (each dropped the connection while processing it); "
                                  "not retried again");
        spdlog::error("{}", status.error_message());
        Finish(call, std::move(status));
        return;
      }
      if (can_try_again) {
        spdlog::warn("{}request to {} failed ({}); retrying on another replica", where, described,
                     status.error_message());
        ++call->attempt_;
        Attempt(std::move(call));
        return;
      }
      status = grpc::Status(grpc::StatusCode::UNAVAILABLE, where + "replica " + described +
                                                               " failed after " +
                                                               std::to_string(call->attempt_ + 1) +
                                                               " tries: " + status.error_message());
      spdlog::error("{}", status.error_message());
      break;
    }
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      // Only timeout_send is retried (Jina's rule); the client's own
      // deadline is final.
      if (call->send_timeout_bound_ && can_try_again) {
        spdlog::warn("{}request to {} took longer than timeout_send ({} ms); retrying", where,
                     described, options_.timeout_send.count());
        ++call->attempt_;
        Attempt(std::move(call));
        return;
      }
      status =
          grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                       where + "replica " + described + " did not answer within " +
                           (call->send_timeout_bound_ ? "timeout_send" : "the request's deadline") +
                           ": " + status.error_message());
      break;
    default:
      // The worker's own answer (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ...):
      // it reached the replica and was refused, so it passes through as is.
      replica.served.fetch_add(1);
      break;
  }
  Finish(call, std::move(status));
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
  gateway.tls = options.tls;
  gateway.monitoring_port = options.monitoring ? options.port_monitoring : -1;
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

std::vector<ReplicaState> Gateway::ReplicaStates() const { return impl_->States(); }

void Gateway::Shutdown(std::chrono::milliseconds grace) { impl_->Shutdown(grace); }

void Gateway::ReplicaDown(std::size_t index, const std::string& why) {
  impl_->ReplicaDown(index, why);
}

void Gateway::ReplicaRestarting(std::size_t index) { impl_->ReplicaRestarting(index); }

void Gateway::ReplicaRestarted(std::size_t index, const std::string& address) {
  impl_->ReplicaRestarted(index, address);
}

void Gateway::ReplicaGivenUp(std::size_t index, const std::string& why) {
  impl_->ReplicaGivenUp(index, why);
}

}  // namespace gantry::internal
