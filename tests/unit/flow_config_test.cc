// Flow YAML (jtype: Flow), the Flow graph's rules, and how the replies of
// parallel branches merge (gateway/request_merge.h).
#include <gantry/config.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/flow_graph.h"
#include "gateway/request_merge.h"

namespace gantry {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ErrorOf(const StatusOr<FlowOptions>& result) {
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument) << result.status();
  return result.status().message();
}

TEST(FlowConfigTest, JinaFlowYamlParses) {
  auto flow = ParseFlowConfig(R"(jtype: Flow
version: '1'
with:
  port: 12345
  protocol: grpc
  env: {SHARED: "1"}
executors:
  - name: encoder
    uses: MyGPUExec
    uses_with: {device: cpu}
    replicas: 2
  - uses: NoOp
    env: {SHARED: "2"}
  - name: indexer
    uses: NoOp
    needs: [encoder, executor1]
    shards: 1
)",
                              "flow.yml");
  ASSERT_TRUE(flow.ok()) << flow.status();
  EXPECT_EQ(flow->port, 12345);
  ASSERT_EQ(flow->executors.size(), 3u);
  EXPECT_EQ(flow->executors[0].deployment.name, "encoder");
  EXPECT_EQ(flow->executors[0].deployment.uses, "MyGPUExec");
  EXPECT_EQ(flow->executors[0].deployment.replicas, 2);
  EXPECT_EQ(*flow->executors[0].deployment.uses_with.at("device").AsText(), "cpu");
  EXPECT_EQ(flow->executors[0].deployment.env.at("SHARED"), "1");
  EXPECT_TRUE(flow->executors[0].needs.empty());
  // Jina's default name; the step's own env wins over the Flow's.
  EXPECT_EQ(flow->executors[1].deployment.name, "executor1");
  EXPECT_EQ(flow->executors[1].deployment.env.at("SHARED"), "2");
  EXPECT_THAT(flow->executors[2].needs, ElementsAre("encoder", "executor1"));
}

TEST(FlowConfigTest, CycleIsAnErrorNamingFileKeyAndSteps) {
  std::string error = ErrorOf(ParseFlowConfig(R"(jtype: Flow
executors:
  - name: a
    uses: NoOp
    needs: c
  - name: b
    uses: NoOp
  - name: c
    uses: NoOp
)",
                                              "cycle.yml"));
  EXPECT_EQ(error,
            "cycle.yml:5:12: executors[0].needs[0]: the steps form a cycle: 'a' needs 'c' needs "
            "'b' needs 'a'");
}

TEST(FlowConfigTest, UnknownNeedIsAnError) {
  std::string error = ErrorOf(ParseFlowConfig(R"(jtype: Flow
executors:
  - {name: a, uses: NoOp}
  - {name: b, uses: NoOp, needs: [a, nope]}
)",
                                              "unknown.yml"));
  EXPECT_EQ(error,
            "unknown.yml:4:38: executors[1].needs[1]: step 'b' needs unknown step 'nope' "
            "(steps: a, b, gateway)");
}

TEST(FlowConfigTest, DuplicateNameIsAnError) {
  std::string error = ErrorOf(ParseFlowConfig(R"(jtype: Flow
executors:
  - name: enc
    uses: NoOp
  - name: enc
    uses: NoOp
)",
                                              "dup.yml"));
  EXPECT_EQ(error,
            "dup.yml:5:11: executors[1].name: duplicate step name 'enc' (also executors[0])");
}

