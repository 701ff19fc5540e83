// The CPU quota of this process's cgroup, in cores. libgomp and libtorch size
// their thread pools by the CPUs a process may run on and ignore a quota, so
// a worker limited to 2 cores (docker --cpus 2, a Kubernetes cpu limit) on a
// 64-core node would start 64 threads and be throttled. Below it, how many
// threads a worker's pools get (the Deployment sizes them per replica; the
// worker checks what it was given).
//
// Thread safety: free functions over files; callable from any thread.
#ifndef GANTRY_COMMON_CPU_QUOTA_H_
#define GANTRY_COMMON_CPU_QUOTA_H_

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
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

// The environment variables that size a worker's OpenMP/MKL thread pools
// (libtorch's intra-op threads among them).
inline constexpr const char* kThreadCountVariables[] = {"OMP_NUM_THREADS", "MKL_NUM_THREADS"};

// Intra-op threads for each of `replicas` workers on `cores` CPU cores: an
// even share, at least 1. Left alone, each worker starts one thread per core,
// and libtorch's kernels, which wait at a barrier after every parallel
// region, ran several times slower with replicas x cores threads on `cores`
// cores (docs/benchmarks-encoder.md).
int IntraOpThreadsPerReplica(int cores, int replicas);

// CPU cores this process may run on (its affinity mask), at least 1.
int AffinityCpuCores();

// AffinityCpuCores, or fewer when this process's cgroup has a CPU quota of
// fewer cores (CgroupCpuQuotaCores): what its thread pools should use.
int AvailableCpuCores();

// Whether the user sized the thread pools: `env` (a replica's extra
// environment) or this process's environment sets one of
// kThreadCountVariables.
bool ThreadPoolsSizedByUser(const std::map<std::string, std::string>& env);

}  // namespace gantry::internal

#endif  // GANTRY_COMMON_CPU_QUOTA_H_
