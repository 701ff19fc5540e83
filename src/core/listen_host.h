// The one default address Gantry's servers listen on: 127.0.0.1, or
// $GANTRY_HOST when set (the container images set 0.0.0.0). A YAML's
// `host:` and a `--host` flag win over it; a C++ program says
// DeploymentOptions::host itself.
//
// Thread safety: reads the environment; call it while nothing sets it.
#ifndef GANTRY_CORE_LISTEN_HOST_H_
#define GANTRY_CORE_LISTEN_HOST_H_

#include <string>

namespace gantry::internal {

inline constexpr const char* kLoopbackHost = "127.0.0.1";

std::string DefaultListenHost();

}  // namespace gantry::internal

#endif  // GANTRY_CORE_LISTEN_HOST_H_
