#include <gantry/flow.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/cpu_quota.h"
#include "common/grpc_options.h"
#include "common/shutdown_wait.h"
#include "core/deployment_rules.h"
#include "core/flow_graph.h"
#include "core/logging.h"
#include "core/option_table.h"
#include "deployment/placement.h"
#include "deployment/serving_front.h"
#include "gateway/flow_router.h"
#include "gateway/gateway.h"

namespace gantry {
namespace {}  // namespace

class Flow::Impl {
 public:
  explicit Impl(FlowOptions options) : options_(std::move(options)) {}
  ~Impl() { Stop(); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  Status Start();
  void Stop();
  Status RollingRestart(FlowOptions next);
  // Waits for SIGINT, SIGTERM or Stop(); for a Flow with no local step.
  void BlockOnSignals();

  // The gateway and Post's client (safe from any thread).
  internal::ServingFront front_;

  Status status_;
  FlowOptions options_;
  // Filled by Start, in the order of options_.executors (by one thread per
  // step, joined before Start goes on); each Deployment is itself safe for
  // concurrent use, and the vector is not resized after Start.
  // External steps have none (nullptr).
  std::vector<std::unique_ptr<Deployment>> steps_;

 private:
  std::string Where() const { return "flow '" + options_.name + "'"; }
  void ShareCoresBetweenSteps(FlowOptions& options) const;
  // What a step takes from the Flow: host 127.0.0.1 (reached through the
  // Flow's gateway only), the Flow's monitoring and tracing.
  static void GiveStepsTheFlowsSettings(FlowOptions& options);

  // Held for a whole rolling restart; Stop waits for it (the steps' own
  // Stop ends theirs).
  std::mutex rollout_mutex_;

  std::mutex stop_mutex_;
  bool stopped_ = false;  // guarded by stop_mutex_
  // BlockOnSignals waits on it (a Flow of external steps only); Stop wakes it.
  internal::ShutdownWait block_wait_;
};

// The replicas of all local steps share this machine's cores, as one
// Deployment's replicas do (Deployment::Impl::SpawnReplicas): each gets
// cores / (all local replicas) threads unless the user sized the pools for a
// step or for this process. The steps then see the variables as set and
// leave them alone.
void Flow::Impl::ShareCoresBetweenSteps(FlowOptions& options) const {
  int replicas = 0;
  for (const FlowStep& step : options.executors) {
    if (step.external) {
      continue;
    }
    replicas += step.deployment.replicas;
    if (internal::ThreadPoolsSizedByUser(step.deployment.env)) {
      return;
    }
  }
  if (replicas <= 1 || internal::ThreadPoolsSizedByUser({})) {
    return;
  }
  const int cores = internal::AvailableCpuCores();
  const int threads = internal::IntraOpThreadsPerReplica(cores, replicas);
  spdlog::info(
      "{}: {} replicas in all share {} CPU cores: OMP_NUM_THREADS={} each (set "
      "OMP_NUM_THREADS in a step's env to choose)",
      Where(), replicas, cores, threads);
  for (FlowStep& step : options.executors) {
    if (!step.external) {
      for (const char* variable : internal::kThreadCountVariables) {
        step.deployment.env[variable] = std::to_string(threads);
      }
    }
  }
}

void Flow::Impl::GiveStepsTheFlowsSettings(FlowOptions& options) {
  for (FlowStep& step : options.executors) {
    if (step.external) {
      continue;  // reached where it says it is
    }
    // Steps are reached only through the Flow's gateway.
    step.deployment.host = "127.0.0.1";
    step.deployment.monitoring = step.deployment.monitoring || options.monitoring;
    // A Flow that traces has every step send its spans to the same collector.
    if (options.tracing && !step.deployment.tracing) {
      step.deployment.tracing = true;
      step.deployment.traces_exporter_host = options.traces_exporter_host;
      step.deployment.traces_exporter_port = options.traces_exporter_port;
    }
  }
}

Status Flow::Impl::RollingRestart(FlowOptions next) {
  const std::string where = Where() + ": rolling restart";
  std::unique_lock rollout(rollout_mutex_, std::try_to_lock);
  if (!rollout.owns_lock()) {
    return FailedPreconditionError(where + ": one is already running");
  }
  if (!status_.ok()) {
    return FailedPreconditionError(where + ": the flow did not start: " + status_.message());
  }
  for (const internal::OptionRow& row : internal::OptionTable()) {
    if (row.flow.present() && row.flow.get(options_) != row.flow.get(next)) {
      return InvalidArgumentError(where + ": `with." + std::string(row.key) +
                                  "` changed, and a rolling restart replaces the steps' replicas "
                                  "only; stop and start the flow to change it");
    }
  }
  if (next.executors.size() != options_.executors.size()) {
    return InvalidArgumentError(where + ": the flow now has " +
                                std::to_string(next.executors.size()) + " steps instead of " +
                                std::to_string(options_.executors.size()) +
                                "; stop and start the flow to change its steps");
  }
  for (std::size_t i = 0; i < next.executors.size(); ++i) {
    const FlowStep& now = options_.executors[i];
    const FlowStep& then = next.executors[i];
    if (now.deployment.name != then.deployment.name || now.needs != then.needs ||
        now.external != then.external ||
        (now.external && (now.deployment.host != then.deployment.host ||
                          now.deployment.port != then.deployment.port))) {
      return InvalidArgumentError(where + ": executors[" + std::to_string(i) + "] ('" +
                                  then.deployment.name +
                                  "') is not the step it was (name, needs, or where an external "
                                  "step is); stop and start the flow to change its steps");
    }
  }
  GiveStepsTheFlowsSettings(next);
  ShareCoresBetweenSteps(next);
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    if (!steps_[i]) {
      continue;  // external
    }
    if (Status s = steps_[i]->RollingRestart(std::move(next.executors[i].deployment)); !s.ok()) {
      return Status(s.code(), where + ": step '" + options_.executors[i].deployment.name +
                                  "': " + s.message() +
                                  (i == 0 ? "" : "; the steps before it were rolled over"));
    }
  }
  spdlog::info("{}: done, every step rolled over", where);
  return OkStatus();
}

Status Flow::Impl::Start() {
  internal::EnsureProcessLogger("gateway");
  if (options_.executors.empty()) {
    return InvalidArgumentError(Where() + ": `executors` is empty; a Flow needs at least one step");
  }
  for (const Status& s :
       {internal::CheckIntOption(internal::kPortRule, "port", options_.port),
        internal::CheckIntOption(internal::kMaxMessageBytesRule, "max_message_bytes",
                                 options_.max_message_bytes),
        internal::CheckIntOption(internal::kMaxConcurrentRequestsRule, "max_concurrent_requests",
                                 options_.max_concurrent_requests),
        internal::CheckIntOption(internal::kTimeoutDrainRule, "timeout_drain",
                                 options_.timeout_drain.count()),
        internal::CheckIntOption(internal::kTimeoutSendRule, "timeout_send",
                                 options_.timeout_send.count()),
        internal::CheckIntOption(internal::kTracesExporterPortRule, "traces_exporter_port",
                                 options_.traces_exporter_port)}) {
    if (!s.ok()) {
      return InvalidArgumentError(Where() + ": " + s.message());
    }
  }
  if (Status s = internal::CheckTracesExporterHost(options_.traces_exporter_host); !s.ok()) {
    return InvalidArgumentError(Where() + ": traces_exporter_host: " + s.message());
  }
  std::vector<std::string> names;
  std::vector<std::vector<std::string>> needs;
  for (const FlowStep& step : options_.executors) {
    names.push_back(step.deployment.name);
    needs.push_back(step.needs);
  }
  GiveStepsTheFlowsSettings(options_);
  internal::FlowGraphResult graph = internal::ResolveFlowGraph(names, needs);
  if (graph.error) {
    return InvalidArgumentError(Where() + ": " + graph.error->Path() + ": " + graph.error->message);
  }
  // Every step's options are checked before any process starts.
  for (std::size_t i = 0; i < options_.executors.size(); ++i) {
    const FlowStep& step = options_.executors[i];
    if (step.external) {
      if (step.deployment.host.empty() || step.deployment.port <= 0 ||
          step.deployment.port > 65535) {
        return InvalidArgumentError(
            Where() + ": executors[" + std::to_string(i) + "]: external step '" + names[i] +
            "' needs a host and a port (1 to 65535), got '" + step.deployment.host + "' and " +
            std::to_string(step.deployment.port));
      }
      continue;
    }
    if (Status s = internal::ValidateDeploymentOptions(step.deployment); !s.ok()) {
      return InvalidArgumentError(Where() + ": executors[" + std::to_string(i) +
                                  "]: " + s.message());
    }
  }
  // A fixed port is taken once, by the Flow's gateway or one step: a second
  // server could not listen on it, after every step had loaded its model.
  {
    std::vector<std::pair<std::string, int>> ports = {
        {"port", options_.port},
        {"http_port", options_.http_port},
        {"port_monitoring", options_.monitoring ? options_.port_monitoring : 0}};
    for (std::size_t i = 0; i < options_.executors.size(); ++i) {
      const DeploymentOptions& step = options_.executors[i].deployment;
      if (options_.executors[i].external) {
        continue;
      }
      const std::string at = "executors[" + std::to_string(i) + "].";
      ports.emplace_back(at + "port", step.port);
      ports.emplace_back(at + "http_port", step.http_port);
      ports.emplace_back(at + "port_monitoring", step.monitoring ? step.port_monitoring : 0);
    }
    for (std::size_t a = 0; a < ports.size(); ++a) {
      for (std::size_t b = a + 1; b < ports.size(); ++b) {
        if (ports[a].second > 0 && ports[a].second == ports[b].second) {
          return InvalidArgumentError(Where() + ": " + ports[a].first + " and " + ports[b].first +
                                      " are both " + std::to_string(ports[a].second) +
                                      "; each server needs a port of its own");
        }
      }
    }
  }
  ShareCoresBetweenSteps(options_);
  // The steps start at once (each loads its model in its own workers), as
  // Jina's do; Stop() stops those that started if another one failed.
  steps_.resize(options_.executors.size());
  {
    std::vector<std::jthread> starting;
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      if (options_.executors[i].external) {
        continue;
      }
      starting.emplace_back([this, i] {
        steps_[i] = std::make_unique<Deployment>(options_.executors[i].deployment);
      });
    }
  }
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    if (steps_[i] && !steps_[i]->ok()) {
      return steps_[i]->status().WithPrefix(Where() + ": step '" + names[i] + "'");
    }
  }

  // The router takes the steps in topological order.
  std::vector<std::size_t> position(names.size());
  for (std::size_t k = 0; k < graph.graph->order.size(); ++k) {
    position[graph.graph->order[k]] = k;
  }
  std::vector<internal::FlowRouteStep> route;
  for (std::size_t i : graph.graph->order) {
    const DeploymentOptions& d = options_.executors[i].deployment;
    // An external step's name may stand for several servers: "dns:///"
    // gives its channel every address (and round_robin, see MakeChannel).
    std::string address = options_.executors[i].external
                              ? "dns:///" + internal::JoinHostPort(d.host, d.port)
                              : "127.0.0.1:" + std::to_string(steps_[i]->port());
    internal::FlowRouteStep step{names[i], std::move(address), {}};
    for (std::size_t need : graph.graph->needs[i]) {
      step.needs.push_back(position[need]);
    }
    route.push_back(std::move(step));
  }
  internal::GatewayOptions gateway_options =
      internal::GatewayOptionsOf(internal::DeploymentOptionsOfFlow(options_));
  // The Flow is ready while every step has a replica in rotation (the
  // gateway's prober asks every 250 ms; it stops before the steps do).
  gateway_options.upstream =
      std::make_shared<internal::FlowRouter>(std::move(route), options_.max_message_bytes, [this] {
        // External steps count through their channels' state (the router's
        // own check); the local ones through their Deployments.
        for (const auto& step : steps_) {
          if (!step) {
            continue;
          }
          const std::vector<ReplicaInfo> replicas = step->replicas();
          if (std::none_of(replicas.begin(), replicas.end(),
                           [](const ReplicaInfo& r) { return r.available && !r.failed; })) {
            return false;
          }
        }
        return true;
      });
  GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<internal::Gateway> gateway,
                          internal::Gateway::Start(std::move(gateway_options)));
  front_.Open(std::move(gateway), options_.host, options_.max_message_bytes,
              /*in_process=*/false, options_.api_key);
  std::string steps;
  for (std::size_t i = 0; i < names.size(); ++i) {
    steps += "\n|   " + names[i] + " <- ";
    if (graph.graph->needs[i].empty()) {
      steps += internal::kFlowGatewayName;
    }
    for (std::size_t k = 0; k < graph.graph->needs[i].size(); ++k) {
      steps += (k == 0 ? "" : ", ") + names[graph.graph->needs[i][k]];
    }
    if (options_.executors[i].external) {
      const DeploymentOptions& d = options_.executors[i].deployment;
      steps += " (external: " + internal::JoinHostPort(d.host, d.port) + ")";
    }
  }
  std::string line(48, '-');
  spdlog::info("\n+{}\n| Flow '{}' is ready to serve!\n|   protocol: GRPC\n|   address:  {}{}\n+{}",
               line, options_.name, internal::JoinHostPort(options_.host, front_.port()), steps,
               line);
  return OkStatus();
}

