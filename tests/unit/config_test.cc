#include <gantry/config.h>
#include <gantry/executor.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace gantry {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char name[] = "/tmp/gantry_config_test.XXXXXX";
    const char* made = mkdtemp(name);
    EXPECT_NE(made, nullptr);
    path_ = made != nullptr ? made : "";
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

  std::string Write(const std::string& relative, const std::string& text) const {
    std::filesystem::path file = std::filesystem::path(path_) / relative;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << text;
    return file.string();
  }

 private:
  std::string path_;
};

// Sets an environment variable for one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

template <typename T>
std::string ErrorOf(const StatusOr<T>& result, StatusCode code = StatusCode::kInvalidArgument) {
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), code) << result.status();
  return result.status().message();
}

std::string ExecutorError(const std::string& yaml) {
  return ErrorOf(ParseExecutorConfig(yaml, "exec.yml"));
}

std::string DeploymentError(const std::string& yaml) {
  return ErrorOf(ParseDeploymentConfig(yaml, "dep.yml"));
}

// ---- Executor YAML --------------------------------------------------------

TEST(ExecutorConfigTest, ParsesTypedWithAndMetas) {
  StatusOr<ExecutorConfig> config = ParseExecutorConfig(R"(jtype: MyExec
with:
  model: bert
  dim: 384
  scale: 0.5
  big: 1e3
  inf: -.inf
  normalize: true
  off: False
  none: ~
  empty:
  quoted: "42"
  single: 'true'
  tagged: !!str 7
  hex: 0x1F
  list: [1, two, 3.0]
  nested: {a: {b: [x, y]}}
  device: cuda:1
metas:
  name: encoder
  description: encodes
  workspace: /tmp/ws
  url: http://example.com
  keywords: [a, b]
  libs: [libfoo.so]
)",
                                                        "exec.yml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->jtype, "MyExec");
  Value::Dict want{{"model", "bert"},
                   {"dim", 384},
                   {"scale", 0.5},
                   {"big", 1000.0},
                   {"inf", -std::numeric_limits<double>::infinity()},
                   {"normalize", true},
                   {"off", false},
                   {"none", Value()},
                   {"empty", Value()},
                   {"quoted", "42"},
                   {"single", "true"},
                   {"tagged", "7"},
                   {"hex", 31},
                   {"list", Value::List{1, "two", 3.0}},
                   {"nested", Value::Dict{{"a", Value::Dict{{"b", Value::List{"x", "y"}}}}}},
                   {"device", "cuda:1"}};
  EXPECT_EQ(config->with, want);
  ASSERT_NE(config->with["dim"].AsInt(), nullptr);
  ASSERT_NE(config->with["list"].AsList()->at(2).AsFloat(), nullptr);
  Value::Dict want_metas{{"name", "encoder"},
                         {"description", "encodes"},
                         {"workspace", "/tmp/ws"},
                         {"url", "http://example.com"},
                         {"keywords", Value::List{"a", "b"}},
                         {"libs", Value::List{"libfoo.so"}}};
  EXPECT_EQ(config->metas, want_metas);
}

TEST(ExecutorConfigTest, JtypeAloneIsEnough) {
  StatusOr<ExecutorConfig> config = ParseExecutorConfig("jtype: MyExec\nwith:\nmetas: {}\n", "x");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->jtype, "MyExec");
  EXPECT_TRUE(config->with.empty());
  EXPECT_TRUE(config->metas.empty());
}

TEST(ExecutorConfigTest, RejectsUnknownKeys) {
  EXPECT_EQ(ExecutorError("jtype: MyExec\npy_modules: [x.py]\n"),
            "exec.yml:2:1: py_modules: unknown key; allowed keys: jtype, with, metas, requests, "
            "dynamic_batching");
  EXPECT_EQ(ExecutorError("jtype: MyExec\nmetas:\n  name: x\n  author: me\n"),
            "exec.yml:4:3: metas.author: unknown key; allowed keys: name, description, "
            "workspace, url, keywords, libs");
}

TEST(ExecutorConfigTest, RequestsAreNotSupportedYet) {
  EXPECT_EQ(ExecutorError("jtype: MyExec\nrequests:\n  /encode: encode\n"),
            "exec.yml:2:1: requests: not supported yet");
}

TEST(ExecutorConfigTest, ParsesDynamicBatching) {
  StatusOr<ExecutorConfig> config = ParseExecutorConfig(R"(jtype: MyExec
dynamic_batching:
  /encode: {preferred_batch_size: 32, timeout: 200}
  Search: {preferred_batch_size: 8, timeout: 5, flush_all: true, max_batch_size: 64,
           max_queue_size: 1000}
  /off: {use_dynamic_batching: false}
  /queued: {queue_timeout: 250, priority_levels: 3, default_priority_level: 2}
)",
                                                        "exec.yml");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->dynamic_batching.size(), 4u);
  const DynamicBatching& encode = config->dynamic_batching.at("/encode");
  EXPECT_EQ(encode.preferred_batch_size, 32);
  EXPECT_EQ(encode.timeout_ms, 200);
  EXPECT_FALSE(encode.flush_all);
  EXPECT_TRUE(encode.enabled);
  const DynamicBatching& search = config->dynamic_batching.at("Search");
  EXPECT_EQ(search.preferred_batch_size, 8);
  EXPECT_EQ(search.timeout_ms, 5);
  EXPECT_TRUE(search.flush_all);
  EXPECT_EQ(search.max_batch_size, 64);
  EXPECT_EQ(search.max_queue_size, 1000);
  EXPECT_FALSE(config->dynamic_batching.at("/off").enabled);
  const DynamicBatching& queued = config->dynamic_batching.at("/queued");
  EXPECT_EQ(queued.queue_timeout_ms, 250);
  EXPECT_EQ(queued.priority_levels, 3);
  EXPECT_EQ(queued.default_priority_level, 2);
  EXPECT_EQ(search.queue_timeout_ms, 0);
  EXPECT_EQ(search.priority_levels, 0);
}

