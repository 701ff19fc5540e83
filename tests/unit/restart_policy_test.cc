#include "deployment/restart_policy.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>

namespace gantry::internal {
namespace {

using Ms = std::chrono::milliseconds;
using Clock = RestartPolicy::Clock;

TEST(RestartPolicyTest, DelayDoublesFromInitialUpToMax) {
  RestartPolicy policy(Ms(100), Ms(1000), 5);
  Clock::time_point t{};
  std::optional<Ms> delays[6];
  for (auto& delay : delays) {
    policy.OnReady(t);
    t += Ms(10);  // dies soon after each start
    delay = policy.OnExit(t, /*during_init=*/false);
  }
  EXPECT_EQ(delays[0], Ms(100));
  EXPECT_EQ(delays[1], Ms(200));
  EXPECT_EQ(delays[2], Ms(400));
  EXPECT_EQ(delays[3], Ms(800));
  EXPECT_EQ(delays[4], Ms(1000));
  EXPECT_EQ(delays[5], Ms(1000));
}

TEST(RestartPolicyTest, DoublingStartsOverAfterServingForMax) {
  RestartPolicy policy(Ms(100), Ms(1000), 5);
  Clock::time_point t{};
  policy.OnReady(t);
  EXPECT_EQ(policy.OnExit(t + Ms(10), false), Ms(100));
  policy.OnReady(t + Ms(200));
  EXPECT_EQ(policy.OnExit(t + Ms(300), false), Ms(200));
  // Ready for a whole `max` this time: back to the initial delay.
  policy.OnReady(t + Ms(1000));
  EXPECT_EQ(policy.OnExit(t + Ms(2000), false), Ms(100));
}

TEST(RestartPolicyTest, GivesUpAfterMaxInitFailuresInARow) {
  RestartPolicy policy(Ms(50), Ms(200), 3);
  Clock::time_point t{};
  policy.OnReady(t);
  EXPECT_EQ(policy.OnExit(t, false), Ms(50));  // crashed while serving
  EXPECT_EQ(policy.OnExit(t, true), Ms(100));  // 1st failed start
  EXPECT_EQ(policy.init_failures(), 1);
  EXPECT_EQ(policy.OnExit(t, true), Ms(200));       // 2nd
  EXPECT_EQ(policy.OnExit(t, true), std::nullopt);  // 3rd: given up
  EXPECT_EQ(policy.init_failures(), 3);
}

TEST(RestartPolicyTest, ReadyResetsTheInitFailureCount) {
  RestartPolicy policy(Ms(1), Ms(1), 2);
  Clock::time_point t{};
  EXPECT_TRUE(policy.OnExit(t, true).has_value());
  policy.OnReady(t);
  EXPECT_EQ(policy.init_failures(), 0);
  EXPECT_TRUE(policy.OnExit(t, true).has_value());
  EXPECT_FALSE(policy.OnExit(t, true).has_value());
}

TEST(RestartPolicyTest, HugeBackoffDoesNotOverflow) {
  RestartPolicy policy(Ms(1), Ms(std::chrono::hours(24 * 365 * 100)), 1000);
  Clock::time_point t{};
  std::optional<Ms> last;
  for (int i = 0; i < 200; ++i) {
    last = policy.OnExit(t, false);
  }
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(*last, Ms(std::chrono::hours(24 * 365 * 100)));
}

}  // namespace
}  // namespace gantry::internal
