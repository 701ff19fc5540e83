// Which devices this process's libtorch can really use. Goes through ATen's
// CUDA hooks, so it links and runs with CPU-only libtorch builds as well.
#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <gantry/torch_tensor.h>

#include <string>

namespace gantry {
namespace {

// False when libtorch has no CUDA support compiled in (or libtorch_cuda was
// not loaded), in which case the hooks are the no-op defaults.
bool CudaBuilt() { return at::detail::getCUDAHooks().isBuilt(); }

int VisibleCudaDevices() {
  if (!CudaBuilt() || !at::hasCUDA()) {
    return 0;
  }
  return at::detail::getCUDAHooks().deviceCount();
}

}  // namespace

Status CheckTorchDevice(const Device& device) {
  if (device.is_cpu() || device.is_auto()) {
    return OkStatus();
  }
  const std::string name = device.ToString();
  if (!CudaBuilt()) {
    return FailedPreconditionError("device " + name +
                                   ": this libtorch was built without CUDA (0 visible CUDA "
                                   "devices); use device cpu");
  }
  const int count = VisibleCudaDevices();
  if (count == 0) {
    return FailedPreconditionError("device " + name +
                                   ": no CUDA device is visible (0 visible CUDA devices; check "
                                   "the driver and CUDA_VISIBLE_DEVICES)");
  }
  if (device.has_index() && device.index() >= count) {
    return FailedPreconditionError("device " + name + ": only " + std::to_string(count) +
                                   " CUDA device" + (count == 1 ? " is" : "s are") +
                                   " visible (cuda:0.." + "cuda:" + std::to_string(count - 1) +
                                   ")");
  }
  return OkStatus();
}

Device ResolveTorchDevice(const Device& device) {
  if (!device.is_auto()) {
    return device;
  }
  return VisibleCudaDevices() > 0 ? Device::Cuda(0) : Device::Cpu();
}

}  // namespace gantry
