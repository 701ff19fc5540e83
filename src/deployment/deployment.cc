#include <fcntl.h>
#include <gantry/config.h>
#include <gantry/deployment.h>
#include <gantry/tensor_signature.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/cpu_quota.h"
#include "common/grpc_options.h"
#include "common/shutdown_wait.h"
#include "common/tls.h"
#include "core/deployment_rules.h"
#include "core/logging.h"
#include "core/option_table.h"
#include "core/registry.h"
#include "core/worker_mode.h"
#include "deployment/child_process.h"
#include "deployment/placement.h"
#include "deployment/replica_launcher.h"
#include "deployment/restart_policy.h"
#include "deployment/serving_front.h"
#include "deployment/worker_program.h"
#include "gateway/gateway.h"
#include "worker/worker_spec.h"

namespace gantry {
namespace {

using internal::ChildProcess;
using internal::ChildProcessPtr;

// A pipe whose ends close themselves.
struct Pipe {
  int read_fd = -1;
  int write_fd = -1;
  Pipe() {
    int fds[2];
    // O_CLOEXEC: no other child we spawn may inherit these ends.
    if (::pipe2(fds, O_CLOEXEC) == 0) {
      read_fd = fds[0];
      write_fd = fds[1];
    }
  }
  ~Pipe() {
    CloseRead();
    CloseWrite();
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  bool ok() const { return read_fd >= 0; }
  void CloseRead() {
    if (read_fd >= 0) {
      ::close(read_fd);
      read_fd = -1;
    }
  }
  void CloseWrite() {
    if (write_fd >= 0) {
      ::close(write_fd);
      write_fd = -1;
    }
  }
};

using SteadyClock = std::chrono::steady_clock;

// How often the supervisor looks for replicas that died.
constexpr std::chrono::milliseconds kSuperviseInterval{50};
// How long a worker that reported a failed start (or closed its status pipe)
// may take to exit before it is killed.
constexpr std::chrono::milliseconds kFailedStartExitGrace{2000};
// How long a worker may take to finish its requests and exit once told to
// stop (it gives calls in flight 5 s) before it is killed.
constexpr std::chrono::milliseconds kWorkerStopGrace{8000};
// How long a request waits at the gateway for a replica being restarted
// when none is in rotation (a crash of every replica at once, a poison
// request's two victims), before it fails with UNAVAILABLE; never past its
// deadline. Long enough for a worker to load a model again.
constexpr std::chrono::milliseconds kHoldWhileRestarting{30000};

struct Replica {
  // Where the supervisor is with this replica.
  enum class State {
    kStarting,  // spawned; its status pipe is open until it reports
    kServing,   // reported ready; watched for its exit
    kEnding,    // failed to start; waiting for its process to end
    kWaiting,   // its process ended; started again at restart_at
    kFailed,    // given up after max_init_failures failed starts in a row
  };

  Replica(std::chrono::milliseconds backoff_initial, std::chrono::milliseconds backoff_max,
          int max_init_failures)
      : policy(backoff_initial, backoff_max, max_init_failures) {}

  std::string name;
  std::string device;
  std::string cuda_visible_devices;
  std::string placement;
  internal::WorkerSpec spec;
  // What starts and cleans up its worker (a process or a container); a
  // rolling restart may bring replicas of another image.
  std::shared_ptr<internal::ReplicaLauncher> launcher;
  // How long each start may take (timeout_ready).
  std::chrono::milliseconds timeout_ready{0};
  // The worker's environment: the options' env plus its placement.
  std::map<std::string, std::string> env;
  ChildProcessPtr process;
  // The parent keeps the write end; the worker exits when it closes.
  std::unique_ptr<Pipe> lifeline;
  // The start-up status pipe (read end only), until the worker reports.
  std::unique_ptr<Pipe> status;
  std::string status_text;
  int port = 0;
  int monitoring_port = -1;
  // The current container's name (uses: docker://IMAGE), else empty.
  std::string container;
  // Times its process was spawned, for container names.
  int starts = 0;

  State state = State::kStarting;
  internal::RestartPolicy policy;
  SteadyClock::time_point started_at{};
  // kStarting: timeout_ready; kEnding: when to SIGKILL; kWaiting: restart.
  SteadyClock::time_point deadline{};
  int restarts = 0;
  // Why the last start failed, or how the process last ended.
  std::string error;
  // Set when the supervisor killed a serving replica that stopped answering
  // its liveness checks, until its process is reaped.
  bool killed_unresponsive = false;
};

// Where the gateway reaches a replica: workers bind 127.0.0.1.
std::string AddressOf(const Replica& replica) {
  return "127.0.0.1:" + std::to_string(replica.port);
}

// A worker's start-up report is complete at EOF, or at the end of a READY
// line: a container replica's status pipe stays open in `docker run`.
bool ReadyLineComplete(const std::string& text) {
  return text.starts_with("READY ") && text.find('\n') != std::string::npos;
}

// "READY <port>" or "READY <port> <metrics port>" (worker_main.cc).
void ParseReady(const std::string& text, Replica& replica) {
  const char* cursor = text.c_str() + 6;
  char* end = nullptr;
  replica.port = static_cast<int>(std::strtol(cursor, &end, 10));
  replica.monitoring_port = -1;
  if (end != nullptr && *end == ' ') {
    replica.monitoring_port = static_cast<int>(std::strtol(end + 1, nullptr, 10));
  }
}

// Reads what the worker has written on its status pipe (readable, or the
// read would not block). True once it has said all it will say: a whole
// READY line, or EOF (an ERROR line, or nothing), or a read error; false
// while more may come.
bool ReadStatusPipe(Replica& replica) {
  char buffer[4096];
  const ssize_t got = ::read(replica.status->read_fd, buffer, sizeof(buffer));
  if (got > 0) {
    replica.status_text.append(buffer, static_cast<std::size_t>(got));
    return ReadyLineComplete(replica.status_text);
  }
  return !(got < 0 && errno == EINTR);
}

// The worker said READY: it serves on the port it named.
void MarkServing(Replica& replica, SteadyClock::time_point now) {
  replica.status.reset();
  ParseReady(replica.status_text, replica);
  replica.state = Replica::State::kServing;
  replica.policy.OnReady(now);
}

}  // namespace

class Deployment::Impl {
 public:
  explicit Impl(DeploymentOptions options) : options_(std::move(options)) {}
  ~Impl() { Stop(); }

