// Interoperability without Python: an executor plugin served from YAML by
// `gantry deployment`, its HTTP/JSON gateway driven with curl, gRPC
// reflection on gateway and worker, and clear errors for broken plugins.
// Processes run on 127.0.0.1 with ports read back; all are killed and reaped.
#include <fcntl.h>
#include <gantry/client.h>
#include <gantry/version.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "testutil/testutil.h"

namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "gantry-interop-XXXXXX");
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A child process with stdout and stderr in files; SIGTERM then SIGKILL, and
// always reaped, when it goes out of scope.
class Process {
 public:
  Process(std::vector<std::string> args, const std::string& log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> argv;
      for (std::string& a : args) {
        argv.push_back(a.data());
      }
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      std::_Exit(127);
    }
  }
  ~Process() { Stop(); }
  // Exit code once it exits by itself within `timeout`; nullopt otherwise.
  std::optional<int> Wait(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return std::nullopt;
  }
  void Stop() {
    if (pid_ <= 0) {
      return;
    }
    ::kill(pid_, SIGTERM);
    if (!Wait(std::chrono::seconds(10))) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

std::optional<int> WaitForPort(const std::string& path, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::string text = ReadAll(path);
    if (!text.empty()) {
      return std::stoi(text);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return std::nullopt;
}

std::vector<std::string> ListServices(const std::string& address) {
  namespace reflection = grpc::reflection::v1alpha;
  auto stub = reflection::ServerReflection::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = stub->ServerReflectionInfo(&context);
  reflection::ServerReflectionRequest request;
  request.set_list_services("");
  std::vector<std::string> names;
  reflection::ServerReflectionResponse response;
  if (stream->Write(request) && stream->Read(&response)) {
    for (const auto& service : response.list_services_response().service()) {
      names.push_back(service.name());
    }
  }
  request.set_file_containing_symbol("jina.JinaRPC");
  if (stream->Write(request) && stream->Read(&response)) {
    // The file and its imports, so that a client can build every message.
    EXPECT_GE(response.file_descriptor_response().file_descriptor_proto_size(), 3);
  }
  stream->WritesDone();
  stream->Finish().IgnoreError();
  return names;
}

class PluginDeploymentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir_.File("deployment.yml"))
        << "jtype: Deployment\nwith:\n  name: interop\n  replicas: 2\n  uses:\n"
        << "    jtype: InteropExec\n    with: {scale: 2.0}\n    metas:\n      libs: ["
        << GANTRY_TEST_PLUGIN << "]\n";
    process_.emplace(
        std::vector<std::string>{GANTRY_TEST_CLI, "deployment", "--uses",
                                 dir_.File("deployment.yml"), "--port", "0", "--http-port", "0",
                                 "--http-port-file", dir_.File("http-port"), "--port-file",
                                 dir_.File("port")},
        dir_.File("log"));
    auto port = WaitForPort(dir_.File("port"), std::chrono::seconds(60));
    ASSERT_TRUE(port.has_value()) << ReadAll(dir_.File("log"));
    port_ = *port;
    // Written before the port file.
    auto http_port = WaitForPort(dir_.File("http-port"), std::chrono::seconds(1));
    ASSERT_TRUE(http_port.has_value()) << ReadAll(dir_.File("log"));
    http_port_ = *http_port;
  }
  std::string Curl(const std::string& args) {
    return gantry::testing::RunCommand("curl -s --max-time 60 -w '\\n%{http_code}' " + args);
  }
  std::string Http(const std::string& path) {
    return "http://127.0.0.1:" + std::to_string(http_port_) + path;
  }

  TempDir dir_;
  std::optional<Process> process_;
  int port_ = 0;
  int http_port_ = 0;
};

TEST_F(PluginDeploymentTest, ServesPluginExecutorFromYamlOverGrpc) {
  gantry::Client client("127.0.0.1:" + std::to_string(port_));
  gantry::PostOptions options;
  options.parameters = gantry::Parameters(gantry::Value::Dict{{"tag", gantry::Value("t1")}});
  auto out =
      client.Post("/encode", gantry::DocList{gantry::Doc("hello"), gantry::Doc("hi")}, options);
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(out->size(), 2u);
  auto values = (*out)[0].embedding()->Values<float>();
  EXPECT_EQ(std::vector<float>(values.begin(), values.end()), (std::vector<float>{5, 2, 0}));
  EXPECT_EQ(*(*out)[1].tags().at("param").AsText(), "t1");
  EXPECT_EQ(*(*out)[1].tags().at("seen_by").AsText(), "gantry");
}

