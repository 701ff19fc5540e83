// Container replicas (`uses: docker://IMAGE`) on the local Docker engine,
// with the CPU image that scripts/docker_images.sh builds (gantry:cpu, or
// $GANTRY_TEST_IMAGE). ctest label `docker`: every test skips, saying why,
// where no daemon answers or the image is missing (scripts/container_tests.sh
// runs them where one does). Every container a test starts carries the
// test's labels and is removed at the end, also when the test fails.
#include <gantry/client.h>
#include <gantry/deployment.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "deployment/child_process.h"
#include "testutil/testutil.h"

namespace gantry {
namespace {

using internal::ChildProcess;
using internal::ChildProcessPtr;
using ::testing::HasSubstr;
using Ms = std::chrono::milliseconds;

constexpr Ms kReady{180000};

std::string TestImage() {
  const char* image = std::getenv("GANTRY_TEST_IMAGE");
  return image != nullptr && *image != '\0' ? image : "gantry:cpu";
}

struct CommandResult {
  bool ok = false;
  std::string output;
};

// `docker ARGS`, bounded; output is stdout and stderr together.
CommandResult Docker(std::vector<std::string> args, Ms timeout = Ms(60000)) {
  testing::TempDir dir;
  internal::ChildProcessOptions options;
  options.program = "docker";
  options.args = std::move(args);
  options.output_file = dir.File("out");
  auto process = ChildProcess::Spawn(options);
  if (!process.ok()) {
    return {false, process.status().message()};
  }
  CommandResult result;
  if ((*process)->WaitFor(timeout)) {
    int status = *(*process)->exit_status();
    result.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  } else {
    (*process)->Terminate(Ms(1000));
  }
  result.output = testing::ReadFile(options.output_file);
  return result;
}

// Names of the containers (running or not) that carry `label`.
std::vector<std::string> ContainersLabelled(const std::string& label) {
  CommandResult listed =
      Docker({"ps", "-a", "--filter", "label=" + label, "--format", "{{.Names}}"});
  std::vector<std::string> names;
  std::istringstream lines(listed.output);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) {
      names.push_back(line);
    }
  }
  return names;
}

// Skips the test unless a daemon answers and the image is here.
#define GANTRY_REQUIRE_DOCKER_IMAGE()                                                          \
  do {                                                                                         \
    if (!Docker({"info", "--format", "{{.ServerVersion}}"}, Ms(20000)).ok) {                   \
      GTEST_SKIP() << "no Docker daemon answers (`docker info` failed): "                      \
                      "scripts/container_tests.sh starts one and runs these tests";            \
    }                                                                                          \
    if (!Docker({"image", "inspect", TestImage()}, Ms(20000)).ok) {                            \
      GTEST_SKIP() << "image " << TestImage() << " is missing: build it with "                 \
                   << "scripts/docker_images.sh --cpu-only (scripts/container_tests.sh does)"; \
    }                                                                                          \
  } while (false)

// Removes whatever containers carry `label` when the test ends, however it
// ends. Thread safety: one owner.
class RemoveContainersAtExit {
 public:
  explicit RemoveContainersAtExit(std::string label) : label_(std::move(label)) {}
  ~RemoveContainersAtExit() {
    for (const std::string& name : ContainersLabelled(label_)) {
      Docker({"rm", "-f", name});
    }
  }
  RemoveContainersAtExit(const RemoveContainersAtExit&) = delete;
  RemoveContainersAtExit& operator=(const RemoveContainersAtExit&) = delete;

 private:
  std::string label_;
};

// The SentenceEncoder with the model mounted when the tests have the model
// (GANTRY_MODEL_PATH, as scripts/test.sh sets it), else the no-op executor.
struct ImageExecutor {
  std::map<std::string, std::string> env;
  std::vector<std::string> volumes;
  bool encodes = false;
};
ImageExecutor PickExecutor() {
  ImageExecutor picked;
  const char* model = std::getenv("GANTRY_MODEL_PATH");
  if (model != nullptr && *model != '\0') {
    picked.env["GANTRY_EXECUTOR"] = "SentenceEncoder";
    picked.volumes.push_back(std::string(model) + ":/models/all-MiniLM-L6-v2:ro");
    picked.encodes = true;
  } else {
    picked.env["GANTRY_EXECUTOR"] = "NoOpExec";
  }
  return picked;
}

DocList SomeDocs(int n) {
  DocList docs;
  for (int i = 0; i < n; ++i) {
    docs.emplace_back("a sentence about container number " + std::to_string(i));
  }
  return docs;
}

