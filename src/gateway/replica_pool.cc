#include "gateway/replica_pool.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "common/grpc_options.h"
#include "common/tracing.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace gantry::internal {
namespace {

constexpr char kSingleMethod[] = "/jina.JinaSingleDataRequestRPC/process_single_data";
// Tries of one request that may end with its replica dropping the
// connection: the second such end is final.
constexpr int kMaxReplicasKilledPerRequest = 2;

using Clock = std::chrono::system_clock;

// The link of a replica given no address yet (still starting).
constexpr char kNotStartedAddress[] = "127.0.0.1:0";

// A liveness check is answered by any reply of the replica's server, an
// error included: UNIMPLEMENTED from a server without a health service (a
// replica `gantry gateway` was pointed at) is as alive as SERVING. Only a
// call that reached no server (UNAVAILABLE) or got no reply in time
// (DEADLINE_EXCEEDED) is a miss.
bool AnsweredLivenessCheck(const grpc::Status& status) {
  return status.error_code() != grpc::StatusCode::UNAVAILABLE &&
         status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED;
}

// "UNAVAILABLE: failed to connect ...": the code too, since some failures
// come with no message at all.
std::string DescribeCheckFailure(const grpc::Status& status) {
  std::string out(StatusCodeName(static_cast<StatusCode>(status.error_code())));
  if (!status.error_message().empty()) {
    out += ": " + status.error_message();
  }
  return out;
}

// The ends of a request that no replica answered, as its client hears them.
// A call its client stopped: its deadline passed (gRPC cancels the server's
// call then too), or it cancelled it. Metrics tell the two apart.
grpc::Status CancelledByClient(Clock::time_point client_deadline, const std::string& deployment) {
  if (client_deadline != Clock::time_point::max() && Clock::now() >= client_deadline) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        "deployment '" + deployment + "': the request's deadline passed");
  }
  return grpc::Status(grpc::StatusCode::CANCELLED,
                      "deployment '" + deployment + "': the request was cancelled by its client");
}

grpc::Status StoppedWhileWaiting(const std::string& deployment) {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "deployment '" + deployment +
                          "': the gateway stopped while the request waited for a replica");
}

// gRPC reports a replica it could not connect to ("failed to connect to all
// addresses", "Connection refused") with the same code as one that dropped
// a call mid-way; only the latter may have been killed by the request.
bool NeverConnected(const grpc::Status& status) {
  const std::string& message = status.error_message();
  return message.find("failed to connect") != std::string::npos ||
         message.find("Failed to connect") != std::string::npos ||
         message.find("Connection refused") != std::string::npos;
}

class GrpcReplicaLink final : public ReplicaLink {
 public:
  GrpcReplicaLink(std::string address, std::int64_t max_message_bytes)
      : address_(std::move(address)),
        channel_(MakeChannel(address_, max_message_bytes)),
        stub_(channel_),
        health_(grpc::health::v1::Health::NewStub(channel_)) {}

  const std::string& address() const override { return address_; }

  void Send(grpc::ClientContext* context, const grpc::ByteBuffer& request,
            ForwardDone done) override {
    // The buffers live until the call completes.
    struct InFlight {
      std::mutex mutex;
      grpc::ByteBuffer request;
      grpc::ByteBuffer reply;
      ForwardDone done;
    };
    auto call = std::make_shared<InFlight>();
    {
      // Passing through the mutex on both sides orders these writes before
      // the completion's reads in a way ThreadSanitizer can see (gRPC's own
      // ordering it cannot).
      std::lock_guard lock(call->mutex);
      call->request = request;
      call->done = std::move(done);
    }
    InFlight* raw = call.get();
    stub_.UnaryCall(context, kSingleMethod, grpc::StubOptions(), &raw->request, &raw->reply,
                    [context, call = std::move(call)](grpc::Status status) {
                      ForwardResult result;
                      ForwardDone done;
                      {
                        std::lock_guard lock(call->mutex);
                        done = std::move(call->done);
                        if (status.ok()) {
                          const auto& trailers = context->GetServerTrailingMetadata();
                          auto it = trailers.find("is-error");
                          result.is_error = it != trailers.end() && it->second == "true";
                          result.reply.Swap(&call->reply);
                        } else {
                          result.peer = context->peer();
                        }
                        // This try's hold on the request's bytes ends here,
                        // not when gRPC drops this callback after `done`.
                        call->request.Clear();
                      }
                      result.status = std::move(status);
                      done(std::move(result));
                    });
  }

