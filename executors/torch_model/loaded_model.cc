#include "loaded_model.h"

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <gantry/torch_tensor.h>
#include <stdlib.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <unordered_map>

namespace gantry::torch_model {
namespace {

// What torch's errors say, without the C++ backtrace c10::Error carries.
std::string Describe(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return c10_error->what_without_backtrace();
  }
  return e.what();
}

at::ScalarType ScalarTypeOfName(const std::string& dtype) {
  if (dtype == "float16") {
    return at::kHalf;
  }
  if (dtype == "bfloat16") {
    return at::kBFloat16;
  }
  return at::kFloat;
}

// `input` (one row) as two equal rows.
at::Tensor DoubledBatch(const at::Tensor& input) {
  std::vector<std::int64_t> sizes = input.sizes().vec();
  sizes[0] = 2;
  return input.expand(sizes).contiguous();
}

class AotInductorModel final : public LoadedModel {
 public:
  explicit AotInductorModel(std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader)
      : loader_(std::move(loader)) {}

  std::vector<at::Tensor> Run(std::vector<at::Tensor> inputs,
                              std::vector<std::string>* /*names*/) override {
    // torch.export gives a dynamic batch a lower bound of 2 (sizes 0 and 1
    // are specialised), which the package's input checks enforce: one
    // document runs as two equal rows, and the first row of each output is
    // its answer.
    const bool single = !inputs.empty() && inputs[0].dim() > 0 && inputs[0].size(0) == 1;
    if (single) {
      for (at::Tensor& input : inputs) {
        input = DoubledBatch(input);
      }
    }
    // A null stream: on CUDA the package runs on the caller's current
    // stream (gantry::InferenceScope's).
    std::vector<at::Tensor> outputs = loader_->boxed_run(std::move(inputs));
    if (single) {
      for (at::Tensor& output : outputs) {
        if (output.dim() > 0 && output.size(0) == 2) {
          output = output.narrow(0, 0, 1);
        }
      }
    }
    return outputs;
  }

  std::vector<std::pair<std::string, at::Tensor>> NamedTensors() const override {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& [name, tensor] :
         loader_->get_runner()->extract_constants_map(/*use_inactive=*/false)) {
      out.emplace_back(name, tensor);
    }
    return out;
  }

  const char* kind() const override { return "AOTInductor package"; }

 private:
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader_;
};

class TorchScriptModel final : public LoadedModel {
 public:
  explicit TorchScriptModel(torch::jit::Module module) : module_(std::move(module)) {}

  std::vector<at::Tensor> Run(std::vector<at::Tensor> inputs,
                              std::vector<std::string>* names) override {
    std::vector<c10::IValue> arguments(inputs.begin(), inputs.end());
    inputs.clear();
    c10::IValue result = module_.forward(std::move(arguments));
    std::vector<at::Tensor> out;
    auto take = [&](const c10::IValue& value, const std::string& where) {
      if (!value.isTensor()) {
        throw std::runtime_error("the TorchScript module returned " + where + " of type " +
                                 value.tagKind() + "; only tensors can be outputs");
      }
      out.push_back(value.toTensor());
    };
    if (result.isTensor()) {
      out.push_back(result.toTensor());
    } else if (result.isTuple()) {
      const auto& elements = result.toTupleRef().elements();
      for (std::size_t i = 0; i < elements.size(); ++i) {
        take(elements[i], "element " + std::to_string(i));
      }
    } else if (result.isList()) {
      const c10::List<c10::IValue> list = result.toList();
      for (std::size_t i = 0; i < list.size(); ++i) {
        take(list.get(i), "element " + std::to_string(i));
      }
    } else if (result.isGenericDict()) {
      for (const auto& entry : result.toGenericDict()) {
        if (!entry.key().isString()) {
          throw std::runtime_error(
              "the TorchScript module returned a dict whose keys are not "
              "strings; outputs need names");
        }
        const std::string name = entry.key().toStringRef();
        take(entry.value(), "\"" + name + "\"");
        if (names != nullptr) {
          names->push_back(name);
        }
      }
    } else {
      throw std::runtime_error(std::string("the TorchScript module returned a ") +
                               result.tagKind() +
                               "; expected a tensor, or a tuple, list or dict of tensors");
    }
    return out;
  }

