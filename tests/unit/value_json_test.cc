#include "core/value_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace gantry::internal {
namespace {

using ::testing::HasSubstr;

Value::Dict RoundTrip(const Value::Dict& dict) {
  std::string json = ValueDictToJson(dict);
  StatusOr<Value::Dict> back = ValueDictFromJson(json);
  EXPECT_TRUE(back.ok()) << back.status() << " for " << json;
  return back.ok() ? *back : Value::Dict{};
}

TEST(ValueJsonTest, EncodesPlainValuesAsPlainJson) {
  Value::Dict dict{{"a", 1},
                   {"b", 1.5},
                   {"c", "x"},
                   {"d", true},
                   {"e", Value()},
                   {"f", Value::List{1, "2"}},
                   {"g", Value::Dict{{"h", -3}}}};
  EXPECT_EQ(ValueDictToJson(dict),
            R"({"a":1,"b":1.5,"c":"x","d":true,"e":null,"f":[1,"2"],"g":{"h":-3}})");
  EXPECT_EQ(ValueDictToJson({}), "{}");
}

TEST(ValueJsonTest, RoundTripsScalarsListsAndNestedDicts) {
  Value::Dict dict{{"int", 7},
                   {"negative", -42},
                   {"float", 0.1},
                   {"whole_float", 2.0},
                   {"tiny", 1e-300},
                   {"text", "hello \"world\"\n\t\\"},
                   {"empty", ""},
                   {"yes", true},
                   {"no", false},
                   {"none", Value()},
                   {"list", Value::List{1, 2.5, "x", Value(), Value::List{}, Value::Dict{}}},
                   {"nested", Value::Dict{{"a", Value::Dict{{"b", Value::List{"c", 1}}}}}},
                   {"max", std::numeric_limits<std::int64_t>::max()},
                   {"min", std::numeric_limits<std::int64_t>::min()}};
  Value::Dict back = RoundTrip(dict);
  EXPECT_EQ(back, dict);
  // Kinds survive: a whole float stays a float, an int stays an int.
  ASSERT_NE(back["whole_float"].AsFloat(), nullptr);
  ASSERT_NE(back["int"].AsInt(), nullptr);
  ASSERT_NE(back["max"].AsInt(), nullptr);
  EXPECT_EQ(*back["max"].AsInt(), std::numeric_limits<std::int64_t>::max());
}

TEST(ValueJsonTest, JsonNumbersBecomeIntsOrFloats) {
  StatusOr<Value::Dict> dict = ValueDictFromJson(R"({"i": 3, "n": -3, "f": 3.0, "e": 1e2})");
  ASSERT_TRUE(dict.ok()) << dict.status();
  ASSERT_NE((*dict)["i"].AsInt(), nullptr);
  EXPECT_EQ(*(*dict)["i"].AsInt(), 3);
  ASSERT_NE((*dict)["n"].AsInt(), nullptr);
  EXPECT_EQ(*(*dict)["n"].AsInt(), -3);
  ASSERT_NE((*dict)["f"].AsFloat(), nullptr);
  EXPECT_EQ(*(*dict)["f"].AsFloat(), 3.0);
  ASSERT_NE((*dict)["e"].AsFloat(), nullptr);
  EXPECT_EQ(*(*dict)["e"].AsFloat(), 100.0);
}

TEST(ValueJsonTest, NonAsciiTextIsEscapedAndRoundTrips) {
  Value::Dict dict{{"text", "caf\xc3\xa9 \xe2\x82\xac"}};
  std::string json = ValueDictToJson(dict);
  for (char c : json) {
    EXPECT_GE(static_cast<unsigned char>(c), 0x20);
    EXPECT_LT(static_cast<unsigned char>(c), 0x80);
  }
  EXPECT_EQ(RoundTrip(dict), dict);
}

TEST(ValueJsonTest, NonFiniteFloatsRoundTrip) {
  Value::Dict dict{{"inf", std::numeric_limits<double>::infinity()},
                   {"minus_inf", -std::numeric_limits<double>::infinity()},
                   {"nan", std::numeric_limits<double>::quiet_NaN()}};
  EXPECT_EQ(ValueDictToJson(dict), R"({"inf":{"__float__":"inf"},"minus_inf":{"__float__":"-inf"},)"
                                   R"("nan":{"__float__":"nan"}})");
  Value::Dict back = RoundTrip(dict);
  ASSERT_NE(back["inf"].AsFloat(), nullptr);
  EXPECT_EQ(*back["inf"].AsFloat(), std::numeric_limits<double>::infinity());
  ASSERT_NE(back["minus_inf"].AsFloat(), nullptr);
  EXPECT_EQ(*back["minus_inf"].AsFloat(), -std::numeric_limits<double>::infinity());
  ASSERT_NE(back["nan"].AsFloat(), nullptr);
  EXPECT_TRUE(std::isnan(*back["nan"].AsFloat()));
}

TEST(ValueJsonTest, BlobsTensorsAndDocsRoundTrip) {
  Tensor tensor = Tensor::FromValues<float>({2, 2}, std::vector<float>{1, 2, 3, 4});
  Doc doc = Doc::Empty();
  doc.set_id("abc");
  doc.set_text("hi");
  tensor.set_type_name("torch_tensor");
  Value::Dict dict{{"blob0", Blob{""}},
                   {"blob1", Blob{"a"}},
                   {"blob2", Blob{std::string("a\0", 2)}},
                   {"blob3", Blob{std::string("\xff\xfe\x00", 3)}},
                   {"tensor", tensor},
                   {"doc", doc},
                   {"docs", DocList{doc, Doc::Empty()}},
                   {"tuple", Value(Value::List{1, 2}, Value::ListKind::kTuple)},
                   {"set", Value(Value::List{"a"}, Value::ListKind::kSet)}};
  EXPECT_THAT(ValueDictToJson({{"b", Blob{"hello"}}}), R"({"b":{"__blob__":"aGVsbG8="}})");
  Value::Dict back = RoundTrip(dict);
  EXPECT_EQ(back, dict);
  ASSERT_NE(back["tensor"].AsTensor(), nullptr);
  EXPECT_EQ(back["tensor"].AsTensor()->Values<float>()[3], 4.0f);
  EXPECT_EQ(back["tensor"].AsTensor()->type_name(), "torch_tensor");
  EXPECT_EQ(back["tuple"].list_kind(), Value::ListKind::kTuple);
  EXPECT_EQ(back["set"].list_kind(), Value::ListKind::kSet);
  // The id field keeps its docarray type annotation.
  ASSERT_NE(back["doc"].AsDoc(), nullptr);
  EXPECT_EQ(back["doc"].AsDoc()->Find("id")->docarray_type(), "id");
}

TEST(ValueJsonTest, DictsThatLookTaggedStayDicts) {
  Value::Dict dict{{"user", Value::Dict{{"__blob__", "not base64!"}}},
                   {"inner", Value::Dict{{"__dict__", Value::Dict{{"__float__", 1}}}}}};
  EXPECT_EQ(RoundTrip(dict), dict);
}

TEST(ValueJsonTest, RejectsBadInput) {
  StatusOr<Value::Dict> malformed = ValueDictFromJson("{\"a\": ");
  ASSERT_FALSE(malformed.ok());
  EXPECT_EQ(malformed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(malformed.status().message(), HasSubstr("JSON value dict: "));
  EXPECT_THAT(malformed.status().message(), HasSubstr("parse error"));

  StatusOr<Value::Dict> array = ValueDictFromJson("[1, 2]");
  ASSERT_FALSE(array.ok());
  EXPECT_EQ(array.status().message(), "JSON value dict: expected an object, got array");

  StatusOr<Value::Dict> too_big = ValueDictFromJson(R"({"a": {"b": [18446744073709551615]}})");
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().message(),
            "JSON value dict: a.b[0]: integer 18446744073709551615 does not fit in int64");

  StatusOr<Value::Dict> bad_blob = ValueDictFromJson(R"({"x": {"__blob__": "abc"}})");
  ASSERT_FALSE(bad_blob.ok());
  EXPECT_EQ(bad_blob.status().message(), "JSON value dict: x.__blob__: expected a base64 string");

  StatusOr<Value::Dict> bad_tensor =
      ValueDictFromJson(R"({"t": {"__tensor__": {"dtype": "<f4", "shape": [2], "bytes": ""}}})");
  ASSERT_FALSE(bad_tensor.ok());
  EXPECT_THAT(bad_tensor.status().message(), HasSubstr("JSON value dict: t.__tensor__: "));

  StatusOr<Value::Dict> bad_float = ValueDictFromJson(R"({"f": {"__float__": "big"}})");
  ASSERT_FALSE(bad_float.ok());
  EXPECT_EQ(bad_float.status().message(),
            "JSON value dict: f.__float__: expected \"nan\", \"inf\" or \"-inf\"");
}

}  // namespace
}  // namespace gantry::internal