TEST(ExecutorConfigTest, RejectsBadDynamicBatching) {
  EXPECT_EQ(ExecutorError("jtype: MyExec\ndynamic_batching: 32\n"),
            "exec.yml:2:19: dynamic_batching: expected a mapping, got \"32\"");
  EXPECT_THAT(ExecutorError("jtype: MyExec\ndynamic_batching:\n  /encode: 32\n"),
              StartsWith("exec.yml:3:12: dynamic_batching[\"/encode\"]: expected a mapping"));
  EXPECT_THAT(
      ExecutorError("jtype: MyExec\ndynamic_batching:\n  /encode: {preferred_batch_size: 0}\n"),
      HasSubstr("dynamic_batching[\"/encode\"].preferred_batch_size: expected an integer >= 1"));
  EXPECT_THAT(ExecutorError("jtype: MyExec\ndynamic_batching:\n  /encode: {timeout: -1}\n"),
              HasSubstr("dynamic_batching[\"/encode\"].timeout: expected milliseconds >= 0"));
  EXPECT_THAT(ExecutorError("jtype: MyExec\ndynamic_batching:\n  /encode: {flush_all: 2}\n"),
              HasSubstr("flush_all: expected true or false, got 2"));
  EXPECT_THAT(ExecutorError("jtype: MyExec\ndynamic_batching:\n  /encode: {custom_metric: f}\n"),
              HasSubstr("custom_metric: not supported"));
  EXPECT_THAT(ExecutorError("jtype: MyExec\ndynamic_batching:\n  /encode: {batch: 3}\n"),
              HasSubstr("batch"));
}

TEST(ExecutorConfigTest, RejectsWrongTypes) {
  EXPECT_EQ(ExecutorError("with: {a: 1}\n"), "exec.yml:1:1: jtype: required key is missing");
  EXPECT_EQ(ExecutorError("jtype: [A, B]\n"),
            "exec.yml:1:8: jtype: expected a string, got a sequence");
  EXPECT_EQ(ExecutorError("jtype:\n"), "exec.yml:1:1: jtype: expected a string, got null");
  EXPECT_EQ(ExecutorError("jtype: Deployment\n"),
            "exec.yml:1:8: jtype: expected an executor type, got \"Deployment\"");
  EXPECT_EQ(ExecutorError("jtype: MyExec\nwith: [1, 2]\n"),
            "exec.yml:2:7: with: expected a mapping, got a sequence");
  EXPECT_EQ(ExecutorError("jtype: MyExec\nmetas:\n  libs: libfoo.so\n"),
            "exec.yml:3:9: metas.libs: expected a list of strings, got \"libfoo.so\"");
  EXPECT_EQ(ExecutorError("jtype: MyExec\nmetas:\n  keywords: [a, {b: c}]\n"),
            "exec.yml:3:17: metas.keywords[1]: expected a string, got a mapping");
  EXPECT_EQ(ExecutorError("jtype: MyExec\nwith:\n  n: 99999999999999999999\n"),
            "exec.yml:3:6: with.n: integer 99999999999999999999 does not fit in 64 bits");
  EXPECT_EQ(ExecutorError("jtype: MyExec\nwith:\n  n: !!int abc\n"),
            "exec.yml:3:6: with.n: expected an integer, got \"abc\"");
  EXPECT_EQ(ExecutorError("jtype: MyExec\nwith:\n  n: !custom abc\n"),
            "exec.yml:3:6: with.n: unsupported YAML tag \"!custom\"");
  EXPECT_EQ(ExecutorError("- jtype: MyExec\n"),
            "exec.yml:1:1: expected a mapping at the top level, got a sequence");
}

TEST(ExecutorConfigTest, RejectsDuplicateKeys) {
  EXPECT_EQ(ExecutorError("jtype: MyExec\nwith:\n  a: 1\n  b: 2\n  a: 3\n"),
            "exec.yml:5:3: with.a: duplicate key (first at line 3)");
}

TEST(ExecutorConfigTest, ChecksTheDevice) {
  StatusOr<ExecutorConfig> good =
      ParseExecutorConfig("jtype: MyExec\nwith: {device: auto}\n", "exec.yml");
  ASSERT_TRUE(good.ok()) << good.status();

  std::string bad = ExecutorError("jtype: MyExec\nwith:\n  device: gpu\n");
  EXPECT_THAT(bad, StartsWith("exec.yml:3:11: with.device: "));
  EXPECT_THAT(bad, HasSubstr("\"gpu\""));
  EXPECT_THAT(bad, HasSubstr("expected \"cpu\", \"cuda\", \"cuda:N\" or \"auto\""));

  EXPECT_EQ(ExecutorError("jtype: MyExec\nwith:\n  device: 0\n"),
            "exec.yml:3:11: with.device: expected a device string (\"cpu\", \"cuda\", "
            "\"cuda:N\" or \"auto\"), got 0");
}

TEST(ExecutorConfigTest, SubstitutesEnvironmentVariables) {
  ScopedEnv model("GANTRY_TEST_MODEL", "bert");
  ScopedEnv dim("GANTRY_TEST_DIM", "128");
  StatusOr<ExecutorConfig> config = ParseExecutorConfig(R"(jtype: ${{ ENV.GANTRY_TEST_MODEL }}Exec
with:
  model: ${{ENV.GANTRY_TEST_MODEL}}
  dim: ${{ ENV.GANTRY_TEST_DIM }}
  quoted: "${{ ENV.GANTRY_TEST_DIM }}"
  path: /models/${{  ENV.GANTRY_TEST_MODEL  }}/${{ENV.GANTRY_TEST_DIM}}.pt
  list:
    - ${{ ENV.GANTRY_TEST_DIM }}
)",
                                                        "exec.yml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->jtype, "bertExec");
  Value::Dict want{{"model", "bert"},
                   {"dim", 128},
                   {"quoted", "128"},
                   {"path", "/models/bert/128.pt"},
                   {"list", Value::List{128}}};
  EXPECT_EQ(config->with, want);
}

TEST(ExecutorConfigTest, ReportsBadSubstitutions) {
  unsetenv("GANTRY_TEST_UNSET_VAR");
  EXPECT_EQ(ExecutorError("jtype: MyExec\nwith:\n  model: ${{ ENV.GANTRY_TEST_UNSET_VAR }}\n"),
            "exec.yml:3:10: with.model: environment variable GANTRY_TEST_UNSET_VAR is not set");
  EXPECT_EQ(ExecutorError("jtype: MyExec\nwith:\n  model: ${{ CONTEXT.X }}\n"),
            "exec.yml:3:10: with.model: unsupported substitution \"${{ CONTEXT.X }}\" (only "
            "${{ ENV.NAME }} is supported)");
  EXPECT_EQ(ExecutorError("jtype: MyExec\nwith:\n  model: ${{ ENV.X\n"),
            "exec.yml:3:10: with.model: unterminated \"${{\" (expected ${{ ENV.NAME }})");
}

