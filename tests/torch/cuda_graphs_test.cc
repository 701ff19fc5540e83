// gantry::CapturedGraphs: the cache of graphs per key with a stand-in
// capturer on the CPU (what is captured, what is copied, what runs eagerly),
// the loading of libgantry_cuda_graphs.so against the wheel's libtorch_cuda
// in a fresh process, and real graphs on a CUDA device (label `gpu`).
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <gantry/cuda_graphs.h>
#include <gantry/torch_cuda.h>
#include <gantry/torch_tensor.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace gantry {
namespace {

// As a CUDA graph behaves, on the CPU: capturing runs the body once (CUDA
// records instead) and each replay runs it again on whatever the captured
// input buffers then hold. Counts what it was asked to do.
struct FakeCounts {
  int captures = 0;
  int replays = 0;
};

class FakeCapturer final : public GraphCapturer {
 public:
  FakeCapturer(FakeCounts* counts, int fail_capture_id = -1)
      : counts_(counts), fail_capture_id_(fail_capture_id) {}
  void Capture(std::size_t id, const std::function<void()>& body) override {
    if (static_cast<int>(id) == fail_capture_id_) {
      throw std::runtime_error("operation not permitted when stream is capturing");
    }
    ASSERT_EQ(id, bodies_.size());
    body();
    bodies_.push_back(body);
    ++counts_->captures;
  }
  void Replay(std::size_t id) override {
    bodies_.at(id)();
    ++counts_->replays;
  }

