// What torch_tensor.cc asks of torch_cuda.cc about loading libtorch's CUDA
// half (gantry::LoadTorchCuda, gantry/torch_cuda.h).
//
// Thread safety: safe for concurrent use.
#ifndef GANTRY_TORCH_TORCH_CUDA_LOADING_H_
#define GANTRY_TORCH_TORCH_CUDA_LOADING_H_

namespace gantry::internal {

// An NVIDIA driver is installed (and, in a container, handed in): where
// `auto` loads the CUDA libraries to see whether a device is visible. Asks
// the kernel, not CUDA.
bool NvidiaDriverInstalled();

}  // namespace gantry::internal

#endif  // GANTRY_TORCH_TORCH_CUDA_LOADING_H_
