// File: gantry/device_report.h
//
// The worker's device check: after an executor's constructor returns, the
// worker lists every tensor the executor registered here and refuses to
// start if one is not on the executor's device (a model silently left on
// the CPU, or on cuda:0 when it should be on cuda:1). Torch-free: executors
// that use libtorch call gantry::RegisterTensorsForDeviceCheck
// (gantry/torch_tensor.h), which fills this registry.
//
// Thread safety: safe for concurrent use.
#ifndef GANTRY_DEVICE_REPORT_H_
#define GANTRY_DEVICE_REPORT_H_

#include <gantry/device.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gantry {

// Where one registered tensor lives ("cpu", "cuda:0").
struct TensorPlacement {
  std::string name;
  std::string device;
};

// Lists the tensors of one registration; called by the worker after start
// and for the info RPC, while the registration lives.
using TensorLister = std::function<std::vector<TensorPlacement>()>;

// Keeps a registration alive; the destructor removes it, so an executor
// holds one as a member and never leaves a dangling lister behind.
class DeviceCheckRegistration {
 public:
  DeviceCheckRegistration() = default;
  ~DeviceCheckRegistration();
  DeviceCheckRegistration(DeviceCheckRegistration&& other) noexcept;
  DeviceCheckRegistration& operator=(DeviceCheckRegistration&& other) noexcept;
  DeviceCheckRegistration(const DeviceCheckRegistration&) = delete;
  DeviceCheckRegistration& operator=(const DeviceCheckRegistration&) = delete;

 private:
  friend DeviceCheckRegistration RegisterDeviceCheck(std::string owner, TensorLister lister);
  explicit DeviceCheckRegistration(std::uint64_t id) : id_(id) {}
  std::uint64_t id_ = 0;
};

// `owner` prefixes the tensor names in messages ("bert.encoder.0.weight").
[[nodiscard]] DeviceCheckRegistration RegisterDeviceCheck(std::string owner, TensorLister lister);

struct DeviceCheckResult {
  std::size_t tensors = 0;
  // "owner.name on cpu", for each tensor not on the expected device.
  std::vector<std::string> misplaced;
};

// Compares every registered tensor with `expected`: "cuda" accepts any CUDA
// device, "auto" any single device shared by all tensors.
DeviceCheckResult CheckRegisteredDevices(const Device& expected);

}  // namespace gantry

#endif  // GANTRY_DEVICE_REPORT_H_
