// GPU placement end to end without a GPU: GANTRY_FAKE_GPUS stands in for
// the driver, and PlacementProbeExec (which touches no CUDA) reports the
// CUDA_VISIBLE_DEVICES and device each replica really received.
#include "deployment/placement.h"

#include <gantry/deployment.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "core/gpu_inventory.h"
#include "testutil/testutil.h"

namespace gantry {
namespace {

using ::testing::HasSubstr;

using testing::FakeGpus;

TEST(PlacementIntegrationTest, ReplicasReceiveThePlannedEnvAndDevice) {
  FakeGpus gpus("NVIDIA H100 80GB,NVIDIA H100 80GB");
  Deployment dep({.uses = "PlacementProbeExec", .replicas = 4, .gpus = "0.5"});
  ASSERT_TRUE(dep.ok()) << dep.status();

  std::vector<ReplicaInfo> replicas = dep.replicas();
  ASSERT_EQ(replicas.size(), 4u);
  const std::vector<std::string> planned{"0", "1", "0", "1"};
  std::map<std::int64_t, const ReplicaInfo*> by_pid;
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    EXPECT_EQ(replicas[i].cuda_visible_devices, planned[i]) << replicas[i].name;
    EXPECT_EQ(replicas[i].device, "cuda:0") << replicas[i].name;
    EXPECT_THAT(replicas[i].placement, HasSubstr("(NVIDIA H100 80GB) x0.5"));
    by_pid[replicas[i].pid] = &replicas[i];
  }

