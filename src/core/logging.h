// One spdlog logger per process, named for its role ("gateway",
// "executor/rep-1"), printing Jina-style lines: "info    executor/rep-1@4242 ...",
// or with format "json" one JSON object per line (docs/logging.md lists its
// fields). After InitProcessLogger, use spdlog::info(...) and friends anywhere.
#ifndef GANTRY_CORE_LOGGING_H_
#define GANTRY_CORE_LOGGING_H_

#include <gantry/status.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace gantry::internal {

// `level`: "trace", "debug", "info", "warning" (or "warn"), "error", "off";
// empty: $GANTRY_LOG_LEVEL, else "info".
// `format`: "text" or "json"; empty: $GANTRY_LOG_FORMAT, else "text".
Status InitProcessLogger(const std::string& name, std::string_view level = "",
                         std::string_view format = "");

// Initialises the logger as `name` unless this process already did.
void EnsureProcessLogger(const std::string& name, std::string_view format = "");

// Checks a level name without changing anything.
Status ValidateLogLevel(std::string_view level);

// Checks a format name ("text" or "json") without changing anything.
Status ValidateLogFormat(std::string_view format);

// The format this process logs in: "text" or "json".
std::string CurrentLogFormat();

// While alive, lines this thread logs carry `request_id` (a JSON field;
// text lines are unchanged). Scopes nest; the id is clipped and made
// printable, as a client wrote it.
// Thread safety: per thread; construct and destroy on the same thread.
class RequestLogScope {
 public:
  explicit RequestLogScope(std::string_view request_id);
  ~RequestLogScope();
  RequestLogScope(const RequestLogScope&) = delete;
  RequestLogScope& operator=(const RequestLogScope&) = delete;

 private:
  std::string previous_;
};

// The request id of the innermost RequestLogScope on this thread, or "".
std::string CurrentRequestId();

// One request as the gateway saw it, for the access log.
struct AccessRecord {
  std::string_view request_id;     // as the client sent it; "" when none
  std::string_view endpoint;       // the executor endpoint ("/encode")
  std::string_view status;         // "OK", a gRPC code's name or "EXECUTOR_ERROR"
  double duration_ms = 0;          // arrival at the gateway to the reply
  std::int64_t request_bytes = 0;  // the serialised request
};

// Logs one access line at info level: text "access request_id=... endpoint=/encode
// status=OK duration_ms=3.2 request_bytes=812", or in JSON those as fields
// with "event": "access".
void LogAccess(const AccessRecord& record);

// `text` clipped to `max_bytes` with bytes outside printable ASCII as '?':
// client-written strings cannot forge log lines or break JSON.
std::string PrintableForLog(std::string_view text, std::size_t max_bytes = 128);

}  // namespace gantry::internal

#endif  // GANTRY_CORE_LOGGING_H_