TEST(ExecutorConfigTest, ReportsSyntaxErrors) {
  EXPECT_EQ(ExecutorError("jtype: MyExec\nwith: [1,\nmetas: {}\n"),
            "exec.yml:4:1: end of sequence flow not found");
  EXPECT_EQ(ExecutorError("jtype: MyExec\n with: 1\n"), "exec.yml:2:6: illegal map value");
  EXPECT_EQ(ExecutorError(""), "exec.yml:1:1: empty document, expected a mapping");
  EXPECT_EQ(ExecutorError("jtype: A\n---\njtype: B\n"),
            "exec.yml:3:1: expected one YAML document, found 2");
}

TEST(ExecutorConfigTest, LoadsFilesAndReportsMissingOnes) {
  TempDir dir;
  std::string path = dir.Write("exec.yml", "jtype: MyExec\nwith:\n  k: v\n");
  StatusOr<ExecutorConfig> config = LoadExecutorConfig(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->jtype, "MyExec");

  std::string bad = dir.Write("bad.yml", "jtype: MyExec\nwith: 3\n");
  EXPECT_EQ(ErrorOf(LoadExecutorConfig(bad)), bad + ":2:7: with: expected a mapping, got \"3\"");

  std::string missing = dir.path() + "/missing.yml";
  EXPECT_EQ(ErrorOf(LoadExecutorConfig(missing), StatusCode::kNotFound),
            missing + ": cannot open: No such file or directory");
}

// ---- Deployment YAML ------------------------------------------------------

TEST(DeploymentConfigTest, ParsesEveryKey) {
  StatusOr<DeploymentOptions> options = ParseDeploymentConfig(R"(jtype: Deployment
version: '1'
with:
  uses: MyExec
  uses_with: {device: cpu, dim: 8}
  uses_metas: {name: enc}
  name: encoder
  replicas: 2
  port: 12345
  http_port: 12346
  host: 0.0.0.0
  env: {A: x, B: 1, C: true, D: 1.50}
  timeout_ready: 5000
  log_level: debug
  log_format: json
  access_log: true
  max_client_batch_size: 32
)",
                                                              "dep.yml");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->uses, "MyExec");
  EXPECT_EQ(options->uses_with, (Value::Dict{{"device", "cpu"}, {"dim", 8}}));
  EXPECT_EQ(options->uses_metas, (Value::Dict{{"name", "enc"}}));
  EXPECT_EQ(options->name, "encoder");
  EXPECT_EQ(options->replicas, 2);
  EXPECT_EQ(options->port, 12345);
  EXPECT_EQ(options->http_port, 12346);
  EXPECT_EQ(options->host, "0.0.0.0");
  std::map<std::string, std::string> want_env{{"A", "x"}, {"B", "1"}, {"C", "true"}, {"D", "1.50"}};
  EXPECT_EQ(options->env, want_env);
  EXPECT_EQ(options->timeout_ready, std::chrono::milliseconds(5000));
  EXPECT_EQ(options->log_level, "debug");
  EXPECT_EQ(options->log_format, "json");
  EXPECT_TRUE(options->access_log);
  EXPECT_EQ(options->max_client_batch_size, 32);
}

TEST(DeploymentConfigTest, ParsesGpusInEveryForm) {
  auto gpus = [](const std::string& value) -> std::string {
    StatusOr<DeploymentOptions> options = ParseDeploymentConfig(
        "jtype: Deployment\nwith:\n  uses: MyExec\n  gpus: " + value + "\n", "dep.yml");
    return options.ok() ? options->gpus : "error: " + options.status().message();
  };
  EXPECT_EQ(gpus("1"), "1");
  EXPECT_EQ(gpus("0"), "0");
  EXPECT_EQ(gpus("2"), "2");
  EXPECT_EQ(gpus("0.5"), "0.5");
  EXPECT_EQ(gpus("all"), "all");
  EXPECT_EQ(gpus("\"0,2\""), "0,2");
  EXPECT_EQ(gpus("[0, 2]"), "0,2");
  EXPECT_EQ(gpus("[3]"), "3,");
  EXPECT_EQ(gpus("null"), "");
  EXPECT_THAT(gpus("-1"), HasSubstr("dep.yml:4:9: with.gpus: expected a number of GPUs"));
  EXPECT_THAT(gpus("1.5"), HasSubstr("whole GPUs or a fraction below 1"));
  EXPECT_THAT(gpus("some"), HasSubstr("got \"some\""));
  EXPECT_THAT(gpus("{a: 1}"), HasSubstr("with.gpus: expected a scalar"));
  // Exact words of the shapes the rule (core/deployment_rules.h) refuses.
  const std::string expected =
      "dep.yml:4:9: with.gpus: expected a number of GPUs per replica (1, 0.5), \"all\", or a list "
      "of GPU indices or UUIDs (\"0,2\" or [0, 2]), got ";
  EXPECT_EQ(gpus("-1"), "error: " + expected + "-1");
  EXPECT_EQ(gpus("-0.5"),
            "error: " + expected + "-0.5 (a replica takes whole GPUs or a fraction below 1)");
  EXPECT_EQ(gpus(".nan"),
            "error: " + expected + ".nan (a replica takes whole GPUs or a fraction below 1)");
  EXPECT_EQ(gpus("2.0"), "2.0");
  EXPECT_EQ(gpus("0.999"), "0.999");
  // A list naming no GPU could never start; the file says so when read.
  EXPECT_EQ(gpus("\",\""), "error: " + expected + "\",\"");
}

TEST(DeploymentConfigTest, ParsesUsesDynamicBatchingOverTheExecutorFile) {
  StatusOr<DeploymentOptions> options = ParseDeploymentConfig(R"(jtype: Deployment
with:
  uses:
    jtype: MyExec
    dynamic_batching:
      /encode: {preferred_batch_size: 4, timeout: 100}
      /search: {preferred_batch_size: 2}
  uses_dynamic_batching:
    /encode: {preferred_batch_size: 32, timeout: 10}
)",
                                                              "dep.yml");
  ASSERT_TRUE(options.ok()) << options.status();
  ASSERT_EQ(options->uses_dynamic_batching.size(), 2u);
  EXPECT_EQ(options->uses_dynamic_batching.at("/encode").preferred_batch_size, 32);
  EXPECT_EQ(options->uses_dynamic_batching.at("/encode").timeout_ms, 10);
  EXPECT_EQ(options->uses_dynamic_batching.at("/search").preferred_batch_size, 2);
  EXPECT_EQ(options->uses_dynamic_batching.at("/search").timeout_ms, 10000);
}