TEST_F(PluginDeploymentTest, CurlPostsJsonAndGetsEmbeddings) {
  std::string body = R"({"data": [{"text": "hello", "tags": {"k": 1}},
                                   {"text": "abc", "tensor": [[1, 2], [3, 4]]}],
                         "parameters": {"offset": 7, "tag": "curl"}})";
  std::ofstream(dir_.File("body.json")) << body;
  std::string reply = Curl("-X POST -H 'Content-Type: application/json' --data @" +
                           dir_.File("body.json") + " " + Http("/encode"));
  ASSERT_THAT(reply, ::testing::EndsWith("\n200")) << reply;
  json j = json::parse(reply.substr(0, reply.rfind('\n')));
  ASSERT_EQ(j["data"].size(), 2u) << j.dump();
  EXPECT_EQ(j["data"][0]["embedding"], json::parse("[5.0, 2.0, 7.0]"));
  EXPECT_EQ(j["data"][0]["tags"]["k"], 1);
  EXPECT_EQ(j["data"][0]["tags"]["param"], "curl");
  EXPECT_EQ(j["data"][1]["tensor"], json::parse("[[1.0, 2.0], [3.0, 4.0]]"));
  EXPECT_EQ(j["data"][1]["tags"]["tensor_dtype"], "<f4");
  EXPECT_EQ(j["data"][1]["tags"]["tensor_shape"], "[2, 2]");
  EXPECT_EQ(j["header"]["execEndpoint"], "/encode");

  // Jina's /post form with execEndpoint; a typed tensor.
  std::ofstream(dir_.File("post.json"))
      << R"({"execEndpoint": "/encode", "data": [{"text": "x", "tensor": {"dtype": "int64", "data": [1, 2, 3]}}]})";
  reply = Curl("-X POST -H 'Content-Type: application/json' --data @" + dir_.File("post.json") +
               " " + Http("/post"));
  ASSERT_THAT(reply, ::testing::EndsWith("\n200")) << reply;
  j = json::parse(reply.substr(0, reply.rfind('\n')));
  EXPECT_EQ(j["data"][0]["embedding"], json::parse("[1.0, 2.0, 0.0]"));
  EXPECT_EQ(j["data"][0]["tensor"], json::parse("[1, 2, 3]"));
  EXPECT_EQ(j["data"][0]["tags"]["tensor_dtype"], "<i8");
}

TEST_F(PluginDeploymentTest, HttpStatusDryRunHealthAndErrors) {
  EXPECT_EQ(Curl(Http("/")), "{}\n200");
  EXPECT_THAT(Curl(Http("/status")), HasSubstr("\"gantry\""));
  std::string dry = Curl(Http("/dry_run"));
  EXPECT_THAT(dry, HasSubstr("\"code\":0")) << dry;

  const std::string json_post = "-X POST -H 'Content-Type: application/json' ";
  std::string failed = Curl(json_post + "-d '{\"data\": [{\"text\": \"a\"}]}' " + Http("/fail"));
  EXPECT_THAT(failed, ::testing::EndsWith("\n500")) << failed;
  EXPECT_THAT(failed, HasSubstr("interop failure requested for 1 documents"));

  std::string bad = Curl(json_post + "-d 'not json' " + Http("/encode"));
  EXPECT_THAT(bad, ::testing::EndsWith("\n400")) << bad;
  EXPECT_THAT(bad, HasSubstr("JSON object"));

  std::string ragged =
      Curl(json_post + "-d '{\"data\": [{\"tensor\": [[1, 2], [3]]}]}' " + Http("/encode"));
  EXPECT_THAT(ragged, ::testing::EndsWith("\n400")) << ragged;
  EXPECT_THAT(ragged, HasSubstr("data[0] (no id): field 'tensor'"));

  // A form body, as a page in a browser may post to any origin: 415.
  std::string form = Curl("-X POST -d '{\"data\": [{\"text\": \"a\"}]}' " + Http("/encode"));
  EXPECT_THAT(form, ::testing::EndsWith("\n415")) << form;
  EXPECT_THAT(form, HasSubstr("application/x-www-form-urlencoded"));
}

TEST_F(PluginDeploymentTest, GatewayReflectionListsJinaAndHealth) {
  std::vector<std::string> services = ListServices("127.0.0.1:" + std::to_string(port_));
  EXPECT_THAT(services, ::testing::IsSupersetOf({"jina.JinaRPC", "jina.JinaSingleDataRequestRPC",
                                                 "jina.JinaGatewayDryRunRPC", "jina.JinaInfoRPC",
                                                 "grpc.health.v1.Health"}));
}