  Status Start();
  void Stop();
  void Block();
  Status RollingRestart(DeploymentOptions next);
  std::shared_ptr<internal::Gateway> gateway() const { return front_.gateway(); }

  Status status_;
  DeploymentOptions options_;
  // The vector is filled by Start before the supervisor starts and never
  // resized after; each Replica's fields are guarded by replicas_mutex_
  // from then on (the supervisor changes them, replicas() reads them).
  std::vector<Replica> replicas_;
  mutable std::mutex replicas_mutex_;
  // The gateway and Post's client (safe from any thread).
  internal::ServingFront front_;
  // Held for the whole of Stop, so a second Stop waits for the first.
  std::mutex stop_mutex_;
  bool stopped_ = false;
  internal::ShutdownWait block_wait_;  // Block() waits on it; Stop() wakes it
  internal::PlacementPlan plan_;

 private:
  // Start's checks and completions of `options` (the rules, the launcher's
  // own checks, a `uses` executor file merged in, GPU placement), as a
  // rolling restart makes them of its new options.
  static Status Complete(DeploymentOptions& options,
                         std::shared_ptr<internal::ReplicaLauncher>& launcher,
                         internal::PlacementPlan& plan);
  Status Validate();
  // Each replica's even share of the machine's cores, unless the user sized
  // the thread pools or there is one replica.
  static std::optional<int> ThreadsPerReplica(const DeploymentOptions& options);
  // Replica `i` of `options`, configured, not started.
  static Replica MakeReplica(int i, const DeploymentOptions& options,
                             const internal::PlacementPlan& plan,
                             std::optional<int> threads_per_replica,
                             const std::shared_ptr<internal::ReplicaLauncher>& launcher);
  Status SpawnReplicas();
  // Spawns `replica`'s worker with its spec, env and fresh pipes.
  Status SpawnReplica(Replica& replica);
  Status AwaitReplicas();
  // A rolling restart's new replica: waits until it reports ready (OK) or
  // fails to start, is past its timeout_ready or the deployment stops.
  Status AwaitReady(Replica& replica);
  // Stops a replica taken out of replicas_: a serving one with SIGTERM (it
  // finishes the calls it holds; SIGKILL after kWorkerStopGrace), any other
  // with SIGKILL; its container removed.
  void Retire(Replica& replica);

  // The supervisor thread: restarts replicas whose process died (see
  // gantry/deployment.h). Runs from the end of Start until Stop.
  void Supervise();
  // One look at replica `index` (under replicas_mutex_); `readable`: its
  // status pipe has something to read.
  void Step(std::size_t index, bool readable, internal::Gateway& gateway);
  // A replica failed its liveness checks: SIGKILL, so that the next Step
  // sees it ended and starts it again (under replicas_mutex_).
  void KillUnresponsive(const internal::UnresponsiveReplica& found);
  // Its process ended (reaped).
  void OnExited(std::size_t index, internal::Gateway& gateway);
  void StopSupervisor();
  // Rewrites options_.monitoring_targets_file, if set, from the replicas'
  // current ports (under replicas_mutex_). A write that fails is logged:
  // metrics are not worth stopping the deployment for.
  void WriteMonitoringTargets(int gateway_monitoring_port) const;

  // Chosen by Validate: processes, or containers for uses: docker://IMAGE.
  std::shared_ptr<internal::ReplicaLauncher> launcher_;
  // Held for the whole of a rolling restart (one at a time; Stop waits for
  // it after asking it to end with abort_rollout_).
  std::mutex rollout_mutex_;
  std::atomic<bool> abort_rollout_{false};
  std::thread supervisor_;
  // Written by StopSupervisor to wake the supervisor's poll.
  Pipe supervisor_wake_;
  std::atomic<bool> stop_supervising_{false};
};

namespace {

// The signature KServe v2 reports for this Deployment: the executor's
// declared `inputs` and `outputs` (TorchModel's), unless it reads text
// (`tokenizer`), which the text-embedding signature describes. A
// declaration that does not parse is left to the executor to refuse.
std::optional<TensorSignature> KServeSignatureOf(const Value::Dict& with) {
  if (!with.contains("inputs") || !with.contains("outputs") || with.contains("tokenizer")) {
    return std::nullopt;
  }
  StatusOr<TensorSignature> signature = ParseTensorSignature(with);
  if (!signature.ok() || signature->inputs.empty() || signature->outputs.empty()) {
    return std::nullopt;
  }
  return std::move(signature).value();
}

}  // namespace

Status Deployment::Impl::Validate() { return Complete(options_, launcher_, plan_); }

Status Deployment::Impl::Complete(DeploymentOptions& options,
                                  std::shared_ptr<internal::ReplicaLauncher>& launcher,
                                  internal::PlacementPlan& plan) {
  // The rules live in core/deployment_rules.h, shared with the YAML loader.
  GANTRY_RETURN_IF_ERROR(internal::ValidateDeploymentOptions(options));
  launcher = internal::ReplicaLauncher::For(options);
  GANTRY_RETURN_IF_ERROR(launcher->CheckOptions(options));
  if (internal::KindOfUses(options.uses) == internal::UsesKind::kExecutorFile) {
    GANTRY_ASSIGN_OR_RETURN(ExecutorConfig config, LoadExecutorConfig(options.uses));
    internal::MergeExecutorConfig(std::move(config), options);
  }
  // After the merge: the file's dynamic_batching and with.device count too.
  GANTRY_RETURN_IF_ERROR(internal::ValidateExecutorOptions(options));

  // GPUs are planned for every replica before anything is spawned, so a
  // request the machine cannot meet fails here with the visible GPUs named.
  internal::PlacementRequest request;
  request.deployment = options.name;
  request.replicas = options.replicas;
  request.gpus = options.gpus;
  if (auto it = options.uses_with.find("device"); it != options.uses_with.end()) {
    request.explicit_device = *it->second.AsText();
  }
  if (auto it = options.env.find("CUDA_VISIBLE_DEVICES"); it != options.env.end()) {
    request.env_cuda_visible_devices = it->second;
  }
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES"); cvd != nullptr) {
    request.process_cuda_visible_devices = std::string(cvd);
  }
  internal::GpuInventory inventory = internal::DiscoverGpus();
  spdlog::debug("deployment '{}': GPUs: {}", options.name,
                internal::DescribeVisibleGpus(inventory));
  GANTRY_ASSIGN_OR_RETURN(plan, internal::PlanPlacement(request, inventory));
  for (const std::string& warning : plan.warnings) {
    spdlog::warn("{}", warning);
  }
  return OkStatus();
}

Status Deployment::Impl::Start() {
  // A worker child whose main() skipped gantry::Init must not spawn (see
  // core/worker_mode.h): it reports to its parent and exits here.
  internal::ExitIfUninitialisedWorker();
  internal::EnsureProcessLogger("gateway", options_.log_format);
  GANTRY_RETURN_IF_ERROR(Validate());
  // Bad TLS files fail the start before any worker is spawned.
  if (options_.tls.enabled()) {
    GANTRY_RETURN_IF_ERROR(internal::LoadServerTls(options_.tls)
                               .status()
                               .WithPrefix("deployment '" + options_.name + "'"));
  }

  GANTRY_RETURN_IF_ERROR(launcher_->Prepare(options_));
  GANTRY_RETURN_IF_ERROR(SpawnReplicas());
  GANTRY_RETURN_IF_ERROR(AwaitReplicas());

  internal::GatewayOptions gateway_options = internal::GatewayOptionsOf(options_);
  gateway_options.signature = KServeSignatureOf(options_.uses_with);
  gateway_options.hold_while_restarting = kHoldWhileRestarting;
  for (const Replica& replica : replicas_) {
    // Empty: still starting (min_ready); the pool keeps it out of rotation
    // until the supervisor reports its address.
    gateway_options.replica_addresses.push_back(
        replica.state == Replica::State::kServing ? AddressOf(replica) : std::string());
    gateway_options.replica_names.push_back(replica.name);
  }
  GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<internal::Gateway> gateway,
                          internal::Gateway::Start(std::move(gateway_options)));
  // Over TLS, Post goes in-process: no CA or client certificate to hold.
  front_.Open(std::move(gateway), options_.host, options_.max_message_bytes, options_.tls.enabled(),
              options_.api_key);
  if (!supervisor_wake_.ok()) {
    return InternalError(std::string("cannot create a pipe: ") + std::strerror(errno));
  }
  if (front_.monitoring_port() >= 0) {
    spdlog::info("metrics on {}/metrics",
                 internal::JoinHostPort(options_.host, front_.monitoring_port()));
  }
  {
    std::lock_guard replicas_lock(replicas_mutex_);
    WriteMonitoringTargets(front_.monitoring_port());
  }
  supervisor_ = std::thread([this] { Supervise(); });