// The one default address: a YAML's host:, else $GANTRY_HOST, else
// 127.0.0.1; a Flow's steps are its own children and stay on loopback.
TEST(DeploymentConfigTest, HostIsTheYamlsElseGantryHostElseLoopback) {
  constexpr const char* kPlain = "jtype: Deployment\nwith:\n  uses: MyExec\n";
  constexpr const char* kFlow = "jtype: Flow\nexecutors:\n  - name: a\n    uses: MyExec\n";
  ::setenv("GANTRY_HOST", "0.0.0.0", 1);
  StatusOr<DeploymentOptions> from_env = ParseDeploymentConfig(kPlain, "dep.yml");
  StatusOr<DeploymentOptions> from_yaml = ParseDeploymentConfig(
      "jtype: Deployment\nwith:\n  uses: MyExec\n  host: 127.0.0.2\n", "dep.yml");
  StatusOr<FlowOptions> flow = ParseFlowConfig(kFlow, "flow.yml");
  ::setenv("GANTRY_HOST", "", 1);
  StatusOr<DeploymentOptions> empty_env = ParseDeploymentConfig(kPlain, "dep.yml");
  ::unsetenv("GANTRY_HOST");
  StatusOr<DeploymentOptions> no_env = ParseDeploymentConfig(kPlain, "dep.yml");
  ASSERT_TRUE(from_env.ok() && from_yaml.ok() && flow.ok() && empty_env.ok() && no_env.ok());
  EXPECT_EQ(from_env->host, "0.0.0.0");
  EXPECT_EQ(from_yaml->host, "127.0.0.2");
  EXPECT_EQ(flow->host, "0.0.0.0");
  ASSERT_EQ(flow->executors.size(), 1U);
  EXPECT_EQ(flow->executors[0].deployment.host, "127.0.0.1");
  EXPECT_EQ(empty_env->host, "127.0.0.1");
  EXPECT_EQ(no_env->host, "127.0.0.1");
}

TEST(DeploymentConfigTest, ReadsTritonsTimeoutActionAndOverride) {
  StatusOr<DeploymentOptions> options = ParseDeploymentConfig(R"(jtype: Deployment
with:
  uses: MyExec
  uses_dynamic_batching:
    /a: {queue_timeout: 100, timeout_action: DELAY, allow_timeout_override: true}
    /b: {timeout_action: reject}
)",
                                                              "dep.yml");
  ASSERT_TRUE(options.ok()) << options.status();
  const DynamicBatching& a = options->uses_dynamic_batching.at("/a");
  EXPECT_EQ(a.timeout_action, DynamicBatching::TimeoutAction::kDelay);
  EXPECT_TRUE(a.allow_timeout_override);
  const DynamicBatching& b = options->uses_dynamic_batching.at("/b");
  EXPECT_EQ(b.timeout_action, DynamicBatching::TimeoutAction::kReject);
  EXPECT_FALSE(b.allow_timeout_override);
  const std::string error = ErrorOf(ParseDeploymentConfig(R"(jtype: Deployment
with:
  uses: MyExec
  uses_dynamic_batching:
    /a: {timeout_action: LATER}
)",
                                                          "dep.yml"));
  EXPECT_THAT(error, HasSubstr("timeout_action"));
  EXPECT_THAT(error, HasSubstr("REJECT or DELAY"));
  EXPECT_THAT(error, HasSubstr("dep.yml:5"));
}

TEST(DeploymentConfigTest, KeepsDefaults) {
  StatusOr<DeploymentOptions> options =
      ParseDeploymentConfig("jtype: Deployment\nwith:\n  uses: MyExec\n", "dep.yml");
  ASSERT_TRUE(options.ok()) << options.status();
  DeploymentOptions defaults;
  EXPECT_EQ(options->uses, "MyExec");
  EXPECT_TRUE(options->uses_with.empty());
  EXPECT_EQ(options->name, defaults.name);
  EXPECT_EQ(options->replicas, defaults.replicas);
  EXPECT_EQ(options->port, defaults.port);
  EXPECT_EQ(options->host, defaults.host);
  EXPECT_EQ(options->timeout_ready, defaults.timeout_ready);
  EXPECT_EQ(options->log_level, defaults.log_level);
  EXPECT_EQ(options->log_format, "");
  EXPECT_FALSE(options->access_log);
}

TEST(DeploymentConfigTest, TimeoutReadyMinusOneWaitsForever) {
  StatusOr<DeploymentOptions> options = ParseDeploymentConfig(
      "jtype: Deployment\nwith:\n  uses: MyExec\n  timeout_ready: -1\n", "dep.yml");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_GT(options->timeout_ready, std::chrono::hours(24 * 365 * 10));
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n  timeout_ready: -2\n"),
            "dep.yml:4:18: with.timeout_ready: expected milliseconds >= 0, or -1 to wait "
            "forever, got -2");
}

TEST(DeploymentConfigTest, MaxMessageBytesIsBounded) {
  StatusOr<DeploymentOptions> options = ParseDeploymentConfig(
      "jtype: Deployment\nwith:\n  uses: MyExec\n  max_message_bytes: 1048576\n", "dep.yml");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->max_message_bytes, 1048576);
  EXPECT_EQ(DeploymentOptions().max_message_bytes, std::int64_t{64} << 20);
  const std::string expected = "expected a size in bytes from 1 to 2147483647 (gRPC's limit), got ";
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n  max_message_bytes: 0\n"),
            "dep.yml:4:22: with.max_message_bytes: " + expected + "0");
  EXPECT_EQ(DeploymentError(
                "jtype: Deployment\nwith:\n  uses: MyExec\n  max_message_bytes: 2147483648\n"),
            "dep.yml:4:22: with.max_message_bytes: " + expected + "2147483648");
  EXPECT_THAT(
      DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n  max_message_bytes: 1MB\n"),
      HasSubstr("dep.yml:4:22: with.max_message_bytes: " + expected));
}

