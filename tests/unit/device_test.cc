#include <gantry/device.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace gantry {
namespace {

using ::testing::HasSubstr;

TEST(DeviceTest, ParsesAcceptedForms) {
  StatusOr<Device> cpu = Device::Parse("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_TRUE(cpu->is_cpu());
  EXPECT_FALSE(cpu->has_index());

  StatusOr<Device> cuda = Device::Parse("cuda");
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_TRUE(cuda->is_cuda());
  EXPECT_EQ(cuda->index(), -1);

  StatusOr<Device> cuda0 = Device::Parse("cuda:0");
  ASSERT_TRUE(cuda0.ok()) << cuda0.status();
  EXPECT_EQ(*cuda0, Device::Cuda(0));

  StatusOr<Device> cuda12 = Device::Parse("cuda:12");
  ASSERT_TRUE(cuda12.ok()) << cuda12.status();
  EXPECT_EQ(cuda12->index(), 12);

  StatusOr<Device> automatic = Device::Parse("auto");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_TRUE(automatic->is_auto());
}

TEST(DeviceTest, ToStringRoundTrips) {
  EXPECT_EQ(Device::Cpu().ToString(), "cpu");
  EXPECT_EQ(Device().ToString(), "cpu");
  EXPECT_EQ(Device::Cuda().ToString(), "cuda");
  EXPECT_EQ(Device::Cuda(3).ToString(), "cuda:3");
  EXPECT_EQ(Device::Auto().ToString(), "auto");
  for (const char* text : {"cpu", "cuda", "cuda:0", "cuda:12", "auto"}) {
    StatusOr<Device> device = Device::Parse(text);
    ASSERT_TRUE(device.ok()) << text;
    EXPECT_EQ(device->ToString(), text);
  }
}

TEST(DeviceTest, RejectsOtherStrings) {
  for (const char* text : {"gpu", "cuda:", "cuda:-1", "cuda:x", "CPU", " cpu", "cuda:1:2", ""}) {
    StatusOr<Device> device = Device::Parse(text);
    ASSERT_FALSE(device.ok()) << "accepted \"" << text << "\"";
    EXPECT_EQ(device.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(device.status().message(), HasSubstr("\"" + std::string(text) + "\"")) << text;
    EXPECT_THAT(device.status().message(),
                HasSubstr("expected \"cpu\", \"cuda\", \"cuda:N\" or \"auto\""))
        << text;
  }
}

}  // namespace
}  // namespace gantry
