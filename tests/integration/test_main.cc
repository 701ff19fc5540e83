// Integration tests run replicas of executors defined in this binary: the
// binary is re-executed in worker mode, which gantry::Init handles first.
#include <gantry/init.h>
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  gantry::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
