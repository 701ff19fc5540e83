#include <fcntl.h>
#include <gantry/config.h>
#include <gantry/deployment.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "common/grpc_options.h"
#include "common/tls.h"
#include "core/deployment_rules.h"
#include "core/logging.h"
#include "core/registry.h"
#include "core/worker_mode.h"
#include "deployment/child_process.h"
#include "deployment/placement.h"
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

struct Replica {
  std::string name;
  std::string device;
  std::string cuda_visible_devices;
  std::string placement;
  internal::WorkerSpec spec;
  ChildProcessPtr process;
  // The parent keeps the write end; the worker exits when it closes.
  std::unique_ptr<Pipe> lifeline;
  // Read end of the start-up status pipe, until the worker reports.
  int status_fd = -1;
  int port = 0;
};

std::string SelfExecutable() {
  std::error_code ec;
  auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : path.string();
}

bool IsExecutable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// Self-pipe for Block(): written by the signal handler and by Stop().
std::atomic<int> g_block_write_fd{-1};

void OnShutdownSignal(int /*signal*/) {
  int fd = g_block_write_fd.load();
  if (fd >= 0) {
    char byte = 1;
    (void)!::write(fd, &byte, 1);
  }
}

}  // namespace

namespace internal {

std::string FindWorkerProgram() {
  if (const char* env = std::getenv("GANTRY_WORKER_PROGRAM"); env != nullptr && *env != '\0') {
    return env;
  }
  std::filesystem::path self = SelfExecutable();
  for (const auto& candidate :
       {self.parent_path() / "gantry-worker", self.parent_path() / "../bin/gantry-worker"}) {
    if (IsExecutable(candidate.string())) {
      return candidate.lexically_normal().string();
    }
  }
  if (const char* path = std::getenv("PATH")) {
    std::string_view rest = path;
    while (!rest.empty()) {
      std::size_t colon = rest.find(':');
      std::string dir(rest.substr(0, colon));
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
      std::string candidate = dir + "/gantry-worker";
      if (!dir.empty() && IsExecutable(candidate)) {
        return candidate;
      }
    }
  }
  return "";
}

}  // namespace internal

class Deployment::Impl {
 public:
  explicit Impl(DeploymentOptions options) : options_(std::move(options)) {}
  ~Impl() { Stop(); }

  Status Start();
  void Stop();
  void Block();
  std::shared_ptr<internal::Gateway> gateway() const {
    std::lock_guard lock(state_mutex_);
    return gateway_;
  }
  std::shared_ptr<Client> client() const {
    std::lock_guard lock(state_mutex_);
    return client_;
  }

  Status status_;
  DeploymentOptions options_;
  std::vector<Replica> replicas_;
  // Shared, not unique: Post and the accessors take a reference under
  // state_mutex_ and use it unlocked, so Stop can drop these while a Post
  // is still running on another thread.
  std::shared_ptr<internal::Gateway> gateway_;  // guarded by state_mutex_
  std::shared_ptr<Client> client_;              // guarded by state_mutex_
  mutable std::mutex state_mutex_;
  // Held for the whole of Stop, so a second Stop waits for the first.
  std::mutex stop_mutex_;
  bool stopped_ = false;
  Pipe block_pipe_;
  internal::PlacementPlan plan_;

 private:
  Status Place();
  Status Validate();
  Status SpawnReplicas(const std::string& program);
  Status AwaitReplicas();
};

Status Deployment::Impl::Validate() {
  // The rules live in core/deployment_rules.h, shared with the YAML loader.
  GANTRY_RETURN_IF_ERROR(internal::ValidateDeploymentOptions(options_));
  if (EndsWith(options_.uses, ".yml") || EndsWith(options_.uses, ".yaml")) {
    GANTRY_ASSIGN_OR_RETURN(ExecutorConfig config, LoadExecutorConfig(options_.uses));
    options_.uses = config.jtype;
    for (auto& [key, value] : config.with) {
      options_.uses_with.emplace(key, value);  // uses_with wins
    }
    for (auto& [key, value] : config.metas) {
      options_.uses_metas.emplace(key, value);
    }
    for (auto& [key, value] : config.dynamic_batching) {
      options_.uses_dynamic_batching.emplace(key, value);  // uses_dynamic_batching wins
    }
  }
  // After the merge: the file's dynamic_batching and with.device count too.
  GANTRY_RETURN_IF_ERROR(internal::ValidateExecutorOptions(options_));
  return Place();
}

