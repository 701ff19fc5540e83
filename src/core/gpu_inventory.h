// The GPUs a process may use, as the NVIDIA driver (NVML, loaded with
// dlopen) reports them: no libtorch, no CUDA context. Shared by the
// Deployment, which plans replicas over them (deployment/placement.h), and
// the worker, which names the GPU its executor runs on.
//
// Thread safety: DiscoverGpus is safe for concurrent use; the rest are pure
// functions.
#ifndef GANTRY_CORE_GPU_INVENTORY_H_
#define GANTRY_CORE_GPU_INVENTORY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gantry::internal {

struct GpuInfo {
  // How a child's CUDA_VISIBLE_DEVICES names this GPU: its index in PCI bus
  // order ("2"), or the UUID when this process's CUDA_VISIBLE_DEVICES used
  // one.
  std::string id;
  std::string uuid;
  std::string name;
  std::uint64_t memory_total_bytes = 0;
  std::uint64_t memory_used_bytes = 0;
};

struct GpuInventory {
  // The GPUs this process may use, in CUDA's order (cuda:0 first).
  std::vector<GpuInfo> gpus;
  // Where the list came from, for messages: "NVML", "GANTRY_FAKE_GPUS",
  // "no NVIDIA driver (libnvidia-ml.so.1 not found)", ...
  std::string source;
};

// The GPUs of this machine that CUDA_VISIBLE_DEVICES (indices or UUIDs; an
// "RR..." value is Jina's replica syntax and hides nothing) lets this
// process see. GANTRY_FAKE_GPUS="name,name,..." replaces the driver's list.
// Never fails: without a driver the inventory is empty.
GpuInventory DiscoverGpus();

// `all` filtered and reordered by a CUDA_VISIBLE_DEVICES value, as CUDA
// does: indices and (prefixes of) UUIDs, up to the first invalid entry.
std::vector<GpuInfo> ApplyCudaVisibleDevices(const std::vector<GpuInfo>& all,
                                             std::string_view cuda_visible_devices);

// "1 is visible (NVIDIA H100 80GB)", "2 are visible (2 x NVIDIA A10)",
// "0 are visible (<source>)".
std::string DescribeVisibleGpus(const GpuInventory& inventory);

// The entries of a comma-separated GPU list ("0, 2,", "GPU-ab,1"), trimmed
// of spaces and tabs, empty entries dropped: CUDA_VISIBLE_DEVICES and
// `gpus` lists alike.
std::vector<std::string> SplitGpuList(std::string_view text);

// A GPU index as written in such a list ("2"); nullopt for anything else
// (a UUID).
std::optional<int> ParseGpuIndex(std::string_view text);

// `text` without leading and trailing spaces and tabs.
std::string_view TrimBlanks(std::string_view text);

}  // namespace gantry::internal

#endif  // GANTRY_CORE_GPU_INVENTORY_H_
