#include "my_gpu_exec.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/rand.h>
#include <c10/core/InferenceMode.h>
#include <gantry/torch_tensor.h>

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
  c10::InferenceMode guard;
  const std::string where = device_.is_cuda() ? "GPU" : "CPU";
  at::Device device = device_.is_cuda()
                          ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_.index()))
                          : at::Device(at::kCPU);
  auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  for (gantry::Doc& doc : docs) {
    at::Tensor embedding = at::rand({5}, options);
    doc.set_embedding(gantry::FromTorch(embedding));
    doc.set_text("Embeddings calculated on " + where);
  }
}

GANTRY_REGISTER_EXECUTOR(MyGPUExec);

}  // namespace gantry_examples
