#include "core/logging.h"

#include <spdlog/formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace gantry::internal {
namespace {

using OrderedJson = nlohmann::ordered_json;

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

std::atomic<bool>& json_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

// What this thread's lines carry beyond the message (RequestLogScope,
// LogAccess). spdlog's loggers here are synchronous: a line is formatted
// on the thread that logs it, so these are that thread's.
thread_local std::string t_request_id;
thread_local const OrderedJson* t_extra_fields = nullptr;

std::string_view JsonLevelName(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
      return "trace";
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warning";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "critical";
    default:
      return "off";
  }
}

// "2026-11-28T18:30:00.123Z": UTC with milliseconds, as log collectors read it.
std::string Iso8601(spdlog::log_clock::time_point time) {
  const auto since_epoch = time.time_since_epoch();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch - seconds).count();
  const std::time_t whole = seconds.count();
  std::tm utc{};
  gmtime_r(&whole, &utc);
  char text[40];
  const std::size_t n = std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &utc);
  return std::string(text, n) + "." + std::to_string(1000 + millis).substr(1) + "Z";
}

// One JSON object per line. The logger's name says the process's role:
// "gateway", or "deployment/rep-N" for a replica.
class JsonLineFormatter final : public spdlog::formatter {
 public:
  explicit JsonLineFormatter(std::string name) : name_(std::move(name)), pid_(getpid()) {
    if (const std::size_t slash = name_.find('/'); slash != std::string::npos) {
      role_ = "worker";
      deployment_ = name_.substr(0, slash);
      replica_ = name_.substr(slash + 1);
    } else {
      role_ = name_;
    }
  }

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    OrderedJson line;
    line["ts"] = Iso8601(msg.time);
    line["level"] = JsonLevelName(msg.level);
    line["role"] = role_;
    if (!deployment_.empty()) {
      line["deployment"] = deployment_;
      line["replica"] = replica_;
    }
    line["pid"] = pid_;
    if (!t_request_id.empty()) {
      line["request_id"] = t_request_id;
    }
    line["msg"] = std::string(msg.payload.data(), msg.payload.size());
    if (t_extra_fields != nullptr) {
      for (const auto& [key, value] : t_extra_fields->items()) {
        line[key] = value;
      }
    }
    // A message may quote client bytes that are not UTF-8: replaced, never thrown.
    const std::string text = line.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
    dest.append(text.data(), text.data() + text.size());
    dest.push_back('\n');
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonLineFormatter>(name_);
  }

 private:
  std::string name_;
  std::string role_;
  std::string deployment_;
  std::string replica_;
  pid_t pid_;
};

std::string ResolveFormat(std::string_view format) {
  if (!format.empty()) {
    return std::string(format);
  }
  const char* env = std::getenv("GANTRY_LOG_FORMAT");
  return env != nullptr && *env != '\0' ? env : "text";
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

Status ValidateLogFormat(std::string_view format) {
  if (format != "text" && format != "json") {
    return InvalidArgumentError("bad log format \"" + PrintableForLog(format) +
                                "\": expected text or json");
  }
  return OkStatus();
}

std::string CurrentLogFormat() { return json_flag() ? "json" : "text"; }

Status InitProcessLogger(const std::string& name, std::string_view level, std::string_view format) {
  if (level.empty()) {
    const char* env = std::getenv("GANTRY_LOG_LEVEL");
    level = env != nullptr && *env != '\0' ? env : "info";
  }
  spdlog::level::level_enum parsed;
  if (!ParseLevel(level, &parsed)) {
    return ValidateLogLevel(level);
  }
  const std::string resolved_format = ResolveFormat(format);
  GANTRY_RETURN_IF_ERROR(ValidateLogFormat(resolved_format));
  const bool json = resolved_format == "json";
  // stderr: stdout belongs to the program (CLI output, progress, results).
  spdlog::drop(name);
  auto logger = json ? spdlog::stderr_logger_mt(name) : spdlog::stderr_color_mt(name);
  if (json) {
    logger->set_formatter(std::make_unique<JsonLineFormatter>(name));
  } else {
    logger->set_pattern("%^%-7l%$ %n@%P [%H:%M:%S.%e] %v");
  }
  logger->set_level(parsed);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(std::move(logger));
  json_flag() = json;
  initialized_flag() = true;
  return OkStatus();
}

void EnsureProcessLogger(const std::string& name, std::string_view format) {
  if (!initialized_flag()) {
    if (!InitProcessLogger(name, "", format).ok()) {
      InitProcessLogger(name, "", "text").IgnoreError();
    }
  }
}

std::string PrintableForLog(std::string_view text, std::size_t max_bytes) {
  std::string out(text.substr(0, max_bytes));
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) {
      c = '?';
    }
  }
  if (text.size() > max_bytes) {
    out += "...";
  }
  return out;
}

RequestLogScope::RequestLogScope(std::string_view request_id)
    : previous_(std::exchange(t_request_id, PrintableForLog(request_id))) {}

RequestLogScope::~RequestLogScope() { t_request_id = std::move(previous_); }

std::string CurrentRequestId() { return t_request_id; }

void LogAccess(const AccessRecord& record) {
  const std::string request_id = PrintableForLog(record.request_id);
  const std::string endpoint = PrintableForLog(record.endpoint);
  if (!json_flag()) {
    spdlog::info("access request_id={} endpoint={} status={} duration_ms={:.1f} request_bytes={}",
                 request_id.empty() ? "-" : request_id, endpoint.empty() ? "-" : endpoint,
                 record.status, record.duration_ms, record.request_bytes);
    return;
  }
  OrderedJson fields;
  fields["event"] = "access";
  fields["endpoint"] = endpoint;
  fields["status"] = record.status;
  fields["duration_ms"] = static_cast<double>(static_cast<long long>(record.duration_ms * 10)) / 10;
  fields["request_bytes"] = record.request_bytes;
  RequestLogScope scope(request_id);
  t_extra_fields = &fields;
  spdlog::info("{} {} {:.1f} ms", endpoint.empty() ? "-" : endpoint, record.status,
               record.duration_ms);
  t_extra_fields = nullptr;
}

}  // namespace gantry::internal
