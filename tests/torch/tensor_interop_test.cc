#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <gantry/torch_tensor.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>

namespace gantry {
namespace {

TEST(TensorInteropTest, ViewSharesTheDocumentsBytes) {
  Tensor tensor = Tensor::FromValues<float>({2, 2}, std::vector<float>{1, 2, 3, 4});
  at::Tensor view = AsTorchView(tensor);
  EXPECT_EQ(view.sizes(), at::IntArrayRef({2, 2}));
  EXPECT_EQ(view.data_ptr(), static_cast<void*>(tensor.mutable_data()));
  view.mul_(10);
  EXPECT_THAT(tensor.Values<float>(), ::testing::ElementsAre(10, 20, 30, 40));
}

TEST(TensorInteropTest, RoundTripsEveryNumpyDtypeTorchHas) {
  for (auto type : {at::kFloat, at::kDouble, at::kHalf, at::kLong, at::kInt, at::kShort, at::kChar,
                    at::kByte, at::kBool}) {
    at::Tensor original = at::arange(6).reshape({2, 3}).to(type);
    Tensor doc_tensor = FromTorch(original);
    EXPECT_EQ(doc_tensor.shape(), std::vector<std::int64_t>({2, 3}));
    EXPECT_EQ(doc_tensor.dtype(), NumpyDTypeOf(original)) << c10::toString(type);
    at::Tensor back = ToTorch(doc_tensor);
    EXPECT_TRUE(at::equal(back, original)) << c10::toString(type);
  }
}

TEST(TensorInteropTest, NonContiguousAndBfloat16AreConverted) {
  at::Tensor transposed = at::arange(6).reshape({2, 3}).to(at::kFloat).t();
  Tensor doc_tensor = FromTorch(transposed);
  EXPECT_THAT(doc_tensor.Values<float>(), ::testing::ElementsAre(0, 3, 1, 4, 2, 5));
  Tensor from_bf16 = FromTorch(at::arange(3).to(at::kBFloat16));
  EXPECT_EQ(from_bf16.dtype(), "<f4");
  EXPECT_THAT(from_bf16.Values<float>(), ::testing::ElementsAre(0, 1, 2));
}

TEST(TensorInteropTest, UnsupportedDtypeThrowsNamingIt) {
  auto tensor = Tensor::FromBytes("<u2", {1}, std::string(2, '\0'));
  ASSERT_TRUE(tensor.ok());
  try {
    ToTorch(*tensor);
    FAIL() << "expected an exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("u2"));
  }
}

TEST(TensorInteropTest, DeviceChecksOnThisMachine) {
  EXPECT_TRUE(CheckTorchDevice(Device::Cpu()).ok());
  Status cuda = CheckTorchDevice(Device::Cuda(3));
  if (!cuda.ok()) {
    EXPECT_EQ(cuda.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(cuda.message(), ::testing::HasSubstr("cuda:3"));
    EXPECT_EQ(ResolveTorchDevice(Device::Auto()), Device::Cpu());
  }
}

TEST(TensorInteropTest, ToTorchDeviceMapsEveryDeviceString) {
  EXPECT_EQ(ToTorchDevice(Device::Cpu()), at::Device(at::kCPU));
  EXPECT_EQ(ToTorchDevice(Device::Cuda(2)), at::Device(at::kCUDA, 2));
  EXPECT_EQ(ToTorchDevice(Device::Cuda()), at::Device(at::kCUDA, 0));
  if (!CheckTorchDevice(Device::Cuda(0)).ok()) {
    EXPECT_EQ(ToTorchDevice(Device::Auto()), at::Device(at::kCPU));
  }
}

}  // namespace
}  // namespace gantry