  bool Check(std::chrono::milliseconds timeout, grpc::Status* status) override {
    grpc::ClientContext context;
    context.set_deadline(Clock::now() + timeout);
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    *status = health_->Check(&context, request, &response);
    return status->ok() && response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  }

 private:
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  grpc::GenericStub stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

}  // namespace

ReplicaLinkFactory GrpcReplicaLinks(std::int64_t max_message_bytes) {
  return [max_message_bytes](const std::string& address) {
    return std::make_shared<GrpcReplicaLink>(address, max_message_bytes);
  };
}

struct ReplicaPool::Replica {
  std::string name;
  std::atomic<int> in_flight{0};
  std::atomic<std::uint64_t> served{0};
  // In rotation: cleared by a transport failure or by the supervisor, set by
  // a passing probe of the current link (under `mutex`, read anywhere).
  std::atomic<bool> available{true};

  mutable std::mutex mutex;
  // Replaced whole when the replica is started again on a new address; a
  // call keeps the link it was sent on until it completes.
  std::shared_ptr<ReplicaLink> link;  // guarded by mutex
  // The supervisor says the process is gone: not probed until restarted.
  bool down = false;  // guarded by mutex
  // Non-empty once the supervisor gave the replica up: why.
  std::string given_up;  // guarded by mutex
  // While down: when the supervisor starts it again, if it said.
  std::optional<Clock::time_point> restart_at;  // guarded by mutex
  // Liveness checks of the current link in a row that got no answer.
  int missed_checks = 0;  // guarded by mutex

  std::shared_ptr<ReplicaLink> CurrentLink() const {
    std::lock_guard lock(mutex);
    return link;
  }
  // The link for a try about to be sent, counted in its tries in flight
  // under `mutex`: once the link is replaced, its count only falls.
  std::shared_ptr<ReplicaLink> LinkForTry() const {
    std::lock_guard lock(mutex);
    link->tries_in_flight_.fetch_add(1);
    return link;
  }
  std::string Describe() const { return Describe(*CurrentLink()); }
  std::string Describe(const ReplicaLink& on) const { return name + " (" + on.address() + ")"; }
};

// One request across its tries. Cancel() may come from any thread; the rest
// is touched by one try at a time.
class ReplicaPool::Call final : public ForwardHandle {
 public:
  // Cancels the try in flight and prevents further ones.
  void Cancel() override {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    if (context_) {
      context_->TryCancel();
    }
  }

 private:
  friend class ReplicaPool;

  // A fresh context for the next try, or null once cancelled.
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
  // Called by the thread that starts a try, after it set the fields below,
  // and by the thread its completion runs on, before it reads them (see
  // GrpcReplicaLink::Send).
  void HandOver() { std::lock_guard lock(mutex_); }

  grpc::ByteBuffer request_;
  // W3C trace context sent with each try; empty when none.
  std::string traceparent_;
  // The client's deadline; time_point::max() when it set none.
  Clock::time_point client_deadline_ = Clock::time_point::max();
  // Whether the try in flight runs under timeout_send rather than the
  // client's deadline.
  bool send_timeout_bound_ = false;
  int attempt_ = 0;
  std::size_t replica_ = 0;
  // The link the try in flight was sent on.
  std::shared_ptr<ReplicaLink> link_;
  // Replicas that dropped the connection in the middle of this request, as
  // "name (address)", and the servers they were on (empty when unknown).
  std::vector<std::string> killed_;
  std::vector<std::string> killed_peers_;
  // The number of the suspects' turn this request holds (replica_pool.h);
  // 0: none.
  std::uint64_t suspect_turn_ = 0;
  // Set when it first found no replica: it waits for one until then.
  std::optional<Clock::time_point> hold_until_;
  ForwardDone done_;

