// libgantry_cuda_graphs.so: gantry::GraphCapturer on libtorch's
// at::cuda::CUDAGraph. A library of its own because it needs libtorch_cuda,
// which Gantry's programs do not link (a replica on the CPU maps no CUDA
// library): gantry::CapturedGraphs::ForDevice loads it after
// gantry::LoadTorchCuda has loaded libtorch_cuda into the global scope, and
// its torch symbols resolve there. It must be built against the torch it
// runs with, as every part of Gantry that includes torch's headers.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gantry/cuda_graphs.h>

#include <cstddef>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace gantry {
namespace {

// Every graph of one capturer draws on one memory pool: a graph's
// intermediates are dead once its replay is done, so the next capture may
// reuse them; outputs stay allocated (CapturedGraphs holds them) and are
// never shared. Graphs are captured on a stream of the capturer's own, as
// torch.cuda.graph does, so that work other threads queue on the caller's
// stream meanwhile is not recorded into them; they are replayed on the
// caller's stream. Thread-compatible, as GraphCapturer.
class CudaGraphCapturer final : public GraphCapturer {
 public:
  explicit CudaGraphCapturer(c10::DeviceIndex device)
      : device_(device),
        pool_(at::cuda::graph_pool_handle()),
        capture_stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)) {}

  void Capture(std::size_t id, const std::function<void()>& body) override {
    if (id != graphs_.size()) {
      throw std::logic_error("CUDA graph " + std::to_string(id) + " captured out of order");
    }
    // What the caller queued (its inputs' copies) is done before the
    // capture stream reads it; captures are rare (warm-up, new shapes).
    const c10::cuda::CUDAStream caller_stream = c10::cuda::getCurrentCUDAStream(device_);
    caller_stream.synchronize();
    // torch hands out its pool's streams in turn, so the caller's may be
    // this one; then take the next, so that nothing else the caller's
    // stream runs meanwhile is recorded into the graph.
    if (capture_stream_ == caller_stream) {
      capture_stream_ = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_);
    }
    const c10::cuda::CUDAStreamGuard on_capture_stream(capture_stream_);
    // Once eagerly on this stream: what torch sets up per stream on first
    // use (cuBLAS's workspace) is set up outside the capture.
    body();
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    // Thread-local: a server's other threads may allocate or copy on their
    // own streams while this thread captures.
    graph->capture_begin(pool_, cudaStreamCaptureModeThreadLocal);
    try {
      body();
    } catch (...) {
      // End the capture so the stream can run work again; its own error,
      // if any, says less than the body's. Where CUDA refuses to end an
      // invalidated capture, torch has not yet stopped taking this stream's
      // allocations from the graphs' pool: stop it here.
      try {
        graph->capture_end();
      } catch (const std::exception&) {
        try {
          c10::cuda::CUDACachingAllocator::endAllocateToPool(device_, pool_);
        } catch (const std::exception&) {
        }
      }
      throw;
    }
    graph->capture_end();
    // The eager pass above may still be running on the capture stream, and
    // the graph's products use the same cuBLAS workspace (torch keeps one
    // per stream): the first replay, on the caller's stream, waits for it.
    capture_stream_.synchronize();
    graphs_.push_back(std::move(graph));
  }

  // On the caller's (current) stream.
  void Replay(std::size_t id) override { graphs_.at(id)->replay(); }

 private:
  const c10::DeviceIndex device_;
  const at::cuda::MempoolId_t pool_;
  c10::cuda::CUDAStream capture_stream_;
  std::vector<std::unique_ptr<at::cuda::CUDAGraph>> graphs_;
};

}  // namespace
}  // namespace gantry

// Returns a capturer for CUDA device `device_index`, or null with the reason
// in `error` (NUL-terminated, cut to error_size).
extern "C" __attribute__((visibility("default"))) gantry::GraphCapturer*
gantry_cuda_graph_capturer_create(int device_index, char* error, std::size_t error_size);

extern "C" gantry::GraphCapturer* gantry_cuda_graph_capturer_create(int device_index, char* error,
                                                                    std::size_t error_size) {
  try {
    if (device_index < 0 || device_index >= c10::cuda::device_count()) {
      throw std::out_of_range("no CUDA device " + std::to_string(device_index) + " (" +
                              std::to_string(c10::cuda::device_count()) + " visible)");
    }
    return new gantry::CudaGraphCapturer(static_cast<c10::DeviceIndex>(device_index));
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return nullptr;
  }
}