void Flow::Impl::Stop() {
  std::lock_guard lock(stop_mutex_);
  if (stopped_) {
    return;
  }
  stopped_ = true;
  block_wait_.Wake();
  std::shared_ptr<internal::Gateway> gateway = front_.StopClient();
  if (gateway) {
    // New requests are refused; those in flight finish, up to timeout_drain.
    gateway->Shutdown(options_.timeout_drain);
  }
  // Then the steps, at once: each drains its own workers; the first one's
  // Stop also ends a Block() waiting on it.
  {
    std::vector<std::jthread> stopping;
    for (auto& step : steps_) {
      if (step) {
        stopping.emplace_back([&step] { step->Stop(); });
      }
    }
  }
  // A rolling restart ends once its step is stopped.
  { const std::lock_guard rollout(rollout_mutex_); }
  front_.Release();
}

Flow::Flow(FlowOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->status_ = impl_->Start();
  if (!impl_->status_.ok()) {
    spdlog::error("{}", impl_->status_.message());
    impl_->Stop();
  }
}

Flow::~Flow() = default;

const Status& Flow::status() const { return impl_->status_; }

int Flow::port() const { return impl_->front_.port(); }

int Flow::monitoring_port() const { return impl_->front_.monitoring_port(); }

int Flow::http_port() const { return impl_->front_.http_port(); }