TEST(DeploymentConfigTest, MaxConcurrentRequestsIsANonNegativeCount) {
  StatusOr<DeploymentOptions> options = ParseDeploymentConfig(
      "jtype: Deployment\nwith:\n  uses: MyExec\n  max_concurrent_requests: 512\n", "dep.yml");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->max_concurrent_requests, 512);
  EXPECT_EQ(DeploymentOptions().max_concurrent_requests, 0);
  EXPECT_EQ(
      DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n  max_concurrent_requests: -1\n"),
      "dep.yml:4:28: with.max_concurrent_requests: expected an integer >= 0 (0: no limit), got -1");
  EXPECT_THAT(DeploymentError(
                  "jtype: Deployment\nwith:\n  uses: MyExec\n  max_concurrent_requests: many\n"),
              HasSubstr("dep.yml:4:28: with.max_concurrent_requests: expected an integer >= 0"));
}

TEST(DeploymentConfigTest, ReadsTlsFilesRelativeToTheDeploymentFile) {
  TempDir dir;
  std::string dep = dir.Write("conf/dep.yml", R"(jtype: Deployment
with:
  uses: MyExec
  ssl_certfile: tls/server.pem
  ssl_keyfile: /etc/gantry/server.key
  ssl_client_cafile: ../clients.pem
)");
  StatusOr<DeploymentOptions> options = LoadDeploymentConfig(dep);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->tls.cert_file, dir.path() + "/conf/tls/server.pem");
  EXPECT_EQ(options->tls.key_file, "/etc/gantry/server.key");
  EXPECT_EQ(options->tls.client_ca_file, dir.path() + "/conf/../clients.pem");
  EXPECT_TRUE(options->tls.enabled());
  // Without TLS keys, TLS is off.
  StatusOr<DeploymentOptions> plain =
      ParseDeploymentConfig("jtype: Deployment\nwith:\n  uses: MyExec\n", "dep.yml");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->tls.enabled());
}

TEST(DeploymentConfigTest, RejectsIncompleteTlsSettings) {
  const std::string head = "jtype: Deployment\nwith:\n  uses: MyExec\n";
  const std::string needs_both =
      "dep.yml:3:3: with: TLS needs both a certificate (ssl_certfile) and its private key "
      "(ssl_keyfile); got only ";
  EXPECT_EQ(DeploymentError(head + "  ssl_keyfile: k.pem\n"), needs_both + "ssl_keyfile");
  EXPECT_EQ(DeploymentError(head + "  ssl_certfile: c.pem\n"), needs_both + "ssl_certfile");
  EXPECT_EQ(DeploymentError(head + "  ssl_client_cafile: ca.pem\n"),
            "dep.yml:3:3: with: ssl_client_cafile needs TLS: set ssl_certfile and ssl_keyfile too");
  EXPECT_THAT(DeploymentError(head + "  ssl_certfile: [a, b]\n  ssl_keyfile: k.pem\n"),
              HasSubstr("dep.yml:4:17: with.ssl_certfile: "));
  EXPECT_THAT(DeploymentError(head + "  ssl_certfile: \"\"\n  ssl_keyfile: k.pem\n"),
              HasSubstr("with.ssl_certfile"));
}

// Found by the config fuzzer (tests/fuzz/corpus/config/regress_alias_cycle.yml):
// an alias inside the node it names recursed without end.
TEST(DeploymentConfigTest, RefusesAliasCyclesAndAliasBombs) {
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith: &w\n  uses: MyExec\n  uses_with: *w\n")
                .substr(0, 8),
            "dep.yml:");
  EXPECT_THAT(DeploymentError("jtype: Deployment\nwith: &w\n  uses: MyExec\n  uses_with: *w\n"),
              HasSubstr("nested deeper than 100 levels (a YAML alias inside the node it names?)"));
  // Each level ten aliases of the one before: 10^7 values once expanded.
  std::string bomb = "jtype: Deployment\nwith:\n  uses: MyExec\n  uses_with:\n    a0: &a0 x\n";
  for (int i = 1; i <= 7; ++i) {
    const std::string previous = "*a" + std::to_string(i - 1);
    bomb += "    a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) {
      bomb += (j > 0 ? ", " : "") + previous;
    }
    bomb += "]\n";
  }
  EXPECT_THAT(DeploymentError(bomb),
              HasSubstr("more than 100000 values in the file once YAML aliases are expanded"));
}

// Found by the config fuzzer (tests/fuzz/corpus/config/regress_leading_comma.yml):
// yaml-cpp 0.7 never returns on a document that starts with ','.
TEST(DeploymentConfigTest, RefusesADocumentStartingWithACommaInsteadOfHanging) {
  for (const std::string yaml : {",x", "--- ,x", "&a ,x", "jtype: Deployment\n---\n, 'a'"}) {
    EXPECT_THAT(DeploymentError(yaml),
                AllOf(StartsWith("dep.yml:"),
                      HasSubstr("not YAML the parser can read (a ',' where a document should "
                                "start?)")))
        << yaml;
    EXPECT_THAT(ExecutorError(yaml), HasSubstr("not YAML the parser can read")) << yaml;
  }
}

TEST(DeploymentConfigTest, RespawnAndDrainKeys) {
  StatusOr<DeploymentOptions> options = ParseDeploymentConfig(
      "jtype: Deployment\nwith:\n  uses: MyExec\n  restart_backoff_initial: 250\n"
      "  restart_backoff_max: 4000\n  max_init_failures: 2\n  timeout_drain: 0\n"
      "  liveness_period: 300\n  liveness_timeout: 700\n  liveness_failure_threshold: 0\n"
      "  min_ready: 1\n",
      "dep.yml");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->restart_backoff_initial, std::chrono::milliseconds(250));
  EXPECT_EQ(options->restart_backoff_max, std::chrono::milliseconds(4000));
  EXPECT_EQ(options->max_init_failures, 2);
  EXPECT_EQ(options->timeout_drain, std::chrono::milliseconds(0));
  EXPECT_EQ(options->liveness_period, std::chrono::milliseconds(300));
  EXPECT_EQ(options->liveness_timeout, std::chrono::milliseconds(700));
  EXPECT_EQ(options->liveness_failure_threshold, 0);
  EXPECT_EQ(options->min_ready, 1);

  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n"
                            "  restart_backoff_initial: 0\n"),
            "dep.yml:4:28: with.restart_backoff_initial: expected milliseconds >= 1, got 0");
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n  max_init_failures: 0\n"),
            "dep.yml:4:22: with.max_init_failures: expected an integer >= 1, got 0");
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n  liveness_timeout: 0\n"),
            "dep.yml:4:21: with.liveness_timeout: expected milliseconds >= 1, got 0");
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n"
                            "  liveness_failure_threshold: -1\n"),
            "dep.yml:4:31: with.liveness_failure_threshold: expected an integer >= 0 (0: no "
            "liveness checks), got -1");
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n  timeout_drain: -1\n"),
            "dep.yml:4:18: with.timeout_drain: expected milliseconds >= 0, got -1");
  EXPECT_THAT(DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n  timeout_drain: 10s\n"),
              HasSubstr("dep.yml:4:18: with.timeout_drain: expected milliseconds >= 0"));
  // Each is fine on its own; together they contradict.
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n"
                            "  restart_backoff_max: 50\n  restart_backoff_initial: 100\n"),
            "dep.yml:4:24: with.restart_backoff_max: restart_backoff_max (50 ms) is below "
            "restart_backoff_initial (100 ms)");
}