  DocList docs;
  for (int i = 0; i < 40; ++i) {
    docs.emplace_back("probe " + std::to_string(i));
  }
  auto result = dep.Post("/", docs, {.request_size = 1});
  ASSERT_TRUE(result.ok()) << result.status();
  std::map<std::int64_t, int> seen;
  for (const Doc& doc : *result) {
    std::int64_t pid = *doc.tags().at("pid").AsInt();
    ASSERT_TRUE(by_pid.contains(pid)) << "pid " << pid << " is no replica of ours";
    // What the worker process saw is what the plan said.
    EXPECT_EQ(*doc.tags().at("cuda_visible_devices").AsText(), by_pid[pid]->cuda_visible_devices);
    EXPECT_EQ(*doc.tags().at("device").AsText(), "cuda:0");
    ++seen[pid];
  }
  EXPECT_EQ(seen.size(), 4u);  // round robin reached every replica
}

TEST(PlacementIntegrationTest, ExplicitDeviceAndZeroGpus) {
  FakeGpus gpus("NVIDIA A10,NVIDIA A10");
  Deployment dep({.uses = "PlacementProbeExec",
                  .uses_with = {{"device", "cuda"}},
                  .replicas = 2,
                  .gpus = "1"});
  ASSERT_TRUE(dep.ok()) << dep.status();
  auto result = dep.Post("/", DocList{Doc("a"), Doc("b")}, {.request_size = 1});
  ASSERT_TRUE(result.ok()) << result.status();
  for (const Doc& doc : *result) {
    EXPECT_EQ(*doc.tags().at("device").AsText(), "cuda");
  }

  Deployment cpu({.uses = "PlacementProbeExec", .gpus = "0"});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto hidden = cpu.Post("/", DocList{Doc("a")});
  ASSERT_TRUE(hidden.ok()) << hidden.status();
  EXPECT_EQ(*(*hidden)[0].tags().at("cuda_visible_devices").AsText(), "");
  EXPECT_EQ(*(*hidden)[0].tags().at("device").AsText(), "cpu");
}

TEST(PlacementIntegrationTest, OverAskingFailsBeforeSpawningAnything) {
  FakeGpus gpus("NVIDIA H100 80GB");
  Deployment dep({.uses = "PlacementProbeExec", .replicas = 4, .gpus = "1"});
  EXPECT_EQ(dep.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(dep.status().message(),
            "deployment 'executor': replicas=4 with gpus=1 needs 4 GPUs; 1 is visible (NVIDIA "
            "H100 80GB)");
  EXPECT_TRUE(dep.replicas().empty());

  Deployment bad({.uses = "PlacementProbeExec", .uses_with = {{"device", "cuda:3"}}, .gpus = "0"});
  EXPECT_THAT(bad.status().message(),
              HasSubstr("uses_with.device cuda:3 needs a GPU, but gpus=0 gives the replicas none"));
  EXPECT_TRUE(bad.replicas().empty());
}

TEST(PlacementIntegrationTest, JinaRoundRobinEnv) {
  FakeGpus gpus("NVIDIA A10,NVIDIA A10,NVIDIA A10");
  Deployment dep(
      {.uses = "PlacementProbeExec", .replicas = 3, .env = {{"CUDA_VISIBLE_DEVICES", "RR1:3"}}});
  ASSERT_TRUE(dep.ok()) << dep.status();
  std::vector<std::string> visible;
  for (const ReplicaInfo& replica : dep.replicas()) {
    visible.push_back(replica.cuda_visible_devices);
  }
  EXPECT_EQ(visible, (std::vector<std::string>{"1", "2", "1"}));
}

// Replicas on one machine split its cores between their OpenMP pools
// instead of each starting one thread per core; a user's own setting wins.
TEST(PlacementIntegrationTest, CpuReplicasShareTheCoresUnlessTheUserSizedThem) {
  std::string expected =
      std::to_string(internal::IntraOpThreadsPerReplica(internal::AvailableCpuCores(), 2));
  std::string expected_single = "<unset>";
  if (const char* own = std::getenv("OMP_NUM_THREADS"); own != nullptr) {
    expected = expected_single = own;  // inherited unchanged
  }
  auto threads_seen = [](Deployment& dep, const char* tag) {
    std::set<std::string> seen;
    DocList docs;
    for (int i = 0; i < 8; ++i) {
      docs.emplace_back("probe " + std::to_string(i));
    }
    auto result = dep.Post("/", docs, {.request_size = 1});
    EXPECT_TRUE(result.ok()) << result.status();
    std::set<std::int64_t> pids;
    for (const Doc& doc : result.ok() ? *result : DocList{}) {
      seen.insert(*doc.tags().at(tag).AsText());
      pids.insert(*doc.tags().at("pid").AsInt());
    }
    EXPECT_EQ(pids.size(), dep.replicas().size());  // every replica answered
    return seen;
  };

  Deployment two({.uses = "PlacementProbeExec", .replicas = 2, .gpus = "0"});
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(threads_seen(two, "omp_num_threads"), std::set<std::string>{expected});
  if (std::getenv("OMP_NUM_THREADS") == nullptr && std::getenv("MKL_NUM_THREADS") == nullptr) {
    EXPECT_EQ(threads_seen(two, "mkl_num_threads"), std::set<std::string>{expected});
  }

  // One replica keeps its libraries' own default.
  Deployment one({.uses = "PlacementProbeExec", .gpus = "0"});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(threads_seen(one, "omp_num_threads"), std::set<std::string>{expected_single});

  Deployment sized({.uses = "PlacementProbeExec",
                    .replicas = 2,
                    .env = {{"OMP_NUM_THREADS", "3"}},
                    .gpus = "0"});
  ASSERT_TRUE(sized.ok()) << sized.status();
  EXPECT_EQ(threads_seen(sized, "omp_num_threads"), std::set<std::string>{"3"});
}

// A CUDA device on a machine without one fails the start with the device
// named, through the worker's status pipe, not at the first request.
TEST(PlacementIntegrationTest, UnusableCudaDeviceFailsTheStart) {
  if (!internal::DiscoverGpus().gpus.empty()) {
    GTEST_SKIP() << "a CUDA device is visible; this test needs a machine without one";
  }
  Deployment dep({.uses = "MyGPUExec", .uses_with = {{"device", "cuda"}}});
  ASSERT_FALSE(dep.ok());
  EXPECT_THAT(dep.status().message(), HasSubstr("replica executor/rep-0 failed to start"));
  EXPECT_THAT(dep.status().message(), HasSubstr("device cuda"));
  // Torch's own answer: the worker loaded libtorch's CUDA half for the
  // device (it is not linked), and CUDA then found no device.
  EXPECT_THAT(dep.status().message(), HasSubstr("no CUDA device is visible"));
  EXPECT_TRUE(dep.replicas().empty() || dep.port() == 0);
}

// The CUDA libraries of the torch wheel mapped by process `pid`, one per
// line of /proc/PID/maps that names one (empty: none).
std::set<std::string> CudaLibrariesMappedBy(pid_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  EXPECT_TRUE(maps.is_open()) << "pid " << pid;
  std::set<std::string> found;
  std::string line;
  while (std::getline(maps, line)) {
    const std::size_t slash = line.rfind('/');
    const std::string file = slash == std::string::npos ? "" : line.substr(slash + 1);
    // libtorch_cpu itself links the small libcudart and libcupti; the rest
    // come with libtorch_cuda.
    for (const char* heavy :
         {"libtorch_cuda", "libc10_cuda", "libcublas", "libcudnn", "libnccl", "libnvrtc",
          "libcusparse", "libcufft", "libcurand", "libcusolver", "libnvshmem"}) {
      if (file.starts_with(heavy)) {
        found.insert(file);
      }
    }
  }
  return found;
}

// A replica on the CPU maps none of the CUDA libraries (hundreds of MB):
// they are loaded only for a CUDA device.
TEST(PlacementIntegrationTest, ACpuReplicaMapsNoCudaLibrary) {
  Deployment dep({.uses = "MyGPUExec", .uses_with = {{"device", "cpu"}}});
  ASSERT_TRUE(dep.ok()) << dep.status();
  auto served = dep.Post("/encode", DocList{Doc("a")});
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ((*served)[0].text(), "Embeddings calculated on CPU");
  ASSERT_EQ(dep.replicas().size(), 1u);
  EXPECT_THAT(CudaLibrariesMappedBy(dep.replicas()[0].pid), ::testing::IsEmpty());
  // Nor does this program, the replica's parent, which links the same.
  EXPECT_THAT(CudaLibrariesMappedBy(::getpid()), ::testing::IsEmpty());
}

}  // namespace
}  // namespace gantry