  std::string address = internal::JoinHostPort(options_.host, front_.port());
  std::string line(48, '-');
  spdlog::info(
      "\n+{}\n| Deployment '{}' is ready to serve!\n|   protocol: GRPC\n|   address:  "
      "{}\n|   replicas: {} x {}\n+{}",
      line, options_.name, address, options_.replicas, options_.uses, line);
  return OkStatus();
}

std::optional<int> Deployment::Impl::ThreadsPerReplica(const DeploymentOptions& options) {
  if (internal::ThreadPoolsSizedByUser(options.env) || options.replicas <= 1) {
    return std::nullopt;
  }
  return internal::IntraOpThreadsPerReplica(internal::AvailableCpuCores(), options.replicas);
}

Replica Deployment::Impl::MakeReplica(int i, const DeploymentOptions& options,
                                      const internal::PlacementPlan& plan,
                                      std::optional<int> threads_per_replica,
                                      const std::shared_ptr<internal::ReplicaLauncher>& launcher) {
  Replica replica(options.restart_backoff_initial, options.restart_backoff_max,
                  options.max_init_failures);
  replica.name = options.name + "/rep-" + std::to_string(i);
  replica.launcher = launcher;
  replica.timeout_ready = options.timeout_ready;
  internal::WorkerSpec& spec = replica.spec;
  launcher->ConfigureWorker(options, spec);
  spec.with = options.uses_with;
  spec.metas = options.uses_metas;
  auto metas_name = spec.metas.find("name");
  spec.executor_name = metas_name != spec.metas.end() && metas_name->second.AsText()
                           ? *metas_name->second.AsText()
                           : options.name;
  spec.runtime_name = replica.name;
  spec.replica_id = i;
  spec.replicas = options.replicas;
  const internal::ReplicaPlacement& placement = plan.replicas[static_cast<std::size_t>(i)];
  // The planner already took an explicit uses_with.device into account.
  spec.device = placement.device;
  spec.dynamic_batching = options.uses_dynamic_batching;
  replica.device = spec.device;
  replica.placement = placement.description;
  spec.log_level = options.log_level;
  // Unset: as this process logs, so one program's lines share a format.
  spec.log_format = options.log_format.empty() ? internal::CurrentLogFormat() : options.log_format;
  spec.max_message_bytes = options.max_message_bytes;
  spec.monitoring_port = options.monitoring ? 0 : -1;
  spec.tracing = options.tracing;
  spec.traces_exporter_host = options.traces_exporter_host;
  spec.traces_exporter_port = options.traces_exporter_port;
  replica.env = options.env;
  if (threads_per_replica) {
    for (const char* variable : internal::kThreadCountVariables) {
      replica.env[variable] = std::to_string(*threads_per_replica);
    }
  }
  launcher->Environment(placement, replica.env);
  replica.cuda_visible_devices = placement.cuda_visible_devices.value_or("");
  return replica;
}