TEST(DeploymentConfigTest, FlattensInlineUsesAndOverridesWith) {
  StatusOr<DeploymentOptions> options = ParseDeploymentConfig(R"(jtype: Deployment
with:
  uses:
    jtype: MyExec
    with: {device: cpu, dim: 8, model: a}
    metas: {name: inner, description: d}
  uses_with: {dim: 16, extra: true}
  uses_metas: {name: outer}
)",
                                                              "dep.yml");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->uses, "MyExec");
  EXPECT_EQ(options->uses_with,
            (Value::Dict{{"device", "cpu"}, {"dim", 16}, {"model", "a"}, {"extra", true}}));
  EXPECT_EQ(options->uses_metas, (Value::Dict{{"name", "outer"}, {"description", "d"}}));

  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith:\n  uses:\n    with: {a: 1}\n"),
            "dep.yml:4:5: with.uses.jtype: required key is missing");
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith:\n  uses: {jtype: A, py_modules: [a.py]}\n"),
            "dep.yml:3:20: with.uses.py_modules: unknown key; allowed keys: jtype, with, metas, "
            "requests, dynamic_batching");
}

TEST(DeploymentConfigTest, LoadsUsesFileRelativeToTheDeploymentFile) {
  TempDir dir;
  dir.Write("execs/exec.yml", R"(jtype: FileExec
with:
  device: cpu
  dim: 8
  model: a
metas:
  name: from_file
  description: d
)");
  std::string dep = dir.Write("dep.yml", R"(jtype: Deployment
with:
  uses: execs/exec.yml
  uses_with:
    dim: 16
  uses_metas:
    name: outer
  replicas: 3
)");
  StatusOr<DeploymentOptions> options = LoadDeploymentConfig(dep);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->uses, "FileExec");
  EXPECT_EQ(options->uses_with, (Value::Dict{{"device", "cpu"}, {"dim", 16}, {"model", "a"}}));
  EXPECT_EQ(options->uses_metas, (Value::Dict{{"name", "outer"}, {"description", "d"}}));
  EXPECT_EQ(options->replicas, 3);

  // An absolute path works from anywhere.
  std::string absolute = dir.path() + "/execs/exec.yml";
  StatusOr<DeploymentOptions> from_text =
      ParseDeploymentConfig("jtype: Deployment\nwith:\n  uses: " + absolute + "\n", "<inline>");
  ASSERT_TRUE(from_text.ok()) << from_text.status();
  EXPECT_EQ(from_text->uses, "FileExec");
}

TEST(DeploymentConfigTest, PrefixesErrorsOfTheUsesFile) {
  TempDir dir;
  dir.Write("exec.yml", "jtype: FileExec\nwith:\n  a: 1\nfoo: bar\n");
  dir.Write("bad_device.yml", "jtype: FileExec\nwith:\n  device: cuda:x\n");
  std::string dep = dir.Write("dep.yml", "jtype: Deployment\nwith:\n  uses: exec.yml\n");
  EXPECT_EQ(ErrorOf(LoadDeploymentConfig(dep)),
            dep + ":3:9: with.uses: " + dir.path() +
                "/exec.yml:4:1: foo: unknown key; allowed keys: jtype, with, metas, requests, "
                "dynamic_batching");

  std::string dep2 = dir.Write("dep2.yml", "jtype: Deployment\nwith:\n  uses: bad_device.yml\n");
  std::string bad_device = ErrorOf(LoadDeploymentConfig(dep2));
  EXPECT_THAT(bad_device, StartsWith(dep2 + ":3:9: with.uses: " + dir.path() +
                                     "/bad_device.yml:3:11: with.device: "));
  EXPECT_THAT(bad_device, HasSubstr("\"cuda:x\""));

  std::string dep3 = dir.Write("dep3.yml", "jtype: Deployment\nwith:\n  uses: nope.yaml\n");
  EXPECT_EQ(ErrorOf(LoadDeploymentConfig(dep3)),
            dep3 + ":3:9: with.uses: " + dir.path() +
                "/nope.yaml: cannot open: No such file or directory");
}

TEST(DeploymentConfigTest, SubstitutesEnvironmentVariables) {
  ScopedEnv replicas("GANTRY_TEST_REPLICAS", "3");
  ScopedEnv device("GANTRY_TEST_DEVICE", "cuda:2");
  StatusOr<DeploymentOptions> options = ParseDeploymentConfig(R"(jtype: Deployment
with:
  uses: MyExec
  uses_with: {device: "${{ ENV.GANTRY_TEST_DEVICE }}"}
  replicas: ${{ ENV.GANTRY_TEST_REPLICAS }}
  env: {R: "${{ ENV.GANTRY_TEST_REPLICAS }}"}
)",
                                                              "dep.yml");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->replicas, 3);
  EXPECT_EQ(options->uses_with, (Value::Dict{{"device", "cuda:2"}}));
  EXPECT_EQ(options->env.at("R"), "3");

  unsetenv("GANTRY_TEST_UNSET_VAR");
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n  host: "
                            "${{ ENV.GANTRY_TEST_UNSET_VAR }}\n"),
            "dep.yml:4:9: with.host: environment variable GANTRY_TEST_UNSET_VAR is not set");
}

