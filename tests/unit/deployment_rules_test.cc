// The rules of a valid deployment (core/deployment_rules.h) at the edges of
// each one, with the words every caller reports.
#include "core/deployment_rules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace gantry::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();

TEST(DeploymentRulesTest, IntRulesAcceptTheirBoundsAndRefuseOneBeyond) {
  struct Case {
    const IntRule& rule;
    std::int64_t min;
    std::int64_t max;
  };
  const std::vector<Case> cases = {
      {kReplicasRule, 1, 1024},
      {kPortRule, 0, 65535},
      {kMaxMessageBytesRule, 1, kInt32Max},
      {kTimeoutReadyRule, -1, std::numeric_limits<std::int64_t>::max()},
      {kPreferredBatchSizeRule, 1, std::numeric_limits<int>::max()},
      {kBatchTimeoutRule, 0, std::numeric_limits<int>::max()},
      {kBatchLimitRule, 0, std::numeric_limits<int>::max()},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.rule.expected));
    EXPECT_TRUE(InRange(c.rule, c.min));
    EXPECT_TRUE(InRange(c.rule, c.max));
    EXPECT_FALSE(InRange(c.rule, c.min - 1));
    if (c.max < std::numeric_limits<std::int64_t>::max()) {
      EXPECT_FALSE(InRange(c.rule, c.max + 1));
    }
  }
}

TEST(DeploymentRulesTest, YamlWordsSayWhatIsExpected) {
  EXPECT_EQ(ExpectedGot(kReplicasRule, "0"), "expected an integer from 1 to 1024, got 0");
  EXPECT_EQ(ExpectedGot(kPortRule, "70000"), "expected an integer from 0 to 65535, got 70000");
  EXPECT_EQ(ExpectedGot(kMaxMessageBytesRule, "\"big\""),
            "expected a size in bytes from 1 to 2147483647 (gRPC's limit), got \"big\"");
  EXPECT_EQ(ExpectedGot(kTimeoutReadyRule, "-2"),
            "expected milliseconds >= 0, or -1 to wait forever, got -2");
  EXPECT_EQ(ExpectedGot(kBatchLimitRule, "-1"), "expected an integer >= 0 (0: no limit), got -1");
}

TEST(DeploymentRulesTest, OptionWordsNameTheMinimumOrTheRange) {
  EXPECT_TRUE(CheckIntOption(kReplicasRule, "replicas", 1).ok());
  Status replicas = CheckIntOption(kReplicasRule, "replicas", 0);
  EXPECT_EQ(replicas.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(replicas.message(), "replicas 0 is outside 1..1024");
  EXPECT_EQ(CheckIntOption(kReplicasRule, "replicas", 1000000000).message(),
            "replicas 1000000000 is outside 1..1024");

  EXPECT_TRUE(CheckIntOption(kPortRule, "port", 0).ok());
  EXPECT_TRUE(CheckIntOption(kPortRule, "port", 65535).ok());
  EXPECT_EQ(CheckIntOption(kPortRule, "port", 65536).message(), "port 65536 is outside 0..65535");
  EXPECT_EQ(CheckIntOption(kPortRule, "port", -1).message(), "port -1 is outside 0..65535");

  EXPECT_TRUE(CheckIntOption(kMaxMessageBytesRule, "max_message_bytes", 1).ok());
  EXPECT_TRUE(CheckIntOption(kMaxMessageBytesRule, "max_message_bytes", kInt32Max).ok());
  EXPECT_EQ(CheckIntOption(kMaxMessageBytesRule, "max_message_bytes", 0).message(),
            "max_message_bytes 0 is outside 1..2147483647");
  EXPECT_EQ(CheckIntOption(kMaxMessageBytesRule, "max_message_bytes", kInt32Max + 1).message(),
            "max_message_bytes 2147483648 is outside 1..2147483647");
}

TEST(DeploymentRulesTest, DeviceIsAStringThatDeviceParseTakes) {
  for (const char* ok : {"cpu", "cuda", "cuda:0", "cuda:15", "auto"}) {
    EXPECT_TRUE(CheckDeviceValue(Value(ok)).ok()) << ok;
  }
  for (const char* bad : {"", "gpu0", "cuda:", "cuda:-1", "cuda:x", "CPU", "cuda:0 "}) {
    Status s = CheckDeviceValue(Value(bad));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("expected \"cpu\", \"cuda\", \"cuda:N\" or \"auto\""));
  }
  EXPECT_EQ(CheckDeviceValue(Value(0)).message(),
            "expected a device string (\"cpu\", \"cuda\", \"cuda:N\" or \"auto\"), got 0");
  EXPECT_FALSE(CheckDeviceValue(Value()).ok());
  EXPECT_FALSE(CheckDeviceValue(Value(true)).ok());
}