Status Deployment::Impl::SpawnReplicas() {
  replicas_.reserve(static_cast<std::size_t>(options_.replicas));
  // Replicas share this machine's cores. Unless the user sized the thread
  // pools (YAML env or this process's environment), each gets an even share;
  // one replica keeps its libraries' default (libtorch: one per physical core).
  const std::optional<int> threads_per_replica = ThreadsPerReplica(options_);
  if (threads_per_replica) {
    spdlog::info(
        "deployment '{}': {} replicas share {} CPU cores: OMP_NUM_THREADS={} each (set "
        "OMP_NUM_THREADS in env to choose)",
        options_.name, options_.replicas, internal::AvailableCpuCores(), *threads_per_replica);
  }
  for (int i = 0; i < options_.replicas; ++i) {
    Replica& replica =
        replicas_.emplace_back(MakeReplica(i, options_, plan_, threads_per_replica, launcher_));
    GANTRY_RETURN_IF_ERROR(SpawnReplica(replica));
    if (!replica.cuda_visible_devices.empty()) {
      spdlog::info("{} placed on {}: CUDA_VISIBLE_DEVICES={} device={}", replica.name,
                   replica.placement, replica.cuda_visible_devices, replica.device);
    }
  }
  return OkStatus();
}

Status Deployment::Impl::SpawnReplica(Replica& replica) {
  auto status_pipe = std::make_unique<Pipe>();
  auto lifeline = std::make_unique<Pipe>();
  if (!status_pipe->ok() || !lifeline->ok()) {
    return InternalError(std::string("cannot create pipes: ") + std::strerror(errno));
  }
  ++replica.starts;
  internal::ReplicaLaunch launch;
  launch.deployment = options_.name;
  launch.replica_name = replica.name;
  launch.replica_index = replica.spec.replica_id;
  launch.start = replica.starts;
  launch.spec = &replica.spec;
  launch.env = replica.env;
  launch.gpus = replica.cuda_visible_devices;
  launch.status_fd = status_pipe->write_fd;
  launch.lifeline_fd = lifeline->read_fd;
  internal::LaunchCommand command = replica.launcher->Command(launch);
  replica.container = command.container;
  auto process = ChildProcess::Spawn(command.child);
  if (!process.ok()) {
    return process.status().WithPrefix("replica " + replica.name);
  }
  replica.process = std::move(process).value();
  // Our copies of the child's ends must close, or EOF never comes.
  status_pipe->CloseWrite();
  lifeline->CloseRead();
  replica.status = std::move(status_pipe);
  replica.lifeline = std::move(lifeline);
  replica.status_text.clear();
  replica.started_at = SteadyClock::now();
  replica.deadline = replica.started_at + replica.timeout_ready;
  replica.state = Replica::State::kStarting;
  spdlog::debug("spawned {} pid={} device={} placement={}", replica.name, replica.process->pid(),
                replica.device, replica.placement);
  return OkStatus();
}

// A first start that crashes or hangs is retried as a later start is (with
// backoff, up to max_init_failures in a row): a GPU still being reset or a
// model file still being written passes on the next try. A constructor
// error (the worker's ERROR line: a bad weights path, a bad option) fails
// the Deployment at once, with its message: it would fail every time.
Status Deployment::Impl::AwaitReplicas() {
  struct Pending {
    bool done = false;
    std::optional<SteadyClock::time_point> retry_at;  // set while backing off
  };
  std::vector<Pending> pending(replicas_.size());
  const std::size_t needed =
      options_.min_ready > 0
          ? std::min(static_cast<std::size_t>(options_.min_ready), replicas_.size())
          : replicas_.size();
  std::size_t ready = 0;
  // The start of replica `i` failed with `error` (a DeadlineExceeded or
  // Internal status): try it again later, or give up with that status.
  auto retry = [&](std::size_t i, const Status& error) -> Status {
    Replica& replica = replicas_[i];
    replica.status.reset();
    replica.lifeline.reset();
    const SteadyClock::time_point now = SteadyClock::now();
    std::optional<std::chrono::milliseconds> delay = replica.policy.OnExit(now, true);
    if (!delay) {
      return Status(error.code(), error.message() + " (" +
                                      std::to_string(replica.policy.init_failures()) +
                                      " failed starts in a row, max_init_failures " +
                                      std::to_string(options_.max_init_failures) + ")");
    }
    spdlog::warn("{} failed to start ({} of {} in a row): {}; trying again in {} ms", replica.name,
                 replica.policy.init_failures(), options_.max_init_failures, error.message(),
                 delay->count());
    pending[i].retry_at = now + *delay;
    return OkStatus();
  };
  while (ready < needed) {
    SteadyClock::time_point now = SteadyClock::now();
    SteadyClock::time_point wake = now + std::chrono::seconds(1);
    std::vector<pollfd> fds;
    std::vector<std::size_t> index;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      Replica& replica = replicas_[i];
      if (pending[i].done) {
        continue;
      }
      if (pending[i].retry_at) {
        if (now < *pending[i].retry_at) {
          wake = std::min(wake, *pending[i].retry_at);
          continue;
        }
        pending[i].retry_at.reset();
        ++replica.restarts;
        GANTRY_RETURN_IF_ERROR(SpawnReplica(replica));
      }
      if (now >= replica.deadline) {
        replica.process->Signal(SIGKILL);
        replica.process->WaitFor(kFailedStartExitGrace);
        GANTRY_RETURN_IF_ERROR(
            retry(i, DeadlineExceededError("replica " + replica.name + " was not ready within " +
                                           std::to_string(options_.timeout_ready.count()) +
                                           " ms (timeout_ready)")));
        continue;
      }
      wake = std::min(wake, replica.deadline);
      fds.push_back({replica.status->read_fd, POLLIN, 0});
      index.push_back(i);
    }
    const auto timeout_ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now);
    int n = ::poll(fds.data(), fds.size(),
                   static_cast<int>(std::max<long long>(0, timeout_ms.count()) + 1));
    if (n < 0 && errno != EINTR) {
      return InternalError(std::string("poll: ") + std::strerror(errno));
    }
    for (std::size_t k = 0; n > 0 && k < fds.size(); ++k) {
      if (fds[k].revents == 0) {
        continue;
      }
      Replica& replica = replicas_[index[k]];
      if (!ReadStatusPipe(replica)) {
        continue;
      }
      if (replica.status_text.starts_with("READY ")) {
        MarkServing(replica, SteadyClock::now());
        pending[index[k]].done = true;
        ++ready;
        spdlog::info("{} ready on 127.0.0.1:{} (pid {}, {})", replica.name, replica.port,
                     replica.process->pid(), replica.device);
        continue;
      }
      if (replica.status_text.starts_with("ERROR ")) {
        return FailedPreconditionError("replica " + replica.name +
                                       " failed to start: " + replica.status_text.substr(6));
      }
      replica.process->WaitFor(kFailedStartExitGrace);
      std::string how = replica.process->exit_status()
                            ? ChildProcess::DescribeWaitStatus(*replica.process->exit_status())
                            : "closed its status pipe";
      GANTRY_RETURN_IF_ERROR(
          retry(index[k], InternalError("replica " + replica.name + " (pid " +
                                        std::to_string(replica.process->pid()) + ") " + how +
                                        " before it was ready; see its log above")));
    }
  }
  // min_ready is met: the supervisor takes over the replicas still starting
  // (kStarting, status pipe open) or waiting to be started again.
  std::string starting;
  for (std::size_t i = 0; i < pending.size(); ++i) {
    if (pending[i].done) {
      continue;
    }
    if (pending[i].retry_at) {
      replicas_[i].state = Replica::State::kWaiting;
      replicas_[i].deadline = *pending[i].retry_at;
    }
    starting += (starting.empty() ? "" : ", ") + replicas_[i].name;
  }
  if (!starting.empty()) {
    spdlog::info("deployment '{}': {} of {} replicas ready (min_ready {}); still starting: {}",
                 options_.name, ready, replicas_.size(), needed, starting);
  }
  return OkStatus();
}

