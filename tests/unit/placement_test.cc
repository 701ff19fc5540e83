// The GPU placement planner over synthetic inventories: no GPU needed.
#include "deployment/placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

namespace gantry::internal {
namespace {

using ::testing::HasSubstr;

GpuInventory Gpus(int n, const std::string& name = "NVIDIA H100 80GB") {
  GpuInventory inventory;
  inventory.source = n == 0 ? "no NVIDIA driver: libnvidia-ml.so.1 not found" : "test";
  for (int i = 0; i < n; ++i) {
    inventory.gpus.push_back({std::to_string(i), "GPU-uuid-" + std::to_string(i), name, 0, 0});
  }
  return inventory;
}

PlacementRequest Request(int replicas, std::string gpus, std::string device = "") {
  PlacementRequest request;
  request.replicas = replicas;
  request.gpus = std::move(gpus);
  request.explicit_device = std::move(device);
  return request;
}

// CUDA_VISIBLE_DEVICES of every replica, "-" where none is set.
std::vector<std::string> Visible(const StatusOr<PlacementPlan>& plan) {
  std::vector<std::string> out;
  for (const ReplicaPlacement& r : plan->replicas) {
    out.push_back(r.cuda_visible_devices ? *r.cuda_visible_devices : "-");
  }
  return out;
}

std::vector<std::string> Devices(const StatusOr<PlacementPlan>& plan) {
  std::vector<std::string> out;
  for (const ReplicaPlacement& r : plan->replicas) {
    out.push_back(r.device);
  }
  return out;
}

using V = std::vector<std::string>;

TEST(PlacementTest, UnmanagedKeepsTheExecutorsDevice) {
  for (int n : {0, 1, 2, 8}) {
    auto plan = PlanPlacement(Request(2, ""), Gpus(n));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(Visible(plan), (V{"-", "-"}));
    EXPECT_EQ(Devices(plan), (V{"cpu", "cpu"}));
  }
  auto plan = PlanPlacement(Request(1, "", "cuda"), Gpus(0));
  ASSERT_TRUE(plan.ok());  // the worker reports "no CUDA device is visible"
  EXPECT_EQ(Devices(plan), (V{"cuda"}));
  auto bad = PlanPlacement(Request(1, "", "cuda:3"), Gpus(2));
  EXPECT_EQ(bad.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("uses_with.device cuda:3 does not exist: 2 are visible (2 x NVIDIA H100 "
                        "80GB) (cuda:0..cuda:1)"));
}

TEST(PlacementTest, ZeroGpusHidesThemAndRefusesCuda) {
  auto plan = PlanPlacement(Request(2, "0"), Gpus(8));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Visible(plan), (V{"", ""}));
  EXPECT_EQ(Devices(plan), (V{"cpu", "cpu"}));
  auto bad = PlanPlacement(Request(1, "0", "cuda:3"), Gpus(8));
  EXPECT_THAT(bad.status().message(),
              HasSubstr("deployment 'executor': uses_with.device cuda:3 needs a GPU, but gpus=0 "
                        "gives the replicas none"));
}

TEST(PlacementTest, WholeGpusGoToOneReplicaEach) {
  auto plan = PlanPlacement(Request(2, "1"), Gpus(2));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Visible(plan), (V{"0", "1"}));
  EXPECT_EQ(Devices(plan), (V{"cuda:0", "cuda:0"}));
  EXPECT_EQ(plan->replicas[1].description, "GPU 1 (NVIDIA H100 80GB)");

  auto two = PlanPlacement(Request(4, "2"), Gpus(8));
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(Visible(two), (V{"0,1", "2,3", "4,5", "6,7"}));
}

TEST(PlacementTest, OverAskingFailsNamingTheVisibleGpus) {
  auto plan = PlanPlacement(Request(4, "1"), Gpus(1));
  EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(plan.status().message(),
            "deployment 'executor': replicas=4 with gpus=1 needs 4 GPUs; 1 is visible (NVIDIA "
            "H100 80GB)");
  auto none = PlanPlacement(Request(1, "1"), Gpus(0));
  EXPECT_THAT(none.status().message(),
              HasSubstr("needs 1 GPU; 0 are visible (no NVIDIA driver: libnvidia-ml.so.1 not "
                        "found)"));
  auto eight = PlanPlacement(Request(3, "3"), Gpus(8));
  EXPECT_THAT(eight.status().message(), HasSubstr("replicas=3 with gpus=3 needs 9 GPUs; 8 are"));
  auto fraction = PlanPlacement(Request(5, "0.5"), Gpus(2));
  EXPECT_THAT(fraction.status().message(),
              HasSubstr("replicas=5 with gpus=0.5 (2 replicas per GPU) needs 3 GPUs; 2 are"));
}

