// File: gantry/config.h
//
// YAML configuration in Jina's shapes:
//
//   jtype: MyExec                 # executor YAML
//   with: {device: cpu}
//   metas: {name: encoder}
//
//   jtype: Deployment             # deployment YAML
//   with:
//     uses: MyExec                # a type name, an executor YAML path, or an
//     uses_with: {device: cpu}    #   inline {jtype:, with:, metas:} mapping
//     replicas: 2
//     port: 12345
//     gpus: 0.5                   # or 1, all, "0,2"
//     uses_dynamic_batching: {/encode: {preferred_batch_size: 32, timeout: 10}}
//     max_message_bytes: 67108864 # cap on one request or reply (default 64 MiB)
//     max_concurrent_requests: 512 # requests the gateway forwards at once
//
//   jtype: Flow                   # flow YAML (docs/flow.md)
//   with: {port: 12345, protocol: grpc}
//   executors:                    # each entry: a deployment's `with:` keys,
//     - name: encoder             #   plus `needs:` (a name, "gateway", or a list)
//       uses: MyExec
//     - {name: indexer, uses: MyIndexer, needs: encoder}
//     - {name: ranker, external: true, host: ranker.svc, port: 8081}  # runs elsewhere
//
// `${{ ENV.NAME }}` is replaced by the environment variable NAME. Files are
// validated whole before anything starts: unknown keys, wrong types and bad
// devices are errors of the form "<file>:<line>:<col>: <key.path>: <what>".
#ifndef GANTRY_CONFIG_H_
#define GANTRY_CONFIG_H_

#include <gantry/deployment.h>
#include <gantry/document.h>
#include <gantry/flow.h>
#include <gantry/status.h>

#include <map>
#include <string>
#include <string_view>
#include <variant>

namespace gantry {

struct ExecutorConfig {
  std::string jtype{};
  Value::Dict with{};
  Value::Dict metas{};
  // `dynamic_batching:` keyed by endpoint or handler name.
  std::map<std::string, DynamicBatching> dynamic_batching{};
  // The file's folder (absolute), against which the executor resolves
  // relative paths in `with:` (ExecutorContext::ResolvePath); empty for
  // text that did not come from a file.
  std::string config_dir{};
};

// `source` names the text in errors (a file path or "<inline>").
StatusOr<ExecutorConfig> ParseExecutorConfig(std::string_view yaml, std::string_view source);
StatusOr<ExecutorConfig> LoadExecutorConfig(const std::string& path);

// Relative `uses:` paths are resolved against the file's directory.
StatusOr<DeploymentOptions> ParseDeploymentConfig(std::string_view yaml, std::string_view source);
StatusOr<DeploymentOptions> LoadDeploymentConfig(const std::string& path);

// Every step is checked as a deployment is, and the graph as the Flow checks
// it (a cycle, an unknown need, a duplicate name), each error naming the
// file, line and key ("executors[2].needs[0]").
StatusOr<FlowOptions> ParseFlowConfig(std::string_view yaml, std::string_view source);
StatusOr<FlowOptions> LoadFlowConfig(const std::string& path);

// A Deployment or a Flow YAML, read once and parsed as its `jtype` says
// (`jtype: Flow`, else a Deployment, whose errors then name what is wrong).
using DeploymentOrFlow = std::variant<DeploymentOptions, FlowOptions>;
StatusOr<DeploymentOrFlow> ParseDeploymentOrFlowConfig(std::string_view yaml,
                                                       std::string_view source);
StatusOr<DeploymentOrFlow> LoadDeploymentOrFlowConfig(const std::string& path);

}  // namespace gantry

#endif  // GANTRY_CONFIG_H_
