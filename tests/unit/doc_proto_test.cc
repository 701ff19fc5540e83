// Documents through docarray's protobufs and back: what a worker receives and
// what a client gets.
#include "core/doc_proto.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>

namespace gantry::internal {
namespace {

using ::testing::HasSubstr;

DocList RichDocs() {
  DocList docs;
  Doc a("first");
  a.set_embedding(Tensor::FromValues<float>({3}, std::vector<float>{0.5f, 1.0f, -1.0f}));
  a.set_tensor("ids",
               Tensor::FromValues<std::int64_t>({2, 2}, std::vector<std::int64_t>{1, 2, 3, 4}));
  a.set_tensor("mask", Tensor::FromValues<std::uint8_t>({2}, std::vector<std::uint8_t>{0, 1}));
  a.Set("blob", Value(Blob{std::string("\0\1\2", 3)}));
  a.Set("nothing", Value());
  a.Set("count", Value(42));
  a.Set("big", Value(std::int64_t{1} << 40));
  a.Set("ratio", Value(0.125));
  a.Set("flag", Value(false));
  a.Set("list", Value(Value::List{Value("x"), Value(1)}));
  a.Set("set", Value(Value::List{Value("y")}, Value::ListKind::kSet));
  a.Set("tuple", Value(Value::List{Value(2.5)}, Value::ListKind::kTuple));
  a.mutable_tags()["nested"] = Value(Value::Dict{{"deep", Value("yes")}});
  Value url("https://example.com/a.png");
  url.set_docarray_type("image_url");
  a.Set("url", url);
  Doc child("child");
  Doc b("second");
  b.Set("chunk", Value(child));
  b.Set("chunks", Value(DocList{Doc("c1"), Doc("c2")}));
  docs.push_back(a);
  docs.push_back(b);
  docs.push_back(Doc::Empty());
  return docs;
}

TEST(DocProtoTest, RoundTripKeepsEveryField) {
  DocList docs = RichDocs();
  docarray::DocListProto proto;
  DocListToProto(docs, &proto);
  ASSERT_EQ(proto.docs_size(), 3);
  auto back = TakeDocListFromProto(&proto);
  ASSERT_TRUE(back.ok()) << back.status();
  // Everything but the int beyond int32, which travels as a double (docarray's
  // `integer` is int32).
  DocList expected = docs;
  expected[0].Set("big", Value(static_cast<double>(std::int64_t{1} << 40)));
  EXPECT_EQ(*back, expected) << (*back)[0].fields().size();
}

TEST(DocProtoTest, WireShapeMatchesDocarray) {
  DocList docs = RichDocs();
  docarray::DocListProto proto;
  DocListToProto(docs, &proto);
  const auto& a = proto.docs(0).data();
  EXPECT_EQ(a.at("id").type(), "id");
  EXPECT_EQ(a.at("id").text(), docs[0].id());
  EXPECT_EQ(a.at("text").text(), "first");
  EXPECT_EQ(a.at("embedding").type(), "ndarray");
  EXPECT_EQ(a.at("embedding").ndarray().dense().dtype(), "<f4");
  EXPECT_THAT(a.at("embedding").ndarray().dense().shape(), ::testing::ElementsAre(3u));
  EXPECT_EQ(a.at("embedding").ndarray().dense().buffer().size(), 12u);
  EXPECT_EQ(a.at("count").integer(), 42);
  EXPECT_EQ(a.at("big").float_(), static_cast<double>(std::int64_t{1} << 40));
  EXPECT_EQ(a.at("nothing").content_case(), docarray::NodeProto::CONTENT_NOT_SET);
  EXPECT_TRUE(a.at("set").has_set());
  EXPECT_TRUE(a.at("tuple").has_tuple());
  EXPECT_EQ(a.at("tags").dict().data().at("nested").dict().data().at("deep").text(), "yes");
  EXPECT_EQ(a.at("url").type(), "image_url");
  EXPECT_EQ(proto.docs(1).data().at("chunks").doc_array().docs_size(), 2);
}

TEST(DocProtoTest, DocsBytesAreASerializedDocList) {
  docarray::DocListProto proto;
  DocListToProto(RichDocs(), &proto);
  auto back = DocListFromBytes(proto.SerializeAsString());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->size(), 3u);
  EXPECT_EQ((*back)[1].text(), "second");
  EXPECT_FALSE(DocListFromBytes("\xff\xff\xff").ok());
}

// An empty buffer is no longer expanded to zeros: a tiny request could ask
// for gigabytes that way.
TEST(DocProtoTest, EmptyBufferWithShapeIsAnError) {
  docarray::DocListProto proto;
  auto& node = (*proto.add_docs()->mutable_data())["t"];
  node.mutable_ndarray()->mutable_dense()->set_dtype("<f4");
  node.mutable_ndarray()->mutable_dense()->add_shape(2);
  auto back = TakeDocListFromProto(&proto);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().message(),
            "docs[0] (no id): field 't': shape [2] of float32 needs 8 bytes, buffer has 0");
}

TEST(DocProtoTest, BadTensorNamesDocumentAndField) {
  docarray::DocListProto proto;
  proto.add_docs();
  auto& node = (*proto.add_docs()->mutable_data())["embedding"];
  node.mutable_ndarray()->mutable_dense()->set_dtype("<f4");
  node.mutable_ndarray()->mutable_dense()->add_shape(4);
  node.mutable_ndarray()->mutable_dense()->set_buffer(std::string(7, 'x'));
  auto back = TakeDocListFromProto(&proto);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(
      back.status().message(),
      "docs[1] (no id): field 'embedding': shape [4] of float32 needs 16 bytes, buffer has 7");
}

TEST(DocProtoTest, StructRoundTrip) {
  Value::Dict dict{{"s", Value("x")},
                   {"n", Value(1.5)},
                   {"b", Value(true)},
                   {"null", Value()},
                   {"list", Value(Value::List{Value(1.0), Value("y")})},
                   {"obj", Value(Value::Dict{{"k", Value(2.0)}})}};
  google::protobuf::Struct proto;
  DictToStruct(dict, &proto);
  EXPECT_EQ(StructToDict(proto).value(), dict);
  // Ints become Struct numbers (doubles).
  google::protobuf::Struct ints;
  DictToStruct({{"i", Value(3)}}, &ints);
  EXPECT_EQ(ints.fields().at("i").number_value(), 3.0);
}

}  // namespace
}  // namespace gantry::internal
