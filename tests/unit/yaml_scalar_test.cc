#include "core/yaml_scalar.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace gantry::internal {
namespace {

using ::testing::HasSubstr;

TEST(YamlScalarTest, PlainScalarsAreTypedByTheirText) {
  EXPECT_EQ(*TypeYamlScalar("12", "?")->AsInt(), 12);
  EXPECT_EQ(*TypeYamlScalar("0x1f", "?")->AsInt(), 31);
  EXPECT_EQ(*TypeYamlScalar("-0o17", "?")->AsInt(), -15);
  EXPECT_EQ(*TypeYamlScalar("1.5", "?")->AsFloat(), 1.5);
  EXPECT_TRUE(std::isinf(*TypeYamlScalar("-.inf", "?")->AsFloat()));
  EXPECT_TRUE(std::isnan(*TypeYamlScalar(".nan", "?")->AsFloat()));
  EXPECT_EQ(*TypeYamlScalar("True", "?")->AsBool(), true);
  EXPECT_TRUE(TypeYamlScalar("~", "?")->is_none());
  EXPECT_EQ(*TypeYamlScalar("cuda:0", "?")->AsText(), "cuda:0");
  // Quoted: a string whatever it looks like.
  EXPECT_EQ(*TypeYamlScalar("12", "!")->AsText(), "12");
}

TEST(YamlScalarTest, TagsAreHonouredOrRefusedNamingTheProblem) {
  EXPECT_EQ(*TypeYamlScalar("7", "tag:yaml.org,2002:int")->AsInt(), 7);
  EXPECT_EQ(*TypeYamlScalar("7", "tag:yaml.org,2002:str")->AsText(), "7");
  EXPECT_THAT(TypeYamlScalar("x", "tag:yaml.org,2002:int").status().message(),
              HasSubstr("expected an integer, got \"x\""));
  EXPECT_THAT(TypeYamlScalar("yes", "tag:yaml.org,2002:bool").status().message(),
              HasSubstr("expected true or false"));
  EXPECT_THAT(TypeYamlScalar("99999999999999999999", "?").status().message(),
              HasSubstr("does not fit in 64 bits"));
  EXPECT_THAT(TypeYamlScalar("1", "!custom").status().message(),
              HasSubstr("unsupported YAML tag \"!custom\""));
}

}  // namespace
}  // namespace gantry::internal
