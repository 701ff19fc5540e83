// What a Deployment runs for a replica, as a process or as a container:
// options, worker spec, GPU environment and command line, without spawning.
#include "deployment/replica_launcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace gantry::internal {
namespace {

bool Contains(const std::vector<std::string>& args, const std::string& arg) {
  return std::find(args.begin(), args.end(), arg) != args.end();
}

DeploymentOptions Options(std::string uses) {
  DeploymentOptions options;
  options.name = "enc";
  options.uses = std::move(uses);
  options.config_dir = "/srv/models";
  return options;
}

TEST(ReplicaLauncherTest, AProcessReplicaRefusesVolumes) {
  DeploymentOptions options = Options("SentenceEncoder");
  options.volumes = {"/data:/data"};
  Status status = ReplicaLauncher::For(options)->CheckOptions(options);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("deployment 'enc': volumes are for container replicas only"),
            std::string::npos)
      << status.message();
}

TEST(ReplicaLauncherTest, AProcessReplicaRunsTheWorkerWithItsPipesAndGpus) {
  DeploymentOptions options = Options("SentenceEncoder");
  options.worker_program = "/opt/gantry/bin/gantry-worker";
  auto launcher = ReplicaLauncher::For(options);
  ASSERT_TRUE(launcher->CheckOptions(options).ok());
  ASSERT_TRUE(launcher->Prepare(options).ok());
  WorkerSpec spec;
  launcher->ConfigureWorker(options, spec);
  EXPECT_EQ(spec.jtype, "SentenceEncoder");
  EXPECT_EQ(spec.config_dir, "/srv/models");

  ReplicaPlacement placement;
  placement.cuda_visible_devices = "1";
  placement.gpus = {1};
  std::map<std::string, std::string> env = {{"CUDA_VISIBLE_DEVICES", "RR"}};
  launcher->Environment(placement, env);
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "1");

  ReplicaLaunch launch;
  launch.deployment = "enc";
  launch.replica_name = "enc/rep-0";
  launch.spec = &spec;
  launch.env = env;
  launch.status_fd = 17;
  launch.lifeline_fd = 18;
  LaunchCommand command = launcher->Command(launch);
  EXPECT_EQ(command.child.program, "/opt/gantry/bin/gantry-worker");
  EXPECT_TRUE(Contains(command.child.args, "--status-fd"));
  EXPECT_TRUE(Contains(command.child.args, "--lifeline-fd"));
  EXPECT_EQ(command.child.fds, (std::vector<std::pair<int, int>>{{3, 17}, {4, 18}}));
  EXPECT_EQ(command.child.env.at("CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_TRUE(command.container.empty());
  EXPECT_TRUE(launcher->CleanUp("").ok());
}

TEST(ReplicaLauncherTest, AContainerReplicaChecksItsImageAndVolumes) {
  DeploymentOptions options = Options("docker://Not An Image");
  EXPECT_NE(
      ReplicaLauncher::For(options)->CheckOptions(options).message().find("deployment 'enc': uses"),
      std::string::npos);
  options = Options("docker://gantry-encoder:1");
  options.volumes = {"relative/models:/models:ro"};
  ASSERT_TRUE(ReplicaLauncher::For(options)->CheckOptions(options).ok());
  ASSERT_EQ(options.volumes.size(), 1u);
  EXPECT_TRUE(options.volumes[0].starts_with("/")) << options.volumes[0];
  EXPECT_TRUE(options.volumes[0].ends_with("relative/models:/models:ro")) << options.volumes[0];
}

TEST(ReplicaLauncherTest, AContainerReplicaGetsItsGpusFromDockerNotFromCudaVariables) {
  DeploymentOptions options = Options("docker://gantry-encoder:1");
  auto launcher = ReplicaLauncher::For(options);
  WorkerSpec spec;
  spec.jtype = "set by the caller";
  launcher->ConfigureWorker(options, spec);
  EXPECT_EQ(spec.jtype, "") << "the image names its executor";
  EXPECT_EQ(spec.config_dir, "") << "a container sees its own file system";

  ReplicaPlacement placement;
  placement.cuda_visible_devices = "2,3";
  std::map<std::string, std::string> env = {{"CUDA_VISIBLE_DEVICES", "2,3"}, {"A", "b"}};
  launcher->Environment(placement, env);
  EXPECT_FALSE(env.contains("CUDA_VISIBLE_DEVICES"));

  ReplicaLaunch launch;
  launch.deployment = "enc";
  launch.replica_name = "enc/rep-1";
  launch.replica_index = 1;
  launch.start = 2;
  launch.spec = &spec;
  launch.env = env;
  launch.gpus = "2,3";
  launch.status_fd = 17;
  launch.lifeline_fd = 18;
  LaunchCommand command = launcher->Command(launch);
  EXPECT_TRUE(Contains(command.child.args, "--gpus"));
  EXPECT_TRUE(Contains(command.child.args, "gantry-encoder:1"));
  EXPECT_EQ(command.child.fds, (std::vector<std::pair<int, int>>{{0, 18}, {1, 17}}));
  EXPECT_NE(command.container.find("enc"), std::string::npos) << command.container;
  EXPECT_TRUE(command.child.env.empty()) << "the container's environment goes by -e";
}

}  // namespace
}  // namespace gantry::internal