TEST(FlowConfigTest, OtherMistakesNameTheirKey) {
  EXPECT_THAT(ErrorOf(ParseFlowConfig("jtype: Flow\nexecutors:\n  - {name: a, uses: NoOp, when: "
                                      "{tags__x: {$eq: 1}}}\n",
                                      "f.yml")),
              HasSubstr("f.yml:3:27: executors[0].when: not supported yet"));
  EXPECT_THAT(ErrorOf(ParseFlowConfig("jtype: Flow\nexecutors:\n  - {name: a, replicas: 0, uses: "
                                      "NoOp}\n",
                                      "f.yml")),
              HasSubstr("executors[0].replicas: expected an integer from 1 to 1024, got 0"));
  EXPECT_THAT(ErrorOf(ParseFlowConfig("jtype: Flow\nexecutors:\n  - {name: a}\n", "f.yml")),
              HasSubstr("executors[0].uses: required key is missing"));
  EXPECT_THAT(ErrorOf(ParseFlowConfig("jtype: Flow\nexecutors: []\n", "f.yml")),
              HasSubstr("executors: expected a non-empty sequence of executors"));
  EXPECT_THAT(ErrorOf(ParseFlowConfig("jtype: Flow\nwith: {protocol: http}\nexecutors:\n  - "
                                      "{uses: NoOp}\n",
                                      "f.yml")),
              HasSubstr("with.protocol: only grpc is supported"));
  EXPECT_THAT(ErrorOf(ParseFlowConfig("jtype: Flow\nexecutors:\n  - {name: gateway, uses: NoOp}\n",
                                      "f.yml")),
              HasSubstr("executors[0].name: 'gateway' is reserved"));
  EXPECT_THAT(ErrorOf(ParseFlowConfig("jtype: Deployment\nexecutors: []\n", "f.yml")),
              HasSubstr("jtype: expected \"Flow\", got \"Deployment\""));
}

TEST(FlowConfigTest, MaxConcurrentRequestsIsTheGatewaysAndBounded) {
  auto flow = ParseFlowConfig(
      "jtype: Flow\nwith: {max_concurrent_requests: 64}\nexecutors:\n  - {uses: NoOp}\n", "f.yml");
  ASSERT_TRUE(flow.ok()) << flow.status();
  EXPECT_EQ(flow->max_concurrent_requests, 64);
  EXPECT_EQ(flow->executors[0].deployment.max_concurrent_requests, 0);
  EXPECT_THAT(ErrorOf(ParseFlowConfig("jtype: Flow\nwith: {max_concurrent_requests: -3}\n"
                                      "executors:\n  - {uses: NoOp}\n",
                                      "f.yml")),
              HasSubstr("f.yml:2:33: with.max_concurrent_requests: expected an integer >= 0 (0: "
                        "no limit), got -3"));
}

TEST(FlowConfigTest, ExternalStepsNameWhereTheyRun) {
  auto flow = ParseFlowConfig(R"(jtype: Flow
executors:
  - {name: enc, external: true, host: enc.search.svc, port: 8081}
  - {name: local, uses: NoOp, external: false}
  - {external: true, host: 127.0.0.1, port: 9000, needs: [enc, local]}
)",
                              "f.yml");
  ASSERT_TRUE(flow.ok()) << flow.status();
  ASSERT_EQ(flow->executors.size(), 3u);
  EXPECT_TRUE(flow->executors[0].external);
  EXPECT_EQ(flow->executors[0].deployment.host, "enc.search.svc");
  EXPECT_EQ(flow->executors[0].deployment.port, 8081);
  EXPECT_FALSE(flow->executors[1].external);
  EXPECT_EQ(flow->executors[1].deployment.uses, "NoOp");
  EXPECT_TRUE(flow->executors[2].external);
  EXPECT_EQ(flow->executors[2].deployment.name, "executor2");
  EXPECT_THAT(flow->executors[2].needs, ElementsAre("enc", "local"));
}

TEST(FlowConfigTest, ExternalStepMistakesNameTheirKey) {
  EXPECT_THAT(ErrorOf(ParseFlowConfig("jtype: Flow\nexecutors:\n  - {name: a, external: true, "
                                      "port: 80}\n",
                                      "f.yml")),
              HasSubstr("f.yml:3:5: executors[0].host: required key is missing for an external "
                        "step"));
  EXPECT_THAT(ErrorOf(ParseFlowConfig("jtype: Flow\nexecutors:\n  - {name: a, external: true, "
                                      "host: h, port: 0}\n",
                                      "f.yml")),
              HasSubstr("f.yml:3:46: executors[0].port: an external step needs the port"));
  EXPECT_THAT(ErrorOf(ParseFlowConfig("jtype: Flow\nexecutors:\n  - {name: a, external: true, "
                                      "host: h, port: 80, replicas: 2}\n",
                                      "f.yml")),
              HasSubstr("f.yml:3:50: executors[0].replicas: not used by an external step"));
  EXPECT_THAT(ErrorOf(ParseFlowConfig("jtype: Flow\nexecutors:\n  - {name: a, external: maybe, "
                                      "host: h, port: 80}\n",
                                      "f.yml")),
              HasSubstr("executors[0].external: expected true or false"));
}