void Deployment::Impl::Supervise() {
  while (!stop_supervising_.load()) {
    std::vector<pollfd> fds{{supervisor_wake_.read_fd, POLLIN, 0}};
    std::vector<std::size_t> index;
    {
      std::lock_guard lock(replicas_mutex_);
      for (std::size_t i = 0; i < replicas_.size(); ++i) {
        if (replicas_[i].state == Replica::State::kStarting && replicas_[i].status) {
          fds.push_back({replicas_[i].status->read_fd, POLLIN, 0});
          index.push_back(i);
        }
      }
    }
    int n = ::poll(fds.data(), fds.size(), static_cast<int>(kSuperviseInterval.count()));
    if (n < 0 && errno != EINTR) {
      spdlog::error("deployment '{}': supervisor: poll: {}; replicas are no longer restarted",
                    options_.name, std::strerror(errno));
      return;
    }
    if (stop_supervising_.load()) {
      return;
    }
    // Stop releases the gateway only after this thread has ended.
    std::shared_ptr<internal::Gateway> gateway = this->gateway();
    if (!gateway) {
      return;
    }
    const std::vector<internal::UnresponsiveReplica> unresponsive = gateway->TakeUnresponsive();
    std::lock_guard lock(replicas_mutex_);
    for (const internal::UnresponsiveReplica& found : unresponsive) {
      KillUnresponsive(found);
    }
    for (std::size_t i = 0; i < replicas_.size(); ++i) {
      bool readable = false;
      for (std::size_t k = 0; k < index.size(); ++k) {
        readable = readable || (index[k] == i && fds[k + 1].revents != 0);
      }
      Step(i, readable, *gateway);
    }
  }
}

void Deployment::Impl::Step(std::size_t index, bool readable, internal::Gateway& gateway) {
  Replica& replica = replicas_[index];
  const SteadyClock::time_point now = SteadyClock::now();
  switch (replica.state) {
    case Replica::State::kStarting: {
      const bool ended = readable && ReadStatusPipe(replica);
      if (ended && replica.status_text.starts_with("READY ")) {
        MarkServing(replica, now);
        replica.error.clear();
        auto took = std::chrono::duration_cast<std::chrono::milliseconds>(now - replica.started_at);
        spdlog::info("{}{} ready on 127.0.0.1:{} (pid {}, {}) after {} ms", replica.name,
                     replica.restarts > 0 ? " restarted:" : "", replica.port,
                     replica.process->pid(), replica.device, took.count());
        gateway.ReplicaRestarted(index, AddressOf(replica));
        WriteMonitoringTargets(gateway.monitoring_port());
        return;
      }
      if (ended) {
        replica.status.reset();
        replica.error = replica.status_text.starts_with("ERROR ")
                            ? replica.status_text.substr(6)
                            : "it closed its status pipe before it was ready";
      } else if (now >= replica.deadline) {
        replica.status.reset();
        replica.error = "it was not ready within " + std::to_string(replica.timeout_ready.count()) +
                        " ms (timeout_ready)";
        replica.process->Signal(SIGKILL);
      } else {
        return;
      }
      replica.state = Replica::State::kEnding;
      replica.deadline = now + kFailedStartExitGrace;
      return;
    }
    case Replica::State::kEnding:
      if (!replica.process->Running()) {
        OnExited(index, gateway);
      } else if (now >= replica.deadline) {
        replica.process->Signal(SIGKILL);
      }
      return;
    case Replica::State::kServing:
      if (!replica.process->Running()) {
        OnExited(index, gateway);
      }
      return;
    case Replica::State::kWaiting:
      if (now >= replica.deadline) {
        ++replica.restarts;
        spdlog::info("{}: starting it again (restart {})", replica.name, replica.restarts);
        gateway.ReplicaRestarting(index);
        if (Status spawned = SpawnReplica(replica); !spawned.ok()) {
          // Counts as a failed start; Step sees no process and goes on.
          replica.error = spawned.message();
          replica.status.reset();
          replica.state = Replica::State::kEnding;
          OnExited(index, gateway);
        }
      }
      return;
    case Replica::State::kFailed:
      return;
  }
}

void Deployment::Impl::KillUnresponsive(const internal::UnresponsiveReplica& found) {
  if (found.index >= replicas_.size()) {
    return;
  }
  Replica& replica = replicas_[found.index];
  if (replica.state != Replica::State::kServing || !replica.process->Running() ||
      found.address != AddressOf(replica)) {
    return;  // it ended, or was replaced after it was found unresponsive
  }
  spdlog::error("{}: not answering its liveness checks; killing it (pid {}) to start it again",
                replica.name, replica.process->pid());
  replica.killed_unresponsive = true;
  replica.process->Signal(SIGKILL);
  if (!replica.container.empty()) {
    // Killing `docker run` leaves its container running: remove it too.
    if (Status removed = replica.launcher->CleanUp(replica.container); !removed.ok()) {
      spdlog::warn("{}: {}", replica.name, removed.message());
    }
  }
}

