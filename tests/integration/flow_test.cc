// Flows end to end: each step a Deployment of real worker processes (this
// binary re-executed), the Flow's gateway routing between them over
// 127.0.0.1, documents posted by a Client.
#include <gantry/deployment.h>
#include <gantry/flow.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <set>
#include <string>

#include "core/gpu_inventory.h"
#include "deployment/placement.h"
#include "testutil/testutil.h"

namespace gantry {
namespace {

using ::testing::HasSubstr;

DocList MakeDocs(int n) {
  DocList docs;
  for (int i = 0; i < n; ++i) {
    docs.emplace_back("doc " + std::to_string(i));
  }
  return docs;
}

FlowStep Step(std::string name, std::string uses, Value::Dict with,
              std::vector<std::string> needs = {}) {
  FlowStep step;
  step.deployment.name = std::move(name);
  step.deployment.uses = std::move(uses);
  step.deployment.uses_with = std::move(with);
  step.needs = std::move(needs);
  return step;
}

std::string Tag(const Doc& doc, const std::string& key) {
  auto it = doc.tags().find(key);
  if (it == doc.tags().end() || it->second.AsText() == nullptr) {
    return "<missing>";
  }
  return *it->second.AsText();
}

std::int64_t IntTag(const Doc& doc, const std::string& key) {
  auto it = doc.tags().find(key);
  return it == doc.tags().end() || it->second.AsInt() == nullptr ? -1 : *it->second.AsInt();
}

TEST(FlowTest, ThreeStepChainRunsTheMiddleStepOnTheDeviceGivenToIt) {
  // Two fake GPUs; the middle step is placed on the second one.
  testing::FakeGpus gpus("NVIDIA H100 80GB,NVIDIA H100 80GB");
  FlowOptions options;
  options.executors = {Step("first", "TagExec", {{"tag", "first"}, {"value", "1"}}),
                       Step("middle", "PlacementProbeExec", {}),
                       Step("last", "TagExec", {{"tag", "last"}, {"value", "3"}})};
  options.executors[1].deployment.gpus = "1,";
  Flow flow(std::move(options));
  ASSERT_TRUE(flow.ok()) << flow.status();
  EXPECT_EQ(flow.steps(), (std::vector<std::string>{"first", "middle", "last"}));
  ASSERT_EQ(flow.replicas("middle").size(), 1u);
  EXPECT_EQ(flow.replicas("middle")[0].cuda_visible_devices, "1");
  EXPECT_EQ(flow.replicas("middle")[0].device, "cuda:0");

  auto result = flow.Post("/", MakeDocs(20), {.request_size = 7});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->size(), 20u);
  std::set<std::int64_t> pids;
  for (std::size_t i = 0; i < result->size(); ++i) {
    const Doc& doc = (*result)[i];
    // Both TagExec steps ran, in order, around the middle one.
    EXPECT_EQ(doc.text(), "doc " + std::to_string(i) + "|first|last");
    EXPECT_EQ(Tag(doc, "first"), "1");
    EXPECT_EQ(Tag(doc, "last"), "3");
    // What the middle step's process saw is the device it was given.
    EXPECT_EQ(Tag(doc, "device"), "cuda:0");
    EXPECT_EQ(Tag(doc, "cuda_visible_devices"), "1");
    EXPECT_EQ(IntTag(doc, "pid"), flow.replicas("middle")[0].pid);
    pids = {IntTag(doc, "pid_first"), IntTag(doc, "pid"), IntTag(doc, "pid_last")};
  }
  EXPECT_EQ(pids.size(), 3u) << "each step runs in a process of its own";
  EXPECT_EQ(IntTag((*result)[0], "pid_first"), flow.replicas("first")[0].pid);
}

// The same chain on a real GPU: the middle step computes on the one it was
// placed on. A ctest entry of its own, labelled `gpu` (skips without one).
TEST(FlowGpuTest, MiddleStepComputesOnItsGpu) {
  if (internal::DiscoverGpus().gpus.empty()) {
    GTEST_SKIP() << "no CUDA device visible";
  }
  FlowOptions options;
  options.executors = {Step("first", "TagExec", {{"tag", "first"}}),
                       Step("middle", "MyGPUExec", {}), Step("last", "TagExec", {{"tag", "last"}})};
  options.executors[1].deployment.gpus = "1";
  Flow flow(std::move(options));
  ASSERT_TRUE(flow.ok()) << flow.status();
  EXPECT_EQ(flow.replicas("middle")[0].device, "cuda:0");
  auto result = flow.Post("/encode", MakeDocs(10));
  ASSERT_TRUE(result.ok()) << result.status();
  for (const Doc& doc : *result) {
    EXPECT_EQ(doc.text(), "Embeddings calculated on GPU|last");
    EXPECT_EQ(doc.embedding()->numel(), 5);
  }
}

TEST(FlowTest, DagMergesTheDocumentsOfTwoParallelBranches) {
  FlowOptions options;
  options.executors = {
      Step("split", "TagExec", {{"tag", "split"}, {"value", "s"}}),
      Step("left", "TagExec", {{"tag", "left"}, {"value", "L"}}, {"split"}),
      Step("right", "TagExec", {{"tag", "right"}, {"value", "R"}, {"embedding", true}}, {"split"}),
      Step("join", "TagExec", {{"tag", "join"}, {"value", "j"}}, {"left", "right"})};
  options.executors[1].deployment.replicas = 2;
  Flow flow(std::move(options));
  ASSERT_TRUE(flow.ok()) << flow.status();

  auto result = flow.Post("/", MakeDocs(30), {.request_size = 4});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->size(), 30u);  // merged by id: no document twice
  for (std::size_t i = 0; i < result->size(); ++i) {
    const Doc& doc = (*result)[i];
    EXPECT_EQ(Tag(doc, "split"), "s");
    // Tags of both branches are kept...
    EXPECT_EQ(Tag(doc, "left"), "L");
    EXPECT_EQ(Tag(doc, "right"), "R");
    EXPECT_EQ(Tag(doc, "join"), "j");
    // ...the embedding only the right branch set survives the merge...
    ASSERT_NE(doc.embedding(), nullptr);
    EXPECT_EQ(doc.embedding()->numel(), 2);
    // ...and where both set a field, the later need (right) wins.
    EXPECT_EQ(doc.text(), "doc " + std::to_string(i) + "|split|right|join");
  }
}

