// Integration tests run replicas of executors defined in this binary: the
// binary is re-executed in worker mode, which gantry::Init handles first.
#include <gantry/init.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "testutil/testutil.h"

namespace {

// Bounds every test, so that a wait with no timeout of its own (a Post with
// no deadline, a join) fails the test by name instead of hanging until
// ctest's TIMEOUT (120 s) kills it without saying where.
class HangGuard : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo& test) override {
    watchdog_ = std::make_unique<gantry::testing::Watchdog>(
        std::chrono::seconds(110),
        std::string("test ") + test.test_suite_name() + "." + test.name());
  }
  void OnTestEnd(const ::testing::TestInfo& /*test*/) override { watchdog_.reset(); }

  std::unique_ptr<gantry::testing::Watchdog> watchdog_;
};

}  // namespace

int main(int argc, char** argv) {
  gantry::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new HangGuard);
  return RUN_ALL_TESTS();
}