void Deployment::Impl::OnExited(std::size_t index, internal::Gateway& gateway) {
  Replica& replica = replicas_[index];
  const bool during_init = replica.state != Replica::State::kServing;
  const SteadyClock::time_point now = SteadyClock::now();
  std::string how;
  if (replica.process) {
    how = "(pid " + std::to_string(replica.process->pid()) + ") " +
          ChildProcess::DescribeWaitStatus(replica.process->exit_status().value_or(0));
  }
  if (!during_init) {
    replica.error =
        replica.killed_unresponsive
            ? "it stopped answering its liveness checks and was killed: its process " + how
            : "its process " + how;
    replica.killed_unresponsive = false;
  } else if (replica.error.starts_with("it closed its status pipe") && !how.empty()) {
    replica.error += ": its process " + how;
  }
  replica.lifeline.reset();
  std::optional<std::chrono::milliseconds> delay = replica.policy.OnExit(now, during_init);
  if (!during_init) {
    // With when it comes back: requests wait for it only if that is soon.
    gateway.ReplicaDown(index, replica.error, delay);
  }
  if (!delay) {
    replica.state = Replica::State::kFailed;
    replica.error =
        "it failed to start " + std::to_string(replica.policy.init_failures()) +
        " times in a row (max_init_failures); not restarting it. Last error: " + replica.error;
    spdlog::error("deployment '{}': replica {} {}", options_.name, replica.name, replica.error);
    gateway.ReplicaGivenUp(index, replica.error);
    return;
  }
  replica.state = Replica::State::kWaiting;
  replica.deadline = now + *delay;
  if (during_init) {
    spdlog::warn("{} failed to start ({} of {} in a row): {}; trying again in {} ms", replica.name,
                 replica.policy.init_failures(), options_.max_init_failures, replica.error,
                 delay->count());
  } else {
    spdlog::warn("{}: {}; starting it again in {} ms", replica.name, replica.error, delay->count());
  }
}

namespace {

// What a rolling restart may change: what replicas are made of and how they
// are started, each key with how the running options take its new value.
// Every other `with:` key is the gateway's (ports, TLS, caps, models,
// metrics, tracing), or the replicas' number.
struct RollingField {
  std::string_view key;
  void (*take)(DeploymentOptions& running, const DeploymentOptions& next);
};
constexpr RollingField kRollingFields[] = {
    {"uses", [](DeploymentOptions& r, const DeploymentOptions& n) { r.uses = n.uses; }},
    {"uses_with",
     [](DeploymentOptions& r, const DeploymentOptions& n) { r.uses_with = n.uses_with; }},
    {"uses_metas",
     [](DeploymentOptions& r, const DeploymentOptions& n) { r.uses_metas = n.uses_metas; }},
    {"env", [](DeploymentOptions& r, const DeploymentOptions& n) { r.env = n.env; }},
    {"gpus", [](DeploymentOptions& r, const DeploymentOptions& n) { r.gpus = n.gpus; }},
    {"uses_dynamic_batching",
     [](DeploymentOptions& r, const DeploymentOptions& n) {
       r.uses_dynamic_batching = n.uses_dynamic_batching;
     }},
    {"volumes", [](DeploymentOptions& r, const DeploymentOptions& n) { r.volumes = n.volumes; }},
    {"log_level",
     [](DeploymentOptions& r, const DeploymentOptions& n) { r.log_level = n.log_level; }},
    {"timeout_ready",
     [](DeploymentOptions& r, const DeploymentOptions& n) { r.timeout_ready = n.timeout_ready; }},
    {"restart_backoff_initial",
     [](DeploymentOptions& r, const DeploymentOptions& n) {
       r.restart_backoff_initial = n.restart_backoff_initial;
     }},
    {"restart_backoff_max",
     [](DeploymentOptions& r, const DeploymentOptions& n) {
       r.restart_backoff_max = n.restart_backoff_max;
     }},
    {"max_init_failures", [](DeploymentOptions& r, const DeploymentOptions& n) {
       r.max_init_failures = n.max_init_failures;
     }}};

bool ARollingKey(std::string_view key) {
  return std::any_of(std::begin(kRollingFields), std::end(kRollingFields),
                     [key](const RollingField& field) { return field.key == key; });
}

// "uses, uses_with, ... and max_init_failures".
std::string RollingKeysListed() {
  std::string listed;
  const std::size_t count = std::size(kRollingFields);
  for (std::size_t i = 0; i < count; ++i) {
    listed += (i == 0 ? "" : i + 1 == count ? " and " : ", ");
    listed += kRollingFields[i].key;
  }
  return listed;
}

// The first key `next` sets otherwise than `now` that a rolling restart
// cannot change, or "".
std::string_view FirstFixedKeyChanged(const DeploymentOptions& now, const DeploymentOptions& next) {
  for (const internal::OptionRow& row : internal::OptionTable()) {
    if (ARollingKey(row.key)) {
      continue;
    }
    if (row.deployment.present() ? row.deployment.get(now) != row.deployment.get(next)
                                 : row.key == "models" && now.models != next.models) {
      return row.key;
    }
  }
  return "";
}

}  // namespace

