// Lookup side of the executor registry (registration is in gantry/executor.h).
#ifndef GANTRY_CORE_REGISTRY_H_
#define GANTRY_CORE_REGISTRY_H_

#include <gantry/executor.h>
#include <gantry/status.h>

#include <string>
#include <string_view>
#include <vector>

namespace gantry::internal {

// nullptr if no executor of that name was registered in this program.
const ExecutorType* FindExecutorType(std::string_view name);
std::vector<std::string> RegisteredExecutorNames();
// NotFound: "unknown executor type (jtype) 'X'; registered types: A, B".
Status UnknownExecutorError(std::string_view name);

// The registrations gantry_accept_executor_abi refused since the last call,
// one message each (source file and both versions); clears the list.
std::vector<std::string> TakeRefusedRegistrations();

}  // namespace gantry::internal

#endif  // GANTRY_CORE_REGISTRY_H_
