// Container replicas: the `docker run` command line, image and volume
// checks, and the YAML `volumes` key. The containers themselves run in
// tests/integration/container_test.cc (label `docker`).
#include "deployment/container_replica.h"

#include <gantry/config.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/deployment_rules.h"

namespace gantry::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The value that follows `flag` in `args`, every time it occurs.
std::vector<std::string> ValuesOf(const std::vector<std::string>& args, const std::string& flag) {
  std::vector<std::string> values;
  for (std::size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag) {
      values.push_back(args[i + 1]);
    }
  }
  return values;
}

TEST(ContainerReplicaTest, DockerRunKeepsTheClientAttachedWithStdinAsLifeline) {
  DockerRunRequest run;
  run.image = "gantry:cpu";
  run.container_name = "gantry-enc-rep0-42-1";
  run.labels = {{"gantry.deployment", "enc"}};
  run.env = {{"GANTRY_EXECUTOR", "SentenceEncoder"}, {"A", "b=c"}};
  run.volumes = {"/srv/models:/models:ro"};
  run.worker_args = {"--gantry-worker", "--spec", "{}"};
  std::vector<std::string> args = DockerRunArguments(run);

  ASSERT_GE(args.size(), 4u);
  EXPECT_EQ(args[0], "run");
  // Attached (no -d) with stdin open: the lifeline and the status report.
  EXPECT_EQ(std::count(args.begin(), args.end(), "-d"), 0);
  EXPECT_EQ(std::count(args.begin(), args.end(), "-i"), 1);
  EXPECT_EQ(std::count(args.begin(), args.end(), "--rm"), 1);
  EXPECT_THAT(ValuesOf(args, "--name"), ElementsAre("gantry-enc-rep0-42-1"));
  EXPECT_THAT(ValuesOf(args, "--network"), ElementsAre("host"));
  EXPECT_THAT(ValuesOf(args, "--label"), ElementsAre("gantry.deployment=enc"));
  EXPECT_THAT(ValuesOf(args, "-e"), ElementsAre("A=b=c", "GANTRY_EXECUTOR=SentenceEncoder"));
  EXPECT_THAT(ValuesOf(args, "-v"), ElementsAre("/srv/models:/models:ro"));
  EXPECT_TRUE(ValuesOf(args, "--gpus").empty());
  // The image, then gantry-worker's own arguments, status on stdout and
  // lifeline on stdin.
  auto image = std::find(args.begin(), args.end(), "gantry:cpu");
  ASSERT_NE(image, args.end());
  EXPECT_EQ(*(image - 1), "gantry-worker");
  EXPECT_EQ(*(image - 2), "--entrypoint");
  EXPECT_THAT(
      std::vector<std::string>(image + 1, args.end()),
      ElementsAre("--gantry-worker", "--spec", "{}", "--status-fd", "1", "--lifeline-fd", "0"));
}

TEST(ContainerReplicaTest, GpusBecomeDockerDeviceRequests) {
  DockerRunRequest run;
  run.image = "gantry:cuda";
  run.container_name = "c";
  run.gpus = "0,2";
  EXPECT_THAT(ValuesOf(DockerRunArguments(run), "--gpus"), ElementsAre("\"device=0,2\""));
  run.gpus = "all";
  EXPECT_THAT(ValuesOf(DockerRunArguments(run), "--gpus"), ElementsAre("all"));
}

TEST(ContainerReplicaTest, UsesNamesTheImageAfterTheScheme) {
  EXPECT_TRUE(IsDockerUses("docker://gantry:cpu"));
  EXPECT_FALSE(IsDockerUses("SentenceEncoder"));
  EXPECT_FALSE(IsDockerUses("docker:/x"));
  EXPECT_EQ(DockerImageOf("docker://registry.local:5000/team/enc:1.2"),
            "registry.local:5000/team/enc:1.2");
  EXPECT_TRUE(CheckDockerImageName("registry.local:5000/team/enc:1.2").ok());
  EXPECT_TRUE(CheckDockerImageName("enc@sha256:0123abcd").ok());
}