Status Deployment::Impl::RollingRestart(DeploymentOptions next) {
  const std::string where = "deployment '" + options_.name + "': rolling restart";
  std::unique_lock rollout(rollout_mutex_, std::try_to_lock);
  if (!rollout.owns_lock()) {
    return FailedPreconditionError(where + ": one is already running");
  }
  if (!status_.ok()) {
    return FailedPreconditionError(where + ": the deployment did not start: " + status_.message());
  }
  if (abort_rollout_.load()) {
    return FailedPreconditionError(where + ": the deployment is stopping");
  }
  if (const std::string_view key = FirstFixedKeyChanged(options_, next); !key.empty()) {
    return InvalidArgumentError(where + ": `" + std::string(key) +
                                "` changed, and a rolling restart replaces replicas only (it may "
                                "change " +
                                RollingKeysListed() +
                                "); stop and start the deployment to change it");
  }
  if (internal::IsDockerUses(next.uses) != internal::IsDockerUses(options_.uses)) {
    return InvalidArgumentError(where +
                                ": `uses` changed between a process and a container "
                                "image; stop and start the deployment to change it");
  }
  std::shared_ptr<internal::ReplicaLauncher> launcher;
  internal::PlacementPlan plan;
  GANTRY_RETURN_IF_ERROR(Complete(next, launcher, plan).WithPrefix(where));
  GANTRY_RETURN_IF_ERROR(launcher->Prepare(next).WithPrefix(where));
  std::shared_ptr<internal::Gateway> gateway = this->gateway();
  if (!gateway) {
    return FailedPreconditionError(where + ": the deployment is stopped");
  }

  const auto began = SteadyClock::now();
  const std::optional<int> threads_per_replica = ThreadsPerReplica(next);
  spdlog::info("{}: replacing {} replicas one at a time", where, next.replicas);
  for (int i = 0; i < next.replicas; ++i) {
    if (abort_rollout_.load()) {
      return CancelledError(where + ": the deployment is stopping; " + std::to_string(i) + " of " +
                            std::to_string(next.replicas) + " replicas were replaced");
    }
    Replica successor = MakeReplica(i, next, plan, threads_per_replica, launcher);
    const std::string progress = i == 0
                                     ? std::string("every replica still runs the old settings")
                                     : std::to_string(i) + " of " + std::to_string(next.replicas) +
                                           " replicas run the new settings, the others the old";
    Status ready = SpawnReplica(successor);
    if (ready.ok()) {
      ready = AwaitReady(successor);
    }
    if (!ready.ok()) {
      Retire(successor);
      return Status(ready.code(), where + ": the new " + successor.name +
                                      " did not start: " + ready.message() + "; " + progress);
    }
    Replica old(next.restart_backoff_initial, next.restart_backoff_max, next.max_init_failures);
    std::shared_ptr<const internal::ReplicaLink> old_link;
    {
      std::lock_guard lock(replicas_mutex_);
      old = std::move(replicas_[static_cast<std::size_t>(i)]);
      replicas_[static_cast<std::size_t>(i)] = std::move(successor);
      const Replica& placed = replicas_[static_cast<std::size_t>(i)];
      old_link = gateway->ReplicaReplaced(static_cast<std::size_t>(i), AddressOf(placed));
      WriteMonitoringTargets(gateway->monitoring_port());
      spdlog::info("{}: {} (pid {}) in rotation in place of pid {}", where, placed.name,
                   placed.process->pid(), old.process ? old.process->pid() : 0);
    }
    // No try goes to the old replica any more; those sent just before the
    // swap finish first (a worker that is stopping refuses calls it has
    // not started), up to timeout_drain.
    const auto drain_until = SteadyClock::now() + options_.timeout_drain;
    while (old_link && old_link->tries_in_flight() > 0 && SteadyClock::now() < drain_until &&
           !abort_rollout_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    Retire(old);
  }
  {
    // The running options say what the replicas now run: the next rolling
    // restart is checked against them (each replica restarts from the
    // settings it was made with).
    std::lock_guard lock(replicas_mutex_);
    for (const RollingField& field : kRollingFields) {
      field.take(options_, next);
    }
    launcher_ = std::move(launcher);
    plan_ = std::move(plan);
  }
  spdlog::info(
      "{}: done, {} replicas replaced in {} ms", where, next.replicas,
      std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - began).count());
  return OkStatus();
}

Status Deployment::Impl::AwaitReady(Replica& replica) {
  while (true) {
    if (abort_rollout_.load()) {
      return CancelledError("the deployment is stopping");
    }
    const SteadyClock::time_point now = SteadyClock::now();
    if (now >= replica.deadline) {
      return DeadlineExceededError("it was not ready within " +
                                   std::to_string(replica.timeout_ready.count()) +
                                   " ms (timeout_ready)");
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(replica.deadline - now);
    pollfd fd{replica.status->read_fd, POLLIN, 0};
    const int n = ::poll(&fd, 1, static_cast<int>(std::min<std::int64_t>(200, left.count() + 1)));
    if (n < 0 && errno != EINTR) {
      return InternalError(std::string("poll: ") + std::strerror(errno));
    }
    if (n <= 0) {
      continue;
    }
    if (!ReadStatusPipe(replica)) {
      continue;
    }
    if (replica.status_text.starts_with("READY ")) {
      MarkServing(replica, SteadyClock::now());
      spdlog::info("{} ready on 127.0.0.1:{} (pid {}, {}) after {} ms", replica.name, replica.port,
                   replica.process->pid(), replica.device,
                   std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() -
                                                                         replica.started_at)
                       .count());
      return OkStatus();
    }
    replica.status.reset();
    if (replica.status_text.starts_with("ERROR ")) {
      return FailedPreconditionError(replica.status_text.substr(6));
    }
    return InternalError("it closed its status pipe before it was ready");
  }
}

void Deployment::Impl::Retire(Replica& replica) {
  if (replica.process && replica.process->Running()) {
    if (replica.state == Replica::State::kServing) {
      replica.process->Signal(SIGTERM);
      replica.process->Terminate(kWorkerStopGrace);
    } else {
      // Not serving (still starting): nothing to finish, and a worker takes
      // SIGTERM only once it is up.
      replica.process->Signal(SIGKILL);
      replica.process->WaitFor(kFailedStartExitGrace);
    }
  }
  replica.lifeline.reset();
  replica.status.reset();
  if (replica.launcher) {
    if (Status removed = replica.launcher->CleanUp(replica.container); !removed.ok()) {
      spdlog::warn("{}: {}", replica.name, removed.message());
    }
  }
}

void Deployment::Impl::StopSupervisor() {
  stop_supervising_.store(true);
  if (supervisor_wake_.write_fd >= 0) {
    char byte = 1;
    (void)!::write(supervisor_wake_.write_fd, &byte, 1);
  }
  if (supervisor_.joinable()) {
    supervisor_.join();
  }
}