// Plans GPUs for every replica before anything is spawned, so a request the
// machine cannot meet fails here with the visible GPUs named.
Status Deployment::Impl::Place() {
  internal::PlacementRequest request;
  request.deployment = options_.name;
  request.replicas = options_.replicas;
  request.gpus = options_.gpus;
  if (auto it = options_.uses_with.find("device"); it != options_.uses_with.end()) {
    request.explicit_device = *it->second.AsText();
  }
  if (auto it = options_.env.find("CUDA_VISIBLE_DEVICES"); it != options_.env.end()) {
    request.env_cuda_visible_devices = it->second;
  }
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES"); cvd != nullptr) {
    request.process_cuda_visible_devices = std::string(cvd);
  }
  internal::GpuInventory inventory = internal::DiscoverGpus();
  spdlog::debug("deployment '{}': GPUs: {}", options_.name,
                internal::DescribeVisibleGpus(inventory));
  GANTRY_ASSIGN_OR_RETURN(plan_, internal::PlanPlacement(request, inventory));
  for (const std::string& warning : plan_.warnings) {
    spdlog::warn("{}", warning);
  }
  return OkStatus();
}

Status Deployment::Impl::Start() {
  // A worker child whose main() skipped gantry::Init must not spawn (see
  // core/worker_mode.h): it reports to its parent and exits here.
  internal::ExitIfUninitialisedWorker();
  internal::EnsureProcessLogger("gateway");
  GANTRY_RETURN_IF_ERROR(Validate());
  // Bad TLS files fail the start before any worker is spawned.
  if (options_.tls.enabled()) {
    GANTRY_RETURN_IF_ERROR(internal::LoadServerTls(options_.tls)
                               .status()
                               .WithPrefix("deployment '" + options_.name + "'"));
  }

  std::string program = options_.worker_program;
  if (program.empty()) {
    if (internal::FindExecutorType(options_.uses) != nullptr) {
      // Re-execute this program: gantry::Init turns it into the worker.
      program = SelfExecutable();
    } else {
      program = internal::FindWorkerProgram();
      if (program.empty()) {
        return internal::UnknownExecutorError(options_.uses)
            .WithPrefix(
                "deployment '" + options_.name +
                "': this program does not register the executor and no gantry-worker program was "
                "found (set GANTRY_WORKER_PROGRAM)");
      }
    }
  }
  GANTRY_RETURN_IF_ERROR(SpawnReplicas(program));
  GANTRY_RETURN_IF_ERROR(AwaitReplicas());

  internal::GatewayOptions gateway_options;
  gateway_options.host = options_.host;
  gateway_options.port = options_.port;
  gateway_options.deployment_name = options_.name;
  gateway_options.http_port = options_.http_port;
  gateway_options.models = options_.models;
  gateway_options.max_message_bytes = options_.max_message_bytes;
  gateway_options.tls = options_.tls;
  for (const Replica& replica : replicas_) {
    gateway_options.replica_addresses.push_back("127.0.0.1:" + std::to_string(replica.port));
    gateway_options.replica_names.push_back(replica.name);
  }
  GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<internal::Gateway> gateway,
                          internal::Gateway::Start(std::move(gateway_options)));
  std::lock_guard state_lock(state_mutex_);
  gateway_ = std::move(gateway);
  std::string client_address = internal::JoinHostPort(
      options_.host == "0.0.0.0" ? "127.0.0.1" : options_.host, gateway_->port());
  ClientOptions client_options{.max_message_bytes = options_.max_message_bytes};
  // Over TLS, Post goes in-process: no CA or client certificate to hold.
  client_ = options_.tls.enabled()
                ? std::shared_ptr<Client>(new Client(std::move(client_address), client_options,
                                                     gateway_->InProcessChannel()))
                : std::make_shared<Client>(std::move(client_address), client_options);

  std::string address = internal::JoinHostPort(options_.host, gateway_->port());
  std::string line(48, '-');
  spdlog::info(
      "\n+{}\n| Deployment '{}' is ready to serve!\n|   protocol: GRPC\n|   address:  "
      "{}\n|   replicas: {} x {}\n+{}",
      line, options_.name, address, options_.replicas, options_.uses, line);
  return OkStatus();
}

