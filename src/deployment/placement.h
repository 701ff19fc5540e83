// Placement of a Deployment's replicas: which GPUs each replica may see (its
// CUDA_VISIBLE_DEVICES), which device string its executor gets, and how many
// OpenMP threads each may start on the CPU cores they share.
// PlanPlacement is pure logic over a GpuInventory (core/gpu_inventory.h), so
// it is unit-tested over synthetic inventories; DiscoverGpus fills one from
// the NVIDIA driver without creating a CUDA context, so the parent process
// never initialises CUDA at all.
//
// Thread safety: PlanPlacement and IntraOpThreadsPerReplica are pure
// functions; AvailableCpuCores may be called from any thread.
#ifndef GANTRY_DEPLOYMENT_PLACEMENT_H_
#define GANTRY_DEPLOYMENT_PLACEMENT_H_

#include <gantry/status.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/cpu_quota.h"  // thread-pool sizing, for the callers of placement
#include "core/gpu_inventory.h"

namespace gantry::internal {

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
