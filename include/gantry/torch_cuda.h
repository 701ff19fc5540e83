// File: gantry/torch_cuda.h   (library gantry::torch; needs libtorch)
//
// GPU hygiene for executors, behind run-time checks so that the same code
// runs on the CPU, where every helper degrades to a plain no-op or copy:
//
//   void Encode(gantry::DocList& docs) {
//     gantry::InferenceScope scope(device_);        // InferenceMode + own stream
//     at::Tensor input = gantry::ToDeviceAsync(host_batch, device_);  // pinned
//     at::Tensor out = model_(input);               // stays on the device...
//     auto rows = gantry::RowsFromTorch(out);       // ...until one copy back
//     for (std::size_t i = 0; i < docs.size(); ++i) docs[i].set_embedding(std::move(rows[i]));
//   }
//
// and, in the constructor, after the model is loaded onto the device:
//
//   registration_ = gantry::RegisterTensorsForDeviceCheck("model", [this] {
//     return model_.named_tensors();  // std::vector<std::pair<std::string, at::Tensor>>
//   });
//
// Thread safety: InferenceScope is one thread at a time (it sets the
// calling thread's current stream); the functions are safe for concurrent use.
#ifndef GANTRY_TORCH_CUDA_H_
#define GANTRY_TORCH_CUDA_H_

#include <gantry/device.h>
#include <gantry/device_report.h>
#include <gantry/document.h>
#include <gantry/status.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace at {
class Tensor;
}  // namespace at

namespace gantry {

// For its lifetime: torch InferenceMode and, on a CUDA device, this
// process's own CUDA stream (one per device, taken once from torch's pool)
// as the current stream, so forward passes never queue behind work on the
// default stream. The destructor waits for the stream only if asked to.
class InferenceScope {
 public:
  explicit InferenceScope(const Device& device);
  ~InferenceScope();
  InferenceScope(const InferenceScope&) = delete;
  InferenceScope& operator=(const InferenceScope&) = delete;

  // True when a CUDA stream is in use (false on the CPU).
  bool on_cuda() const;
  // Blocks until the work queued on the stream so far has finished.
  void Synchronize();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// `host` (a CPU tensor) on `device`: for CUDA, copied through pinned
// (page-locked) memory without blocking the calling thread, on the current
// stream; for the CPU, `host` itself.
at::Tensor ToDeviceAsync(const at::Tensor& host, const Device& device);

// One document tensor per row of `batch`, with a single device-to-host
// copy for the whole batch (not one synchronising copy per document).
std::vector<Tensor> RowsFromTorch(const at::Tensor& batch);

// Loads libtorch's CUDA half, unless it is loaded already: libtorch_cuda.so
// from the folder of the libtorch_cpu.so in use (and, through it, the CUDA
// libraries it needs), whose static initialisers register torch's CUDA
// backend. Gantry's programs link only libtorch_cpu, so that a process on
// the CPU maps no CUDA library. The worker calls it before constructing an
// executor on `cuda`/`cuda:N` (and on `auto` where an NVIDIA driver is
// installed), and CheckTorchDevice, ResolveTorchDevice, ToTorchDevice,
// InferenceScope and ToDeviceAsync call it for such a device, so an executor
// rarely needs to; a program that reaches CUDA through torch by other means
// calls it first. It must run before torch is first asked about CUDA: torch
// remembers the answer "no CUDA" for the life of the process.
// FailedPrecondition naming the library and the loader's error otherwise.
// The outcome of the first call is every later call's.
Status LoadTorchCuda();

// Registers named tensors (a model's parameters and buffers) for the
// worker's device check and its info RPC; see gantry/device_report.h.
// Keep the registration as long as the tensors live.
[[nodiscard]] DeviceCheckRegistration RegisterTensorsForDeviceCheck(
    std::string owner, std::function<std::vector<std::pair<std::string, at::Tensor>>()> tensors);

}  // namespace gantry

#endif  // GANTRY_TORCH_CUDA_H_