TEST(DeploymentRulesTest, FilesKeepToFourLogLevels) {
  for (const char* ok : {"debug", "info", "warning", "error"}) {
    EXPECT_TRUE(CheckLogLevel(ok).ok()) << ok;
  }
  for (const char* bad : {"", "warn", "trace", "off", "INFO", "info "}) {
    EXPECT_FALSE(CheckLogLevel(bad).ok()) << bad;
  }
  EXPECT_EQ(CheckLogLevel("loud").message(),
            "expected one of debug, info, warning, error; got \"loud\"");
}

TEST(DeploymentRulesTest, EnvNamesAreNonEmptyWithoutEqualsOrNul) {
  EXPECT_TRUE(CheckEnvName("CUDA_VISIBLE_DEVICES").ok());
  EXPECT_TRUE(CheckEnvName("x").ok());
  EXPECT_FALSE(CheckEnvName("").ok());
  EXPECT_FALSE(CheckEnvName("A=B").ok());
  EXPECT_FALSE(CheckEnvName("=").ok());
  EXPECT_FALSE(CheckEnvName(std::string_view("A\0B", 3)).ok());
  EXPECT_EQ(CheckEnvName("").message(),
            "not a valid environment variable name (empty, or has '=')");
}

TEST(DeploymentRulesTest, DeploymentNamesAreNonEmptyWithoutSlash) {
  EXPECT_TRUE(CheckDeploymentName("executor").ok());
  EXPECT_TRUE(CheckDeploymentName("a.b-c_d").ok());
  EXPECT_EQ(CheckDeploymentName("").message(),
            "deployment name '' must be non-empty and contain no '/'");
  EXPECT_EQ(CheckDeploymentName("a/b").message(),
            "deployment name 'a/b' must be non-empty and contain no '/'");
  EXPECT_FALSE(CheckDeploymentName("/").ok());
}

TEST(DeploymentRulesTest, DynamicBatchingAtItsEdges) {
  EXPECT_TRUE(CheckDynamicBatching(DynamicBatching{}).ok());
  DynamicBatching edge;
  edge.preferred_batch_size = 1;
  edge.timeout_ms = 0;
  edge.max_batch_size = 0;
  edge.max_queue_size = 0;
  EXPECT_TRUE(CheckDynamicBatching(edge).ok());

  const std::string expected =
      "preferred_batch_size must be >= 1 and timeout_ms, max_batch_size, max_queue_size >= 0";
  DynamicBatching b = edge;
  b.preferred_batch_size = 0;
  EXPECT_EQ(CheckDynamicBatching(b).message(), expected);
  b = edge;
  b.timeout_ms = -1;
  EXPECT_EQ(CheckDynamicBatching(b).message(), expected);
  b = edge;
  b.max_batch_size = -1;
  EXPECT_EQ(CheckDynamicBatching(b).message(), expected);
  b = edge;
  b.max_queue_size = -1;
  EXPECT_EQ(CheckDynamicBatching(b).code(), StatusCode::kInvalidArgument);
}

TEST(DeploymentRulesTest, QueuePolicyRanges) {
  DynamicBatching b{.queue_timeout_ms = 100, .priority_levels = 3, .default_priority_level = 3};
  EXPECT_TRUE(CheckDynamicBatching(b).ok());
  b.default_priority_level = 4;
  EXPECT_EQ(
      CheckDynamicBatching(b).message(),
      "default_priority_level must be from 0 (the least urgent) to priority_levels (3), got 4");
  b = {.priority_levels = 101};
  EXPECT_EQ(CheckDynamicBatching(b).message(),
            "priority_levels must be an integer from 0 (none) to 100, got 101");
  b = {.queue_timeout_ms = -1};
  EXPECT_EQ(CheckDynamicBatching(b).message(),
            "queue_timeout must be milliseconds >= 0 (0: no limit), got -1");
  // Without levels there is no default level to give.
  b = {.default_priority_level = 1};
  EXPECT_EQ(CheckDynamicBatching(b).code(), StatusCode::kInvalidArgument);
}