Status Deployment::Impl::SpawnReplicas(const std::string& program) {
  for (int i = 0; i < options_.replicas; ++i) {
    Replica replica;
    replica.name = options_.name + "/rep-" + std::to_string(i);
    internal::WorkerSpec& spec = replica.spec;
    spec.jtype = options_.uses;
    spec.with = options_.uses_with;
    spec.metas = options_.uses_metas;
    auto metas_name = spec.metas.find("name");
    spec.executor_name = metas_name != spec.metas.end() && metas_name->second.AsText()
                             ? *metas_name->second.AsText()
                             : options_.name;
    spec.runtime_name = replica.name;
    spec.replica_id = i;
    spec.replicas = options_.replicas;
    const internal::ReplicaPlacement& placement = plan_.replicas[static_cast<std::size_t>(i)];
    // The planner already took an explicit uses_with.device into account.
    spec.device = placement.device;
    spec.dynamic_batching = options_.uses_dynamic_batching;
    replica.device = spec.device;
    replica.placement = placement.description;
    spec.log_level = options_.log_level;
    spec.max_message_bytes = options_.max_message_bytes;

    Pipe status_pipe;
    replica.lifeline = std::make_unique<Pipe>();
    if (!status_pipe.ok() || !replica.lifeline->ok()) {
      return InternalError(std::string("cannot create pipes: ") + std::strerror(errno));
    }
    internal::ChildProcessOptions child;
    child.program = program;
    child.args = internal::WorkerArguments(spec);
    child.args.insert(child.args.end(), {"--status-fd", "3", "--lifeline-fd", "4"});
    child.env = options_.env;
    if (placement.cuda_visible_devices) {
      // Replaces any "RR..." value, which CUDA itself would reject.
      child.env["CUDA_VISIBLE_DEVICES"] = *placement.cuda_visible_devices;
      replica.cuda_visible_devices = *placement.cuda_visible_devices;
      // Indices were counted in NVML's (PCI bus) order; make CUDA agree.
      if (!placement.gpus.empty() && !child.env.contains("CUDA_DEVICE_ORDER") &&
          std::getenv("CUDA_DEVICE_ORDER") == nullptr) {
        child.env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
      }
    }
    child.fds = {{3, status_pipe.write_fd}, {4, replica.lifeline->read_fd}};
    auto process = ChildProcess::Spawn(child);
    if (!process.ok()) {
      return process.status().WithPrefix("replica " + replica.name);
    }
    replica.process = std::move(process).value();
    // Our copies of the child's ends must close, or EOF never comes.
    status_pipe.CloseWrite();
    replica.lifeline->CloseRead();
    replica.status_fd = status_pipe.read_fd;
    status_pipe.read_fd = -1;
    spdlog::debug("spawned {} pid={} device={} placement={}", replica.name, replica.process->pid(),
                  replica.device, replica.placement);
    if (placement.cuda_visible_devices && !placement.cuda_visible_devices->empty()) {
      spdlog::info("{} placed on {}: CUDA_VISIBLE_DEVICES={} device={}", replica.name,
                   replica.placement, replica.cuda_visible_devices, replica.device);
    }
    replicas_.push_back(std::move(replica));
  }
  return OkStatus();
}

Status Deployment::Impl::AwaitReplicas() {
  struct Pending {
    int fd;
    std::string text;
    bool done = false;
  };
  std::vector<Pending> pending;
  for (Replica& replica : replicas_) {
    pending.push_back({replica.status_fd, "", false});
    replica.status_fd = -1;
  }
  auto close_all = [&] {
    for (Pending& p : pending) {
      if (p.fd >= 0) {
        ::close(p.fd);
        p.fd = -1;
      }
    }
  };
  auto deadline = std::chrono::steady_clock::now() + options_.timeout_ready;
  std::size_t remaining = pending.size();
  while (remaining > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      close_all();
      for (std::size_t i = 0; i < pending.size(); ++i) {
        if (!pending[i].done) {
          return DeadlineExceededError("replica " + replicas_[i].name + " was not ready within " +
                                       std::to_string(options_.timeout_ready.count()) +
                                       " ms (timeout_ready)");
        }
      }
    }
    std::vector<pollfd> fds;
    std::vector<std::size_t> index;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      if (!pending[i].done) {
        fds.push_back({pending[i].fd, POLLIN, 0});
        index.push_back(i);
      }
    }
    int timeout_ms = static_cast<int>(std::min<long long>(left.count(), 1000));
    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) {
      close_all();
      return InternalError(std::string("poll: ") + std::strerror(errno));
    }
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) {
        continue;
      }
      Pending& p = pending[index[k]];
      char buffer[4096];
      ssize_t got = ::read(p.fd, buffer, sizeof(buffer));
      if (got > 0) {
        p.text.append(buffer, static_cast<std::size_t>(got));
        continue;
      }
      if (got < 0 && errno == EINTR) {
        continue;
      }
      // EOF: the worker said all it will say.
      p.done = true;
      --remaining;
      ::close(p.fd);
      p.fd = -1;
      Replica& replica = replicas_[index[k]];
      if (p.text.starts_with("READY ")) {
        replica.port = std::atoi(p.text.c_str() + 6);
        spdlog::info("{} ready on 127.0.0.1:{} (pid {}, {})", replica.name, replica.port,
                     replica.process->pid(), replica.device);
        continue;
      }
      close_all();
      if (p.text.starts_with("ERROR ")) {
        return FailedPreconditionError("replica " + replica.name +
                                       " failed to start: " + p.text.substr(6));
      }
      replica.process->WaitFor(std::chrono::milliseconds(2000));
      std::string how = replica.process->exit_status()
                            ? ChildProcess::DescribeWaitStatus(*replica.process->exit_status())
                            : "closed its status pipe";
      return InternalError("replica " + replica.name + " (pid " +
                           std::to_string(replica.process->pid()) + ") " + how +
                           " before it was ready; see its log above");
    }
  }
  return OkStatus();
}