void Deployment::Impl::Stop() {
  std::lock_guard lock(stop_mutex_);
  if (stopped_) {
    return;
  }
  stopped_ = true;
  // A rolling restart in progress ends (its new replica, if not yet in
  // rotation, is stopped) before anything else stops.
  abort_rollout_.store(true);
  { const std::lock_guard rollout(rollout_mutex_); }
  // No replica is restarted from here on.
  StopSupervisor();
  // From here on Post answers "stopped"; Posts already running keep their
  // own reference to the client and fail once the gateway is shut down.
  std::shared_ptr<internal::Gateway> gateway = front_.StopClient();
  if (gateway) {
    // New requests are refused; those in flight finish, up to timeout_drain.
    gateway->Shutdown(options_.timeout_drain);
  }
  // Only then the workers. Signal every replica first, then wait: they
  // drain their own queues in parallel.
  for (Replica& replica : replicas_) {
    if (replica.process) {
      replica.process->Signal(SIGTERM);
    }
  }
  // One grace for all of them, not one each: a stop must fit an
  // orchestrator's grace period however many replicas are stuck.
  const auto kill_at = std::chrono::steady_clock::now() + kWorkerStopGrace;
  for (Replica& replica : replicas_) {
    if (replica.process) {
      replica.process->Terminate(std::max(std::chrono::milliseconds(0),
                                          std::chrono::duration_cast<std::chrono::milliseconds>(
                                              kill_at - std::chrono::steady_clock::now())));
      if (replica.process->exit_status() && *replica.process->exit_status() != 0) {
        spdlog::debug("{} {}", replica.name,
                      ChildProcess::DescribeWaitStatus(*replica.process->exit_status()));
      }
    }
    replica.lifeline.reset();
    replica.status.reset();
    if (replica.launcher) {
      if (Status removed = replica.launcher->CleanUp(replica.container); !removed.ok()) {
        spdlog::warn("{}: {}", replica.name, removed.message());
      }
    }
  }
  front_.Release();
  block_wait_.Wake();
}

void Deployment::Impl::Block() {
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
  spdlog::info("shutting down deployment '{}'", options_.name);
}

Deployment::Deployment(DeploymentOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->status_ = impl_->Start();
  if (!impl_->status_.ok()) {
    spdlog::error("{}", impl_->status_.message());
    impl_->Stop();
  }
}

Deployment::~Deployment() = default;

const Status& Deployment::status() const { return impl_->status_; }

int Deployment::port() const { return impl_->front_.port(); }

int Deployment::http_port() const { return impl_->front_.http_port(); }

std::string Deployment::address() const { return impl_->front_.address(); }

void Deployment::Impl::WriteMonitoringTargets(int gateway_monitoring_port) const {
  if (options_.monitoring_targets_file.empty() || gateway_monitoring_port < 0) {
    return;
  }
  const std::string gateway_host = options_.host == "0.0.0.0" ? "127.0.0.1" : options_.host;
  nlohmann::json groups = nlohmann::json::array();
  groups.push_back({{"targets", {internal::JoinHostPort(gateway_host, gateway_monitoring_port)}},
                    {"labels", {{"gantry_role", "gateway"}, {"deployment", options_.name}}}});
  for (const Replica& replica : replicas_) {
    if (replica.state != Replica::State::kServing || replica.monitoring_port < 0) {
      continue;
    }
    groups.push_back(
        {{"targets", {"127.0.0.1:" + std::to_string(replica.monitoring_port)}},
         {"labels",
          {{"gantry_role", "worker"}, {"deployment", options_.name}, {"replica", replica.name}}}});
  }
  // Written then renamed: Prometheus never reads half a file.
  const std::string& path = options_.monitoring_targets_file;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << groups.dump(2) << "\n";
    if (!out) {
      spdlog::warn("monitoring_targets_file: cannot write {}: {}", tmp, std::strerror(errno));
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    spdlog::warn("monitoring_targets_file: cannot rename {} to {}: {}", tmp, path,
                 std::strerror(errno));
  }
}

int Deployment::monitoring_port() const { return impl_->front_.monitoring_port(); }

std::vector<ReplicaInfo> Deployment::replicas() const {
  std::vector<ReplicaInfo> out;
  std::vector<internal::ReplicaState> states;
  if (std::shared_ptr<internal::Gateway> gateway = impl_->gateway()) {
    states = gateway->ReplicaStates();
  }
  std::lock_guard lock(impl_->replicas_mutex_);
  for (std::size_t i = 0; i < impl_->replicas_.size(); ++i) {
    const Replica& replica = impl_->replicas_[i];
    ReplicaInfo info;
    info.name = replica.name;
    info.pid = replica.process ? replica.process->pid() : 0;
    info.address = AddressOf(replica);
    info.device = replica.device;
    if (i < states.size()) {
      info.requests = states[i].requests;
      info.in_flight = states[i].in_flight;
      info.available = states[i].available;
    }
    info.cuda_visible_devices = replica.cuda_visible_devices;
    info.placement = replica.placement;
    info.restarts = replica.restarts;
    info.monitoring_port = replica.monitoring_port;
    info.container = replica.container;
    info.failed = replica.state == Replica::State::kFailed;
    info.starting = replica.state == Replica::State::kStarting ||
                    replica.state == Replica::State::kEnding ||
                    replica.state == Replica::State::kWaiting;
    if (replica.state != Replica::State::kServing) {
      info.error = replica.error;
    }
    out.push_back(std::move(info));
  }
  return out;
}

StatusOr<DocList> Deployment::Post(std::string_view endpoint, const DocList& docs,
                                   const PostOptions& options) {
  if (!impl_->status_.ok()) {
    return impl_->status_;
  }
  return impl_->front_.Post("deployment '" + impl_->options_.name + "'", endpoint, docs, options);
}

void Deployment::Block() { impl_->Block(); }

Status Deployment::RollingRestart(DeploymentOptions options) {
  return impl_->RollingRestart(std::move(options));
}

Status Deployment::ReloadTls() {
  const std::string what = "deployment '" + impl_->options_.name + "'";
  if (!impl_->options_.tls.enabled()) {
    return FailedPreconditionError(what + " serves no TLS");
  }
  std::shared_ptr<internal::Gateway> gateway = impl_->gateway();
  if (!impl_->status_.ok() || gateway == nullptr) {
    return UnavailableError(what + " is not serving");
  }
  return gateway->ReloadTls().WithPrefix(what);
}

void Deployment::Stop() { impl_->Stop(); }

}  // namespace gantry
