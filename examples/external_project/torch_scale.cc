// TorchScale: multiplies each document's `tensor` by `with: {factor: F}`
// with libtorch, on the executor's device, and returns the product as the
// document's `embedding`. Built twice against the installed Gantry: as a
// plugin for gantry-worker, which provides gantry::ToTorch & co (CMake:
// gantry_add_executor_plugin(... TORCH)), and into torch_scale_app, which
// links them itself (Gantry::torch).
#include <ATen/core/Tensor.h>
#include <ATen/ops/scalar_tensor.h>
#include <gantry/executor.h>
#include <gantry/torch_cuda.h>
#include <gantry/torch_tensor.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

class TorchScale final : public gantry::Executor {
  GANTRY_EXECUTOR(TorchScale);
  explicit TorchScale(const gantry::ExecutorContext& context)
      : device_(gantry::ResolveTorchDevice(context.device)) {
    if (gantry::Status usable = gantry::CheckTorchDevice(device_); !usable.ok()) {
      throw std::runtime_error(usable.message());
    }
    factor_ = at::scalar_tensor(
        context.with.GetNumber("factor", 1.0),
        at::TensorOptions().dtype(at::kFloat).device(gantry::ToTorchDevice(device_)));
    // After this constructor the worker checks that `factor` is on device_
    // (its log says tensors_on_device=1).
    registration_ = gantry::RegisterTensorsForDeviceCheck("TorchScale", [this] {
      return std::vector<std::pair<std::string, at::Tensor>>{{"factor", factor_}};
    });
  }

  GANTRY_REQUESTS(Scale, "/scale");
  void Scale(gantry::DocList& docs) {
    gantry::InferenceScope scope(device_);  // InferenceMode; on a GPU, the worker's stream
    for (gantry::Doc& doc : docs) {
      const gantry::Tensor* tensor = doc.tensor("tensor");
      if (tensor == nullptr) {
        throw std::invalid_argument("document '" + std::string(doc.text()) + "' has no tensor");
      }
      doc.set_embedding(gantry::FromTorch(gantry::ToTorch(*tensor, device_).mul(factor_)));
    }
  }

 private:
  gantry::Device device_;
  at::Tensor factor_;
  gantry::DeviceCheckRegistration registration_;  // declared last: released first
};
GANTRY_REGISTER_EXECUTOR(TorchScale);
