// How the gateway routes around failures, passes errors and deadlines on,
// and caps messages: real worker processes (this binary, re-executed) behind
// a Deployment's gateway on 127.0.0.1 ephemeral ports.
#include <gantry/client.h>
#include <gantry/config.h>
#include <gantry/deployment.h>
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/grpc_options.h"
#include "core/doc_proto.h"
#include "deployment/child_process.h"
#include "jina/jina.grpc.pb.h"
#include "testutil/testutil.h"

namespace gantry {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Ms = std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

using testing::Since;
using testing::WaitUntil;

// Lines of ChaosExec's call log: one per handler call.
std::vector<std::string> LogLines(const std::string& path) {
  std::vector<std::string> lines;
  std::string text = testing::ReadFile(path);
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      end = text.size();
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

int TotalInFlight(const Deployment& dep) {
  int total = 0;
  for (const ReplicaInfo& r : dep.replicas()) {
    total += r.in_flight;
  }
  return total;
}

DeploymentOptions ChaosOptions(const std::string& name, int replicas, const std::string& log) {
  return {.uses = "ChaosExec", .uses_with = {{"log", log}}, .name = name, .replicas = replicas};
}

// One /work request of ChaosExec as Jina's wire format.
jina::DataRequestProto WorkRequest(const std::string& id, const std::string& text, int sleep_ms) {
  jina::DataRequestProto request;
  request.mutable_header()->set_request_id(id);
  request.mutable_header()->set_exec_endpoint("/work");
  (*request.mutable_parameters()->mutable_fields())["sleep_ms"].set_number_value(sleep_ms);
  internal::DocListToProto(DocList{Doc(text)}, request.mutable_data()->mutable_docs());
  return request;
}

TEST(RoutingTest, WorkerErrorPassesThroughWithItsCodeAndBlamesNoReplica) {
  Deployment dep({.uses = "EchoExec", .name = "errs", .replicas = 2});
  ASSERT_TRUE(dep.ok()) << dep.status();
  // Bytes no worker can decode: a length-delimited field cut short.
  auto channel = internal::MakeChannel(dep.address(), std::int64_t{1} << 20);
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + Ms(5000));
  std::string bytes = "\x0a\x7f\x01";
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer reply;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/jina.JinaSingleDataRequestRPC/process_single_data",
                 grpc::StubOptions(), &request, &reply,
                 [&done](grpc::Status status) { done.set_value(std::move(status)); });
  grpc::Status status = done.get_future().get();
  // The worker refuses it as the client's error: not a transport failure.
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), Not(HasSubstr("communication error")));
  EXPECT_THAT(status.error_message(), Not(HasSubstr("may be down")));

  // Answered once, by one replica, and nobody left rotation.
  std::uint64_t answered = 0;
  for (const ReplicaInfo& r : dep.replicas()) {
    EXPECT_TRUE(r.available) << r.name;
    answered += r.requests;
  }
  EXPECT_EQ(answered, 1u);
  Client client(dep.address());
  // A generous bound: this asks "serving?", not "how fast?" (TSan, -j2).
  Status ping = client.Ping(Ms(5000));
  EXPECT_TRUE(ping.ok()) << ping;
  auto out = dep.Post("/echo", {Doc("fine")});
  ASSERT_TRUE(out.ok()) << out.status();
}

