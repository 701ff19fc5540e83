// gantry_torch's stream, pinned-copy and device-check helpers, in process.
// On a machine without CUDA they must degrade to no-ops and plain copies;
// the CUDA half skips with a visible reason.
#include <ATen/core/Tensor.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/zeros.h>
#include <dlfcn.h>
#include <gantry/device_report.h>
#include <gantry/device_runtime.h>
#include <gantry/torch_cuda.h>
#include <gantry/torch_tensor.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace gantry {
namespace {

using ::testing::ElementsAre;

TEST(TorchCudaTest, HelpersDegradeToNoOpsOnTheCpu) {
  InferenceScope scope(Device::Cpu());
  EXPECT_FALSE(scope.on_cuda());
  scope.Synchronize();
  at::Tensor host = at::arange(15, at::TensorOptions().dtype(at::kFloat)).reshape({3, 5});
  at::Tensor same = ToDeviceAsync(host, Device::Cpu());
  EXPECT_TRUE(same.is_same(host));
  std::vector<Tensor> rows = RowsFromTorch(host);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[2].shape(), std::vector<std::int64_t>({5}));
  EXPECT_THAT(rows[2].Values<float>(), ElementsAre(10, 11, 12, 13, 14));
  EXPECT_TRUE(RowsFromTorch(at::zeros({0, 5})).empty());
}

TEST(TorchCudaTest, DeviceCheckFindsTensorsOffTheirDevice) {
  at::Tensor weight = at::zeros({2, 2});
  at::Tensor bias = at::zeros({2});
  {
    DeviceCheckRegistration registration = RegisterTensorsForDeviceCheck("model", [&] {
      return std::vector<std::pair<std::string, at::Tensor>>{{"weight", weight}, {"bias", bias}};
    });
    DeviceCheckResult on_cpu = CheckRegisteredDevices(Device::Cpu());
    EXPECT_EQ(on_cpu.tensors, 2u);
    EXPECT_TRUE(on_cpu.misplaced.empty());
    DeviceCheckResult on_gpu = CheckRegisteredDevices(Device::Cuda(1));
    EXPECT_THAT(on_gpu.misplaced, ElementsAre("model.weight on cpu", "model.bias on cpu"));
  }
  // The registration is gone with its owner.
  EXPECT_EQ(CheckRegisteredDevices(Device::Cpu()).tensors, 0u);
}

bool Mapped(const char* soname) {
  void* handle = ::dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
  if (handle != nullptr) {
    ::dlclose(handle);
  }
  return handle != nullptr;
}

// The checks of a fresh process's loading, run in a child (see below): a
// line on stderr for each failure; Exit ends the child, 1 if any failed.
class ChildChecks {
 public:
  void Check(bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "failed: %s\n", what);
      ++failures_;
    }
  }
  bool passed() const { return failures_ == 0; }
  [[noreturn]] void Exit() const {
    std::fflush(stderr);
    std::_Exit(passed() ? 0 : 1);
  }

 private:
  int failures_ = 0;
};

// The programs link libtorch_cpu only: libtorch's CUDA half is loaded for a
// CUDA device and for nothing else.
void LoadsTheCudaHalfForACudaDeviceOnly() {
  ChildChecks checks;
  checks.Check(!Mapped("libtorch_cuda.so"), "libtorch_cuda.so is linked at start-up");
  {
    InferenceScope scope(Device::Cpu());
    at::Tensor host = at::zeros({2});
    (void)ToDeviceAsync(host, Device::Cpu());
    (void)ToTorchDevice(Device::Cpu());
  }
  checks.Check(CheckTorchDevice(Device::Cpu()).ok(), "CheckTorchDevice(cpu)");
  checks.Check(LoadDeviceRuntimes(Device::Cpu()).ok(), "LoadDeviceRuntimes(cpu)");
  const bool driver = std::filesystem::exists("/proc/driver/nvidia/version") ||
                      std::filesystem::exists("/dev/nvidiactl");
  if (!driver) {
    checks.Check(ResolveTorchDevice(Device::Auto()).is_cpu(), "auto without a driver");
    checks.Check(LoadDeviceRuntimes(Device::Auto()).ok(), "LoadDeviceRuntimes(auto)");
  }
  checks.Check(!Mapped("libtorch_cuda.so") || driver, "loaded for the CPU");
  // What the worker asks before it constructs an executor on `cuda`.
  const Status loaded = LoadDeviceRuntimes(Device::Cuda());
  if (!loaded.ok()) {
    std::fprintf(stderr, "LoadDeviceRuntimes(cuda): %s\n", loaded.ToString().c_str());
  }
  checks.Check(loaded.ok(), "the CUDA wheel's libtorch_cuda.so loads");
  checks.Check(Mapped("libtorch_cuda.so"), "libtorch_cuda.so is mapped after the load");
  checks.Check(at::detail::getCUDAHooks().isBuilt(), "torch's CUDA backend is registered");
  checks.Check(LoadTorchCuda().ok(), "a second load is OK");
  if (!driver) {
    const Status check = CheckTorchDevice(Device::Cuda());
    checks.Check(check.message().find("no CUDA device is visible") != std::string::npos,
                 "without a GPU CUDA itself says so");
  }
  if (checks.passed()) {
    std::fprintf(stderr, "loaded for cuda only\n");
  }
  checks.Exit();
}

// torch keeps its first answer about CUDA: asked before the load, CUDA
// stays off in this process, and the load says why instead of pretending.
void AskingTorchFirstIsReported() {
  ChildChecks checks;
  checks.Check(!at::detail::getCUDAHooks().isBuilt(), "CUDA hooks before any load");
  const Status loaded = LoadTorchCuda();
  checks.Check(!loaded.ok(), "the late load fails");
  checks.Check(loaded.message().find("asked about CUDA before") != std::string::npos,
               "the message says why");
  if (checks.passed()) {
    std::fprintf(stderr, "asked first: %s\n", loaded.message().c_str());
  }
  checks.Exit();
}

// Each in a process of its own, whatever ran before in this one: the
// "threadsafe" death-test style re-executes the test program.
TEST(TorchCudaTest, TheCudaHalfIsLoadedForACudaDeviceOnly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(LoadsTheCudaHalfForACudaDeviceOnly(), ::testing::ExitedWithCode(0),
              "loaded for cuda only");
}

TEST(TorchCudaTest, TheLoadSaysWhenTorchWasAskedAboutCudaFirst) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(AskingTorchFirstIsReported(), ::testing::ExitedWithCode(0),
              "asked first: .*call gantry::LoadTorchCuda\\(\\) before");
}

TEST(TorchCudaTest, StreamAndPinnedCopyOnCuda) {
  if (!ResolveTorchDevice(Device::Auto()).is_cuda()) {
    GTEST_SKIP() << "no CUDA device visible";
  }
  InferenceScope scope(Device::Cuda(0));
  EXPECT_TRUE(scope.on_cuda());
  at::Tensor host = at::arange(10, at::TensorOptions().dtype(at::kFloat)).reshape({2, 5});
  at::Tensor device = ToDeviceAsync(host, Device::Cuda(0));
  EXPECT_TRUE(device.is_cuda());
  std::vector<Tensor> rows = RowsFromTorch(device.mul(2));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_THAT(rows[1].Values<float>(), ElementsAre(10, 12, 14, 16, 18));
}

}  // namespace
}  // namespace gantry