void ExpectServed(const StatusOr<DocList>& out, int n, bool encodes) {
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), static_cast<std::size_t>(n));
  for (const Doc& doc : *out) {
    if (!encodes) {
      continue;
    }
    const Tensor* embedding = doc.embedding();
    ASSERT_NE(embedding, nullptr) << doc.text();
    ASSERT_EQ(embedding->shape(), (std::vector<std::int64_t>{384}));
    double norm = 0;
    for (float v : embedding->Values<float>()) {
      norm += static_cast<double>(v) * v;
    }
    EXPECT_NEAR(std::sqrt(norm), 1.0, 1e-3);
  }
}

TEST(ContainerTest, ReplicasRunAsContainersServeAndAreRemovedOnStop) {
  GANTRY_REQUIRE_DOCKER_IMAGE();
  const std::string owner = "gantry.owner-pid=" + std::to_string(::getpid());
  RemoveContainersAtExit cleanup(owner);
  ImageExecutor executor = PickExecutor();
  {
    Deployment dep({.uses = "docker://" + TestImage(),
                    .name = "ctserve",
                    .replicas = 2,
                    .env = executor.env,
                    .volumes = executor.volumes,
                    .timeout_ready = kReady});
    ASSERT_TRUE(dep.ok()) << dep.status();
    std::vector<ReplicaInfo> replicas = dep.replicas();
    ASSERT_EQ(replicas.size(), 2u);
    for (const ReplicaInfo& replica : replicas) {
      ASSERT_FALSE(replica.container.empty());
      CommandResult state =
          Docker({"inspect", "--format", "{{.State.Running}} {{.Config.User}}", replica.container});
      EXPECT_TRUE(state.ok) << state.output;
      EXPECT_THAT(state.output, HasSubstr("true 10001")) << replica.container;
    }
    ExpectServed(dep.Post("/encode", SomeDocs(40), {.request_size = 4}), 40, executor.encodes);
    for (const ReplicaInfo& replica : dep.replicas()) {
      EXPECT_GT(replica.requests, 0u) << replica.name << " got no request";
    }
  }
  // --rm, and the Deployment's own `docker rm -f` on stop.
  EXPECT_TRUE(ContainersLabelled(owner).empty());
}

TEST(ContainerTest, AKilledContainerIsReplacedByANewOne) {
  GANTRY_REQUIRE_DOCKER_IMAGE();
  const std::string owner = "gantry.owner-pid=" + std::to_string(::getpid());
  RemoveContainersAtExit cleanup(owner);
  Deployment dep({.uses = "docker://" + TestImage(),
                  .name = "ctrespawn",
                  .replicas = 1,
                  .env = {{"GANTRY_EXECUTOR", "NoOpExec"}},
                  .timeout_ready = kReady,
                  .restart_backoff_initial = Ms(100)});
  ASSERT_TRUE(dep.ok()) << dep.status();
  const std::string first = dep.replicas()[0].container;
  CommandResult killed = Docker({"kill", first});
  ASSERT_TRUE(killed.ok) << killed.output;
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        ReplicaInfo now = dep.replicas()[0];
        return now.restarts == 1 && now.available && now.container != first &&
               dep.Post("/", SomeDocs(1)).ok();
      },
      Ms(60000)))
      << dep.replicas()[0].error;
  EXPECT_TRUE(Docker({"inspect", dep.replicas()[0].container}).ok);
}

TEST(ContainerTest, SigkillOfGantryLeavesNoContainerBehind) {
  GANTRY_REQUIRE_DOCKER_IMAGE();
  const std::string name = "ctsigkill" + std::to_string(::getpid());
  const std::string label = "gantry.deployment=" + name;
  RemoveContainersAtExit cleanup(label);
  testing::TempDir dir;
  testing::WriteFile(dir.File("dep.yml"), "jtype: Deployment\nwith:\n  name: " + name +
                                              "\n  uses: docker://" + TestImage() +
                                              "\n  replicas: 2\n  env:\n"
                                              "    GANTRY_EXECUTOR: NoOpExec\n");
  internal::ChildProcessOptions options;
  options.program = testing::GantryCli();
  options.args = {"deployment", "--uses",      dir.File("dep.yml"), "--port",
                  "0",          "--port-file", dir.File("port")};
  options.output_file = dir.File("cli.log");
  auto cli = ChildProcess::Spawn(options);
  ASSERT_TRUE(cli.ok()) << cli.status();
  std::optional<std::string> port = testing::WaitForFile(dir.File("port"), kReady);
  ASSERT_TRUE(port.has_value()) << testing::ReadFile(dir.File("cli.log"));
  Client client("127.0.0.1:" + std::to_string(std::stoi(*port)));
  ExpectServed(client.Post("/", SomeDocs(10), {.request_size = 2}), 10, false);
  ASSERT_EQ(ContainersLabelled(label).size(), 2u);

  (*cli)->Signal(SIGKILL);
  ASSERT_TRUE((*cli)->WaitFor(Ms(10000)));
  const auto killed_at = std::chrono::steady_clock::now();
  EXPECT_TRUE(testing::WaitUntil([&] { return ContainersLabelled(label).empty(); }, Ms(60000)))
      << "left behind: " << testing::ReadFile(dir.File("cli.log"));
  std::printf("[ measured ] containers gone %lld ms after SIGKILL of gantry\n",
              static_cast<long long>(testing::Since(killed_at).count()));
}

