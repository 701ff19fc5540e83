#include <gantry/document.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <any>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gantry {
namespace {

using ::testing::HasSubstr;

TEST(DocumentTest, NewDocHasA32HexIdAndText) {
  Doc a("hello");
  Doc b;
  EXPECT_EQ(a.id().size(), 32u);
  EXPECT_EQ(a.id().find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a.id(), b.id());
  EXPECT_EQ(a.text(), "hello");
  EXPECT_EQ(b.text(), "");
  EXPECT_EQ(a.Find("id")->docarray_type(), "id");
  EXPECT_TRUE(Doc::Empty().fields().empty());
}

TEST(DocumentTest, DocListTextsAreEachDocumentsTextInOrder) {
  DocList docs = {Doc("first"), Doc::Empty(), Doc("third")};
  EXPECT_EQ(docs.texts(), (std::vector<std::string_view>{"first", "", "third"}));
  EXPECT_TRUE(DocList().texts().empty());
}

// What a preparer leaves with a document travels with it (copies and
// moves) and is not part of it: not compared, not a field.
TEST(DocumentTest, PreparedDataIsKeptButIsNotAField) {
  Doc doc("text");
  const Doc plain = doc;
  doc.set_prepared(std::vector<std::int64_t>{101, 7, 102});
  EXPECT_EQ(doc, plain);
  EXPECT_EQ(doc.fields().size(), plain.fields().size());
  const Doc copy = doc;
  const Doc moved = std::move(doc);
  for (const Doc* d : {&copy, &moved}) {
    const auto* ids = std::any_cast<std::vector<std::int64_t>>(&d->prepared());
    ASSERT_NE(ids, nullptr);
    EXPECT_EQ(*ids, (std::vector<std::int64_t>{101, 7, 102}));
  }
  EXPECT_FALSE(plain.prepared().has_value());
}

// A handler takes a call's prepared values back all or none: one document
// without one (or with another type) leaves every document as it was.
TEST(DocumentTest, TakePreparedTakesEveryDocumentsValueOrNone) {
  DocList docs = {Doc("a"), Doc("b")};
  docs[0].set_prepared(std::string("A"));
  EXPECT_TRUE(TakePrepared<std::string>(docs).empty());
  docs[1].set_prepared(7);
  EXPECT_TRUE(TakePrepared<std::string>(docs).empty());
  EXPECT_TRUE(docs[0].prepared().has_value());
  docs[1].set_prepared(std::string("B"));
  EXPECT_EQ(TakePrepared<std::string>(docs), (std::vector<std::string>{"A", "B"}));
  EXPECT_FALSE(docs[0].prepared().has_value());
  EXPECT_FALSE(docs[1].prepared().has_value());
  EXPECT_TRUE(TakePrepared<std::string>(docs).empty());
}

TEST(DocumentTest, TypedAccessors) {
  Doc doc;
  EXPECT_EQ(doc.embedding(), nullptr);
  doc.set_embedding(Tensor::FromValues<float>({2}, std::vector<float>{1.5f, -2.0f}));
  ASSERT_NE(doc.embedding(), nullptr);
  EXPECT_THAT(doc.embedding()->Values<float>(), ::testing::ElementsAre(1.5f, -2.0f));
  EXPECT_THROW(doc.embedding()->Values<double>(), std::invalid_argument);
  doc.mutable_tags()["k"] = Value(3);
  EXPECT_EQ(*doc.tags().at("k").AsInt(), 3);
  doc.Set("score", Value(0.25));
  EXPECT_EQ(*doc.Find("score")->AsFloat(), 0.25);
  EXPECT_TRUE(doc.Erase("score"));
  EXPECT_FALSE(doc.Has("score"));
  // A text accessor on a non-text field is empty, not a crash.
  doc.Set("text", Value(7));
  EXPECT_EQ(doc.text(), "");
}

TEST(DocumentTest, TensorFromBytesValidates) {
  auto ok = Tensor::FromBytes("<f4", {2, 3}, std::string(24, '\0'));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->numel(), 6);
  EXPECT_EQ(ok->ShapeString(), "[2, 3]");

  auto short_buffer = Tensor::FromBytes("<f4", {2, 3}, std::string(20, '\0'));
  EXPECT_EQ(short_buffer.status().message(),
            "shape [2, 3] of float32 needs 24 bytes, buffer has 20");
  auto bad_dtype = Tensor::FromBytes("float32", {1}, std::string(4, '\0'));
  EXPECT_THAT(bad_dtype.status().message(), HasSubstr("unknown tensor dtype 'float32'"));
  auto negative = Tensor::FromBytes("<f4", {-1}, "");
  EXPECT_FALSE(negative.ok());
}

TEST(DocumentTest, DTypeItemSizes) {
  EXPECT_EQ(DTypeItemSize("<f4"), 4u);
  EXPECT_EQ(DTypeItemSize("<f2"), 2u);
  EXPECT_EQ(DTypeItemSize("<i8"), 8u);
  EXPECT_EQ(DTypeItemSize("|u1"), 1u);
  EXPECT_EQ(DTypeItemSize("|b1"), 1u);
  EXPECT_EQ(DTypeItemSize("<c16"), 16u);
  EXPECT_EQ(DTypeItemSize("<f3"), 0u);
  EXPECT_EQ(DTypeItemSize("f4"), 0u);
}

TEST(DocumentTest, ValueEqualityAndCopiesAreDeep) {
  Doc inner("in");
  Value::Dict dict{{"a", Value(1)}, {"b", Value(Value::List{Value("x"), Value(true)})}};
  Value original(dict);
  Value copy = original;
  copy.AsMutableDict()->at("a") = Value(2);
  EXPECT_EQ(*original.AsDict()->at("a").AsInt(), 1);
  EXPECT_FALSE(original == copy);

  Value nested(inner);
  Value nested_copy = nested;
  nested_copy.AsMutableDoc()->set_text("changed");
  EXPECT_EQ(nested.AsDoc()->text(), "in");

  EXPECT_FALSE(Value(Value::List{}, Value::ListKind::kSet) == Value(Value::List{}));
  EXPECT_EQ(Value(std::int64_t{5}), Value(5));
  EXPECT_FALSE(Value(5) == Value(5.0));
  EXPECT_EQ(Value().DebugString(), "null");
  EXPECT_EQ(original.DebugString(), R"({"a": 1, "b": ["x", true]})");
}

TEST(DocumentTest, ParametersAccessors) {
  Parameters parameters(
      Value::Dict{{"name", Value("x")}, {"n", Value(4.0)}, {"i", Value(3)}, {"flag", Value(true)}});
  EXPECT_EQ(parameters.GetString("name"), "x");
  EXPECT_EQ(parameters.GetString("missing", "d"), "d");
  EXPECT_EQ(parameters.GetNumber("n"), 4.0);
  EXPECT_EQ(parameters.GetNumber("i"), 3.0);
  EXPECT_EQ(parameters.GetInt("n"), 4);
  EXPECT_EQ(parameters.GetInt("name", -1), -1);
  EXPECT_TRUE(parameters.GetBool("flag"));
  EXPECT_FALSE(parameters.GetBool("name"));
}

}  // namespace
}  // namespace gantry