TEST(RoutingTest, HealthIsNotServingAndRequestsFailFastWhenEveryReplicaIsDead) {
  // Respawn (respawn_test.cc) put off past the end of the test.
  Deployment dep({.uses = "EchoExec",
                  .name = "dead",
                  .replicas = 2,
                  .restart_backoff_initial = std::chrono::minutes(10),
                  .restart_backoff_max = std::chrono::minutes(10)});
  ASSERT_TRUE(dep.ok()) << dep.status();
  Client client(dep.address());
  ASSERT_TRUE(client.Ping(Ms(5000)).ok());
  for (const ReplicaInfo& r : dep.replicas()) {
    ASSERT_EQ(::kill(r.pid, SIGKILL), 0) << r.name;
  }
  // No request needed: the health probes notice.
  auto start = SteadyClock::now();
  EXPECT_TRUE(WaitUntil([&] { return !client.Ping(Ms(500)).ok(); }, Ms(5000)))
      << "the gateway still answers SERVING with every replica dead";
  std::printf("[ measured ] NOT_SERVING %lld ms after both replicas were killed\n",
              static_cast<long long>(Since(start).count()));
  EXPECT_THAT(client.Ping(Ms(5000)).message(), HasSubstr("not serving"));
  for (const ReplicaInfo& r : dep.replicas()) {
    EXPECT_FALSE(r.available) << r.name;
  }
  start = SteadyClock::now();
  auto out = dep.Post("/echo", {Doc("x")}, {.timeout = Ms(30000)});
  Ms took = Since(start);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kUnavailable) << out.status();
  EXPECT_THAT(out.status().message(), HasSubstr("deployment 'dead'"));
  EXPECT_THAT(out.status().message(), HasSubstr("no replica is available"));
  // "Fast" means well before the 30 s deadline, not a latency figure: the
  // first call also opens a channel, which takes over a second under TSan.
  EXPECT_LT(took, Ms(5000));
  std::printf("[ measured ] UNAVAILABLE after %lld ms (deadline 30000 ms)\n",
              static_cast<long long>(took.count()));
}

TEST(RoutingTest, ClientDeadlineReachesTheWorkerAndIsNotRetried) {
  testing::TempDir dir;
  std::string log = dir.File("calls.log");
  Deployment dep(ChaosOptions("slow", 2, log));
  ASSERT_TRUE(dep.ok()) << dep.status();
  // One quick request per replica first: under TSan a channel's first call
  // alone can take over a second, past this test's 200 ms deadline.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(dep.Post("/work", {Doc("warm")}).ok());
  }
  const std::size_t warm_calls = LogLines(log).size();
  auto start = SteadyClock::now();
  auto out = dep.Post(
      "/work", {Doc("slow")},
      {.parameters = Parameters(Value::Dict{{"sleep_ms", Value(2000.0)}}), .timeout = Ms(200)});
  Ms took = Since(start);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kDeadlineExceeded) << out.status();
  EXPECT_LT(took, Ms(1000));
  std::printf("[ measured ] DEADLINE_EXCEEDED after %lld ms (deadline 200 ms, handler 2000 ms)\n",
              static_cast<long long>(took.count()));
  // The gateway's call to the worker carried the deadline: it ended too,
  // instead of holding the replica for the handler's 2 s.
  EXPECT_TRUE(WaitUntil([&] { return TotalInFlight(dep) == 0; }, Ms(500)))
      << "in flight: " << TotalInFlight(dep);
  for (const ReplicaInfo& r : dep.replicas()) {
    EXPECT_TRUE(r.available) << r.name << ": a slow replica is not a dead one";
  }
  // Once the handler would have finished: it ran once, on one replica.
  std::this_thread::sleep_for(Ms(2300) - Since(start));
  EXPECT_EQ(LogLines(log).size(), warm_calls + 1) << testing::ReadFile(log);
}

TEST(RoutingTest, RequestPastItsDeadlineWhileQueuedDoesNotRunTheHandler) {
  testing::TempDir dir;
  std::string log = dir.File("calls.log");
  Deployment dep(ChaosOptions("queue", 1, log));
  ASSERT_TRUE(dep.ok()) << dep.status();
  std::future<StatusOr<DocList>> first = std::async(std::launch::async, [&] {
    return dep.Post(
        "/work", {Doc("first")},
        {.parameters = Parameters(Value::Dict{{"sleep_ms", Value(1000.0)}}), .timeout = Ms(10000)});
  });
  ASSERT_TRUE(WaitUntil([&] { return LogLines(log).size() == 1; }, Ms(5000)));
  // Waits behind "first" on the one replica and expires there.
  auto late = dep.Post("/work", {Doc("late")}, {.timeout = Ms(300)});
  EXPECT_EQ(late.status().code(), StatusCode::kDeadlineExceeded) << late.status();
  auto first_out = first.get();
  ASSERT_TRUE(first_out.ok()) << first_out.status();
  // The worker would have run "late" right after "first": give it time to.
  std::this_thread::sleep_for(Ms(300));
  auto again = dep.Post("/work", {Doc("after")});
  ASSERT_TRUE(again.ok()) << again.status();
  std::vector<std::string> lines = LogLines(log);
  ASSERT_EQ(lines.size(), 2u) << testing::ReadFile(log);
  EXPECT_THAT(lines[0], HasSubstr("first"));
  EXPECT_THAT(lines[1], HasSubstr("after"));
}