  std::mutex mutex_;
  std::unique_ptr<grpc::ClientContext> context_;  // guarded by mutex_
  bool cancelled_ = false;                        // guarded by mutex_
};

ReplicaPool::ReplicaPool(ReplicaPoolOptions options) : options_(std::move(options)) {
  if (!options_.links) {
    options_.links = GrpcReplicaLinks(kDefaultMaxMessageBytes);
  }
  for (std::size_t i = 0; i < options_.replica_addresses.size(); ++i) {
    auto replica = std::make_unique<Replica>();
    replica->name = i < options_.replica_names.size()
                        ? options_.replica_names[i]
                        : options_.deployment_name + "/rep-" + std::to_string(i);
    const std::string& address = options_.replica_addresses[i];
    if (address.empty()) {
      // Still starting: down until ReplicaRestarted names its address; the
      // placeholder link is never called.
      replica->down = true;
      replica->restart_at = Clock::now();
      replica->available.store(false);
      replica->link = options_.links(kNotStartedAddress);
    } else {
      replica->link = options_.links(address);
    }
    replicas_.push_back(std::move(replica));
  }
  max_attempts_ = std::max<int>(3, static_cast<int>(replicas_.size())) + 1;
}

ReplicaPool::~ReplicaPool() { Stop(); }

void ReplicaPool::Start() {
  {
    std::lock_guard lock(waiting_mutex_);
    holding_ = options_.hold_while_restarting.count() > 0 && !stopped_waiting_;
  }
  if (!prober_.joinable()) {
    prober_ = std::thread([this] { ProbeLoop(); });
  }
  if (!liveness_checker_.joinable() && options_.liveness_failure_threshold > 0) {
    liveness_checker_ = std::thread([this] { LivenessLoop(); });
  }
}

void ReplicaPool::Stop() {
  {
    std::lock_guard lock(probe_mutex_);
    stop_probing_ = true;
  }
  probe_wake_.notify_all();
  if (prober_.joinable()) {
    prober_.join();
  }
  if (liveness_checker_.joinable()) {
    liveness_checker_.join();
  }
  std::vector<std::shared_ptr<Call>> waiting;
  {
    std::lock_guard lock(waiting_mutex_);
    holding_ = false;
    stopped_waiting_ = true;
    waiting = std::exchange(held_, {});
    waiting.insert(waiting.end(), suspects_.begin(), suspects_.end());
    suspects_.clear();
  }
  for (const std::shared_ptr<Call>& call : waiting) {
    Fail(call, StoppedWhileWaiting(options_.deployment_name));
  }
  std::lock_guard lock(listener_mutex_);
  stopped_ = true;
}

std::vector<std::string> ReplicaPool::names() const {
  std::vector<std::string> out;
  for (const auto& r : replicas_) {
    out.push_back(r->name);
  }
  return out;
}

std::vector<ReplicaState> ReplicaPool::States() const {
  std::vector<ReplicaState> out;
  for (const auto& r : replicas_) {
    out.push_back({r->served.load(), r->in_flight.load(), r->available.load()});
  }
  return out;
}

bool ReplicaPool::Available() const {
  return std::any_of(replicas_.begin(), replicas_.end(),
                     [](const auto& r) { return r->available.load(); });
}

std::string ReplicaPool::WhyUnavailable() const {
  std::string given_up;
  std::size_t given_up_count = 0;
  for (const auto& replica : replicas_) {
    std::lock_guard lock(replica->mutex);
    if (!replica->given_up.empty()) {
      ++given_up_count;
      given_up += "; replica " + replica->name + " was given up: " + replica->given_up;
    }
  }
  return "no replica is available (all " + std::to_string(replicas_.size()) +
         " are out of rotation after failing; " +
         (given_up_count == replicas_.size()
              ? std::string("every one was given up, and none is restarted)")
              : std::string("they rejoin when their health check passes)")) +
         given_up;
}