TEST(ContainerReplicaTest, BadImageNamesAreRefusedSayingWhy) {
  EXPECT_THAT(CheckDockerImageName("").message(), HasSubstr("names no image"));
  EXPECT_THAT(CheckDockerImageName("gantry cpu").message(), HasSubstr("character"));
  EXPECT_THAT(CheckDockerImageName("--privileged").message(), HasSubstr("does not start"));
  EXPECT_THAT(CheckDockerImageName(std::string(300, 'a')).message(), HasSubstr("255"));
}

TEST(ContainerReplicaTest, ContainerNamesAreUniqueAndDockerSafe) {
  std::string name = ContainerName("my enc/υ", 3, 2);
  EXPECT_EQ(name.rfind("gantry-my-enc-", 0), 0u) << name;
  EXPECT_THAT(name, HasSubstr("-rep3-" + std::to_string(::getpid()) + "-2"));
  for (char c : name) {
    EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')
        << name;
  }
  EXPECT_NE(ContainerName("enc", 0, 1), ContainerName("enc", 0, 2));
}

TEST(ContainerReplicaTest, VolumesNeedAnAbsoluteTargetAndAKnownMode) {
  EXPECT_TRUE(CheckVolumeSpec("./models:/models:ro").ok());
  EXPECT_TRUE(CheckVolumeSpec("cache:/cache").ok());
  EXPECT_THAT(CheckVolumeSpec("/models").message(), HasSubstr("SOURCE:TARGET"));
  EXPECT_THAT(CheckVolumeSpec("./m:models").message(), HasSubstr("must be absolute"));
  EXPECT_THAT(CheckVolumeSpec("./m:/models:rx").message(), HasSubstr("mode \"rx\""));
  EXPECT_THAT(CheckVolumeSpec(std::string(5000, 'a') + ":/x").message(), HasSubstr("4096"));
}

TEST(ContainerReplicaTest, RelativeVolumeSourcesBecomeAbsoluteNamedVolumesStay) {
  EXPECT_EQ(AbsoluteVolumeSpec("./models:/models:ro", "/srv/app"), "/srv/app/models:/models:ro");
  EXPECT_EQ(AbsoluteVolumeSpec("data/x:/x", "/srv/app"), "/srv/app/data/x:/x");
  EXPECT_EQ(AbsoluteVolumeSpec("/abs:/x", "/srv/app"), "/abs:/x");
  EXPECT_EQ(AbsoluteVolumeSpec("cache:/cache", "/srv/app"), "cache:/cache");
}

TEST(ContainerReplicaTest, YamlVolumesAreReadRelativeToTheFile) {
  auto options = ParseDeploymentConfig(R"(jtype: Deployment
with:
  uses: docker://gantry:cpu
  volumes:
    - ./models:/models:ro
    - cache:/cache
)",
                                       "/srv/app/dep.yml");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->uses, "docker://gantry:cpu");
  EXPECT_THAT(options->volumes, ElementsAre("/srv/app/models:/models:ro", "cache:/cache"));
}

TEST(ContainerReplicaTest, ADockerTagEndingInYmlIsAnImageNotAFile) {
  auto options = ParseDeploymentConfig("jtype: Deployment\nwith:\n  uses: docker://enc:v1.yml\n",
                                       "/srv/app/dep.yml");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->uses, "docker://enc:v1.yml");
}

TEST(ContainerReplicaTest, BadYamlVolumesNameFileLineAndKey) {
  auto options = ParseDeploymentConfig(R"(jtype: Deployment
with:
  uses: docker://gantry:cpu
  volumes:
    - ./models:/models:ro
    - ./m:models
)",
                                       "/srv/app/dep.yml");
  ASSERT_FALSE(options.ok());
  EXPECT_THAT(options.status().message(), HasSubstr("dep.yml:6"));
  EXPECT_THAT(options.status().message(), HasSubstr("with.volumes[1]"));
  EXPECT_THAT(options.status().message(), HasSubstr("must be absolute"));
}

TEST(ContainerReplicaTest, MissingDockerProgramIsAnErrorNotACrash) {
  Status status =
      CheckDockerImagePresent("/nonexistent/docker", "gantry:cpu", std::chrono::seconds(5));
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("gantry:cpu"));
}

}  // namespace
}  // namespace gantry::internal
