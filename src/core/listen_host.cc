#include "core/listen_host.h"

#include <cstdlib>

namespace gantry::internal {

std::string DefaultListenHost() {
  const char* host = std::getenv("GANTRY_HOST");
  return host != nullptr && *host != '\0' ? std::string(host) : std::string(kLoopbackHost);
}

}  // namespace gantry::internal