TEST(PluginWorkerTest, WorkerReflectionListsExactlyWhatJinaKnows) {
  TempDir dir;
  Process worker({GANTRY_TEST_CLI, "executor", "--host", "127.0.0.1", "--uses", "InteropExec",
                  "--lib", GANTRY_TEST_PLUGIN, "--port", "0", "--port-file", dir.File("port")},
                 dir.File("log"));
  auto port = WaitForPort(dir.File("port"), std::chrono::seconds(60));
  ASSERT_TRUE(port.has_value()) << ReadAll(dir.File("log"));
  EXPECT_THAT(ListServices("127.0.0.1:" + std::to_string(*port)),
              ::testing::UnorderedElementsAre("jina.JinaRPC", "jina.JinaSingleDataRequestRPC",
                                              "jina.JinaDataRequestRPC",
                                              "jina.JinaDiscoverEndpointsRPC", "jina.JinaInfoRPC",
                                              "grpc.reflection.v1alpha.ServerReflection"));
}

TEST(PluginWorkerTest, MissingPluginIsAClearError) {
  TempDir dir;
  Process worker({GANTRY_TEST_CLI, "executor", "--host", "127.0.0.1", "--uses", "InteropExec",
                  "--lib", "/nonexistent/libnope.so", "--port", "0"},
                 dir.File("log"));
  auto code = worker.Wait(std::chrono::seconds(30));
  ASSERT_TRUE(code.has_value());
  EXPECT_NE(*code, 0);
  std::string log = ReadAll(dir.File("log"));
  EXPECT_THAT(log, HasSubstr("metas.libs[0]: cannot load executor plugin "
                             "'/nonexistent/libnope.so': /nonexistent/libnope.so: cannot open "
                             "shared object file: No such file or directory"));
}

TEST(PluginWorkerTest, BrokenPluginFromDeploymentYamlIsAClearError) {
  TempDir dir;
  // Not a shared library at all.
  std::ofstream(dir.File("libbroken.so")) << std::string(512, 'x');
  std::ofstream(dir.File("deployment.yml"))
      << "jtype: Deployment\nwith:\n  uses:\n    jtype: InteropExec\n    metas:\n      libs: ["
      << GANTRY_TEST_PLUGIN << ", " << dir.File("libbroken.so") << "]\n";
  Process deployment(
      {GANTRY_TEST_CLI, "deployment", "--uses", dir.File("deployment.yml"), "--port", "0"},
      dir.File("log"));
  auto code = deployment.Wait(std::chrono::seconds(60));
  ASSERT_TRUE(code.has_value());
  EXPECT_NE(*code, 0);
  std::string log = ReadAll(dir.File("log"));
  EXPECT_THAT(log, HasSubstr("gantry: error: replica executor/rep-0 failed to start: "
                             "executor/rep-0: metas.libs[1]: cannot load executor plugin '" +
                             dir.File("libbroken.so") + "': " + dir.File("libbroken.so") +
                             ": invalid ELF header"));
}

TEST(PluginWorkerTest, PluginWithMissingSymbolIsAClearError) {
  TempDir dir;
  Process worker({GANTRY_TEST_CLI, "executor", "--host", "127.0.0.1", "--uses", "InteropExec",
                  "--lib", GANTRY_TEST_BROKEN_PLUGIN, "--port", "0"},
                 dir.File("log"));
  auto code = worker.Wait(std::chrono::seconds(30));
  ASSERT_TRUE(code.has_value());
  EXPECT_NE(*code, 0);
  std::string log = ReadAll(dir.File("log"));
  EXPECT_THAT(log, HasSubstr(std::string("metas.libs[0]: cannot load executor plugin '") +
                             GANTRY_TEST_BROKEN_PLUGIN + "': " + GANTRY_TEST_BROKEN_PLUGIN +
                             ": undefined symbol: _Z35GantryInteropSymbolThatDoesNotExistv"));
}

TEST(PluginWorkerTest, PluginBuiltAgainstAnotherVersionIsRefusedNamingBoth) {
  TempDir dir;
  Process worker({GANTRY_TEST_CLI, "executor", "--host", "127.0.0.1", "--uses", "InteropExec",
                  "--lib", GANTRY_TEST_ABI_MISMATCH_PLUGIN, "--port", "0"},
                 dir.File("log"));
  auto code = worker.Wait(std::chrono::seconds(30));
  ASSERT_TRUE(code.has_value());
  EXPECT_NE(*code, 0);
  std::string log = ReadAll(dir.File("log"));
  EXPECT_THAT(log, HasSubstr(std::string("metas.libs[0]: executor plugin '") +
                             GANTRY_TEST_ABI_MISMATCH_PLUGIN +
                             "' was built against Gantry 99.0, this worker is Gantry " +
                             GANTRY_VERSION_STRING " (ABI " GANTRY_PLUGIN_ABI_VERSION
                                                   "); rebuild the plugin against this Gantry"));
  // Refused before registration: the type was never added.
  EXPECT_THAT(log, Not(HasSubstr("registered twice")));
}

}  // namespace
