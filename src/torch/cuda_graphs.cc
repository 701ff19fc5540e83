// CapturedGraphs: the cache of graphs per key, and the loader of the CUDA
// capturer. This file needs no CUDA headers: the capturer is
// libgantry_cuda_graphs.so (src/torch_cuda_graphs), which uses libtorch's
// at::cuda::CUDAGraph and is loaded only once libtorch_cuda is.
#include <ATen/ops/empty_like.h>
#include <dlfcn.h>
#include <gantry/cuda_graphs.h>
#include <gantry/log.h>
#include <gantry/torch_cuda.h>
#include <unistd.h>

#include <array>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace gantry {
namespace {

constexpr const char* kLibraryName = "libgantry_cuda_graphs.so";
// The library's one entry point (src/torch_cuda_graphs/cuda_graph_capturer.cc).
constexpr const char* kFactoryName = "gantry_cuda_graph_capturer_create";
using Factory = GraphCapturer* (*)(int device_index, char* error, std::size_t error_size);

std::string ProgramFolder() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

// Where the library may be: beside the program (the build tree's bin/),
// in the install's library folder from it, where this build put it (test
// programs elsewhere in the build tree), and dlopen's own search last.
std::vector<std::string> LibraryCandidates() {
  std::vector<std::string> candidates;
  if (const std::string folder = ProgramFolder(); !folder.empty()) {
    candidates.push_back(folder + "/" + kLibraryName);
    candidates.push_back(folder + "/../" GANTRY_INSTALL_LIBDIR "/" + kLibraryName);
  }
#ifdef GANTRY_CUDA_GRAPHS_BUILD_PATH
  candidates.emplace_back(GANTRY_CUDA_GRAPHS_BUILD_PATH);
#endif
  candidates.emplace_back(kLibraryName);
  return candidates;
}

StatusOr<Factory> LoadFactory() {
  std::string tried;
  for (const std::string& path : LibraryCandidates()) {
    const bool searched = path.find('/') == std::string::npos;
    if (!searched && ::access(path.c_str(), R_OK) != 0) {
      tried += path + ", ";
      continue;
    }
    // RTLD_NOW: a symbol this torch lacks (a library built against another
    // torch) is an error here, not a crash at the first capture.
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = ::dlerror();
      if (searched) {
        tried += path + " on the library path";
        break;
      }
      return FailedPreconditionError("cannot load " + path + ": " +
                                     (why != nullptr ? why : "unknown dlopen error"));
    }
    void* symbol = ::dlsym(handle, kFactoryName);
    if (symbol == nullptr) {
      return FailedPreconditionError(path + " has no " + kFactoryName);
    }
    return reinterpret_cast<Factory>(symbol);  // never unloaded: graphs live to the end
  }
  return UnimplementedError(std::string("no ") + kLibraryName +
                            " (it is built where CUDA's headers and a CUDA build of libtorch "
                            "are found); looked for " +
                            tried);
}

}  // namespace

StatusOr<std::unique_ptr<CapturedGraphs>> CapturedGraphs::ForDevice(const Device& device,
                                                                    std::size_t max_graphs) {
  if (!device.is_cuda()) {
    return InvalidArgumentError("CUDA graphs need a CUDA device, not " + device.ToString());
  }
  GANTRY_RETURN_IF_ERROR(LoadTorchCuda().WithPrefix("CUDA graphs on " + device.ToString()));
  static const StatusOr<Factory>* const factory = new StatusOr<Factory>(LoadFactory());
  if (!factory->ok()) {
    return factory->status();
  }
  std::array<char, 512> error{};
  GraphCapturer* capturer =
      (**factory)(device.has_index() ? device.index() : 0, error.data(), error.size());
  if (capturer == nullptr) {
    return FailedPreconditionError("CUDA graphs on " + device.ToString() + ": " +
                                   std::string(error.data()));
  }
  return std::make_unique<CapturedGraphs>(std::unique_ptr<GraphCapturer>(capturer), max_graphs);
}

CapturedGraphs::CapturedGraphs(std::unique_ptr<GraphCapturer> capturer, std::size_t max_graphs)
    : capturer_(std::move(capturer)), max_graphs_(max_graphs) {}

// The graphs go before the capturer (members in reverse order), so a graph's
// buffers are freed while the pool they came from is still known.
CapturedGraphs::~CapturedGraphs() = default;

std::vector<at::Tensor> CapturedGraphs::Run(const std::string& key,
                                            const std::vector<at::Tensor>& inputs,
                                            const Step& step) {
  std::lock_guard lock(mutex_);
  // After a failed capture no graph is trusted, captured before or not.
  if (!failure_.empty()) {
    return step(inputs);
  }
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    if (graphs_.size() >= max_graphs_) {
      return step(inputs);
    }
    Graph graph;
    graph.id = graphs_.size();
    for (const at::Tensor& input : inputs) {
      graph.inputs.push_back(at::empty_like(input).copy_(input, /*non_blocking=*/true));
    }
    it = graphs_.emplace(key, std::move(graph)).first;
    Graph& captured = it->second;
    try {
      // The body holds its own copy of step: a capturer may keep it.
      capturer_->Capture(captured.id,
                         [&captured, step] { captured.outputs = step(captured.inputs); });
    } catch (const std::exception& e) {
      failure_ = std::string("capturing a CUDA graph failed (") + e.what() +
                 "); forward passes run without graphs from now on";
      LogWarning(failure_);
      graphs_.erase(it);
      return step(inputs);
    }
  } else {
    std::vector<at::Tensor>& held = it->second.inputs;
    if (held.size() != inputs.size()) {
      throw std::invalid_argument("CUDA graph '" + key + "' takes " + std::to_string(held.size()) +
                                  " inputs, not " + std::to_string(inputs.size()));
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (held[i].sizes() != inputs[i].sizes() || held[i].dtype() != inputs[i].dtype()) {
        throw std::invalid_argument("CUDA graph '" + key + "': input " + std::to_string(i) +
                                    " changed shape or dtype since it was captured");
      }
      held[i].copy_(inputs[i], /*non_blocking=*/true);
    }
  }
  capturer_->Replay(it->second.id);
  std::vector<at::Tensor> outputs;
  outputs.reserve(it->second.outputs.size());
  for (const at::Tensor& output : it->second.outputs) {
    outputs.push_back(output.clone());
  }
  return outputs;
}

std::size_t CapturedGraphs::size() const {
  std::lock_guard lock(mutex_);
  return graphs_.size();
}

std::string CapturedGraphs::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

}  // namespace gantry
