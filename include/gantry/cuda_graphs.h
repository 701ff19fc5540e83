// File: gantry/cuda_graphs.h   (library gantry::torch; needs libtorch)
//
// CUDA graphs for a model's forward pass: the kernels one step launches for
// one input shape are captured once and then launched again as a single
// graph, which spares the CPU a launch per kernel. For small models on a
// fast GPU (a MiniLM pass is some hundred short kernels) those launches,
// not the kernels, can bound a pass.
//
//   // At load, for a CUDA device (in a function that returns a Status):
//   GANTRY_ASSIGN_OR_RETURN(graphs_, gantry::CapturedGraphs::ForDevice(device_, 256));
//   // Per batch, inside an InferenceScope, with inputs already on the device:
//   std::vector<at::Tensor> out = graphs_->Run(ShapeKey(ids), {ids, mask},
//       [&](const std::vector<at::Tensor>& in) { return std::vector{model_(in[0], in[1])}; });
//
// The step must do the same thing for every input of the same key: only the
// values of `inputs` change between replays, so the key must name whatever
// else decides what the step does (shapes, dtypes, flags). It must not copy
// to the host, read a tensor's value on the host, or synchronise: those
// cannot be captured, and the first such failure turns graphs off.
//
// Thread safety: Run may be called from several threads at once (one mutex
// holds each call); they must share one current CUDA stream, as every
// InferenceScope of a process does on one device. Work other threads queue
// meanwhile is never recorded into a graph (captures use a stream of their
// own).
#ifndef GANTRY_CUDA_GRAPHS_H_
#define GANTRY_CUDA_GRAPHS_H_

#include <ATen/core/Tensor.h>
#include <gantry/device.h>
#include <gantry/status.h>

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace gantry {

// Captures and replays graphs on the current CUDA stream: CUDA's own
// (the library libgantry_cuda_graphs.so, loaded for a CUDA device only), or
// a test's stand-in. Thread-compatible: CapturedGraphs serialises calls.
class GraphCapturer {
 public:
  virtual ~GraphCapturer() = default;
  // Records what `body` queues as graph `id` (0, 1, ... in order), after
  // what the current stream holds. CUDA's runs body once eagerly (so that
  // lazy set-up happens outside the capture), then captures it on a stream
  // of its own, and returns once that stream is idle. Throws what body or CUDA throws, and leaves
  // no stream in capture mode then. `body` stays valid for as long as the capturer, so a stand-in
  // may run it again at each replay.
  virtual void Capture(std::size_t id, const std::function<void()>& body) = 0;
  // Queues graph `id` on the current stream.
  virtual void Replay(std::size_t id) = 0;
};

class CapturedGraphs {
 public:
  using Step = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

  // For a CUDA `device`: loads libgantry_cuda_graphs.so (beside the
  // program, in ../lib from it, or where the build put it). Keeps at most
  // `max_graphs` graphs; other keys run eagerly. The error says why graphs
  // cannot be used (a CPU device, no CUDA, a build without the library).
  static StatusOr<std::unique_ptr<CapturedGraphs>> ForDevice(const Device& device,
                                                             std::size_t max_graphs);

  CapturedGraphs(std::unique_ptr<GraphCapturer> capturer, std::size_t max_graphs);
  ~CapturedGraphs();
  CapturedGraphs(const CapturedGraphs&) = delete;
  CapturedGraphs& operator=(const CapturedGraphs&) = delete;

  // step(inputs). The first call with `key` copies `inputs` into buffers of
  // its own, has the capturer capture step on them, and replays it; later
  // calls copy `inputs` into those buffers and replay. Inputs of a key must keep its shapes and
  // dtypes (std::invalid_argument otherwise). Returns copies of the
  // outputs, so a later replay does not overwrite them. Past max_graphs
  // new keys run step eagerly; once a capture has failed every key does,
  // and no graph is replayed again.
  std::vector<at::Tensor> Run(const std::string& key, const std::vector<at::Tensor>& inputs,
                              const Step& step);

  // Graphs captured so far.
  std::size_t size() const;
  // Why capturing was turned off; empty while it works.
  std::string failure() const;

 private:
  struct Graph {
    std::size_t id = 0;
    std::vector<at::Tensor> inputs;
    std::vector<at::Tensor> outputs;
  };

  const std::unique_ptr<GraphCapturer> capturer_;
  const std::size_t max_graphs_;
  mutable std::mutex mutex_;
  // std::map: a Graph's address is stable while its step is captured.
  std::map<std::string, Graph> graphs_;
  std::string failure_;
};

}  // namespace gantry

#endif  // GANTRY_CUDA_GRAPHS_H_
