// CUDA streams, pinned copies, the device-check registration and the
// loading of libtorch's CUDA half, through c10's device-generic interfaces:
// this file needs no CUDA headers, builds with GANTRY_WITH_CUDA off and runs
// on CPU-only libtorch, where the CUDA branches are never taken.
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <dlfcn.h>
#include <gantry/device_runtime.h>
#include <gantry/torch_cuda.h>
#include <gantry/torch_tensor.h>
#include <link.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "torch/torch_cuda_loading.h"

namespace gantry {
namespace {

bool CudaUsable() {
  return LoadTorchCuda().ok() && at::detail::getCUDAHooks().isBuilt() && at::hasCUDA();
}

// Whether the library with this soname is already in the process.
bool Loaded(const char* soname) {
  void* handle = ::dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) {
    return false;
  }
  ::dlclose(handle);
  return true;
}

// The folder of the libtorch_cpu.so this process runs: libtorch_cuda.so
// lies beside it, in the wheel as in an unpacked libtorch.
StatusOr<std::string> TorchLibraryFolder() {
  void* handle = ::dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) {
    return FailedPreconditionError("libtorch_cpu.so is not loaded in this process");
  }
  link_map* map = nullptr;
  const int got = ::dlinfo(handle, RTLD_DI_LINKMAP, &map);
  ::dlclose(handle);
  if (got != 0 || map == nullptr || map->l_name == nullptr) {
    return FailedPreconditionError("cannot tell where libtorch_cpu.so was loaded from");
  }
  const std::string path = map->l_name;
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

Status LoadTorchCudaNow() {
  // Programs built against torch's CMake package link it at start.
  if (!Loaded("libtorch_cuda.so")) {
    GANTRY_ASSIGN_OR_RETURN(const std::string folder, TorchLibraryFolder());
    const std::string path = folder + "/libtorch_cuda.so";
    if (::access(path.c_str(), F_OK) != 0) {
      return FailedPreconditionError("this libtorch was built without CUDA (there is no " + path +
                                     ")");
    }
    // Bound lazily and global, as a program linked with it would have it.
    if (::dlopen(path.c_str(), RTLD_LAZY | RTLD_GLOBAL) == nullptr) {
      const char* error = ::dlerror();
      return FailedPreconditionError("libtorch's CUDA libraries could not be loaded: " +
                                     std::string(error != nullptr ? error : path));
    }
  }
  if (!at::detail::getCUDAHooks().isBuilt()) {
    return FailedPreconditionError(
        "libtorch_cuda.so is loaded, but torch was asked about CUDA before it was, and keeps the "
        "answer 'no CUDA' (call gantry::LoadTorchCuda() before anything else asks torch about "
        "CUDA)");
  }
  return OkStatus();
}

// The worker's loader (gantry/device_runtime.h). For `auto` a failure is
// not an error: auto then resolves to the CPU.
Status LoadTorchCudaFor(const Device& device) {
  if (device.is_auto() && internal::NvidiaDriverInstalled()) {
    LoadTorchCuda().IgnoreError();
  } else if (device.is_cuda()) {
    return LoadTorchCuda().WithPrefix("device " + device.ToString());
  }
  return OkStatus();
}

const bool kLoaderRegistered = RegisterDeviceRuntimeLoader(&LoadTorchCudaFor);

// This process's stream on `device`: taken from the pool once, so every
// forward pass of the worker runs on the same non-default stream.
c10::Stream OwnStream(const at::Device& device) {
  static std::mutex mutex;
  static std::map<int, c10::Stream>* streams = new std::map<int, c10::Stream>();
  std::lock_guard lock(mutex);
  auto it = streams->find(device.index());
  if (it == streams->end()) {
    c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    it = streams->emplace(device.index(), impl.getStreamFromGlobalPool(device, false)).first;
  }
  return it->second;
}

}  // namespace

// Referenced by every program that links gantry::torch (CMake's
// --undefined), so that the loader above is registered even where nothing
// else of this file is used.
extern "C" const bool* gantry_torch_cuda_loader();
extern "C" const bool* gantry_torch_cuda_loader() { return &kLoaderRegistered; }

namespace internal {

bool NvidiaDriverInstalled() {
  return ::access("/proc/driver/nvidia/version", F_OK) == 0 ||
         ::access("/dev/nvidiactl", F_OK) == 0;
}

}  // namespace internal

Status LoadTorchCuda() {
  static const Status* const loaded = new Status(LoadTorchCudaNow());  // never destroyed
  return *loaded;
}

struct InferenceScope::State {
  c10::InferenceMode inference;
  std::optional<c10::Stream> stream;
  std::optional<c10::StreamGuard> guard;
};

InferenceScope::InferenceScope(const Device& device) : state_(std::make_unique<State>()) {
  if (device.is_cuda() && CudaUsable()) {
    state_->stream = OwnStream(ToTorchDevice(device));
    state_->guard.emplace(*state_->stream);
  }
}

InferenceScope::~InferenceScope() = default;

bool InferenceScope::on_cuda() const { return state_->stream.has_value(); }

void InferenceScope::Synchronize() {
  if (state_->stream) {
    state_->stream->synchronize();
  }
}

at::Tensor ToDeviceAsync(const at::Tensor& host, const Device& device) {
  if (!device.is_cuda() || !CudaUsable() || !host.device().is_cpu()) {
    return device.is_cuda() ? host.to(ToTorchDevice(device)) : host;
  }
  // Pinned memory lets the copy run asynchronously; the caching host
  // allocator keeps the buffer alive until the stream has used it.
  at::Tensor pinned = host.is_pinned() ? host : host.pin_memory();
  return pinned.to(ToTorchDevice(device), /*non_blocking=*/true);
}

std::vector<Tensor> RowsFromTorch(const at::Tensor& batch) {
  // One synchronising copy for the batch; rows are then views of host memory.
  at::Tensor host = batch.device().is_cpu() ? batch : batch.to(at::kCPU);
  std::vector<Tensor> rows;
  const std::int64_t n = host.dim() == 0 ? 0 : host.size(0);
  rows.reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    rows.push_back(FromTorch(host.select(0, i)));
  }
  return rows;
}

DeviceCheckRegistration RegisterTensorsForDeviceCheck(
    std::string owner, std::function<std::vector<std::pair<std::string, at::Tensor>>()> tensors) {
  return RegisterDeviceCheck(std::move(owner), [tensors = std::move(tensors)] {
    std::vector<TensorPlacement> out;
    for (const auto& [name, tensor] : tensors()) {
      out.push_back({name, tensor.device().str()});
    }
    return out;
  });
}

}  // namespace gantry