TEST(ContainerTest, AnImageThatIsNotHereFailsTheStartNamingIt) {
  GANTRY_REQUIRE_DOCKER_IMAGE();
  Deployment dep({.uses = "docker://gantry-test-no-such-image:none", .name = "ctmissing"});
  ASSERT_FALSE(dep.ok());
  EXPECT_THAT(dep.status().message(), HasSubstr("gantry-test-no-such-image:none"));
  EXPECT_THAT(dep.status().message(), HasSubstr("not on this machine"));
}

TEST(ContainerTest, AnImageThatNamesNoExecutorFailsTheStartSayingSo) {
  GANTRY_REQUIRE_DOCKER_IMAGE();
  const std::string owner = "gantry.owner-pid=" + std::to_string(::getpid());
  RemoveContainersAtExit cleanup(owner);
  Deployment dep({.uses = "docker://" + TestImage(),
                  .name = "ctnoexec",
                  .env = {{"GANTRY_EXECUTOR", ""}},
                  .timeout_ready = kReady});
  ASSERT_FALSE(dep.ok());
  EXPECT_THAT(dep.status().message(), HasSubstr("GANTRY_EXECUTOR"));
  EXPECT_THAT(dep.status().message(), HasSubstr("ctnoexec/rep-0"));
}

// The image's HEALTHCHECK asks the port the command wrote to
// $GANTRY_PORT_FILE, so a Deployment whose YAML names no port (a free one
// is picked) comes up healthy, as one on the examples' 8080 does.
TEST(ContainerTest, TheImagesHealthCheckFindsAPortTheYamlDidNotName) {
  GANTRY_REQUIRE_DOCKER_IMAGE();
  const std::string label = "gantry.test-healthcheck=" + std::to_string(::getpid());
  RemoveContainersAtExit cleanup(label);
  testing::TempDir dir;
  {
    std::ofstream yaml(dir.File("deployment.yml"));
    yaml << "jtype: Deployment\nwith:\n  name: probed\n  uses: NoOpExec\n  replicas: 1\n";
  }
  // The image runs as uid 10001.
  std::filesystem::permissions(
      dir.path(), std::filesystem::perms::others_read | std::filesystem::perms::others_exec,
      std::filesystem::perm_options::add);
  std::filesystem::permissions(dir.File("deployment.yml"), std::filesystem::perms::others_read,
                               std::filesystem::perm_options::add);
  const std::string name = "gantry-test-health-" + std::to_string(::getpid());
  CommandResult started =
      Docker({"run", "-d", "--name", name, "--label", label, "-v", dir.path() + ":/config:ro",
              TestImage(), "deployment", "--uses", "/config/deployment.yml"});
  ASSERT_TRUE(started.ok) << started.output;
  std::string health;
  // The check runs every 10 s; the first that passes makes it healthy.
  const bool healthy = testing::WaitUntil(
      [&] {
        health = Docker({"inspect", "--format", "{{.State.Health.Status}}", name}).output;
        if (health.rfind("healthy", 0) == 0) {
          return true;
        }
        ::usleep(500000);
        return false;
      },
      Ms(90000));
  EXPECT_TRUE(healthy) << "health: " << health << "\nlogs:\n" << Docker({"logs", name}).output;
  const CommandResult port = Docker({"exec", name, "cat", "/tmp/gantry.port"});
  ASSERT_TRUE(port.ok) << port.output;
  EXPECT_NE(std::stoi(port.output), 0);
}

}  // namespace
}  // namespace gantry