std::string Flow::address() const { return impl_->front_.address(); }

std::vector<std::string> Flow::steps() const {
  std::vector<std::string> names;
  for (const FlowStep& step : impl_->options_.executors) {
    names.push_back(step.deployment.name);
  }
  return names;
}

std::vector<ReplicaInfo> Flow::replicas(std::string_view step) const {
  for (std::size_t i = 0; i < impl_->steps_.size(); ++i) {
    if (impl_->options_.executors[i].deployment.name == step && impl_->steps_[i]) {
      return impl_->steps_[i]->replicas();
    }
  }
  return {};
}

StatusOr<DocList> Flow::Post(std::string_view endpoint, const DocList& docs,
                             const PostOptions& options) {
  if (!impl_->status_.ok()) {
    return impl_->status_;
  }
  return impl_->front_.Post("flow '" + impl_->options_.name + "'", endpoint, docs, options);
}

void Flow::Impl::BlockOnSignals() {
  if (!block_wait_.ok()) {
    return;
  }
  {
    std::lock_guard lock(stop_mutex_);
    if (stopped_) {
      return;
    }
  }
  block_wait_.Wait();
}

// The first local step's Deployment waits for the signal (Stop() stops it
// too); a Flow of external steps only waits on its own.
void Flow::Block() {
  if (!impl_->status_.ok()) {
    return;
  }
  auto local = std::find_if(impl_->steps_.begin(), impl_->steps_.end(),
                            [](const auto& step) { return step != nullptr; });
  if (local != impl_->steps_.end()) {
    (*local)->Block();
  } else {
    impl_->BlockOnSignals();
  }
  spdlog::info("shutting down flow '{}'", impl_->options_.name);
}

void Flow::Stop() { impl_->Stop(); }

Status Flow::RollingRestart(FlowOptions options) {
  return impl_->RollingRestart(std::move(options));
}

}  // namespace gantry
