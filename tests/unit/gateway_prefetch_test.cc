// The bound on a client's `__prefetch__` metadata (gateway/gateway.h).
#include <gtest/gtest.h>

#include "core/limits.h"
#include "gateway/gateway.h"

namespace gantry::internal {
namespace {

TEST(ParsePrefetchTest, KeepsNumbersWithinTheBound) {
  EXPECT_EQ(ParsePrefetch("1", 50), 1);
  EXPECT_EQ(ParsePrefetch("64", 50), 64);
  EXPECT_EQ(ParsePrefetch(std::to_string(kMaxPrefetch), 50), kMaxPrefetch);
}

TEST(ParsePrefetchTest, ClampsLargeAndUnlimitedToTheBound) {
  EXPECT_EQ(ParsePrefetch(std::to_string(kMaxPrefetch + 1), 50), kMaxPrefetch);
  EXPECT_EQ(ParsePrefetch("2147483648", 50), kMaxPrefetch);
  EXPECT_EQ(ParsePrefetch("99999999999999999999999", 50), kMaxPrefetch);
  // Jina's prefetch 0 means "no limit": the bound is the limit.
  EXPECT_EQ(ParsePrefetch("0", 50), kMaxPrefetch);
  EXPECT_EQ(ParsePrefetch("-5", 50), kMaxPrefetch);
  EXPECT_EQ(ParsePrefetch("-99999999999999999999999", 50), kMaxPrefetch);
}

TEST(ParsePrefetchTest, IgnoresWhatIsNotANumber) {
  EXPECT_EQ(ParsePrefetch("", 50), 50);
  EXPECT_EQ(ParsePrefetch("ten", 50), 50);
  EXPECT_EQ(ParsePrefetch("12abc", 50), 50);
  EXPECT_EQ(ParsePrefetch(" 12", 50), 50);
}

}  // namespace
}  // namespace gantry::internal
