// File: gantry/torch_tensor.h   (library gantry::torch; needs libtorch)
//
// Document tensors as torch tensors and back. Include <ATen/...> headers
// yourself for the operations you use; this header only declares.
#ifndef GANTRY_TORCH_TENSOR_H_
#define GANTRY_TORCH_TENSOR_H_

#include <gantry/device.h>
#include <gantry/document.h>
#include <gantry/status.h>

#include <string_view>

namespace at {
class Tensor;
}  // namespace at
namespace c10 {
struct Device;
}  // namespace c10

namespace gantry {

// A CPU torch tensor that *views* `tensor`'s bytes without copying. The view
// is valid only while `tensor` lives and is not resized. Throws
// std::invalid_argument for dtypes torch lacks (e.g. unsigned 16-bit).
at::Tensor AsTorchView(Tensor& tensor);

// A torch tensor on `device` holding a copy of `tensor`.
at::Tensor ToTorch(const Tensor& tensor, const Device& device = Device::Cpu());

// A document tensor holding a copy of `tensor` (moved to CPU and made
// contiguous first). bfloat16, which numpy lacks, is converted to float32.
Tensor FromTorch(const at::Tensor& tensor);

// The numpy dtype string for a torch dtype name, for errors and tests.
std::string_view NumpyDTypeOf(const at::Tensor& tensor);

// Checks `device` against this process's libtorch: CUDA must be compiled in
// and `cuda:N` must name a visible device. FailedPrecondition otherwise,
// with the number of visible devices in the message.
Status CheckTorchDevice(const Device& device);

// Resolves "auto" to cuda when a device is visible, else cpu.
Device ResolveTorchDevice(const Device& device);

// The torch device for `device` ("auto" resolved as above; "cuda" without an
// index is cuda:0, the first device this process sees). Executors move
// their model with it: `model.to(gantry::ToTorchDevice(context.device))`.
c10::Device ToTorchDevice(const Device& device);

}  // namespace gantry

#endif  // GANTRY_TORCH_TENSOR_H_