std::string ReplicaPool::NoReplicaMessage() const {
  return "deployment '" + options_.deployment_name + "': " + WhyUnavailable();
}

void ReplicaPool::RotationChanged() {
  {
    // Under the lock, so that Stop returns only once no callback runs.
    std::lock_guard lock(listener_mutex_);
    if (!stopped_ && options_.on_rotation_change) {
      options_.on_rotation_change();
    }
  }
  bool any_held = false;
  {
    std::lock_guard lock(waiting_mutex_);
    any_held = !held_.empty();
  }
  if (any_held && Available()) {
    WakeProber();
  }
}

void ReplicaPool::WakeProber() {
  {
    std::lock_guard lock(probe_mutex_);
    serve_waiting_now_ = true;
  }
  probe_wake_.notify_all();
}

std::optional<std::size_t> ReplicaPool::Pick(const Call& call) {
  std::size_t n = replicas_.size();
  if (n == 0) {
    return std::nullopt;
  }
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

void ReplicaPool::MarkOut(Replica& replica, const ReplicaLink& on, const std::string& why) {
  {
    std::lock_guard lock(replica.mutex);
    if (replica.link.get() != &on || !replica.available.exchange(false)) {
      return;
    }
  }
  spdlog::warn("deployment '{}': replica {} leaves rotation: {}", options_.deployment_name,
               replica.Describe(on), why);
  RotationChanged();
}

void ReplicaPool::ReplicaDown(std::size_t index, const std::string& why,
                              std::optional<std::chrono::milliseconds> restart_in) {
  Replica& replica = *replicas_.at(index);
  bool was_available = false;
  {
    std::lock_guard lock(replica.mutex);
    replica.down = true;
    replica.restart_at.reset();
    if (restart_in) {
      replica.restart_at = Clock::now() + *restart_in;
    }
    was_available = replica.available.exchange(false);
  }
  if (was_available) {
    spdlog::warn("deployment '{}': replica {} leaves rotation: {}", options_.deployment_name,
                 replica.Describe(), why);
    RotationChanged();
  }
}

void ReplicaPool::ReplicaStarting(std::size_t index) {
  Replica& replica = *replicas_.at(index);
  std::lock_guard lock(replica.mutex);
  replica.restart_at = Clock::now();
}

void ReplicaPool::ReplicaRestarted(std::size_t index, const std::string& address) {
  Replica& replica = *replicas_.at(index);
  std::shared_ptr<ReplicaLink> link = options_.links(address);
  {
    std::lock_guard lock(replica.mutex);
    replica.link = std::move(link);
    replica.down = false;
    replica.missed_checks = 0;
    replica.available.store(false);  // until its health check passes
  }
  {
    std::lock_guard lock(probe_mutex_);
    probe_now_ = true;
  }
  probe_wake_.notify_all();
}

std::shared_ptr<const ReplicaLink> ReplicaPool::ReplicaReplaced(std::size_t index,
                                                                const std::string& address) {
  Replica& replica = *replicas_.at(index);
  std::shared_ptr<ReplicaLink> link = options_.links(address);
  std::shared_ptr<ReplicaLink> old;
  {
    std::lock_guard lock(replica.mutex);
    old = std::exchange(replica.link, std::move(link));
    replica.down = false;
    replica.given_up.clear();
    replica.missed_checks = 0;
    replica.available.store(true);
  }
  RotationChanged();
  return old;
}

void ReplicaPool::ReplicaGivenUp(std::size_t index, const std::string& why) {
  Replica& replica = *replicas_.at(index);
  {
    std::lock_guard lock(replica.mutex);
    replica.down = true;
    replica.given_up = why;
    replica.restart_at.reset();
    replica.available.store(false);
  }
  RotationChanged();
}

void ReplicaPool::ProbeLoop() {
  using Steady = std::chrono::steady_clock;
  std::unique_lock lock(probe_mutex_);
  Steady::time_point next_probe = Steady::now() + options_.probe_interval;
  while (true) {
    probe_wake_.wait_until(lock, next_probe,
                           [this] { return stop_probing_ || probe_now_ || serve_waiting_now_; });
    if (stop_probing_) {
      return;
    }
    const bool probe = probe_now_ || Steady::now() >= next_probe;
    probe_now_ = false;
    serve_waiting_now_ = false;
    lock.unlock();
    if (probe) {
      ProbeOnce();
      next_probe = Steady::now() + options_.probe_interval;
    }
    // Each round at least: held requests find a replica that rejoined, and
    // the ones cancelled or out of time end within an interval.
    ServeWaiting();
    lock.lock();
  }
}

void ReplicaPool::ProbeOnce() {
  for (auto& replica : replicas_) {
    std::shared_ptr<ReplicaLink> link;
    {
      std::lock_guard lock(replica->mutex);
      if (replica->down) {
        continue;  // the supervisor reports when it is back
      }
      link = replica->link;
    }
    grpc::Status status;
    const bool serving = link->Check(options_.probe_timeout, &status);
    if (serving && !replica->available.load()) {
      {
        std::lock_guard lock(replica->mutex);
        if (replica->down || replica->link != link) {
          continue;  // replaced or gone while it was probed
        }
        replica->available.store(true);
      }
      spdlog::info("deployment '{}': replica {} passed its health check; back in rotation",
                   options_.deployment_name, replica->Describe(*link));
      RotationChanged();
    } else if (!serving && (status.ok() || status.error_code() == grpc::StatusCode::UNAVAILABLE)) {
      MarkOut(*replica, *link,
              status.ok() ? "health check answered NOT_SERVING"
                          : "health check failed: " + DescribeCheckFailure(status));
    }
  }
}

void ReplicaPool::LivenessLoop() {
  std::unique_lock lock(probe_mutex_);
  while (true) {
    probe_wake_.wait_for(lock, options_.liveness_period, [this] { return stop_probing_; });
    if (stop_probing_) {
      return;
    }
    lock.unlock();
    CheckLivenessOnce();
    lock.lock();
  }
}

void ReplicaPool::CheckLivenessOnce() {
  const int threshold = options_.liveness_failure_threshold;
  if (threshold <= 0) {
    return;
  }
  // One replica at a time: a check of a live one takes a millisecond, so
  // only hung ones stretch a round (by liveness_timeout each).
  for (std::size_t index = 0; index < replicas_.size(); ++index) {
    Replica& replica = *replicas_[index];
    std::shared_ptr<ReplicaLink> link;
    {
      std::lock_guard lock(replica.mutex);
      if (replica.down) {
        continue;
      }
      link = replica.link;
    }
    grpc::Status status;
    link->Check(options_.liveness_timeout, &status);
    int missed = 0;
    {
      std::lock_guard lock(replica.mutex);
      if (replica.down || replica.link != link) {
        continue;  // replaced or gone while it was checked
      }
      replica.missed_checks = AnsweredLivenessCheck(status) ? 0 : replica.missed_checks + 1;
      missed = replica.missed_checks;
      if (missed >= threshold) {
        replica.missed_checks = 0;  // reported once per run of misses
      }
    }
    if (missed < threshold) {
      continue;
    }
    const std::string why = "it answered none of " + std::to_string(threshold) +
                            " liveness checks in a row within " +
                            std::to_string(options_.liveness_timeout.count()) +
                            " ms (last: " + DescribeCheckFailure(status) + ")";
    MarkOut(replica, *link, why);
    spdlog::error("deployment '{}': replica {} is unresponsive: {}", options_.deployment_name,
                  replica.Describe(*link), why);
    {
      // At most one entry per replica until taken: a gateway with no
      // supervisor never takes them.
      std::lock_guard lock(unresponsive_mutex_);
      UnresponsiveReplica found{index, link->address()};
      if (std::find(unresponsive_.begin(), unresponsive_.end(), found) == unresponsive_.end()) {
        unresponsive_.push_back(std::move(found));
      }
    }
    std::lock_guard lock(listener_mutex_);
    if (!stopped_ && options_.on_unresponsive) {
      options_.on_unresponsive(index);
    }
  }
}

std::vector<UnresponsiveReplica> ReplicaPool::TakeUnresponsive() {
  std::lock_guard lock(unresponsive_mutex_);
  return std::exchange(unresponsive_, {});
}

std::shared_ptr<ForwardHandle> ReplicaPool::Forward(const grpc::ByteBuffer& request,
                                                    Clock::time_point deadline, ForwardDone done) {
  auto call = std::make_shared<Call>();
  call->request_ = request;
  call->client_deadline_ = deadline;
  call->done_ = std::move(done);
  // The gateway's span (or the client's context) goes to whichever replica
  // serves the request, on every try.
  if (const std::optional<TraceContext> trace = CurrentTraceContext()) {
    call->traceparent_ = FormatTraceparent(*trace);
  }
  Attempt(call);
  return call;
}

namespace {

void Finish(ForwardDone& done, grpc::Status status) {
  ForwardResult result;
  result.status = std::move(status);
  done(std::move(result));
}

}  // namespace

void ReplicaPool::Attempt(std::shared_ptr<Call> call) {
  // Built only on the error paths.
  auto where = [this] { return "deployment '" + options_.deployment_name + "': "; };
  if (call->cancelled()) {
    Fail(call, CancelledByClient(call->client_deadline_, options_.deployment_name));
    return;
  }
  Clock::time_point now = Clock::now();
  if (call->client_deadline_ <= now) {
    Fail(call, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                            where() + "the request's deadline passed before it could be sent"));
    return;
  }
  std::optional<std::size_t> picked = Pick(*call);
  if (!picked) {
    if (Hold(call)) {
      return;
    }
    std::string message = NoReplicaMessage();
    if (call->hold_until_) {
      message += "; none came back within " +
                 std::to_string(options_.hold_while_restarting.count()) +
                 " ms (hold_while_restarting) or the request's deadline";
    }
    if (!call->killed_.empty()) {
      message += "; this request's replica " + call->killed_.front() +
                 " dropped the connection while processing it";
    }
    Fail(call, grpc::Status(grpc::StatusCode::UNAVAILABLE, message));
    return;
  }
  grpc::ClientContext* context = call->NewContext();
  if (context == nullptr) {
    Fail(call, CancelledByClient(call->client_deadline_, options_.deployment_name));
    return;
  }
  if (!call->traceparent_.empty()) {
    context->AddMetadata(kTraceparentKey, call->traceparent_);
  }
  call->replica_ = *picked;
  Replica& replica = *replicas_[call->replica_];
  call->link_ = replica.LinkForTry();
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
  Call* raw = call.get();
  raw->HandOver();
  raw->link_->Send(context, raw->request_,
                   [this, call = std::move(call)](ForwardResult result) mutable {
                     OnAttemptDone(std::move(call), std::move(result));
                   });
}

