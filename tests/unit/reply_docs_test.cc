#include "gateway/reply_docs.h"

#include <gtest/gtest.h>

#include <string>

namespace gantry::internal {
namespace {

jina::DataRequestProto ReplyWith(const DocList& docs, bool as_bytes) {
  jina::DataRequestProto reply;
  docarray::DocListProto list;
  DocListToProto(docs, &list);
  if (as_bytes) {
    reply.mutable_data()->set_docs_bytes(list.SerializeAsString());
  } else {
    *reply.mutable_data()->mutable_docs() = list;
  }
  return reply;
}

TEST(ReplyDocsTest, BothOfJinasFormsGiveTheSameDocuments) {
  DocList sent = {Doc("a"), Doc("b")};
  for (bool as_bytes : {false, true}) {
    SCOPED_TRACE(as_bytes ? "docs_bytes" : "docs");
    jina::DataRequestProto reply = ReplyWith(sent, as_bytes);
    reply.mutable_header()->set_request_id("r1");
    StatusOr<DocList> docs = ReplyDocs(&reply, {});
    ASSERT_TRUE(docs.ok()) << docs.status();
    ASSERT_EQ(docs->size(), 2u);
    EXPECT_EQ((*docs)[1].text(), "b");
    reply = ReplyWith(sent, as_bytes);
    StatusOr<docarray::DocListProto> protos = ReplyDocProtos(&reply);
    ASSERT_TRUE(protos.ok()) << protos.status();
    ASSERT_EQ(protos->docs_size(), 2);
    EXPECT_EQ(protos->docs(1).data().at("text").text(), "b");
  }
}

TEST(ReplyDocsTest, TheDocumentsAreTakenOutAndTheHeaderStays) {
  for (bool as_bytes : {false, true}) {
    SCOPED_TRACE(as_bytes ? "docs_bytes" : "docs");
    jina::DataRequestProto reply = ReplyWith({Doc(std::string(1 << 20, 'x'))}, as_bytes);
    reply.mutable_header()->set_request_id("r1");
    ASSERT_TRUE(ReplyDocs(&reply, {}).ok());
    EXPECT_LT(reply.ByteSizeLong(), 64u);  // the text is no longer in it
    EXPECT_EQ(reply.header().request_id(), "r1");
    reply = ReplyWith({Doc(std::string(1 << 20, 'x'))}, as_bytes);
    ASSERT_TRUE(ReplyDocProtos(&reply).ok());
    EXPECT_LT(reply.ByteSizeLong(), 64u);
  }
}

TEST(ReplyDocsTest, NoDocumentsIsAnEmptyListAndGarbageIsAnError) {
  jina::DataRequestProto empty;
  EXPECT_TRUE(ReplyDocs(&empty, {})->empty());
  EXPECT_EQ(ReplyDocProtos(&empty)->docs_size(), 0);
  jina::DataRequestProto garbage;
  garbage.mutable_data()->set_docs_bytes(std::string("\xff\xff\xff", 3));
  EXPECT_FALSE(ReplyDocs(&garbage, {}).ok());
  garbage.mutable_data()->set_docs_bytes(std::string("\xff\xff\xff", 3));
  EXPECT_FALSE(ReplyDocProtos(&garbage).ok());
}

}  // namespace
}  // namespace gantry::internal