TEST(FlowTest, TwoEndsAreMergedIntoTheReply) {
  FlowOptions options;
  options.executors = {Step("a", "TagExec", {{"tag", "a"}, {"value", "A"}}, {"gateway"}),
                       Step("b", "TagExec", {{"tag", "b"}, {"value", "B"}}, {"gateway"})};
  Flow flow(std::move(options));
  ASSERT_TRUE(flow.ok()) << flow.status();
  auto result = flow.Post("/", MakeDocs(5));
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->size(), 5u);
  EXPECT_EQ(Tag((*result)[4], "a"), "A");
  EXPECT_EQ(Tag((*result)[4], "b"), "B");
}

TEST(FlowTest, AStepThatThrowsReachesTheClientNamingTheStep) {
  FlowOptions options;
  options.executors = {Step("prepare", "TagExec", {{"tag", "prepare"}}),
                       Step("picky", "TagExec", {{"tag", "picky"}, {"fail_on", "boom"}}),
                       Step("finish", "TagExec", {{"tag", "finish"}})};
  Flow flow(std::move(options));
  ASSERT_TRUE(flow.ok()) << flow.status();

  DocList docs = MakeDocs(3);
  docs.emplace_back("boom");
  auto result = flow.Post("/", docs);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("picky/rep-0"));
  EXPECT_THAT(result.status().message(), HasSubstr("step picky cannot take 'boom|prepare'"));
  EXPECT_EQ(flow.replicas("finish")[0].requests, 0u) << "no step runs after the failed one";

  // The Flow serves on.
  auto good = flow.Post("/", MakeDocs(3));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ((*good)[0].text(), "doc 0|prepare|picky|finish");
}