void ReplicaPool::Fail(const std::shared_ptr<Call>& call, grpc::Status status) {
  const std::uint64_t turn = std::exchange(call->suspect_turn_, 0);
  if (turn != 0) {
    FreeSuspectTurn(turn);
  }
  Finish(call->done_, std::move(status));
  if (turn != 0) {
    RunSuspects();
  }
}

void ReplicaPool::Retry(std::shared_ptr<Call> call) {
  if (call->killed_.empty()) {
    Attempt(std::move(call));
    return;
  }
  bool queued = false;
  {
    std::lock_guard lock(waiting_mutex_);
    if (!stopped_waiting_) {
      suspects_.push_back(call);
      queued = true;
    }
  }
  if (!queued) {
    Fail(call, StoppedWhileWaiting(options_.deployment_name));
    return;
  }
  RunSuspects();
}

void ReplicaPool::FreeSuspectTurn(std::uint64_t turn) {
  std::lock_guard lock(waiting_mutex_);
  if (turn == suspect_turn_) {
    suspect_in_flight_ = false;
  }
}

void ReplicaPool::RunSuspects() {
  // A try that ends before Send returns frees the turn inside Attempt below:
  // this loop, not a nested one, starts the next suspect, so the stack does
  // not grow with the queue.
  thread_local const ReplicaPool* running = nullptr;
  if (running == this) {
    return;
  }
  const ReplicaPool* outer = std::exchange(running, this);
  while (true) {
    std::shared_ptr<Call> next;
    {
      std::lock_guard lock(waiting_mutex_);
      if (suspect_in_flight_ || suspects_.empty()) {
        break;
      }
      suspect_in_flight_ = true;
      suspect_turn_runs_out_ = Clock::now() + options_.suspect_turn_limit;
      next = std::move(suspects_.front());
      suspects_.pop_front();
      next->suspect_turn_ = ++suspect_turn_;
    }
    Attempt(std::move(next));
  }
  running = outer;
}

