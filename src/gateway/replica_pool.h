// A Deployment's replicas as one Upstream (gateway/upstream.h): which
// replica a request goes to, which ones are in rotation, their health
// probes, and the tries of one request across them. The gateway in front
// (gateway/gateway.h) keeps its services, admission, drain and health, and
// forwards every data request to an Upstream: this pool for a Deployment, a
// FlowRouter for a Flow.
//
// Picking: among replicas in rotation, the one with the fewest requests in
// flight, ties broken round-robin; a retry goes to another replica when
// there is one.
//
// Failures. Only transport failures (UNAVAILABLE) blame a replica: it leaves
// rotation until its health check passes again (probed every
// `probe_interval`). Any other status from a worker reaches the caller as it
// is, unretried. A request is tried again on another replica when its
// replica could not be reached, at most once when its replica dropped the
// connection mid-call (it may have killed the replica: a poison request must
// not kill them all), or when `timeout_send` ran out before the client's
// deadline (Jina's rule); never past the client's deadline, and in all at
// most max(3, replicas) + 1 tries.
//
// Suspects. A request whose replica dropped the connection mid-call is
// retried alone: at most one such request is in flight at a time, the others
// wait their turn. So when a poison request takes a replica down with the
// requests beside it, it alone kills the next one, and the innocent ones are
// not condemned with it. A turn lasts until that try ends, or at most
// `suspect_turn_limit`: a try that long has not taken its replica down the
// way a poison does, and one on a hung replica (liveness checks off, no
// deadline) must not hold the others forever. Drops by the same server of a
// dns:/// name (reached again before its channel noticed it went) count once.
//
// No replica in rotation: a request fails at once with UNAVAILABLE, unless
// `hold_while_restarting` is set and the pool is started, and some replica
// is coming back (out of rotation but not reported down, starting, or down
// with its restart due within the hold): then it waits for one, at most
// that long and never past its deadline, and is sent when one rejoins.
//
// Liveness, as Kubernetes' liveness probe: a separate check of every
// replica each `liveness_period`, bounded by `liveness_timeout`. A replica
// that answers none of `liveness_failure_threshold` such checks in a row
// (it is alive but hung: stopped, deadlocked, stuck in a kernel call)
// leaves rotation and is reported unresponsive (`on_unresponsive`, and
// TakeUnresponsive for the Deployment's supervisor, which kills and
// restarts it). Any answer, NOT_SERVING included, counts as alive.
//
// Restarts: the Deployment's supervisor reports a replica's process gone
// (ReplicaDown: out of rotation, not probed), started again on a new
// address (ReplicaRestarted: probed at once, in rotation once its check
// passes; calls in flight on the old address end as they would have) or
// given up (ReplicaGivenUp: the reason joins the message of a request that
// finds no replica).
//
// How a replica is reached is a ReplicaLink, made per address by a factory:
// gRPC (process_single_data and grpc.health.v1) unless the options say
// otherwise, so that the rules above can be tested without sockets.
//
// Thread safety: safe for concurrent use; Start and Stop from one thread.
#ifndef GANTRY_GATEWAY_REPLICA_POOL_H_
#define GANTRY_GATEWAY_REPLICA_POOL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/limits.h"
#include "gateway/upstream.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace gantry::internal {

// What the pool knows of one replica, for Deployment::replicas().
struct ReplicaState {
  // Requests the replica answered (errors from the executor included).
  std::uint64_t requests = 0;
  // Requests forwarded to it and not yet answered, failed or cancelled.
  int in_flight = 0;
  // False while it is out of rotation after a transport failure.
  bool available = true;
};

// One replica process's address. Thread safety: safe for concurrent use.
class ReplicaLink {
 public:
  virtual ~ReplicaLink() = default;
  virtual const std::string& address() const = 0;
  // Sends one try of a request under `context`, which carries its deadline
  // and cancels it (TryCancel); `done` runs exactly once, possibly before
  // Send returns, with the worker's status, reply and is-error trailer.
  virtual void Send(grpc::ClientContext* context, const grpc::ByteBuffer& request,
                    ForwardDone done) = 0;
  // One health check bounded by `timeout`: true when it answered SERVING.
  // `status` is the check's gRPC status (OK when it answered at all).
  virtual bool Check(std::chrono::milliseconds timeout, grpc::Status* status) = 0;

