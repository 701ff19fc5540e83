// How a Deployment runs its replicas: gantry-worker as a child process of
// this one, or, for `uses: docker://IMAGE`, a `docker run` client attached
// to a container (deployment/container_replica.h). Either way the
// Deployment supervises a ChildProcess that reports READY on a status pipe
// and exits when its lifeline closes; what differs (options, program,
// worker spec, GPUs, command line, clean-up) lives here.
//
// Thread safety: CheckOptions and Prepare first, from one thread; the const
// methods are then safe from any thread.
#ifndef GANTRY_DEPLOYMENT_REPLICA_LAUNCHER_H_
#define GANTRY_DEPLOYMENT_REPLICA_LAUNCHER_H_

#include <gantry/deployment.h>
#include <gantry/status.h>

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "deployment/child_process.h"
#include "deployment/placement.h"
#include "worker/worker_spec.h"

namespace gantry::internal {

// One start of one replica.
struct ReplicaLaunch {
  std::string deployment;
  std::string replica_name;
  int replica_index = 0;
  // 1 for its first start, counting restarts.
  int start = 1;
  const WorkerSpec* spec = nullptr;
  // Its environment (ReplicaLauncher::Environment made it).
  std::map<std::string, std::string> env;
  // The GPUs placement gave it, as CUDA_VISIBLE_DEVICES would name them;
  // empty for none.
  std::string gpus;
  // The parent's ends the child gets: the status pipe's write end and the
  // lifeline's read end.
  int status_fd = -1;
  int lifeline_fd = -1;
};

struct LaunchCommand {
  ChildProcessOptions child;
  // The container it runs, for clean-up and ReplicaInfo; empty for a process.
  std::string container;
};

class ReplicaLauncher {
 public:
  // The launcher `options.uses` asks for.
  static std::unique_ptr<ReplicaLauncher> For(const DeploymentOptions& options);
  virtual ~ReplicaLauncher() = default;

  // Checks, makes absolute and keeps the options only this kind of replica
  // reads (volumes); errors start with "deployment '<name>'".
  virtual Status CheckOptions(DeploymentOptions& options) = 0;
  // Finds what runs the replicas: the worker program (options.worker_program,
  // this program when it registers the executor, else gantry-worker), or
  // docker and the image, which must be present.
  virtual Status Prepare(const DeploymentOptions& options) = 0;
  // The launcher's part of a replica's worker spec (its executor type and
  // the folder relative paths are resolved against).
  virtual void ConfigureWorker(const DeploymentOptions& options, WorkerSpec& spec) const = 0;
  // `env` with the variables that give the replica its GPUs.
  virtual void Environment(const ReplicaPlacement& placement,
                           std::map<std::string, std::string>& env) const = 0;
  virtual LaunchCommand Command(const ReplicaLaunch& launch) const = 0;
  // Removes what may outlive a replica's process (a container whose client
  // was killed); a failure is returned for the log.
  virtual Status CleanUp(const std::string& container) const = 0;
};

}  // namespace gantry::internal

#endif  // GANTRY_DEPLOYMENT_REPLICA_LAUNCHER_H_