bool ReplicaPool::AnyReplicaComingBack(Clock::time_point now) const {
  for (const auto& replica : replicas_) {
    std::lock_guard lock(replica->mutex);
    if (!replica->given_up.empty()) {
      continue;
    }
    // Out of rotation but not reported down: its probe may bring it back.
    if (!replica->down) {
      return true;
    }
    if (replica->restart_at && *replica->restart_at <= now + options_.hold_while_restarting) {
      return true;
    }
  }
  return false;
}

bool ReplicaPool::Hold(const std::shared_ptr<Call>& call) {
  if (options_.hold_while_restarting.count() <= 0) {
    return false;
  }
  const Clock::time_point now = Clock::now();
  // hold_until_ stays set only once the call was held: its failure then
  // says that none came back in time.
  const bool first = !call->hold_until_;
  if (first) {
    call->hold_until_ = std::min(now + options_.hold_while_restarting, call->client_deadline_);
  }
  auto not_held = [&] {
    if (first) {
      call->hold_until_.reset();
    }
    return false;
  };
  if (now >= *call->hold_until_ || !AnyReplicaComingBack(now)) {
    return not_held();
  }
  {
    std::lock_guard lock(waiting_mutex_);
    if (!holding_) {
      return not_held();
    }
    held_.push_back(call);
  }
  // A replica may have rejoined since Pick looked.
  if (Available()) {
    WakeProber();
  }
  return true;
}