TEST(DeploymentRulesTest, GpuSpecForms) {
  StatusOr<GpuSpec> unset = ParseGpuSpec("");
  ASSERT_TRUE(unset.ok());
  EXPECT_EQ(unset->kind, GpuSpec::Kind::kUnmanaged);
  EXPECT_EQ(ParseGpuSpec("  ")->kind, GpuSpec::Kind::kUnmanaged);
  EXPECT_EQ(ParseGpuSpec("0")->kind, GpuSpec::Kind::kNone);
  EXPECT_EQ(ParseGpuSpec("0.0")->kind, GpuSpec::Kind::kNone);
  EXPECT_EQ(ParseGpuSpec("all")->kind, GpuSpec::Kind::kAll);
  EXPECT_EQ(ParseGpuSpec(" all\t")->kind, GpuSpec::Kind::kAll);

  StatusOr<GpuSpec> two = ParseGpuSpec("2");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->kind, GpuSpec::Kind::kCount);
  EXPECT_EQ(two->amount, 2);
  EXPECT_EQ(ParseGpuSpec("1")->kind, GpuSpec::Kind::kCount);
  EXPECT_EQ(ParseGpuSpec("2.0")->kind, GpuSpec::Kind::kCount);

  StatusOr<GpuSpec> half = ParseGpuSpec("0.5");
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(half->kind, GpuSpec::Kind::kFraction);
  EXPECT_EQ(half->amount, 0.5);
  EXPECT_EQ(ParseGpuSpec("0.999")->kind, GpuSpec::Kind::kFraction);
  EXPECT_EQ(ParseGpuSpec("1e-3")->kind, GpuSpec::Kind::kFraction);

  StatusOr<GpuSpec> list = ParseGpuSpec("0, 2,GPU-ab");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->kind, GpuSpec::Kind::kList);
  EXPECT_THAT(list->ids, ElementsAre("0", "2", "GPU-ab"));
  StatusOr<GpuSpec> one = ParseGpuSpec("3,");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->kind, GpuSpec::Kind::kList);
  EXPECT_THAT(one->ids, ElementsAre("3"));
}

TEST(DeploymentRulesTest, GpuSpecRefusesWhatNoMachineCouldPlace) {
  const std::string expected =
      "\": expected a number of GPUs per replica (1, 0.5), \"all\", or a list of GPU indices or "
      "UUIDs (\"0,2\", \"3,\")";
  for (const char* bad : {"-1", "-0.5", "lots", "All", "nan", "inf", "1x", "+1", "0x10"}) {
    StatusOr<GpuSpec> spec = ParseGpuSpec(bad);
    ASSERT_FALSE(spec.ok()) << bad;
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(spec.status().message(), "gpus=\"" + std::string(bad) + expected);
  }
  for (const char* mixed : {"1.5", "1.000001", "2.5"}) {
    EXPECT_EQ(ParseGpuSpec(mixed).status().message(),
              "gpus=" + std::string(mixed) +
                  ": a replica takes whole GPUs or a fraction below 1, not both");
  }
  EXPECT_EQ(ParseGpuSpec(",").status().message(), "gpus=\",\" lists no GPU");
  EXPECT_EQ(ParseGpuSpec(" , ,").status().message(), "gpus=\", ,\" lists no GPU");
}

DeploymentOptions Valid() {
  DeploymentOptions options;
  options.uses = "EchoExec";
  options.name = "dep";
  return options;
}