 private:
  FakeCounts* counts_;
  int fail_capture_id_;
  std::vector<std::function<void()>> bodies_;
};

// A step that depends on every value of both inputs.
std::vector<at::Tensor> Step(const std::vector<at::Tensor>& in) {
  return {in[0] * 2 + in[1].sum(), in[1] - 1};
}

at::Tensor Values(std::int64_t n, float start) {
  return at::arange(n, at::TensorOptions().dtype(at::kFloat)) + start;
}

TEST(CapturedGraphsTest, EachReplayComputesItsOwnCallsInputs) {
  FakeCounts counts;
  CapturedGraphs graphs(std::make_unique<FakeCapturer>(&counts), 8);
  int steps = 0;
  auto counted = [&](const std::vector<at::Tensor>& in) {
    ++steps;
    return Step(in);
  };
  for (float start : {0.0f, 10.0f, -3.5f, 100.0f}) {
    const std::vector<at::Tensor> in{Values(6, start), Values(3, start * 2)};
    const std::vector<at::Tensor> out = graphs.Run("6,3", in, counted);
    const std::vector<at::Tensor> want = Step(in);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_TRUE(at::allclose(out[0], want[0])) << "start " << start;
    EXPECT_TRUE(at::allclose(out[1], want[1])) << "start " << start;
  }
  EXPECT_EQ(graphs.size(), 1u);
  EXPECT_EQ(counts.captures, 1);
  EXPECT_EQ(counts.replays, 4);
  // The capture, and (this stand-in only) each replay.
  EXPECT_EQ(steps, 1 + 4);
  EXPECT_EQ(graphs.failure(), "");
}

TEST(CapturedGraphsTest, ReturnedOutputsAreNotOverwrittenByTheNextReplay) {
  FakeCounts counts;
  CapturedGraphs graphs(std::make_unique<FakeCapturer>(&counts), 8);
  // As a graph's output: one buffer, written by every replay.
  at::Tensor buffer = at::zeros({4});
  auto into_buffer = [&](const std::vector<at::Tensor>& in) {
    buffer.copy_(in[0] * 3);
    return std::vector<at::Tensor>{buffer};
  };
  const at::Tensor first = graphs.Run("4", {Values(4, 1)}, into_buffer).front();
  const at::Tensor second = graphs.Run("4", {Values(4, 50)}, into_buffer).front();
  EXPECT_TRUE(at::allclose(first, Values(4, 1) * 3));
  EXPECT_TRUE(at::allclose(second, Values(4, 50) * 3));
}

TEST(CapturedGraphsTest, KeysPastTheLimitRunEagerly) {
  FakeCounts counts;
  CapturedGraphs graphs(std::make_unique<FakeCapturer>(&counts), 2);
  for (int round = 0; round < 2; ++round) {
    for (std::int64_t n : {2, 3, 5}) {
      const std::vector<at::Tensor> in{Values(n, static_cast<float>(round)), Values(1, 7)};
      const std::vector<at::Tensor> out = graphs.Run(std::to_string(n), in, Step);
      EXPECT_TRUE(at::allclose(out[0], Step(in)[0])) << "n " << n;
    }
  }
  EXPECT_EQ(graphs.size(), 2u);
  EXPECT_EQ(counts.captures, 2);
  EXPECT_EQ(counts.replays, 4);  // keys 2 and 3, twice each; 5 ran eagerly
}

// The second key's capture fails: it and every key after answer eagerly,
// and the first key's graph, captured before, is not replayed again.
TEST(CapturedGraphsTest, AFailedCaptureTurnsGraphsOffAndStillAnswers) {
  FakeCounts counts;
  CapturedGraphs graphs(std::make_unique<FakeCapturer>(&counts, /*fail_capture_id=*/1), 8);
  const std::vector<at::Tensor> first{Values(4, 0), Values(2, 0)};
  EXPECT_TRUE(at::allclose(graphs.Run("4,2", first, Step)[0], Step(first)[0]));
  EXPECT_EQ(counts.replays, 1);
  for (float start : {1.0f, 2.0f}) {
    for (const char* key : {"3,2", "4,2", "5,2"}) {
      const std::int64_t n = key[0] - '0';
      const std::vector<at::Tensor> in{Values(n, start), Values(2, start)};
      const std::vector<at::Tensor> out = graphs.Run(key, in, Step);
      EXPECT_TRUE(at::allclose(out[0], Step(in)[0])) << key;
    }
  }
  EXPECT_EQ(graphs.size(), 1u);
  EXPECT_EQ(counts.captures, 1);
  EXPECT_EQ(counts.replays, 1);
  EXPECT_NE(graphs.failure().find("operation not permitted when stream is capturing"),
            std::string::npos)
      << graphs.failure();
}

TEST(CapturedGraphsTest, AKeysInputsMustKeepTheirShapeAndCount) {
  FakeCounts counts;
  CapturedGraphs graphs(std::make_unique<FakeCapturer>(&counts), 8);
  graphs.Run("k", {Values(3, 0), Values(2, 0)}, Step);
  EXPECT_THROW(graphs.Run("k", {Values(4, 0), Values(2, 0)}, Step), std::invalid_argument);
  EXPECT_THROW(graphs.Run("k", {Values(3, 0)}, Step), std::invalid_argument);
}

TEST(CapturedGraphsTest, ConcurrentCallersEachGetTheirOwnInputsAnswer) {
  FakeCounts counts;
  CapturedGraphs graphs(std::make_unique<FakeCapturer>(&counts), 8);
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const std::int64_t n = 2 + (t + i) % 3;  // three keys, shared by the threads
        const std::vector<at::Tensor> in{Values(n, static_cast<float>(t * 1000 + i)),
                                         Values(2, static_cast<float>(i))};
        const std::vector<at::Tensor> out = graphs.Run(std::to_string(n), in, Step);
        if (!at::allclose(out[0], Step(in)[0]) || !at::allclose(out[1], Step(in)[1])) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& caller : callers) {
    caller.join();
  }
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(graphs.size(), 3u);
  EXPECT_EQ(counts.captures, 3);
  EXPECT_EQ(counts.replays, 200);
}

