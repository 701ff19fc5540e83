#include "my_gpu_exec.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/rand.h>
#include <gantry/torch_cuda.h>
#include <gantry/torch_tensor.h>

#include <cstdint>
#include <stdexcept>

namespace gantry_examples {

MyGPUExec::MyGPUExec(const gantry::ExecutorContext& context)
    : device_(gantry::ResolveTorchDevice(context.device)) {
  // Fails the replica's start, with the reason, if the device is not usable.
  gantry::Status usable = gantry::CheckTorchDevice(device_);
  if (!usable.ok()) {
    throw std::runtime_error(usable.message());
  }
}

void MyGPUExec::Encode(gantry::DocList& docs) {
  // InferenceMode, and on a GPU this worker's own CUDA stream.
  gantry::InferenceScope scope(device_);
  const std::string where = device_.is_cuda() ? "GPU" : "CPU";
  auto options = at::TensorOptions().dtype(at::kFloat).device(gantry::ToTorchDevice(device_));
  // One kernel for the whole batch; the result stays on the device until
  // the single copy back in RowsFromTorch.
  at::Tensor embeddings = at::rand({static_cast<std::int64_t>(docs.size()), 5}, options);
  std::vector<gantry::Tensor> rows = gantry::RowsFromTorch(embeddings);
  for (std::size_t i = 0; i < docs.size(); ++i) {
    docs[i].set_embedding(std::move(rows[i]));
    docs[i].set_text("Embeddings calculated on " + where);
  }
}

GANTRY_REGISTER_EXECUTOR(MyGPUExec);

}  // namespace gantry_examples
