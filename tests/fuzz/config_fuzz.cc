// libFuzzer target: the YAML loader (src/core/config.cc). The input is YAML
// text, read as a deployment file, an executor file and a Flow file. Whatever the
// text, the loader must answer a Status: no crash, no exception, no
// undefined behaviour.
//
// `uses: x.yml` makes the loader read another file, relative to the working
// directory (the source name starts with '<'); scripts/fuzz.sh runs the
// target in an empty directory so that such reads fail cleanly.
#include <gantry/config.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  gantry::StatusOr<gantry::DeploymentOptions> deployment =
      gantry::ParseDeploymentConfig(yaml, "<fuzz>");
  if (!deployment.ok() && deployment.status().message().empty()) {
    __builtin_trap();  // every refusal says why
  }
  gantry::StatusOr<gantry::ExecutorConfig> executor = gantry::ParseExecutorConfig(yaml, "<fuzz>");
  if (!executor.ok() && executor.status().message().empty()) {
    __builtin_trap();
  }
  gantry::StatusOr<gantry::FlowOptions> flow = gantry::ParseFlowConfig(yaml, "<fuzz>");
  if (!flow.ok() && flow.status().message().empty()) {
    __builtin_trap();
  }
  return 0;
}
