// Every `with:` key of a Deployment and of a Flow, declared once: its YAML
// key, its command-line flag and help, its rule, and where it is stored.
// The YAML loader (core/config.cc), the flags of `gantry deployment`,
// `gantry flow` and `gantry gateway` (cli/main.cc) and the gateway's
// arguments that `gantry export` writes (export/export.cc) are made from
// this table, so a new scalar option costs a field in the options struct
// and a row here.
//
// Keys with a grammar of their own (uses, gpus, env, volumes, models,
// uses_dynamic_batching, protocol) are rows too, of type kOwnReader, so
// that the table is the one list of allowed keys (in the order messages
// list them); their values are read by their own code.
//
// Thread safety: constants and pure functions, safe from any thread.
#ifndef GANTRY_CORE_OPTION_TABLE_H_
#define GANTRY_CORE_OPTION_TABLE_H_

#include <gantry/deployment.h>
#include <gantry/flow.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "core/deployment_rules.h"

namespace gantry::internal {

// How an option's value is written and checked.
enum class OptionType {
  kOwnReader,     // read by its own code (the row only names the key)
  kInt,           // an integer within the row's rule
  kMilliseconds,  // milliseconds within the row's rule
  kBool,          // true or false; as a flag, present or not
  kName,          // a non-empty string
  kPath,          // a file path; in YAML, relative to the file's folder
  kLogLevel,      // debug, info, warning or error
  kLogFormat,     // text or json
};

// One option's value, as read from YAML or from a flag: kInt and
// kMilliseconds hold std::int64_t, kBool bool, the others std::string.
using OptionValue = std::variant<std::int64_t, bool, std::string>;

// Reads and writes one option of an options struct; `set` is null where
// the struct has no such option.
template <typename Options>
struct OptionField {
  void (*set)(Options&, const OptionValue&) = nullptr;
  OptionValue (*get)(const Options&) = nullptr;
  bool present() const { return set != nullptr; }
};

struct OptionRow {
  // The YAML key under `with:` ("max_message_bytes").
  std::string_view key;
  OptionType type = OptionType::kOwnReader;
  // kInt and kMilliseconds: the bounds (core/deployment_rules.h).
  const IntRule* rule = nullptr;
  // The flag ("--max-message-bytes"); empty: YAML only.
  std::string_view flag{};
  std::string_view help{};
  OptionField<DeploymentOptions> deployment{};
  OptionField<FlowOptions> flow{};
  // `gantry gateway` takes the flag too (into the gateway's settings).
  bool gateway_flag = false;
  // Flags of one group replace the YAML's values as a set: giving any of
  // them clears the others first (the TLS files).
  std::string_view flag_group{};
  // Giving this flag also turns on the bool option of that key
  // (--port-monitoring implies --monitoring); YAML keys imply nothing.
  std::string_view flag_implies{};
  // kName: a check of the text beyond "not empty"; its message follows the
  // key's name.
  Status (*check)(std::string_view text) = nullptr;
};

// Every row, in the order "allowed keys" messages list them.
std::span<const OptionRow> OptionTable();

// The row of `key`, or null.
const OptionRow* FindOption(std::string_view key);

// The keys a Deployment's `with:` (and a Flow step) takes, and those a
// Flow's own `with:` takes, in table order.
std::span<const std::string_view> DeploymentWithKeys();
std::span<const std::string_view> FlowWithKeys();

// `timeout_ready: -1` waits forever; a finite stand-in (a century) keeps
// deadline arithmetic from overflowing.
inline constexpr std::chrono::milliseconds kWaitForever = std::chrono::hours(24 * 365 * 100);

// A Flow's gateway options as a Deployment's (every row both have: name,
// listen address and ports, caps, drain, metrics), so that one function
// derives a gateway's settings for both.
DeploymentOptions DeploymentOptionsOfFlow(const FlowOptions& flow);

// An option's value as text for a flag or a message ("65536", "true").
std::string OptionText(const OptionValue& value);

}  // namespace gantry::internal

#endif  // GANTRY_CORE_OPTION_TABLE_H_
