// The CPU quota of this process's cgroup, in cores. libgomp and libtorch size
// their thread pools by the CPUs a process may run on and ignore a quota, so
// a worker limited to 2 cores (docker --cpus 2, a Kubernetes cpu limit) on a
// 64-core node would start 64 threads and be throttled.
//
// Thread safety: free functions over files; callable from any thread.
#ifndef GANTRY_COMMON_CPU_QUOTA_H_
#define GANTRY_COMMON_CPU_QUOTA_H_

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

namespace gantry::internal {

// Whole cores `quota_us` of CPU time per `period_us` allows, rounded up, at
// least 1; nullopt when there is no quota (quota_us < 0) or the period is not
// positive.
std::optional<int> QuotaCores(std::int64_t quota_us, std::int64_t period_us);

// The smallest quota, in cores, on the way from this process's cgroup up to
// the root of the hierarchy mounted at `cgroup_root`, as `proc_self_cgroup`
// (the text of /proc/self/cgroup) places it. cgroup v2 (`cpu.max`) and v1
// (`cpu.cfs_quota_us`, `cpu.cfs_period_us` under the `cpu` controller's
// mount). Directories that are not there (a container sees its own cgroup as
// the root) are skipped; nullopt when no quota is found.
std::optional<int> CgroupCpuQuotaCores(const std::filesystem::path& cgroup_root,
                                       std::string_view proc_self_cgroup);

// The same for this process: /sys/fs/cgroup and /proc/self/cgroup.
std::optional<int> CgroupCpuQuotaCores();

}  // namespace gantry::internal

#endif  // GANTRY_COMMON_CPU_QUOTA_H_
