// The checked-size helpers: every size computed from client data goes
// through them, so their edge values are pinned here.
#include "core/checked_size.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace gantry::internal {
namespace {

using ::testing::HasSubstr;

constexpr std::uint64_t kNoCap = std::numeric_limits<std::uint64_t>::max();
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

StatusOr<std::uint64_t> Bytes(std::vector<std::int64_t> shape, std::size_t itemsize = 4,
                              std::uint64_t cap = kNoCap) {
  return TensorByteSize(shape, itemsize, "<f4", cap);
}

TEST(CheckedSizeTest, CheckedMulAndAdd) {
  EXPECT_EQ(CheckedMul(0, kNoCap, "x").value(), 0u);
  EXPECT_EQ(CheckedMul(1u << 31, 1u << 31, "x").value(), std::uint64_t{1} << 62);
  EXPECT_EQ(CheckedMul(kNoCap, 1, "x").value(), kNoCap);
  auto overflow = CheckedMul(std::uint64_t{1} << 32, std::uint64_t{1} << 32, "shape");
  ASSERT_FALSE(overflow.ok());
  EXPECT_EQ(overflow.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(overflow.status().message(), "shape: 4294967296 * 4294967296 overflows 64 bits");
  EXPECT_EQ(CheckedAdd(kNoCap - 1, 1, "x").value(), kNoCap);
  EXPECT_FALSE(CheckedAdd(kNoCap, 1, "count").ok());
}

TEST(CheckedSizeTest, ZeroDimensionalTensorIsOneElement) {
  EXPECT_EQ(Bytes({}).value(), 4u);
  EXPECT_EQ(Bytes({}, 8).value(), 8u);
}

TEST(CheckedSizeTest, ZeroDimensionMakesItEmptyEvenAfterHugeOnes) {
  EXPECT_EQ(Bytes({0}).value(), 0u);
  EXPECT_EQ(Bytes({3, 0, 5}).value(), 0u);
  // The product of the others overflows, but the tensor is empty.
  EXPECT_EQ(Bytes({kInt64Max, kInt64Max, 0}).value(), 0u);
}

TEST(CheckedSizeTest, Int64MaxDimension) {
  // INT64_MAX elements of one byte fit in 64 bits; of four bytes they do not.
  EXPECT_EQ(Bytes({kInt64Max}, 1).value(), static_cast<std::uint64_t>(kInt64Max));
  auto four = Bytes({kInt64Max}, 4);
  ASSERT_FALSE(four.ok());
  EXPECT_EQ(four.status().message(),
            "shape [9223372036854775807] of float32 needs more than 2^64 bytes");
}

TEST(CheckedSizeTest, ProductsThatOverflow64Bits) {
  // 2^64 exactly wraps to 0 with unchecked arithmetic.
  auto wraps_to_zero = Bytes({65536, 65536, 65536, 65536}, 1);
  ASSERT_FALSE(wraps_to_zero.ok());
  EXPECT_THAT(wraps_to_zero.status().message(), HasSubstr("needs more than 2^64 bytes"));
  // The element count fits; times the item size it does not.
  EXPECT_FALSE(Bytes({std::int64_t{1} << 62}, 4).ok());
  EXPECT_FALSE(Bytes({4294967295, 4294967295, 4294967295}, 4).ok());
}

TEST(CheckedSizeTest, NegativeDimensionsAreRefused) {
  auto negative = Bytes({2, -1});
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(negative.status().message(),
            "shape [2, -1] of float32 has the negative dimension -1 on axis 1");
  // Two negatives would multiply to a positive size.
  EXPECT_FALSE(Bytes({-2, -2}).ok());
  EXPECT_FALSE(Bytes({std::numeric_limits<std::int64_t>::min()}).ok());
  // Even with a zero elsewhere.
  EXPECT_FALSE(Bytes({0, -1}).ok());
}

TEST(CheckedSizeTest, CapIsInclusive) {
  EXPECT_EQ(Bytes({16}, 4, 64).value(), 64u);  // exactly at the cap
  auto over = Bytes({17}, 4, 64);              // 68 bytes
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().message(),
            "shape [17] of float32 needs 68 bytes, over the 64-byte "
            "message cap");
  // cap + 1 byte.
  EXPECT_EQ(Bytes({65}, 1, 65).value(), 65u);
  EXPECT_FALSE(Bytes({66}, 1, 65).ok());
  EXPECT_EQ(CheckedCap(64, 64, "reply").value(), 64u);
  EXPECT_EQ(CheckedCap(65, 64, "reply").status().message(),
            "reply: 65 bytes exceeds the 64-byte message cap");
}

TEST(CheckedSizeTest, UnknownDTypeIsRefused) {
  auto unknown = TensorByteSize(std::vector<std::int64_t>{2}, 0, "float32", kNoCap);
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown tensor dtype 'float32'"));
}

TEST(CheckedSizeTest, CheckTensorBufferWantsTheExactSize) {
  std::vector<std::int64_t> shape{3};
  EXPECT_TRUE(CheckTensorBuffer(shape, "<f4", 12, kNoCap).ok());
  EXPECT_EQ(CheckTensorBuffer(shape, "<f4", 11, kNoCap).message(),
            "shape [3] of float32 needs 12 bytes, buffer has 11");
  EXPECT_EQ(CheckTensorBuffer(shape, "<f4", 13, kNoCap).message(),
            "shape [3] of float32 needs 12 bytes, buffer has 13");
  std::vector<std::int64_t> poison{1000000000};
  EXPECT_EQ(CheckTensorBuffer(poison, "<f4", 0, kNoCap).message(),
            "shape [1000000000] of float32 needs 4000000000 bytes, buffer has 0");
  EXPECT_EQ(CheckTensorBuffer(poison, "<f4", 0, std::uint64_t{64} << 20).message(),
            "shape [1000000000] of float32 needs 4000000000 bytes, over the 67108864-byte "
            "message cap");
  EXPECT_TRUE(CheckTensorBuffer(std::vector<std::int64_t>{2, 2}, "|b1", 4, kNoCap).ok());
  EXPECT_FALSE(CheckTensorBuffer(shape, "<x4", 12, kNoCap).ok());
}

TEST(CheckedSizeTest, CheckDepth) {
  EXPECT_TRUE(CheckDepth(0, "x").ok());
  EXPECT_TRUE(CheckDepth(kMaxNestingDepth, "x").ok());
  Status deep = CheckDepth(kMaxNestingDepth + 1, "tags");
  EXPECT_EQ(deep.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(deep.message(), "tags: nested deeper than 100 levels");
}

TEST(CheckedSizeTest, DTypeNames) {
  EXPECT_EQ(DTypeName("<f4"), "float32");
  EXPECT_EQ(DTypeName("<f2"), "float16");
  EXPECT_EQ(DTypeName("|u1"), "uint8");
  EXPECT_EQ(DTypeName("<i8"), "int64");
  EXPECT_EQ(DTypeName("|b1"), "bool");
  EXPECT_EQ(DTypeName("<c16"), "complex128");
  EXPECT_EQ(DTypeName("weird"), "weird");
}

}  // namespace
}  // namespace gantry::internal