void ReplicaPool::ServeWaiting() {
  const Clock::time_point now = Clock::now();
  std::vector<std::shared_ptr<Call>> held;
  std::vector<std::shared_ptr<Call>> out_of_time;
  bool turn_ran_out = false;
  {
    std::lock_guard lock(waiting_mutex_);
    held = std::exchange(held_, {});
    if (suspect_in_flight_ && now >= suspect_turn_runs_out_) {
      // Its try goes on; the next suspect need not wait for it any more.
      suspect_in_flight_ = false;
      turn_ran_out = !suspects_.empty();
    }
    for (auto it = suspects_.begin(); it != suspects_.end();) {
      if ((*it)->cancelled() || (*it)->client_deadline_ <= now) {
        out_of_time.push_back(std::move(*it));
        it = suspects_.erase(it);
      } else {
        ++it;
      }
    }
  }
  const std::string where = "deployment '" + options_.deployment_name + "': ";
  for (const std::shared_ptr<Call>& call : out_of_time) {
    Fail(call, call->cancelled()
                   ? CancelledByClient(call->client_deadline_, options_.deployment_name)
                   : grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                  where + "the request's deadline passed while it waited to be "
                                          "tried again after its replica dropped it"));
  }
  // Each goes out, or is held again while its time lasts.
  for (std::shared_ptr<Call>& call : held) {
    Attempt(std::move(call));
  }
  if (turn_ran_out) {
    spdlog::warn(
        "{}a request tried again after its replica dropped it has run for {} ms "
        "(suspect_turn_limit); the next such request goes without waiting for it",
        where, options_.suspect_turn_limit.count());
    RunSuspects();
  }
}