void Deployment::Impl::Stop() {
  std::lock_guard lock(stop_mutex_);
  if (stopped_) {
    return;
  }
  stopped_ = true;
  std::shared_ptr<internal::Gateway> gateway;
  {
    // From here on Post answers "stopped"; Posts already running keep their
    // own reference to the client and fail once the gateway is shut down.
    std::lock_guard state_lock(state_mutex_);
    gateway = gateway_;
    client_.reset();
  }
  if (gateway) {
    gateway->Shutdown(std::chrono::milliseconds(2000));
  }
  // Signal every replica first, then wait: they drain in parallel.
  for (Replica& replica : replicas_) {
    if (replica.process) {
      replica.process->Signal(SIGTERM);
    }
  }
  for (Replica& replica : replicas_) {
    if (replica.process) {
      replica.process->Terminate(std::chrono::milliseconds(8000));
      if (replica.process->exit_status() && *replica.process->exit_status() != 0) {
        spdlog::debug("{} {}", replica.name,
                      ChildProcess::DescribeWaitStatus(*replica.process->exit_status()));
      }
    }
    replica.lifeline.reset();
  }
  {
    std::lock_guard state_lock(state_mutex_);
    gateway_.reset();
  }
  if (block_pipe_.write_fd >= 0) {
    char byte = 1;
    (void)!::write(block_pipe_.write_fd, &byte, 1);
  }
}

void Deployment::Impl::Block() {
  if (!block_pipe_.ok()) {
    return;
  }
  {
    std::lock_guard lock(stop_mutex_);
    if (stopped_) {
      return;
    }
  }
  g_block_write_fd.store(block_pipe_.write_fd);
  struct sigaction action {};
  action.sa_handler = OnShutdownSignal;
  sigemptyset(&action.sa_mask);
  struct sigaction old_int {};
  struct sigaction old_term {};
  sigaction(SIGINT, &action, &old_int);
  sigaction(SIGTERM, &action, &old_term);
  char byte;
  while (::read(block_pipe_.read_fd, &byte, 1) < 0 && errno == EINTR) {
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  g_block_write_fd.store(-1);
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

int Deployment::port() const {
  std::shared_ptr<internal::Gateway> gateway = impl_->gateway();
  return gateway ? gateway->port() : 0;
}

int Deployment::http_port() const {
  std::shared_ptr<internal::Gateway> gateway = impl_->gateway();
  return gateway ? gateway->http_port() : -1;
}

std::string Deployment::address() const {
  std::shared_ptr<Client> client = impl_->client();
  return client ? client->address() : std::string();
}

std::vector<ReplicaInfo> Deployment::replicas() const {
  std::vector<ReplicaInfo> out;
  std::vector<internal::ReplicaState> states;
  if (std::shared_ptr<internal::Gateway> gateway = impl_->gateway()) {
    states = gateway->ReplicaStates();
  }
  for (std::size_t i = 0; i < impl_->replicas_.size(); ++i) {
    const Replica& replica = impl_->replicas_[i];
    ReplicaInfo info;
    info.name = replica.name;
    info.pid = replica.process ? replica.process->pid() : 0;
    info.address = "127.0.0.1:" + std::to_string(replica.port);
    info.device = replica.device;
    if (i < states.size()) {
      info.requests = states[i].requests;
      info.in_flight = states[i].in_flight;
      info.available = states[i].available;
    }
    info.cuda_visible_devices = replica.cuda_visible_devices;
    info.placement = replica.placement;
    out.push_back(std::move(info));
  }
  return out;
}

StatusOr<DocList> Deployment::Post(std::string_view endpoint, const DocList& docs,
                                   const PostOptions& options) {
  if (!impl_->status_.ok()) {
    return impl_->status_;
  }
  std::shared_ptr<Client> client = impl_->client();
  if (!client) {
    return FailedPreconditionError("deployment '" + impl_->options_.name + "' is stopped");
  }
  return client->Post(endpoint, docs, options);
}

void Deployment::Block() { impl_->Block(); }

void Deployment::Stop() { impl_->Stop(); }

}  // namespace gantry