  // Tries the pool sent on this link that are not done yet.
  int tries_in_flight() const { return tries_in_flight_.load(); }

 private:
  friend class ReplicaPool;
  std::atomic<int> tries_in_flight_{0};
};
using ReplicaLinkFactory = std::function<std::shared_ptr<ReplicaLink>(const std::string& address)>;

// process_single_data and grpc.health.v1 over a plaintext channel capped at
// `max_message_bytes`.
ReplicaLinkFactory GrpcReplicaLinks(std::int64_t max_message_bytes);

struct UnresponsiveReplica {
  std::size_t index = 0;
  std::string address;
  bool operator==(const UnresponsiveReplica&) const = default;
};

struct ReplicaPoolOptions {
  // For messages: "deployment '<name>': ...".
  std::string deployment_name = "executor";
  // One "host:port" per replica, and their runtime names for messages
  // (missing names become "<deployment_name>/rep-<i>"). An empty address:
  // the replica is still starting, out of rotation and unprobed until
  // ReplicaRestarted gives its address.
  std::vector<std::string> replica_addresses;
  std::vector<std::string> replica_names;
  // Deadline for one try; zero means none (Jina's timeout_send).
  std::chrono::milliseconds timeout_send{0};
  // How often replicas are health-checked, and how long one check may take.
  // A replica out of rotation is back within about one interval of
  // recovering.
  std::chrono::milliseconds probe_interval{250};
  std::chrono::milliseconds probe_timeout{500};
  // Makes each replica's link; GrpcReplicaLinks(kDefaultMaxMessageBytes)
  // when unset.
  ReplicaLinkFactory links;
  // Runs whenever a replica enters or leaves rotation (the gateway updates
  // its health). Not after Stop.
  std::function<void()> on_rotation_change;
  // Liveness (above); a threshold of 0 turns it off.
  std::chrono::milliseconds liveness_period{1000};
  std::chrono::milliseconds liveness_timeout{1000};
  int liveness_failure_threshold = 3;
  // Runs once each time a replica is found unresponsive, on the liveness
  // thread, with its index. Not after Stop.
  std::function<void(std::size_t)> on_unresponsive;
  // How long a request waits for a replica coming back when none is in
  // rotation (above); zero: it fails at once.
  std::chrono::milliseconds hold_while_restarting{0};
  // How long one suspect's try holds the suspects' turn at most (above).
  std::chrono::milliseconds suspect_turn_limit{10000};
};

class ReplicaPool final : public Upstream {
 public:
  explicit ReplicaPool(ReplicaPoolOptions options);
  ~ReplicaPool() override;
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  // Starts the probes (and the holding of requests, above). Without it
  // replicas are only probed by ProbeOnce.
  void Start();
  // Stops the probes and the rotation callback; requests still waiting for
  // a replica or their turn as suspects fail with UNAVAILABLE. Idempotent.
  void Stop();

  std::shared_ptr<ForwardHandle> Forward(const grpc::ByteBuffer& request,
                                         std::chrono::system_clock::time_point deadline,
                                         ForwardDone done) override;
  bool Available() const override;
  // Why no replica is in rotation: each one given up, with its reason.
  std::string WhyUnavailable() const override;

  // Health-checks every replica not reported down, once: one out of
  // rotation rejoins when it answers SERVING; one in rotation leaves when it
  // cannot be reached or answers NOT_SERVING (a slow answer from a busy
  // replica is not a failure).
  void ProbeOnce();
  // One liveness check of every replica not reported down (see above).
  void CheckLivenessOnce();
  // Replicas found unresponsive since the last call, each once, with the
  // address they were found unresponsive on (a successor on a new address
  // is not to be killed for them).
  std::vector<UnresponsiveReplica> TakeUnresponsive();

  std::size_t size() const { return replicas_.size(); }
  std::vector<std::string> names() const;
  // One entry per replica, in the order of `replica_addresses`.
  std::vector<ReplicaState> States() const;

