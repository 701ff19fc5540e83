#include <gantry/status.h>
#include <gtest/gtest.h>

namespace gantry {
namespace {

StatusOr<int> Half(int n) {
  if (n % 2 != 0) {
    return InvalidArgumentError(std::to_string(n) + " is odd");
  }
  return n / 2;
}

Status Quarter(int n, int* out) {
  GANTRY_ASSIGN_OR_RETURN(int half, Half(n));
  GANTRY_ASSIGN_OR_RETURN(*out, Half(half));
  return OkStatus();
}

TEST(StatusTest, OkAndErrors) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.ToString(), "OK");
  EXPECT_EQ(ok.message(), "");
  Status error = NotFoundError("no such file");
  EXPECT_EQ(error.code(), StatusCode::kNotFound);
  EXPECT_EQ(error.ToString(), "NOT_FOUND: no such file");
  EXPECT_EQ(error.WithPrefix("config.yml").message(), "config.yml: no such file");
  EXPECT_TRUE(OkStatus().WithPrefix("x").ok());
  // Codes are gRPC's numbers.
  EXPECT_EQ(static_cast<int>(StatusCode::kUnavailable), 14);
  EXPECT_EQ(static_cast<int>(StatusCode::kResourceExhausted), 8);
}

TEST(StatusTest, MacrosPropagate) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status odd = Quarter(6, &out);
  EXPECT_EQ(odd.message(), "3 is odd");
  StatusOr<int> from_ok_status = OkStatus();
  EXPECT_EQ(from_ok_status.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace gantry