// As in Jina, a step with no handler for the endpoint (and no default one)
// is skipped: the request goes on as it came, so that a Flow's endpoints
// need not exist on every step.
TEST(FlowTest, AStepWithoutTheEndpointIsSkipped) {
  FlowOptions options;
  // NoDefaultExec serves /index and /search only.
  options.executors = {Step("index", "NoDefaultExec", {}),
                       Step("tag", "TagExec", {{"tag", "tag"}})};
  Flow flow(std::move(options));
  ASSERT_TRUE(flow.ok()) << flow.status();
  for (const char* endpoint : {"/other", "/index"}) {
    auto result = flow.Post(endpoint, MakeDocs(2));
    ASSERT_TRUE(result.ok()) << endpoint << ": " << result.status();
    EXPECT_EQ((*result)[1].text(), "doc 1|tag") << endpoint;
  }
  // On its own, the Deployment still says the endpoint is not served.
  Deployment alone({.uses = "NoDefaultExec"});
  ASSERT_TRUE(alone.ok()) << alone.status();
  auto refused = alone.Post("/other", MakeDocs(1));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("no handler for this endpoint"));
}

TEST(FlowTest, HttpJsonPostsTravelThroughTheSteps) {
  FlowOptions options;
  options.http_port = 0;
  options.executors = {Step("a", "TagExec", {{"tag", "a"}}),
                       Step("b", "TagExec", {{"tag", "b"}, {"fail_on", "boom"}})};
  Flow flow(std::move(options));
  ASSERT_TRUE(flow.ok()) << flow.status();
  ASSERT_GT(flow.http_port(), 0);
  httplib::Client http("127.0.0.1", flow.http_port());
  http.set_connection_timeout(std::chrono::seconds(10));
  http.set_read_timeout(std::chrono::seconds(30));
  auto res = http.Post("/any", R"({"data": [{"text": "hi"}]})", "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_THAT(res->body, HasSubstr("hi|a|b"));
  res = http.Post("/any", R"({"data": [{"text": "boom"}]})", "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_NE(res->status, 200);
  EXPECT_THAT(res->body, HasSubstr("b/rep-0"));
}

TEST(FlowTest, AStepThatCannotStartFailsTheFlowAndLeavesNoWorkerBehind) {
  FlowOptions options;
  options.executors = {Step("fine", "TagExec", {{"tag", "fine"}}),
                       Step("broken", "CtorFailExec", {}),
                       Step("also_fine", "TagExec", {{"tag", "also"}})};
  Flow flow(std::move(options));
  ASSERT_FALSE(flow.ok());
  EXPECT_THAT(flow.status().message(), HasSubstr("flow 'flow': step 'broken'"));
  EXPECT_THAT(flow.status().message(), HasSubstr("/nonexistent/model.safetensors is missing"));
  EXPECT_EQ(flow.port(), 0);
  EXPECT_FALSE(flow.Post("/", MakeDocs(1)).ok());
  // The steps that did start were stopped and reaped.
  EXPECT_TRUE(testing::ChildrenOf(::getpid()).empty());
}

// The Flow's health follows its steps': a step with no replica in rotation
// makes it NOT_SERVING (it used to answer SERVING regardless).
TEST(FlowTest, HealthIsNotServingWhileAStepHasNoReplica) {
  FlowOptions options;
  options.executors = {Step("first", "TagExec", {{"tag", "first"}, {"value", "1"}}),
                       Step("second", "TagExec", {{"tag", "second"}, {"value", "2"}})};
  // Long enough that the killed replica stays down for the test.
  options.executors[1].deployment.restart_backoff_initial = std::chrono::milliseconds(60000);
  options.executors[1].deployment.restart_backoff_max = std::chrono::milliseconds(60000);
  Flow flow(std::move(options));
  ASSERT_TRUE(flow.ok()) << flow.status();
  Client client(flow.address());
  ASSERT_TRUE(client.Ping(std::chrono::milliseconds(5000)).ok());
  ASSERT_EQ(::kill(flow.replicas("second").at(0).pid, SIGKILL), 0);
  EXPECT_TRUE(testing::WaitUntil([&] { return !client.Ping(std::chrono::milliseconds(500)).ok(); },
                                 std::chrono::seconds(10)));
}

// The replicas of all the steps share the cores, not each step's alone: two
// single-replica steps on this machine get half the cores each.
TEST(FlowTest, StepsShareTheCoresUnlessTheUserSizedThem) {
  std::string expected =
      std::to_string(internal::IntraOpThreadsPerReplica(internal::AvailableCpuCores(), 2));
  if (const char* own = std::getenv("OMP_NUM_THREADS"); own != nullptr) {
    expected = own;  // the user's setting, inherited unchanged
  }
  FlowOptions options;
  options.executors = {Step("a", "PlacementProbeExec", {{"tag_prefix", "a_"}}),
                       Step("b", "PlacementProbeExec", {{"tag_prefix", "b_"}}, {"a"})};
  Flow flow(options);
  ASSERT_TRUE(flow.ok()) << flow.status();
  auto result = flow.Post("/", MakeDocs(3));
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->size(), 3u);
  for (const Doc& doc : *result) {
    EXPECT_EQ(Tag(doc, "a_omp_num_threads"), expected);
    EXPECT_EQ(Tag(doc, "b_omp_num_threads"), expected);
  }

  // A step the user sized keeps its setting.
  options.executors[0].deployment.env["OMP_NUM_THREADS"] = "3";
  Flow sized(options);
  ASSERT_TRUE(sized.ok()) << sized.status();
  auto sized_result = sized.Post("/", MakeDocs(1));
  ASSERT_TRUE(sized_result.ok()) << sized_result.status();
  EXPECT_EQ(Tag((*sized_result)[0], "a_omp_num_threads"), "3");
}

TEST(FlowTest, BadGraphsAreRefusedBeforeAnythingStarts) {
  const auto error_of = [](std::vector<FlowStep> steps) {
    Flow flow({.executors = std::move(steps)});
    EXPECT_EQ(flow.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(flow.port(), 0);
    return flow.status().message();
  };
  EXPECT_EQ(error_of({Step("a", "TagExec", {}, {"b"}), Step("b", "TagExec", {})}),
            "flow 'flow': executors[0].needs[0]: the steps form a cycle: 'a' needs 'b' needs 'a'");
  EXPECT_EQ(error_of({Step("a", "TagExec", {}), Step("b", "TagExec", {}, {"x"})}),
            "flow 'flow': executors[1].needs[0]: step 'b' needs unknown step 'x' (steps: a, b, "
            "gateway)");
  EXPECT_EQ(error_of({Step("a", "TagExec", {}), Step("a", "TagExec", {})}),
            "flow 'flow': executors[1].name: duplicate step name 'a' (also executors[0])");
  EXPECT_THAT(error_of({Step("a", "TagExec", {}), Step("b", "", {})}),
              HasSubstr("flow 'flow': executors[1]: deployment 'b': `uses` is empty"));
  // A fixed port taken twice, by two steps or by a step and the Flow.
  std::vector<FlowStep> same_port = {Step("a", "TagExec", {}), Step("b", "TagExec", {})};
  same_port[0].deployment.port = 19533;
  same_port[1].deployment.port = 19533;
  EXPECT_EQ(error_of(same_port),
            "flow 'flow': executors[0].port and executors[1].port are both 19533; each server "
            "needs a port of its own");
  FlowOptions clashing;
  clashing.port = 19534;
  clashing.http_port = 19534;
  clashing.executors = {Step("a", "TagExec", {})};
  Flow clash(std::move(clashing));
  EXPECT_THAT(clash.status().message(),
              HasSubstr("port and http_port are both 19534; each server needs a port of its own"));
}

}  // namespace
}  // namespace gantry
