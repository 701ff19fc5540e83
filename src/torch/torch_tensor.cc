// Document tensors <-> torch tensors, and which devices this process's
// libtorch can really use (through ATen's CUDA hooks, so it links and runs
// with CPU-only libtorch builds as well). Only narrow ATen headers: this file
// is compiled into every worker, so it must stay cheap to build.
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/ScalarType.h>
#include <gantry/torch_cuda.h>
#include <gantry/torch_tensor.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "torch/torch_cuda_loading.h"

namespace gantry {
namespace {

// numpy dtype string -> torch dtype. numpy writes "|" for one-byte types and
// "<" for little-endian; "=" and no prefix mean native (little-endian here).
at::ScalarType ScalarTypeOf(std::string_view dtype) {
  if (!dtype.empty() && (dtype[0] == '<' || dtype[0] == '|' || dtype[0] == '=')) {
    dtype.remove_prefix(1);
  } else if (!dtype.empty() && dtype[0] == '>') {
    throw std::invalid_argument("tensor dtype '" + std::string(dtype) +
                                "' is big-endian; torch needs little-endian data");
  }
  if (dtype == "f4") return at::kFloat;
  if (dtype == "f8") return at::kDouble;
  if (dtype == "f2") return at::kHalf;
  if (dtype == "i8") return at::kLong;
  if (dtype == "i4") return at::kInt;
  if (dtype == "i2") return at::kShort;
  if (dtype == "i1") return at::kChar;
  if (dtype == "u1") return at::kByte;
  if (dtype == "b1") return at::kBool;
  if (dtype == "c8") return at::kComplexFloat;
  if (dtype == "c16") return at::kComplexDouble;
  throw std::invalid_argument("tensor dtype '" + std::string(dtype) +
                              "' has no torch equivalent (supported: f2 f4 f8 i1 i2 i4 i8 u1 b1 "
                              "c8 c16)");
}

}  // namespace

at::Tensor AsTorchView(Tensor& tensor) {
  const at::ScalarType type = ScalarTypeOf(tensor.dtype());
  return at::from_blob(tensor.mutable_data(), tensor.shape(),
                       at::TensorOptions().dtype(type).device(at::kCPU));
}

at::Tensor ToTorch(const Tensor& tensor, const Device& device) {
  const at::ScalarType type = ScalarTypeOf(tensor.dtype());
  // The view never outlives this call: `to(..., copy=true)` owns its result.
  const at::Tensor view = at::from_blob(const_cast<char*>(tensor.data()), tensor.shape(),
                                        at::TensorOptions().dtype(type).device(at::kCPU));
  return view.to(ToTorchDevice(device), type, /*non_blocking=*/false, /*copy=*/true);
}

Tensor FromTorch(const at::Tensor& tensor) {
  at::Tensor cpu = tensor.detach();
  if (cpu.scalar_type() == at::kBFloat16) {
    // numpy has no bfloat16; float32 holds every bfloat16 value exactly.
    cpu = cpu.to(at::kFloat);
  }
  cpu = cpu.to(at::kCPU).contiguous();
  const std::string_view dtype = NumpyDTypeOf(cpu);
  if (dtype.empty() || dtype == "bfloat16") {
    throw std::invalid_argument(std::string("FromTorch: torch dtype ") +
                                c10::toString(cpu.scalar_type()) + " has no numpy equivalent");
  }
  const std::vector<std::int64_t> shape(cpu.sizes().begin(), cpu.sizes().end());
  std::string bytes(cpu.nbytes(), '\0');
  if (!bytes.empty()) {
    std::memcpy(bytes.data(), cpu.data_ptr(), bytes.size());
  }
  StatusOr<Tensor> result = Tensor::FromBytes(std::string(dtype), shape, std::move(bytes));
  if (!result.ok()) {
    throw std::invalid_argument("FromTorch: " + result.status().message());
  }
  return std::move(result).value();
}

std::string_view NumpyDTypeOf(const at::Tensor& tensor) {
  switch (tensor.scalar_type()) {
    case at::kFloat:
      return "<f4";
    case at::kDouble:
      return "<f8";
    case at::kHalf:
      return "<f2";
    case at::kBFloat16:
      // Not a numpy dtype; only for messages (FromTorch converts to float32).
      return "bfloat16";
    case at::kLong:
      return "<i8";
    case at::kInt:
      return "<i4";
    case at::kShort:
      return "<i2";
    case at::kChar:
      return "|i1";
    case at::kByte:
      return "|u1";
    case at::kBool:
      return "|b1";
    case at::kComplexFloat:
      return "<c8";
    case at::kComplexDouble:
      return "<c16";
    default:
      return "";
  }
}

c10::Device ToTorchDevice(const Device& device) {
  const Device resolved = ResolveTorchDevice(device);
  if (!resolved.is_cuda()) {
    return at::Device(at::kCPU);
  }
  // Where it cannot be loaded, CheckTorchDevice (and the worker) say why.
  LoadTorchCuda().IgnoreError();
  return at::Device(at::kCUDA,
                    static_cast<c10::DeviceIndex>(resolved.has_index() ? resolved.index() : 0));
}

// ---- Devices ---------------------------------------------------------------
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
  if (Status loaded = LoadTorchCuda(); !loaded.ok()) {
    return FailedPreconditionError("device " + name + ": " + loaded.message() + "; use device cpu");
  }
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
  // Without a driver there is no device to find, and no CUDA library to map.
  if (!internal::NvidiaDriverInstalled() || !LoadTorchCuda().ok()) {
    return Device::Cpu();
  }
  return VisibleCudaDevices() > 0 ? Device::Cuda(0) : Device::Cpu();
}

}  // namespace gantry
