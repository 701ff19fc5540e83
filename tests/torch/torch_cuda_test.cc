// gantry_torch's stream, pinned-copy and device-check helpers, in process.
// On a machine without CUDA they must degrade to no-ops and plain copies;
// the CUDA half skips with a visible reason.
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/zeros.h>
#include <gantry/device_report.h>
#include <gantry/torch_cuda.h>
#include <gantry/torch_tensor.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>

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