TEST(DeploymentRulesTest, ValidateDeploymentOptionsNamesTheDeployment) {
  EXPECT_TRUE(ValidateDeploymentOptions(Valid()).ok());

  DeploymentOptions o = Valid();
  o.uses = "";
  EXPECT_EQ(ValidateDeploymentOptions(o).message(),
            "deployment 'dep': `uses` is empty; name an executor type or a YAML file");
  o = Valid();
  o.replicas = 0;
  EXPECT_EQ(ValidateDeploymentOptions(o).message(),
            "deployment 'dep': replicas 0 is outside 1..1024");
  o = Valid();
  o.port = 9000;
  o.http_port = 9000;
  EXPECT_EQ(ValidateDeploymentOptions(o).message(),
            "deployment 'dep': port and http_port are both 9000; each server needs a port of "
            "its own");
  o.http_port = 9001;
  o.port_monitoring = 9001;
  EXPECT_TRUE(ValidateDeploymentOptions(o).ok()) << "no metrics server without monitoring";
  o.monitoring = true;
  EXPECT_EQ(ValidateDeploymentOptions(o).message(),
            "deployment 'dep': http_port and port_monitoring are both 9001; each server needs a "
            "port of its own");
  o = Valid();
  o.port = 65536;
  EXPECT_EQ(ValidateDeploymentOptions(o).message(),
            "deployment 'dep': port 65536 is outside 0..65535");
  o = Valid();
  o.max_message_bytes = 0;
  EXPECT_EQ(ValidateDeploymentOptions(o).message(),
            "deployment 'dep': max_message_bytes 0 is outside 1..2147483647");
  o = Valid();
  o.max_init_failures = 0;
  EXPECT_EQ(ValidateDeploymentOptions(o).message(),
            "deployment 'dep': max_init_failures must be >= 1, got 0");
  o = Valid();
  o.liveness_period = std::chrono::milliseconds(0);
  EXPECT_EQ(ValidateDeploymentOptions(o).message(),
            "deployment 'dep': liveness_period must be >= 1, got 0");
  o = Valid();
  o.liveness_failure_threshold = -2;
  EXPECT_EQ(ValidateDeploymentOptions(o).message(),
            "deployment 'dep': liveness_failure_threshold must be >= 0, got -2");
  o = Valid();
  o.restart_backoff_initial = std::chrono::milliseconds(0);
  EXPECT_EQ(ValidateDeploymentOptions(o).message(),
            "deployment 'dep': restart_backoff_initial must be >= 1, got 0");
  o = Valid();
  o.restart_backoff_initial = std::chrono::milliseconds(500);
  o.restart_backoff_max = std::chrono::milliseconds(100);
  EXPECT_EQ(ValidateDeploymentOptions(o).message(),
            "deployment 'dep': restart_backoff_max (100 ms) is below restart_backoff_initial "
            "(500 ms)");
  o = Valid();
  o.timeout_drain = std::chrono::milliseconds(-1);
  EXPECT_EQ(ValidateDeploymentOptions(o).message(),
            "deployment 'dep': timeout_drain must be >= 0, got -1");
  o = Valid();
  o.name = "a/b";
  EXPECT_EQ(ValidateDeploymentOptions(o).message(),
            "deployment name 'a/b' must be non-empty and contain no '/'");
  o = Valid();
  o.log_level = "loud";
  EXPECT_THAT(ValidateDeploymentOptions(o).message(), HasSubstr("bad log level \"loud\""));
  // The C++ API takes any level the logger knows, wider than a file's.
  o.log_level = "trace";
  EXPECT_TRUE(ValidateDeploymentOptions(o).ok());
  o = Valid();
  o.log_format = "yaml";
  EXPECT_EQ(ValidateDeploymentOptions(o).message(),
            "deployment 'dep': log_format: expected text or json; got \"yaml\"");
  o.log_format = "json";
  EXPECT_TRUE(ValidateDeploymentOptions(o).ok());

  // First rule broken, first reported: replicas before port.
  o = Valid();
  o.replicas = 0;
  o.port = -1;
  EXPECT_THAT(ValidateDeploymentOptions(o).message(), HasSubstr("replicas"));
}

