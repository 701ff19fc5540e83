// File: executors/torch_model/loaded_model.h
//
// A PyTorch model the user exported, loaded without Python: an AOTInductor
// package (`torch._inductor.aoti_compile_and_package`, a .pt2 file holding
// a compiled shared library and the weights) or a TorchScript module
// (`torch.jit.script`/`trace` then `.save`, any other extension).
//
// Thread safety: Run is one caller at a time (the executor's handler
// thread); NamedTensors may be called from any thread while no Run is in
// flight, as the worker's device check does.
#ifndef GANTRY_EXECUTORS_TORCH_MODEL_LOADED_MODEL_H_
#define GANTRY_EXECUTORS_TORCH_MODEL_LOADED_MODEL_H_

#include <ATen/core/Tensor.h>
#include <gantry/device.h>
#include <gantry/status.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gantry::torch_model {

enum class ModelFormat { kAotInductor, kTorchScript };

// ".pt2": AOTInductor; anything else: TorchScript.
ModelFormat FormatOfPath(const std::string& path);

class LoadedModel {
 public:
  virtual ~LoadedModel() = default;

  // Runs one forward pass on `inputs` (on the model's device, in the
  // declared order). Returns the outputs in the model's order; `names`
  // receives output names where the model has them (a TorchScript module
  // returning a dict), else stays empty. Throws on a failing model.
  virtual std::vector<at::Tensor> Run(std::vector<at::Tensor> inputs,
                                      std::vector<std::string>* names) = 0;

  // Weights and buffers, for the worker's device check.
  virtual std::vector<std::pair<std::string, at::Tensor>> NamedTensors() const = 0;

  // "AOTInductor package" or "TorchScript module", for messages.
  virtual const char* kind() const = 0;
};

// Loads the model at `path` onto `device` (already checked against this
// process's libtorch). `dtype` ("float32", "float16", "bfloat16") converts
// a TorchScript module's floating weights; an AOTInductor package runs in
// the dtype it was compiled with. FailedPrecondition naming the file when
// it is missing, not a model of that format, or compiled for another
// device.
StatusOr<std::unique_ptr<LoadedModel>> LoadModel(const std::string& path, const Device& device,
                                                 const std::string& dtype);

}  // namespace gantry::torch_model

#endif  // GANTRY_EXECUTORS_TORCH_MODEL_LOADED_MODEL_H_
