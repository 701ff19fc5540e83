#include "common/cpu_quota.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "testutil/testutil.h"

namespace gantry::internal {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  testing::WriteFile(path.string(), text);
}

TEST(CpuQuotaTest, QuotaRoundsUpToWholeCores) {
  EXPECT_EQ(QuotaCores(200000, 100000), 2);
  EXPECT_EQ(QuotaCores(150000, 100000), 2);
  EXPECT_EQ(QuotaCores(50000, 100000), 1);
  EXPECT_EQ(QuotaCores(-1, 100000), std::nullopt);
  EXPECT_EQ(QuotaCores(100000, 0), std::nullopt);
}

TEST(CpuQuotaTest, CgroupV2TakesTheSmallestCpuMaxOnTheWayUp) {
  testing::TempDir dir;
  const fs::path root = dir.path();
  Write(root / "kubepods/pod1/cpu.max", "max 100000\n");
  Write(root / "kubepods/pod1/c1/cpu.max", "300000 100000\n");
  Write(root / "kubepods/cpu.max", "250000 100000\n");
  EXPECT_EQ(CgroupCpuQuotaCores(root, "0::/kubepods/pod1/c1\n"), 3);
  Write(root / "kubepods/cpu.max", "150000 100000\n");
  EXPECT_EQ(CgroupCpuQuotaCores(root, "0::/kubepods/pod1/c1\n"), 2);
  // A container sees its own cgroup as the root: the path is not below it.
  Write(root / "cpu.max", "100000 100000\n");
  EXPECT_EQ(CgroupCpuQuotaCores(root, "0::/docker/abc\n"), 1);
  EXPECT_EQ(CgroupCpuQuotaCores(root / "none", "0::/\n"), std::nullopt);
}

TEST(CpuQuotaTest, CgroupV1ReadsTheCpuControllersCfsQuota) {
  testing::TempDir dir;
  const fs::path root = dir.path();
  Write(root / "cpu,cpuacct/job/cpu.cfs_quota_us", "400000\n");
  Write(root / "cpu,cpuacct/job/cpu.cfs_period_us", "100000\n");
  Write(root / "cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  Write(root / "cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  const std::string cgroup = "12:memory:/job\n4:cpu,cpuacct:/job\n0::/\n";
  EXPECT_EQ(CgroupCpuQuotaCores(root, cgroup), 4);
  // No quota anywhere, or no cpu controller: none.
  Write(root / "cpu,cpuacct/job/cpu.cfs_quota_us", "-1\n");
  EXPECT_EQ(CgroupCpuQuotaCores(root, cgroup), std::nullopt);
  EXPECT_EQ(CgroupCpuQuotaCores(root, "12:memory:/job\n"), std::nullopt);
  // Unreadable text is no quota, not a crash.
  Write(root / "cpu,cpuacct/job/cpu.cfs_quota_us", "lots\n");
  EXPECT_EQ(CgroupCpuQuotaCores(root, cgroup), std::nullopt);
  EXPECT_EQ(CgroupCpuQuotaCores(root, "garbage\n::\n"), std::nullopt);
}

}  // namespace
}  // namespace gantry::internal