  std::vector<std::pair<std::string, at::Tensor>> NamedTensors() const override {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
      out.emplace_back(p.name, p.value);
    }
    for (const auto& b : module_.named_buffers(/*recurse=*/true)) {
      out.emplace_back(b.name, b.value);
    }
    return out;
  }

  const char* kind() const override { return "TorchScript module"; }

 private:
  torch::jit::Module module_;
};

Status CheckReadable(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    return FailedPreconditionError("model file " + path + " does not exist or is not a file" +
                                   (error ? " (" + error.message() + ")" : std::string()));
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return FailedPreconditionError("model file " + path +
                                   " cannot be read: " + std::strerror(errno));
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<LoadedModel>> LoadAotInductor(const std::string& path,
                                                       const Device& device) {
  std::unordered_map<std::string, std::string> metadata;
  try {
    metadata = torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path, "model");
  } catch (const std::exception& e) {
    return FailedPreconditionError(path +
                                   " is not a readable AOTInductor package (.pt2 from "
                                   "torch._inductor.aoti_compile_and_package): " +
                                   Describe(e));
  }
  // The package is compiled for one kind of device; its key names it.
  const c10::Device torch_device = ToTorchDevice(device);
  const std::string want = torch_device.is_cuda() ? "cuda" : "cpu";
  if (auto it = metadata.find("AOTI_DEVICE_KEY"); it != metadata.end() && it->second != want) {
    return FailedPreconditionError(path + " was compiled for " + it->second +
                                   ", and this replica's device is " + device.ToString() +
                                   ": compile it again with the model and its example inputs on " +
                                   want + " (or set device: " + it->second + ")");
  }
  // The package's own checks of every input's dtype and sizes against what
  // it was compiled for, which it skips unless this is set: without them a
  // declaration the package contradicts reads past its inputs and answers
  // garbage. The generated code reads the variable once; a user's own
  // setting (0 turns them off) is kept.
  ::setenv("AOTI_RUNTIME_CHECK_INPUTS", "1", /*overwrite=*/0);
  try {
    auto loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        path, "model", /*run_single_threaded=*/false, /*num_runners=*/1,
        torch_device.is_cuda() ? torch_device.index() : c10::DeviceIndex(-1));
    return std::unique_ptr<LoadedModel>(std::make_unique<AotInductorModel>(std::move(loader)));
  } catch (const std::exception& e) {
    return FailedPreconditionError("cannot load AOTInductor package " + path + ": " + Describe(e));
  }
}

StatusOr<std::unique_ptr<LoadedModel>> LoadTorchScript(const std::string& path,
                                                       const Device& device,
                                                       const std::string& dtype) {
  try {
    torch::jit::Module module = torch::jit::load(path, ToTorchDevice(device));
    module.eval();
    if (dtype != "float32") {
      module.to(ScalarTypeOfName(dtype));
    }
    return std::unique_ptr<LoadedModel>(std::make_unique<TorchScriptModel>(std::move(module)));
  } catch (const std::exception& e) {
    return FailedPreconditionError(
        path + " is not a loadable TorchScript module (torch.jit.save): " + Describe(e));
  }
}

}  // namespace

ModelFormat FormatOfPath(const std::string& path) {
  return std::string_view(path).ends_with(".pt2") ? ModelFormat::kAotInductor
                                                  : ModelFormat::kTorchScript;
}

StatusOr<std::unique_ptr<LoadedModel>> LoadModel(const std::string& path, const Device& device,
                                                 const std::string& dtype) {
  GANTRY_RETURN_IF_ERROR(CheckReadable(path));
  if (FormatOfPath(path) == ModelFormat::kAotInductor) {
    return LoadAotInductor(path, device);
  }
  return LoadTorchScript(path, device, dtype);
}

}  // namespace gantry::torch_model