TEST(CapturedGraphsTest, ACpuDeviceIsRefused) {
  const auto graphs = CapturedGraphs::ForDevice(Device::Cpu(), 8);
  ASSERT_FALSE(graphs.ok());
  EXPECT_NE(graphs.status().message().find("need a CUDA device, not cpu"), std::string::npos)
      << graphs.status().ToString();
}

// In a fresh process (torch must not have been asked about CUDA yet): the
// library is found, its torch CUDA symbols resolve against the wheel's
// libtorch_cuda, and its factory runs. Without a GPU the factory itself
// says that no device is visible.
void LoadsTheCaptureLibrary() {
  const auto graphs = CapturedGraphs::ForDevice(Device::Cuda(0), 8);
  std::fprintf(stderr, "ForDevice(cuda:0): %s\n", graphs.status().ToString().c_str());
  // ForDevice has loaded libtorch_cuda (or failed to, which it then
  // reports first) by now, so torch may be asked how many devices it sees.
  const Status torch_cuda = LoadTorchCuda();
  const std::string message(graphs.status().message());
  const auto says = [&message](std::string_view what) {
    return message.find(what) != std::string::npos;
  };
#ifdef GANTRY_CUDA_GRAPHS_BUILD_PATH
  // A driver with no device visible (CUDA_VISIBLE_DEVICES="") is the
  // factory's error, as no driver is.
  const bool driver = std::filesystem::exists("/proc/driver/nvidia/version") ||
                      std::filesystem::exists("/dev/nvidiactl");
  const bool visible = driver && ResolveTorchDevice(Device::Auto()).is_cuda();
  const bool expected = !torch_cuda.ok() ? says(torch_cuda.message())
                        : visible        ? graphs.ok()
                                         : says("no CUDA device 0 (0 visible)");
#else
  const bool expected =
      !torch_cuda.ok() ? says(torch_cuda.message()) : says("no libgantry_cuda_graphs.so");
#endif
  if (expected) {
    std::fprintf(stderr, "as expected\n");
  }
  std::fflush(stderr);
  std::_Exit(expected ? 0 : 1);
}

TEST(CapturedGraphsTest, TheCaptureLibraryLoadsAgainstLibtorchCuda) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(LoadsTheCaptureLibrary(), ::testing::ExitedWithCode(0), "as expected");
}

// Real graphs: a step of the kernels a transformer layer launches, replayed
// with new inputs, against the same step run eagerly.
TEST(CapturedGraphsTest, ReplaysMatchEagerPassesOnCuda) {
  if (!ResolveTorchDevice(Device::Auto()).is_cuda()) {
    GTEST_SKIP() << "no CUDA device visible";
  }
  const Device device = Device::Cuda(0);
  auto graphs = CapturedGraphs::ForDevice(device, 4);
  ASSERT_TRUE(graphs.ok()) << graphs.status().ToString();
  InferenceScope scope(device);
  const auto on_gpu = at::TensorOptions().device(ToTorchDevice(device)).dtype(at::kFloat);
  const at::Tensor weight = at::randn({64, 64}, on_gpu);
  auto layer = [&](const std::vector<at::Tensor>& in) {
    const at::Tensor h = at::gelu(at::matmul(in[0], weight)) + in[0];
    return std::vector<at::Tensor>{at::layer_norm(h, {64}) * in[1]};
  };
  for (int round = 0; round < 3; ++round) {
    for (std::int64_t rows : {8, 32}) {
      const std::vector<at::Tensor> in{at::randn({rows, 64}, on_gpu),
                                       at::full({rows, 1}, 1.0 + round, on_gpu)};
      const at::Tensor got = (*graphs)->Run(std::to_string(rows), in, layer).front();
      const at::Tensor want = layer(in).front();
      EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-5)) << "rows " << rows << " round " << round;
    }
  }
  EXPECT_EQ((*graphs)->size(), 2u);
  EXPECT_EQ((*graphs)->failure(), "");
}

}  // namespace
}  // namespace gantry
