// CUDA streams, pinned copies and the device-check registration, through
// c10's device-generic interfaces: this file needs no CUDA headers, builds
// with GANTRY_WITH_CUDA off and runs on CPU-only libtorch, where the CUDA
// branches are never taken.
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gantry/torch_cuda.h>
#include <gantry/torch_tensor.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

namespace gantry {
namespace {

bool CudaUsable() { return at::detail::getCUDAHooks().isBuilt() && at::hasCUDA(); }

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