TEST(PlacementTest, FractionsShareGpusRoundRobin) {
  auto one = PlanPlacement(Request(2, "0.5"), Gpus(1));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(Visible(one), (V{"0", "0"}));
  EXPECT_EQ(one->replicas[0].share, 0.5);
  EXPECT_EQ(one->replicas[0].description, "GPU 0 (NVIDIA H100 80GB) x0.5");

  auto two = PlanPlacement(Request(4, "0.5"), Gpus(2));
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(Visible(two), (V{"0", "1", "0", "1"}));

  auto third = PlanPlacement(Request(3, "0.3"), Gpus(1));  // floor(1 / 0.3) = 3 per GPU
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(Visible(third), (V{"0", "0", "0"}));
  EXPECT_FALSE(PlanPlacement(Request(4, "0.3"), Gpus(1)).ok());
  EXPECT_THAT(PlanPlacement(Request(1, "1.5"), Gpus(2)).status().message(),
              HasSubstr("whole GPUs or a fraction below 1"));
  EXPECT_THAT(PlanPlacement(Request(1, "lots"), Gpus(2)).status().message(),
              HasSubstr("gpus=\"lots\": expected a number of GPUs"));
}

TEST(PlacementTest, AllGivesOneReplicaEveryGpu) {
  auto plan = PlanPlacement(Request(1, "all"), Gpus(8));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Visible(plan), (V{"0,1,2,3,4,5,6,7"}));
  EXPECT_EQ(Devices(plan), (V{"cuda:0"}));
  EXPECT_THAT(PlanPlacement(Request(2, "all"), Gpus(8)).status().message(),
              HasSubstr("would all default to the same cuda:0"));
  EXPECT_THAT(PlanPlacement(Request(1, "all"), Gpus(0)).status().message(),
              HasSubstr("gpus=all needs at least 1 GPU; 0 are visible"));
}

TEST(PlacementTest, ListsTakeGpusRoundRobinByIndexOrUuid) {
  auto plan = PlanPlacement(Request(3, "0,2"), Gpus(8));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Visible(plan), (V{"0", "2", "0"}));
  auto one = PlanPlacement(Request(2, "3,"), Gpus(8));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(Visible(one), (V{"3", "3"}));
  EXPECT_EQ(one->replicas[0].share, 0.5);
  auto uuid = PlanPlacement(Request(1, "GPU-uuid-1,"), Gpus(2));
  ASSERT_TRUE(uuid.ok()) << uuid.status();
  EXPECT_EQ(Visible(uuid), (V{"1"}));
  EXPECT_THAT(PlanPlacement(Request(1, "0,2"), Gpus(2)).status().message(),
              HasSubstr("gpus=0,2: GPU 2 is not visible; 2 are visible"));
  EXPECT_THAT(PlanPlacement(Request(1, "GPU-nope,"), Gpus(2)).status().message(),
              HasSubstr("no visible GPU has UUID GPU-nope"));
}

TEST(PlacementTest, ExplicitDevicesAreCheckedAgainstThePlan) {
  auto plan = PlanPlacement(Request(2, "1", "cuda"), Gpus(2));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(Devices(plan), (V{"cuda", "cuda"}));
  auto two = PlanPlacement(Request(1, "2", "cuda:1"), Gpus(2));
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(Devices(two), (V{"cuda:1"}));
  auto bad = PlanPlacement(Request(2, "1", "cuda:3"), Gpus(2));
  EXPECT_EQ(bad.status().message(),
            "deployment 'executor': uses_with.device cuda:3 does not exist in replica "
            "executor/rep-0 (CUDA_VISIBLE_DEVICES=0), which sees 1 GPU (cuda:0); drop `device` "
            "to get cuda:0");
  auto cpu = PlanPlacement(Request(1, "1", "cpu"), Gpus(1));
  ASSERT_TRUE(cpu.ok());
  ASSERT_EQ(cpu->warnings.size(), 1u);
  EXPECT_THAT(cpu->warnings[0], HasSubstr("the GPU will sit idle"));
  EXPECT_FALSE(PlanPlacement(Request(1, "1", "gpu0"), Gpus(1)).ok());
}

PlacementRequest RoundRobin(int replicas, std::string value, bool from_env = true) {
  PlacementRequest request = Request(replicas, "");
  (from_env ? request.env_cuda_visible_devices : request.process_cuda_visible_devices) =
      std::move(value);
  return request;
}