  // From the Deployment's supervisor; `index` follows `replica_addresses`.
  // `restart_in`: when it will be started again (none: not known).
  void ReplicaDown(std::size_t index, const std::string& why,
                   std::optional<std::chrono::milliseconds> restart_in = std::nullopt);
  // Its process is being started again.
  void ReplicaStarting(std::size_t index);
  void ReplicaRestarted(std::size_t index, const std::string& address);
  void ReplicaGivenUp(std::size_t index, const std::string& why);
  // A rolling restart's new replica, ready, at `address`: in rotation at
  // once (it answered its start-up, so no probe is awaited). Returns the old
  // link: tries already sent on it finish there, and no new one is, so once
  // its tries_in_flight() is 0 the old replica may stop.
  std::shared_ptr<const ReplicaLink> ReplicaReplaced(std::size_t index, const std::string& address);

  // Defined in replica_pool.cc.
  struct Replica;
  class Call;

 private:
  void Attempt(std::shared_ptr<Call> call);
  void OnAttemptDone(std::shared_ptr<Call> call, ForwardResult result);
  // Another try of `call`: at once, or in the suspects' queue when a
  // replica dropped it before.
  void Retry(std::shared_ptr<Call> call);
  // Ends `call` with `status`, passing on its suspect's turn if it had it.
  void Fail(const std::shared_ptr<Call>& call, grpc::Status status);
  // Starts queued suspects while none holds the turn.
  void RunSuspects();
  // Ends turn number `turn` if it is still the current one.
  void FreeSuspectTurn(std::uint64_t turn);
  // Keeps `call`, which found no replica, until one rejoins (see above);
  // false when it is not to wait.
  bool Hold(const std::shared_ptr<Call>& call);
  bool AnyReplicaComingBack(std::chrono::system_clock::time_point now) const;
  // On the prober thread: tries held requests again, ends the ones
  // cancelled or out of time among held and queued ones.
  void ServeWaiting();
  void WakeProber();
  // An available replica other than the one the previous try of `call`
  // failed on, that one when it is the only one left, or nullopt.
  std::optional<std::size_t> Pick(const Call& call);
  // Takes `replica` out of rotation if `on` is still its link (a late
  // failure of a replaced process must not take its successor out).
  void MarkOut(Replica& replica, const ReplicaLink& on, const std::string& why);
  void RotationChanged();
  std::string NoReplicaMessage() const;
  void ProbeLoop();
  void LivenessLoop();

  ReplicaPoolOptions options_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::atomic<std::size_t> round_robin_{0};
  int max_attempts_ = 1;

  std::mutex listener_mutex_;
  bool stopped_ = false;  // guarded by listener_mutex_

  std::mutex probe_mutex_;
  std::condition_variable probe_wake_;
  bool stop_probing_ = false;  // guarded by probe_mutex_
  // A replica was restarted: probe now rather than at the next interval.
  bool probe_now_ = false;  // guarded by probe_mutex_
  // A replica rejoined or a suspect's turn is free: serve the waiting now.
  bool serve_waiting_now_ = false;  // guarded by probe_mutex_
  std::thread prober_;
  std::thread liveness_checker_;

  std::mutex waiting_mutex_;
  // Open between Start and Stop when hold_while_restarting is set.
  bool holding_ = false;                        // guarded by waiting_mutex_
  std::vector<std::shared_ptr<Call>> held_;     // guarded by waiting_mutex_
  std::deque<std::shared_ptr<Call>> suspects_;  // guarded by waiting_mutex_
  bool suspect_in_flight_ = false;              // guarded by waiting_mutex_
  // The current (or last) turn's number, and when it runs out.
  std::uint64_t suspect_turn_ = 0;                                 // guarded by waiting_mutex_
  std::chrono::system_clock::time_point suspect_turn_runs_out_{};  // guarded by waiting_mutex_
  bool stopped_waiting_ = false;                                   // guarded by waiting_mutex_

  std::mutex unresponsive_mutex_;
  std::vector<UnresponsiveReplica> unresponsive_;  // guarded by unresponsive_mutex_
};

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_REPLICA_POOL_H_
