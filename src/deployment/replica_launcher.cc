#include "deployment/replica_launcher.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <utility>

#include "core/deployment_rules.h"
#include "core/limits.h"
#include "core/registry.h"
#include "deployment/container_replica.h"
#include "deployment/worker_program.h"

namespace gantry::internal {
namespace {

// `docker image inspect` and `docker rm`: local commands, but a daemon under
// load can take a while.
constexpr std::chrono::milliseconds kDockerCommandTimeout{30000};

std::string SelfExecutable() {
  std::error_code ec;
  auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : path.string();
}

bool IsExecutable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

std::string Where(const DeploymentOptions& options) { return "deployment '" + options.name + "'"; }

// gantry-worker (or this program) as a child process on this machine.
class ProcessLauncher final : public ReplicaLauncher {
 public:
  Status CheckOptions(DeploymentOptions& options) override {
    if (!options.volumes.empty()) {
      return InvalidArgumentError(Where(options) +
                                  ": volumes are for container replicas only (uses: " +
                                  "docker://IMAGE); \"" + options.uses + "\" runs as a process");
    }
    return OkStatus();
  }

  Status Prepare(const DeploymentOptions& options) override {
    program_ = options.worker_program;
    if (!program_.empty()) {
      return OkStatus();
    }
    if (FindExecutorType(options.uses) != nullptr) {
      // Re-execute this program: gantry::Init turns it into the worker.
      program_ = SelfExecutable();
      return OkStatus();
    }
    program_ = FindWorkerProgram();
    if (program_.empty()) {
      return UnknownExecutorError(options.uses)
          .WithPrefix(Where(options) +
                      ": this program does not register the executor and no gantry-worker "
                      "program was found (set GANTRY_WORKER_PROGRAM)");
    }
    return OkStatus();
  }

  void ConfigureWorker(const DeploymentOptions& options, WorkerSpec& spec) const override {
    spec.jtype = options.uses;
    spec.config_dir = options.config_dir;
  }

  void Environment(const ReplicaPlacement& placement,
                   std::map<std::string, std::string>& env) const override {
    if (!placement.cuda_visible_devices) {
      return;
    }
    // Replaces any "RR..." value, which CUDA itself would reject.
    env["CUDA_VISIBLE_DEVICES"] = *placement.cuda_visible_devices;
    // Indices were counted in NVML's (PCI bus) order; make CUDA agree.
    if (!placement.gpus.empty() && !env.contains("CUDA_DEVICE_ORDER") &&
        std::getenv("CUDA_DEVICE_ORDER") == nullptr) {
      env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
    }
  }

  LaunchCommand Command(const ReplicaLaunch& launch) const override {
    LaunchCommand command;
    command.child.program = program_;
    command.child.args = WorkerArguments(*launch.spec);
    command.child.args.insert(command.child.args.end(), {"--status-fd", "3", "--lifeline-fd", "4"});
    command.child.env = launch.env;
    command.child.fds = {{3, launch.status_fd}, {4, launch.lifeline_fd}};
    return command;
  }

  Status CleanUp(const std::string& /*container*/) const override { return OkStatus(); }

 private:
  std::string program_;
};

// `docker run` of the image's gantry-worker; see deployment/container_replica.h.
class ContainerLauncher final : public ReplicaLauncher {
 public:
  explicit ContainerLauncher(std::string_view uses) : image_(DockerImageOf(uses)) {}

  Status CheckOptions(DeploymentOptions& options) override {
    GANTRY_RETURN_IF_ERROR(
        CheckDockerImageName(DockerImageOf(options.uses)).WithPrefix(Where(options) + ": uses"));
    if (options.volumes.size() > kMaxVolumes) {
      return InvalidArgumentError(Where(options) + ": more than " + std::to_string(kMaxVolumes) +
                                  " volumes");
    }
    for (std::string& volume : options.volumes) {
      GANTRY_RETURN_IF_ERROR(CheckVolumeSpec(volume).WithPrefix(Where(options) + ": volumes"));
      volume = AbsoluteVolumeSpec(volume, "");
    }
    volumes_ = options.volumes;
    return OkStatus();
  }

  Status Prepare(const DeploymentOptions& options) override {
    docker_ = DockerProgram();
    return CheckDockerImagePresent(docker_, image_, kDockerCommandTimeout)
        .WithPrefix(Where(options));
  }

  void ConfigureWorker(const DeploymentOptions& /*options*/, WorkerSpec& spec) const override {
    // The worker takes the executor its image names, and sees the
    // container's file system, not this machine's folders.
    spec.jtype.clear();
    spec.config_dir.clear();
  }

  void Environment(const ReplicaPlacement& placement,
                   std::map<std::string, std::string>& env) const override {
    if (placement.cuda_visible_devices) {
      // Docker gives the container its GPUs (numbered from 0 inside, see
      // Command); the CUDA variables would name host indices.
      env.erase("CUDA_VISIBLE_DEVICES");
    }
  }

  LaunchCommand Command(const ReplicaLaunch& launch) const override {
    DockerRunRequest run;
    run.image = image_;
    run.container_name = ContainerName(launch.deployment, launch.replica_index, launch.start);
    run.labels = {{"gantry.deployment", launch.deployment},
                  {"gantry.replica", launch.replica_name},
                  {"gantry.owner-pid", std::to_string(::getpid())}};
    run.env = launch.env;
    run.volumes = volumes_;
    run.gpus = launch.gpus;
    run.worker_args = WorkerArguments(*launch.spec);
    LaunchCommand command;
    command.child.program = docker_;
    command.child.args = DockerRunArguments(run);
    // The attached client: its stdin is the container's (the lifeline), its
    // stdout the container's (the status report).
    command.child.fds = {{0, launch.lifeline_fd}, {1, launch.status_fd}};
    command.container = run.container_name;
    return command;
  }

  Status CleanUp(const std::string& container) const override {
    if (container.empty()) {
      return OkStatus();
    }
    // Normally gone already (--rm); this covers a client that was killed
    // while its container still ran.
    return RemoveContainer(docker_, container, kDockerCommandTimeout);
  }

 private:
  std::string docker_;
  std::string image_;
  std::vector<std::string> volumes_;
};

}  // namespace

std::unique_ptr<ReplicaLauncher> ReplicaLauncher::For(const DeploymentOptions& options) {
  if (IsDockerUses(options.uses)) {
    return std::make_unique<ContainerLauncher>(options.uses);
  }
  return std::make_unique<ProcessLauncher>();
}

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

}  // namespace gantry::internal