TEST(PlacementTest, JinaRoundRobinForms) {
  // The forms of Jina's CUDA_VISIBLE_DEVICES=RR<suffix>: all GPUs, a slice, a list,
  // one index, a negative slice, UUIDs.
  EXPECT_EQ(Visible(PlanPlacement(RoundRobin(5, "RR"), Gpus(3))), (V{"0", "1", "2", "0", "1"}));
  EXPECT_EQ(Visible(PlanPlacement(RoundRobin(5, "RR0:2"), Gpus(3))), (V{"0", "1", "0", "1", "0"}));
  EXPECT_EQ(Visible(PlanPlacement(RoundRobin(5, "RR1,3"), Gpus(4))), (V{"1", "3", "1", "3", "1"}));
  EXPECT_EQ(Visible(PlanPlacement(RoundRobin(2, "RR[0:4:2]", false), Gpus(8))), (V{"0", "2"}));
  EXPECT_EQ(Visible(PlanPlacement(RoundRobin(2, "RR2"), Gpus(8))), (V{"2", "2"}));
  EXPECT_EQ(Visible(PlanPlacement(RoundRobin(3, "RR-2:"), Gpus(8))), (V{"6", "7", "6"}));
  EXPECT_EQ(Visible(PlanPlacement(RoundRobin(3, "RRGPU-0aaa,GPU-0bbb"), Gpus(0))),
            (V{"GPU-0aaa", "GPU-0bbb", "GPU-0aaa"}));
  EXPECT_EQ(Devices(PlanPlacement(RoundRobin(1, "RR"), Gpus(1))), (V{"cuda:0"}));
  // Env wins over the process's variable.
  PlacementRequest both = RoundRobin(2, "RR1");
  both.process_cuda_visible_devices = "RR0";
  EXPECT_EQ(Visible(PlanPlacement(both, Gpus(2))), (V{"1", "1"}));

  EXPECT_THAT(PlanPlacement(RoundRobin(1, "RR"), Gpus(0)).status().message(),
              HasSubstr("CUDA_VISIBLE_DEVICES=RR selects no GPU; 0 are visible"));
  EXPECT_THAT(PlanPlacement(RoundRobin(1, "RR5"), Gpus(2)).status().message(),
              HasSubstr("CUDA_VISIBLE_DEVICES=RR5 selects no GPU"));
  EXPECT_THAT(PlanPlacement(RoundRobin(1, "RR0:x"), Gpus(2)).status().message(),
              HasSubstr("\"x\" is not an integer"));
  PlacementRequest conflict = RoundRobin(1, "RR");
  conflict.gpus = "1";
  EXPECT_THAT(PlanPlacement(conflict, Gpus(2)).status().message(), HasSubstr("set only one"));
}

TEST(PlacementTest, CudaVisibleDevicesFiltersTheInventory) {
  std::vector<GpuInfo> all = Gpus(4).gpus;
  std::vector<GpuInfo> two = ApplyCudaVisibleDevices(all, "2,0");
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].id, "2");
  EXPECT_EQ(two[1].id, "0");
  std::vector<GpuInfo> by_uuid = ApplyCudaVisibleDevices(all, "GPU-uuid-3");
  ASSERT_EQ(by_uuid.size(), 1u);
  EXPECT_EQ(by_uuid[0].id, "GPU-uuid-3");
  EXPECT_EQ(ApplyCudaVisibleDevices(all, "1,9,2").size(), 1u);  // stops at the invalid entry
  EXPECT_TRUE(ApplyCudaVisibleDevices(all, "").empty());
  // A replica placed on the parent's second visible GPU gets its real id.
  GpuInventory inventory{two, "test"};
  EXPECT_EQ(Visible(PlanPlacement(Request(1, "0,1"), inventory)), (V{"2"}));
}

TEST(PlacementTest, FakeGpusStandInForTheDriver) {
  ::setenv("GANTRY_FAKE_GPUS", "NVIDIA A10,NVIDIA A10", 1);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  GpuInventory inventory = DiscoverGpus();
  ::unsetenv("GANTRY_FAKE_GPUS");
  ASSERT_EQ(inventory.gpus.size(), 2u);
  EXPECT_EQ(DescribeVisibleGpus(inventory), "2 are visible (2 x NVIDIA A10)");
  EXPECT_EQ(inventory.gpus[1].id, "1");
}

TEST(IntraOpThreadsTest, AnEvenShareOfTheCoresAndAtLeastOne) {
  EXPECT_EQ(IntraOpThreadsPerReplica(2, 1), 2);
  EXPECT_EQ(IntraOpThreadsPerReplica(2, 2), 1);
  EXPECT_EQ(IntraOpThreadsPerReplica(16, 3), 5);
  EXPECT_EQ(IntraOpThreadsPerReplica(2, 8), 1);
  EXPECT_EQ(IntraOpThreadsPerReplica(4, 0), 4);
  EXPECT_GE(AvailableCpuCores(), 1);
}

}  // namespace
}  // namespace gantry::internal