TEST(DeploymentRulesTest, ValidateExecutorOptionsChecksBatchingAndDevice) {
  EXPECT_TRUE(ValidateExecutorOptions(Valid()).ok());

  DeploymentOptions o = Valid();
  o.uses_dynamic_batching[""] = DynamicBatching{};
  EXPECT_EQ(ValidateExecutorOptions(o).message(),
            "deployment 'dep': uses_dynamic_batching['']: the key must name an endpoint or a "
            "handler");
  o = Valid();
  o.uses_dynamic_batching["/encode"].preferred_batch_size = 0;
  EXPECT_EQ(ValidateExecutorOptions(o).message(),
            "deployment 'dep': uses_dynamic_batching['/encode']: preferred_batch_size must be >= 1 "
            "and timeout_ms, max_batch_size, max_queue_size >= 0");

  o = Valid();
  o.uses_with["device"] = Value("cuda:1");
  EXPECT_TRUE(ValidateExecutorOptions(o).ok());
  o.uses_with["device"] = Value(0);
  EXPECT_EQ(ValidateExecutorOptions(o).message(),
            "deployment 'dep': uses_with.device must be a string such as \"cuda:0\"");
  o.uses_with["device"] = Value("gpu0");
  EXPECT_EQ(ValidateExecutorOptions(o).message(),
            "deployment 'dep': uses_with.device: bad device \"gpu0\": expected \"cpu\", \"cuda\", "
            "\"cuda:N\" or \"auto\"");
}

TEST(DeploymentRulesTest, TlsNeedsCertificateAndKeyTogether) {
  EXPECT_TRUE(CheckServerTlsOptions({}).ok());
  EXPECT_TRUE(CheckServerTlsOptions({.cert_file = "c.pem", .key_file = "k.pem"}).ok());
  EXPECT_TRUE(
      CheckServerTlsOptions({.cert_file = "c.pem", .key_file = "k.pem", .client_ca_file = "ca.pem"})
          .ok());
  EXPECT_THAT(CheckServerTlsOptions({.cert_file = "c.pem"}).message(),
              HasSubstr("got only ssl_certfile"));
  EXPECT_THAT(CheckServerTlsOptions({.key_file = "k.pem"}).message(),
              HasSubstr("got only ssl_keyfile"));
  EXPECT_THAT(CheckServerTlsOptions({.client_ca_file = "ca.pem"}).message(),
              HasSubstr("ssl_client_cafile needs TLS"));
  // A Deployment built in C++ is held to the same rule, under its name.
  EXPECT_THAT(
      ValidateDeploymentOptions({.uses = "MyExec", .name = "enc", .tls = {.key_file = "k.pem"}})
          .message(),
      HasSubstr("deployment 'enc': TLS needs both"));
}

TEST(DeploymentRulesTest, KindOfUsesTellsImagesFilesAndTypesApart) {
  EXPECT_EQ(KindOfUses("SentenceEncoder"), UsesKind::kExecutorType);
  EXPECT_EQ(KindOfUses("exec.yml"), UsesKind::kExecutorFile);
  EXPECT_EQ(KindOfUses("dir/exec.yaml"), UsesKind::kExecutorFile);
  EXPECT_EQ(KindOfUses("docker://gantry:cpu"), UsesKind::kImage);
  // An image whose tag ends like a file is still an image.
  EXPECT_EQ(KindOfUses("docker://repo/img:v1.yml"), UsesKind::kImage);
}

TEST(DeploymentRulesTest, MergeExecutorConfigKeepsWhatTheOptionsSet) {
  ExecutorConfig file;
  file.jtype = "MyExec";
  file.with = {{"device", Value("cpu")}, {"size", Value(1.0)}};
  file.metas = {{"name", Value("from-file")}};
  file.dynamic_batching["/encode"].preferred_batch_size = 8;
  file.dynamic_batching["/other"].preferred_batch_size = 2;
  file.config_dir = "/models";
  DeploymentOptions options{.uses = "exec.yml", .uses_with = {{"size", Value(2.0)}}};
  options.uses_dynamic_batching["/encode"].preferred_batch_size = 32;
  MergeExecutorConfig(file, options);
  EXPECT_EQ(options.uses, "MyExec");
  EXPECT_EQ(options.config_dir, "/models");
  EXPECT_EQ(*options.uses_with.at("size").AsFloat(), 2.0);
  EXPECT_EQ(*options.uses_with.at("device").AsText(), "cpu");
  EXPECT_EQ(*options.uses_metas.at("name").AsText(), "from-file");
  EXPECT_EQ(options.uses_dynamic_batching.at("/encode").preferred_batch_size, 32);
  EXPECT_EQ(options.uses_dynamic_batching.at("/other").preferred_batch_size, 2);

  DeploymentOptions named{.uses = "exec.yml", .config_dir = "/mine"};
  MergeExecutorConfig(file, named);
  EXPECT_EQ(named.config_dir, "/mine");
}

}  // namespace
}  // namespace gantry::internal
