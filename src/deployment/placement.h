// GPU placement of a Deployment's replicas: which GPUs each replica may see
// (its CUDA_VISIBLE_DEVICES) and which device string its executor gets.
// PlanPlacement is pure logic over a GpuInventory, so it is unit-tested over
// synthetic inventories; DiscoverGpus fills one from the NVIDIA driver
// (NVML, loaded with dlopen) without libtorch and without creating a CUDA
// context, so the parent process never initialises CUDA at all.
//
// Thread safety: PlanPlacement is a pure function; DiscoverGpus is safe for
// concurrent use.
#ifndef GANTRY_DEPLOYMENT_PLACEMENT_H_
#define GANTRY_DEPLOYMENT_PLACEMENT_H_

#include <gantry/status.h>

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

struct PlacementRequest {
  std::string deployment = "executor";
  int replicas = 1;
  // DeploymentOptions::gpus.
  std::string gpus;
  // uses_with.device, empty if not given.
  std::string explicit_device;
  // CUDA_VISIBLE_DEVICES from DeploymentOptions::env (it wins) and from this
  // process's environment; nullopt when unset.
  std::optional<std::string> env_cuda_visible_devices;
  std::optional<std::string> process_cuda_visible_devices;
};

struct ReplicaPlacement {
  // The device the worker's executor gets: uses_with.device if given, else
  // "cuda:0" when placed on GPUs, else "cpu".
  std::string device = "cpu";
  // Set in the worker's environment when present ("" hides every GPU).
  std::optional<std::string> cuda_visible_devices;
  // Indices into the inventory; empty when not placed (or placed by UUID).
  std::vector<int> gpus;
  // Share of each GPU (0.5 for gpus=0.5); 0 when not placed.
  double share = 0;
  // For logs and ReplicaInfo: "cpu", "GPU 1 (NVIDIA A10) x0.5".
  std::string description;
};

struct PlacementPlan {
  std::vector<ReplicaPlacement> replicas;
  // Legal but probably unintended, e.g. device cpu on a reserved GPU.
  std::vector<std::string> warnings;
};

// Plans every replica, or returns why the request cannot be met (naming
// deployment, replica, the request and the visible GPUs) before anything is
// spawned.
StatusOr<PlacementPlan> PlanPlacement(const PlacementRequest& request,
                                      const GpuInventory& inventory);

}  // namespace gantry::internal

#endif  // GANTRY_DEPLOYMENT_PLACEMENT_H_
