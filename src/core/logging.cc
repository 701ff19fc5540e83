#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>

namespace gantry::internal {
namespace {

bool ParseLevel(std::string_view text, spdlog::level::level_enum* out) {
  if (text == "trace") {
    *out = spdlog::level::trace;
  } else if (text == "debug") {
    *out = spdlog::level::debug;
  } else if (text == "info") {
    *out = spdlog::level::info;
  } else if (text == "warning" || text == "warn") {
    *out = spdlog::level::warn;
  } else if (text == "error") {
    *out = spdlog::level::err;
  } else if (text == "off") {
    *out = spdlog::level::off;
  } else {
    return false;
  }
  return true;
}

std::atomic<bool>& initialized_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

}  // namespace

Status ValidateLogLevel(std::string_view level) {
  spdlog::level::level_enum parsed;
  if (!ParseLevel(level, &parsed)) {
    return InvalidArgumentError("bad log level \"" + std::string(level) +
                                "\": expected debug, info, warning or error");
  }
  return OkStatus();
}

Status InitProcessLogger(const std::string& name, std::string_view level) {
  if (level.empty()) {
    const char* env = std::getenv("GANTRY_LOG_LEVEL");
    level = env != nullptr && *env != '\0' ? env : "info";
  }
  spdlog::level::level_enum parsed;
  if (!ParseLevel(level, &parsed)) {
    return ValidateLogLevel(level);
  }
  // stderr: stdout belongs to the program (CLI output, progress, results).
  spdlog::drop(name);
  auto logger = spdlog::stderr_color_mt(name);
  logger->set_pattern("%^%-7l%$ %n@%P [%H:%M:%S.%e] %v");
  logger->set_level(parsed);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(std::move(logger));
  initialized_flag() = true;
  return OkStatus();
}

void EnsureProcessLogger(const std::string& name) {
  if (!initialized_flag()) {
    InitProcessLogger(name).IgnoreError();
  }
}

}  // namespace gantry::internal