void ReplicaPool::OnAttemptDone(std::shared_ptr<Call> call, ForwardResult result) {
  call->HandOver();
  // The try that held the suspects' turn is over: the next suspect goes once
  // this one is finished or queued again.
  struct PassTurn {
    ReplicaPool* pool;
    bool had_turn;
    ~PassTurn() {
      if (had_turn) {
        pool->RunSuspects();
      }
    }
  };
  const std::uint64_t turn = std::exchange(call->suspect_turn_, 0);
  const PassTurn pass_turn{this, turn != 0};
  if (turn != 0) {
    FreeSuspectTurn(turn);
  }
  Replica& replica = *replicas_[call->replica_];
  replica.in_flight.fetch_sub(1);
  call->link_->tries_in_flight_.fetch_sub(1);
  const std::string where = "deployment '" + options_.deployment_name + "': ";
  const std::string described = replica.Describe(*call->link_);
  grpc::Status status = std::move(result.status);
  if (status.ok()) {
    replica.served.fetch_add(1);
    result.status = grpc::Status::OK;
    // No try follows: the request's bytes go before the reply is handled.
    call->request_.Clear();
    call->done_(std::move(result));
    return;
  }
  if (call->cancelled()) {
    Finish(call->done_, CancelledByClient(call->client_deadline_, options_.deployment_name));
    return;
  }
  const bool past_deadline = Clock::now() >= call->client_deadline_;
  const bool can_try_again = call->attempt_ + 1 < max_attempts_ && !past_deadline;
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE: {
      // A transport failure: the replica is down or dying. A "dns:///" name
      // stands for every server it resolves to, and its channel's
      // round_robin already routes around the one that went: it stays in
      // rotation (the health probe still takes it out when none answers),
      // and the retry may go to it again.
      const bool dns_name = call->link_->address().starts_with("dns:///");
      if (!dns_name) {
        MarkOut(replica, *call->link_, status.error_message());
      }
      // A dns:/// name's server dropping it again (reached once more before
      // the channel noticed it went) is no second kill. Only there: behind
      // one address (a virtual IP) every server has the same peer.
      const bool same_server = dns_name && !result.peer.empty() &&
                               std::find(call->killed_peers_.begin(), call->killed_peers_.end(),
                                         result.peer) != call->killed_peers_.end();
      if (!NeverConnected(status) && !same_server) {
        call->killed_.push_back(described);
        call->killed_peers_.push_back(result.peer);
      }
      if (call->killed_.size() >= static_cast<std::size_t>(kMaxReplicasKilledPerRequest)) {
        // A dns:/// replica is several servers: the same name twice is two
        // of them.
        std::vector<std::string> names;
        for (const std::string& name : call->killed_) {
          if (std::find(names.begin(), names.end(), name) == names.end()) {
            names.push_back(name);
          }
        }
        std::string listed;
        for (std::size_t i = 0; i < names.size(); ++i) {
          listed += i == 0 ? "" : (i + 1 == names.size() ? " and " : ", ");
          listed += names[i];
        }
        const std::string what =
            names.size() == 1 && call->killed_.size() > 1
                ? std::to_string(call->killed_.size()) + " servers of replica " + listed +
                      " (each dropped the connection while processing it)"
                : "replica " + listed + " (each dropped the connection while processing it)";
        status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              where + "the request killed " + what + "; not retried again");
        spdlog::error("{}", status.error_message());
        Finish(call->done_, std::move(status));
        return;
      }
      if (can_try_again) {
        spdlog::warn("{}request to {} failed ({}); retrying on another replica", where, described,
                     status.error_message());
        ++call->attempt_;
        Retry(std::move(call));
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
        Retry(std::move(call));
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
  Finish(call->done_, std::move(status));
}

}  // namespace gantry::internal