TEST(RoutingTest, CancelledCallFreesTheReplica) {
  testing::TempDir dir;
  std::string log = dir.File("calls.log");
  Deployment dep(ChaosOptions("cancel", 1, log));
  ASSERT_TRUE(dep.ok()) << dep.status();
  auto stub = jina::JinaRPC::NewStub(internal::MakeChannel(dep.address(), 1 << 20));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + Ms(30000));
  auto stream = stub->Call(&context);
  ASSERT_TRUE(stream->Write(WorkRequest("r-0", "running", 1500)));
  ASSERT_TRUE(WaitUntil([&] { return LogLines(log).size() == 1; }, Ms(5000)));
  // Waits on the replica behind "running".
  ASSERT_TRUE(stream->Write(WorkRequest("r-1", "queued", 0)));
  ASSERT_TRUE(WaitUntil([&] { return TotalInFlight(dep) == 2; }, Ms(1000)))
      << "in flight: " << TotalInFlight(dep);
  auto start = SteadyClock::now();
  context.TryCancel();
  EXPECT_TRUE(WaitUntil([&] { return TotalInFlight(dep) == 0; }, Ms(500)))
      << "the cancelled requests still occupy the replica: " << TotalInFlight(dep);
  std::printf("[ measured ] in flight back to 0 %lld ms after the client cancelled\n",
              static_cast<long long>(Since(start).count()));
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  // The replica serves the next request once the running handler returns;
  // the queued, cancelled one never ran.
  auto out = dep.Post("/work", {Doc("next")}, {.timeout = Ms(10000)});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<std::string> lines = LogLines(log);
  ASSERT_EQ(lines.size(), 2u) << testing::ReadFile(log);
  EXPECT_THAT(lines[0], HasSubstr("running"));
  EXPECT_THAT(lines[1], HasSubstr("next"));
}

TEST(RoutingTest, RequestOverTheConfiguredCapIsRefused) {
  constexpr std::int64_t kCap = 64 << 10;
  Deployment dep({.uses = "EchoExec", .name = "capped", .max_message_bytes = kCap});
  ASSERT_TRUE(dep.ok()) << dep.status();
  // A client allowed to send more than the gateway takes.
  Client client(dep.address());
  auto over = client.Post("/echo", {Doc(std::string(kCap + 1024, 'x'))});
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted) << over.status();
  auto under = client.Post("/echo", {Doc(std::string(kCap / 2, 'y'))});
  ASSERT_TRUE(under.ok()) << under.status();
  EXPECT_EQ((*under)[0].text().size(), kCap / 2 + 5);  // "echo:" prefix
  for (const ReplicaInfo& r : dep.replicas()) {
    EXPECT_TRUE(r.available) << r.name;
  }
}

TEST(RoutingTest, InvalidCapIsRejectedBeforeAnythingStarts) {
  Deployment dep({.uses = "EchoExec", .max_message_bytes = 0});
  ASSERT_FALSE(dep.ok());
  EXPECT_EQ(dep.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(dep.status().message(), HasSubstr("max_message_bytes"));
}

TEST(RoutingTest, ClientCapBoundsWhatItReceives) {
  Deployment dep({.uses = "EchoExec", .name = "big"});
  ASSERT_TRUE(dep.ok()) << dep.status();
  std::string text(40 << 10, 'z');
  Client small(dep.address(), ClientOptions{.max_message_bytes = 32 << 10});
  auto refused = small.Post("/echo", {Doc(text)});
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status();
  Client large(dep.address(), ClientOptions{.max_message_bytes = 1 << 20});
  auto out = large.Post("/echo", {Doc(text)});
  ASSERT_TRUE(out.ok()) << out.status();
}

// --max-message-bytes on `gantry deployment` and `gantry executor`, and
// `max_message_bytes:` in YAML, reach the gateway and the worker.
using internal::ChildProcess;
using internal::ChildProcessPtr;

ChildProcessPtr StartCli(const std::vector<std::string>& args, const std::string& log) {
  internal::ChildProcessOptions options;
  options.program = testing::GantryCli();
  options.args = args;
  options.output_file = log;
  options.env["GANTRY_WORKER_PROGRAM"] = testing::GantryWorker();
  auto child = ChildProcess::Spawn(options);
  return child.ok() ? std::move(child).value() : nullptr;
}

// Posts a document just over and one well under `cap` bytes to `address`.
void ExpectCap(const std::string& address, std::int64_t cap, const std::string& endpoint) {
  Client client(address);
  auto over = client.Post(endpoint, {Doc(std::string(cap + 1024, 'x'))});
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted) << over.status();
  auto under = client.Post(endpoint, {Doc(std::string(cap / 2, 'y'))});
  EXPECT_TRUE(under.ok()) << under.status();
}