TEST(DeploymentConfigTest, RejectsBadJtype) {
  EXPECT_EQ(DeploymentError("jtype: Flow\nwith:\n  uses: MyExec\n"),
            "dep.yml:1:8: jtype: expected \"Deployment\", got \"Flow\"");
  EXPECT_EQ(DeploymentError("jtype: MyExec\n"),
            "dep.yml:1:8: jtype: expected \"Deployment\", got \"MyExec\"");
  EXPECT_EQ(DeploymentError("with:\n  uses: MyExec\n"),
            "dep.yml:1:1: jtype: required key is missing");
  EXPECT_EQ(DeploymentError("jtype: Deployment\n"), "dep.yml:1:1: with: required key is missing");
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith:\n  replicas: 2\n"),
            "dep.yml:3:3: with.uses: required key is missing");
}

TEST(DeploymentConfigTest, RejectsUnknownKeys) {
  EXPECT_EQ(DeploymentError("jtype: Deployment\nexecutors: []\n"),
            "dep.yml:2:1: executors: unknown key; allowed keys: jtype, version, with");
  EXPECT_EQ(
      DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n  replica: 2\n"),
      "dep.yml:4:3: with.replica: unknown key; allowed keys: uses, uses_with, uses_metas, "
      "name, replicas, port, host, env, timeout_ready, log_level, log_format, access_log, gpus, "
      "uses_dynamic_batching, "
      "http_port, max_message_bytes, max_concurrent_requests, max_client_batch_size, models, "
      "api_key, cors, "
      "ssl_certfile, ssl_keyfile, ssl_client_cafile, "
      "restart_backoff_initial, restart_backoff_max, max_init_failures, min_ready, "
      "liveness_period, "
      "liveness_timeout, liveness_failure_threshold, timeout_drain, "
      "timeout_send, monitoring, port_monitoring, monitoring_targets_file, tracing, "
      "traces_exporter_host, traces_exporter_port, volumes");
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n  uses_metas: {size: 1}\n"),
            "dep.yml:4:16: with.uses_metas.size: unknown key; allowed keys: name, description, "
            "workspace, url, keywords, libs");
}

TEST(DeploymentConfigTest, ParsesServedModelsAndRejectsBadOnes) {
  const std::string head = "jtype: Deployment\nwith:\n  uses: MyExec\n";
  StatusOr<DeploymentOptions> options = ParseDeploymentConfig(
      head + "  models: {all-MiniLM-L6-v2: /encode, small: /small}\n", "dep.yml");
  ASSERT_TRUE(options.ok()) << options.status();
  std::map<std::string, std::string> want{{"all-MiniLM-L6-v2", "/encode"}, {"small", "/small"}};
  EXPECT_EQ(options->models, want);
  EXPECT_EQ(DeploymentError(head + "  models: {m: encode}\n"),
            "dep.yml:4:15: with.models.m: model 'm' maps to endpoint 'encode'; "
            "expected an executor endpoint such as /encode");
  EXPECT_EQ(DeploymentError(head + "  models: [/encode]\n"),
            "dep.yml:4:11: with.models: expected a mapping of model names to endpoints "
            "({all-MiniLM-L6-v2: /encode}), got a sequence");
  EXPECT_THAT(DeploymentError(head + "  models: {\"a b\": /encode}\n"),
              HasSubstr("model name 'a b' must be 1 to 256 characters without whitespace"));
}

// Keys are checked for duplicates through a map (a mapping of 200,000 keys
// took over 30 s with a scan per key), and one mapping holds at most
// 100,000 of them.
TEST(DeploymentConfigTest, AMappingOfTooManyKeysIsRefusedNamingIt) {
  std::string env;
  for (int i = 0; i <= 100000; ++i) {
    env += "    K" + std::to_string(i) + ": v\n";
  }
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n  env:\n" + env),
            "dep.yml:100005:5: with.env: more than 100000 keys in one mapping");
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n  env:\n    A: x\n    B: y\n"
                            "    A: z\n"),
            "dep.yml:7:5: with.env.A: duplicate key (first at line 5)");
}

TEST(DeploymentConfigTest, RejectsBadReplicasAndPort) {
  const std::string head = "jtype: Deployment\nwith:\n  uses: MyExec\n";
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n  replicas: two\n"),
            "dep.yml:4:13: with.replicas: expected an integer from 1 to 1024, got \"two\"");
  EXPECT_EQ(DeploymentError(head + "  replicas: 0\n"),
            "dep.yml:4:13: with.replicas: expected an integer from 1 to 1024, got 0");
  EXPECT_EQ(DeploymentError(head + "  replicas: 1.5\n"),
            "dep.yml:4:13: with.replicas: expected an integer from 1 to 1024, got 1.5");
  EXPECT_EQ(DeploymentError(head + "  replicas: \"2\"\n"),
            "dep.yml:4:13: with.replicas: expected an integer from 1 to 1024, got \"2\"");
  EXPECT_EQ(DeploymentError(head + "  replicas:\n"),
            "dep.yml:4:3: with.replicas: expected an integer from 1 to 1024, got null");
  EXPECT_EQ(DeploymentError(head + "  port: 70000\n"),
            "dep.yml:4:9: with.port: expected an integer from 0 to 65535, got 70000");
  EXPECT_EQ(DeploymentError(head + "  port: -1\n"),
            "dep.yml:4:9: with.port: expected an integer from 0 to 65535, got -1");
  EXPECT_EQ(DeploymentError(head + "  port: [1]\n"),
            "dep.yml:4:9: with.port: expected a scalar, got a sequence");
}

