// One spdlog logger per process, named for its role ("gateway",
// "executor/rep-1"), printing Jina-style lines: "INFO  executor/rep-1@4242 ...".
// After InitProcessLogger, use spdlog::info(...) and friends anywhere.
#ifndef GANTRY_CORE_LOGGING_H_
#define GANTRY_CORE_LOGGING_H_

#include <gantry/status.h>

#include <string>
#include <string_view>

namespace gantry::internal {

// `level`: "trace", "debug", "info", "warning" (or "warn"), "error", "off".
// Also honours $GANTRY_LOG_LEVEL when `level` is empty.
Status InitProcessLogger(const std::string& name, std::string_view level = "");

// Initialises the logger as `name` unless this process already did.
void EnsureProcessLogger(const std::string& name);

// Checks a level name without changing anything.
Status ValidateLogLevel(std::string_view level);

}  // namespace gantry::internal

#endif  // GANTRY_CORE_LOGGING_H_