TEST(FlowGraphTest, DefaultsChainAndOrderFollowsNeeds) {
  internal::FlowGraphResult result =
      internal::ResolveFlowGraph({"a", "b", "c", "d"}, {{}, {"gateway"}, {"d", "a"}, {"b"}});
  ASSERT_FALSE(result.error) << result.error->message;
  EXPECT_TRUE(result.graph->needs[0].empty());
  EXPECT_TRUE(result.graph->needs[1].empty());
  EXPECT_THAT(result.graph->needs[2], ElementsAre(3u, 0u));
  EXPECT_THAT(result.graph->needs[3], ElementsAre(1u));
  EXPECT_THAT(result.graph->order, ElementsAre(0u, 1u, 3u, 2u));
}

docarray::DocProto* AddDoc(docarray::DocListProto* docs, const std::string& id) {
  docarray::DocProto* doc = docs->add_docs();
  (*doc->mutable_data())["id"].set_text(id);
  return doc;
}

void SetTag(docarray::DocProto* doc, const std::string& key, const std::string& value) {
  (*(*doc->mutable_data())["tags"].mutable_dict()->mutable_data())[key].set_text(value);
}

TEST(RequestMergeTest, MergesDocumentsByIdTheWayDocarrayUpdates) {
  std::vector<jina::DataRequestProto> parts(2);
  auto* left = parts[0].mutable_data()->mutable_docs();
  docarray::DocProto* a = AddDoc(left, "a");
  SetTag(a, "branch", "left");
  SetTag(a, "left_only", "1");
  (*a->mutable_data())["text"].set_text("left text");
  (*a->mutable_data())["list"].mutable_list()->add_data()->set_integer(1);
  AddDoc(left, "b");
  parts[0].add_routes()->set_executor("first");
  parts[0].add_routes()->set_executor("left");

  docarray::DocListProto right;
  docarray::DocProto* a2 = AddDoc(&right, "a");
  SetTag(a2, "branch", "right");
  SetTag(a2, "right_only", "2");
  (*a2->mutable_data())["embedding"].mutable_ndarray()->mutable_dense()->add_shape(3);
  (*a2->mutable_data())["list"].mutable_list()->add_data()->set_integer(2);
  (*a2->mutable_data())["text"];  // None: keeps the left's
  AddDoc(&right, "c");
  // The right branch sent docs_bytes, as a Jina writer may.
  parts[1].mutable_data()->set_docs_bytes(right.SerializeAsString());
  parts[1].add_routes()->set_executor("first");
  parts[1].add_routes()->set_executor("right");

  ASSERT_TRUE(internal::MergeRequests(parts).ok());
  const docarray::DocListProto& merged = parts[0].data().docs();
  ASSERT_EQ(merged.docs_size(), 3);
  EXPECT_EQ(merged.docs(0).data().at("id").text(), "a");
  EXPECT_EQ(merged.docs(1).data().at("id").text(), "b");
  EXPECT_EQ(merged.docs(2).data().at("id").text(), "c");
  const auto& fields = merged.docs(0).data();
  const auto& tags = fields.at("tags").dict().data();
  EXPECT_EQ(tags.at("branch").text(), "right");  // the later branch wins a shared key
  EXPECT_EQ(tags.at("left_only").text(), "1");
  EXPECT_EQ(tags.at("right_only").text(), "2");
  EXPECT_EQ(fields.at("text").text(), "left text");
  EXPECT_EQ(fields.at("embedding").ndarray().dense().shape(0), 3u);
  EXPECT_EQ(fields.at("list").list().data_size(), 2);
  std::vector<std::string> routes;
  for (const auto& route : parts[0].routes()) {
    routes.push_back(route.executor());
  }
  EXPECT_THAT(routes, ElementsAre("first", "left", "right"));
}

TEST(RequestMergeTest, UndecodableDocsBytesIsAnError) {
  std::vector<jina::DataRequestProto> parts(2);
  parts[1].mutable_data()->set_docs_bytes("\xff\xff\xff");
  Status status = internal::MergeRequests(parts);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("reply 1: docs_bytes"));
}

}  // namespace
}  // namespace gantry