TEST(DeploymentConfigTest, RejectsWrongTypes) {
  const std::string head = "jtype: Deployment\nwith:\n  uses: MyExec\n";
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith: [uses]\n"),
            "dep.yml:2:7: with: expected a mapping, got a sequence");
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith:\n  uses: [A]\n"),
            "dep.yml:3:9: with.uses: expected an executor type, a .yml path or a mapping, got a "
            "sequence");
  EXPECT_EQ(DeploymentError(head + "  name: [a]\n"),
            "dep.yml:4:9: with.name: expected a string, got a sequence");
  EXPECT_EQ(DeploymentError(head + "  name: ''\n"),
            "dep.yml:4:9: with.name: expected a non-empty string");
  EXPECT_EQ(DeploymentError(head + "  uses_with: 5\n"),
            "dep.yml:4:14: with.uses_with: expected a mapping, got \"5\"");
  EXPECT_EQ(DeploymentError(head + "  env: {A: [1]}\n"),
            "dep.yml:4:12: with.env.A: expected a string, number or bool, got a sequence");
  EXPECT_EQ(DeploymentError(head + "  env: [A]\n"),
            "dep.yml:4:8: with.env: expected a mapping, got a sequence");
  EXPECT_EQ(DeploymentError(head + "  log_level: verbose\n"),
            "dep.yml:4:14: with.log_level: expected one of debug, info, warning, error; got "
            "\"verbose\"");
  EXPECT_EQ(DeploymentError(head + "  log_format: xml\n"),
            "dep.yml:4:15: with.log_format: expected text or json; got \"xml\"");
  EXPECT_EQ(DeploymentError(head + "  max_client_batch_size: 4096\n"),
            "dep.yml:4:26: with.max_client_batch_size: expected an integer from 1 to 2048, got "
            "4096");
  EXPECT_EQ(DeploymentError(head + "  access_log: sometimes\n"),
            "dep.yml:4:15: with.access_log: expected true or false, got \"sometimes\"");
  EXPECT_EQ(DeploymentError(head + "  timeout_ready: soon\n"),
            "dep.yml:4:18: with.timeout_ready: expected milliseconds >= 0, or -1 to wait "
            "forever, got \"soon\"");
}

TEST(DeploymentConfigTest, ChecksDevices) {
  std::string in_uses_with =
      DeploymentError("jtype: Deployment\nwith:\n  uses: MyExec\n  uses_with: {device: gpu}\n");
  EXPECT_THAT(in_uses_with, StartsWith("dep.yml:4:23: with.uses_with.device: "));
  EXPECT_THAT(in_uses_with, HasSubstr("\"gpu\""));

  std::string inline_uses = DeploymentError(
      "jtype: Deployment\nwith:\n  uses:\n    jtype: MyExec\n    with:\n      device: cuda:-1\n");
  EXPECT_THAT(inline_uses, StartsWith("dep.yml:6:15: with.uses.with.device: "));
  EXPECT_THAT(inline_uses, HasSubstr("\"cuda:-1\""));
}

TEST(DeploymentConfigTest, ReportsSyntaxErrorsAndMissingFiles) {
  EXPECT_EQ(DeploymentError("jtype: Deployment\nwith: {uses: MyExec\n"),
            "dep.yml:3:1: end of map flow not found");
  EXPECT_EQ(ErrorOf(LoadDeploymentConfig("/nonexistent/gantry/dep.yml"), StatusCode::kNotFound),
            "/nonexistent/gantry/dep.yml: cannot open: No such file or directory");
}

}  // namespace
}  // namespace gantry

namespace gantry {
namespace {

// Relative paths in `with:` resolve against the folder of the file that
// wrote them (ExecutorContext::config_dir), and plugin paths in
// metas.libs against their file's folder, not the worker's directory.
TEST(ConfigDirTest, WithPathsResolveAgainstTheFileThatWroteThem) {
  TempDir dir;
  const std::string exec = dir.Write("models/exec.yml",
                                     "jtype: TorchModel\n"
                                     "with: {model: m.pt2}\n"
                                     "metas: {libs: [plugins/libx.so, libsystem.so]}\n");
  StatusOr<ExecutorConfig> config = LoadExecutorConfig(exec);
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string models = std::filesystem::path(dir.path()) / "models";
  EXPECT_EQ(config->config_dir, models);
  ExecutorContext context;
  context.config_dir = config->config_dir;
  EXPECT_EQ(context.ResolvePath("m.pt2"), models + "/m.pt2");
  EXPECT_EQ(context.ResolvePath("../w/m.pt2"), dir.path() + "/w/m.pt2");
  EXPECT_EQ(context.ResolvePath("/abs/m.pt2"), "/abs/m.pt2");
  EXPECT_EQ(ExecutorContext{}.ResolvePath("m.pt2"), "m.pt2");
  const Value::List& libs = *config->metas.at("libs").AsList();
  EXPECT_EQ(*libs[0].AsText(), models + "/plugins/libx.so");
  // A bare name that is no file beside the YAML is left to dlopen's search.
  EXPECT_EQ(*libs[1].AsText(), "libsystem.so");

  // A Deployment that `uses:` the executor file takes that file's folder;
  // one with the executor inline takes its own.
  const std::string by_file =
      dir.Write("deploy/a.yml", "jtype: Deployment\nwith: {uses: ../models/exec.yml}\n");
  StatusOr<DeploymentOptions> a = LoadDeploymentConfig(by_file);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->config_dir, models);
  const std::string inline_uses = dir.Write(
      "deploy/b.yml", "jtype: Deployment\nwith: {uses: {jtype: TorchModel, with: {model: m}}}\n");
  StatusOr<DeploymentOptions> b = LoadDeploymentConfig(inline_uses);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->config_dir, std::filesystem::path(dir.path()) / "deploy");
  // Text that came from no file resolves against the working directory.
  StatusOr<DeploymentOptions> c =
      ParseDeploymentConfig("jtype: Deployment\nwith: {uses: X}\n", "<inline>");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->config_dir, "");
}

TEST(DeploymentOrFlowConfigTest, ParsesWhatTheJtypeSays) {
  auto flow = ParseDeploymentOrFlowConfig(
      "jtype: Flow\nwith: {port: 7}\nexecutors:\n  - {name: a, uses: EchoExec}\n", "f.yml");
  ASSERT_TRUE(flow.ok()) << flow.status();
  ASSERT_TRUE(std::holds_alternative<FlowOptions>(*flow));
  EXPECT_EQ(std::get<FlowOptions>(*flow).port, 7);
  auto deployment = ParseDeploymentOrFlowConfig(
      "jtype: Deployment\nwith: {uses: EchoExec, replicas: 3}\n", "d.yml");
  ASSERT_TRUE(deployment.ok()) << deployment.status();
  EXPECT_EQ(std::get<DeploymentOptions>(*deployment).replicas, 3);
  // Anything else is read as a Deployment, whose loader names the problem.
  auto neither = ParseDeploymentOrFlowConfig("jtype: Pipeline\nwith: {}\n", "x.yml");
  ASSERT_FALSE(neither.ok());
  EXPECT_THAT(neither.status().message(),
              HasSubstr("x.yml:1:8: jtype: expected \"Deployment\", got \"Pipeline\""));
}

}  // namespace
}  // namespace gantry