// One `gantry` command line and the message cap its server must keep.
struct CliCapCase {
  std::vector<std::string> args;
  std::int64_t cap;
};

// Starts each command on a free port, checks its cap, and stops it.
void ExpectCapsThroughTheCli(const testing::TempDir& dir, const std::vector<CliCapCase>& cases) {
  for (std::size_t i = 0; i < cases.size(); ++i) {
    std::string port_file = dir.File("port" + std::to_string(i));
    std::string log = dir.File("cli" + std::to_string(i) + ".log");
    std::vector<std::string> args = cases[i].args;
    args.insert(args.end(), {"--port", "0", "--port-file", port_file});
    ChildProcessPtr cli = StartCli(args, log);
    ASSERT_NE(cli, nullptr);
    auto port = testing::WaitForFile(port_file, std::chrono::seconds(60));
    ASSERT_TRUE(port.has_value()) << testing::ReadFile(log);
    ExpectCap("127.0.0.1:" + std::to_string(std::stoi(*port)), cases[i].cap, "/encode");
    cli->Signal(SIGTERM);
    EXPECT_TRUE(cli->WaitFor(std::chrono::seconds(30)));
  }
}

TEST(RoutingTest, CliAndYamlSetTheCap) {
  testing::TempDir dir;
  const std::string yaml = dir.File("dep.yml");
  testing::WriteFile(yaml, "jtype: Deployment\nwith:\n  uses: " + testing::SourceDir() +
                               "/examples/seed/executor.yml\n  max_message_bytes: 65536\n");
  std::vector<CliCapCase> cases = {
      {{"deployment", "--uses", yaml}, 65536},
      {{"deployment", "--uses", yaml, "--max-message-bytes", "131072"}, 131072},
      {{"executor", "--uses", testing::SourceDir() + "/examples/seed/executor.yml", "--host",
        "127.0.0.1", "--max-message-bytes", "65536"},
       65536},
  };
  ExpectCapsThroughTheCli(dir, cases);

  testing::WriteFile(yaml, "jtype: Deployment\nwith:\n  uses: EchoExec\n  max_message_bytes: 0\n");
  auto parsed = LoadDeploymentConfig(yaml);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr(yaml + ":4:22: with.max_message_bytes: "));
}

// `gantry flow` takes the Flow's gateway options as flags (from the same
// table as `gantry deployment`), each over the YAML's.
TEST(RoutingTest, FlowCliFlagsOverrideTheFlowsYaml) {
  testing::TempDir dir;
  const std::string yaml = dir.File("flow.yml");
  testing::WriteFile(yaml,
                     "jtype: Flow\nwith:\n  max_message_bytes: 65536\nexecutors:\n"
                     "  - name: seed\n    uses: " +
                         testing::SourceDir() + "/examples/seed/executor.yml\n");
  std::vector<CliCapCase> cases = {
      {{"flow", "--uses", yaml}, 65536},
      {{"flow", "--uses", yaml, "--max-message-bytes", "131072", "--max-concurrent-requests", "8",
        "--timeout-drain", "2000"},
       131072},
  };
  ExpectCapsThroughTheCli(dir, cases);
  // A flag's own range is checked before anything starts.
  std::string log = dir.File("refused.log");
  ChildProcessPtr refused =
      StartCli({"flow", "--uses", yaml, "--max-concurrent-requests", "-1"}, log);
  ASSERT_NE(refused, nullptr);
  ASSERT_TRUE(refused->WaitFor(std::chrono::seconds(30)));
  EXPECT_NE(*refused->exit_status(), 0);
  EXPECT_THAT(testing::ReadFile(log), HasSubstr("--max-concurrent-requests"));
}

}  // namespace
}  // namespace gantry
