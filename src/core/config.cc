#include <gantry/config.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/deployment_rules.h"
#include "core/flow_graph.h"
#include "core/limits.h"
#include "core/listen_host.h"
#include "core/option_table.h"
#include "core/yaml_scalar.h"

namespace gantry {
namespace {

using internal::IntRule;

constexpr std::string_view kExecutorKeys[] = {"jtype", "with", "metas", "requests",
                                              "dynamic_batching"};
constexpr std::string_view kMetasKeys[] = {"name", "description", "workspace",
                                           "url",  "keywords",    "libs"};
constexpr std::string_view kDeploymentKeys[] = {"jtype", "version", "with"};
constexpr std::string_view kFlowKeys[] = {"jtype", "version", "with", "executors", "gateway"};
// Keys of a Flow's `executors:` entries that Jina has and a Deployment has
// not; all but `needs` (and `shards: 1`) are refused as not supported.
constexpr std::string_view kFlowStepOnlyKeys[] = {
    "needs",      "shards",   "when",      "polling", "floating",     "uses_before",
    "uses_after", "external", "workspace", "tls",     "uses_requests"};
// Jina's batching keys, plus Triton-style caps of ours.
constexpr std::string_view kBatchingKeys[] = {"preferred_batch_size",
                                              "timeout",
                                              "flush_all",
                                              "use_dynamic_batching",
                                              "max_batch_size",
                                              "max_queue_size",
                                              "custom_metric",
                                              "use_custom_metric",
                                              "queue_timeout",
                                              "priority_levels",
                                              "default_priority_level",
                                              "timeout_action",
                                              "allow_timeout_override"};

// The whole-number keys of a dynamic_batching entry: each its rule and field.
struct BatchingIntKey {
  std::string_view key;
  const internal::IntRule* rule;
  int DynamicBatching::*field;
};
constexpr BatchingIntKey kBatchingIntKeys[] = {
    {"preferred_batch_size", &internal::kPreferredBatchSizeRule,
     &DynamicBatching::preferred_batch_size},
    {"timeout", &internal::kBatchTimeoutRule, &DynamicBatching::timeout_ms},
    {"max_batch_size", &internal::kBatchLimitRule, &DynamicBatching::max_batch_size},
    {"max_queue_size", &internal::kBatchLimitRule, &DynamicBatching::max_queue_size},
    {"queue_timeout", &internal::kQueueTimeoutRule, &DynamicBatching::queue_timeout_ms},
    {"priority_levels", &internal::kPriorityLevelsRule, &DynamicBatching::priority_levels},
    {"default_priority_level", &internal::kDefaultPriorityLevelRule,
     &DynamicBatching::default_priority_level},
};

std::string Join(std::string_view path, std::string_view key) {
  if (path.empty()) {
    return std::string(key);
  }
  return std::string(path) + "." + std::string(key);
}

std::string Quote(std::string_view text) { return "\"" + std::string(text) + "\""; }

std::string JoinNames(std::span<const std::string_view> names) {
  std::string out;
  for (std::string_view name : names) {
    if (!out.empty()) {
      out += ", ";
    }
    out += name;
  }
  return out;
}

bool IsSpace(char c) { return c == ' ' || c == '\t'; }

std::string_view Trim(std::string_view text) {
  while (!text.empty() && IsSpace(text.front())) {
    text.remove_prefix(1);
  }
  while (!text.empty() && IsSpace(text.back())) {
    text.remove_suffix(1);
  }
  return text;
}

bool IsEnvName(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) {
    return false;
  }
  for (char c : name) {
    bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) {
      return false;
    }
  }
  return true;
}

// Counts a parse's events and stops it (ParserStalled) past `max_events`.
// yaml-cpp 0.7 never returns on a document whose first token is ',' (",x",
// "--- ,x": found by the config fuzzer); it emits events without end, so a
// bound linear in the text's length catches that before YAML::LoadAll
// would run out of memory. Thread safety: one parse, one thread.
class StallDetector final : public YAML::EventHandler {
 public:
  struct ParserStalled {
    YAML::Mark mark;
  };

  explicit StallDetector(std::size_t max_events) : max_events_(max_events) {}

  void OnDocumentStart(const YAML::Mark& mark) override { Tick(mark); }
  void OnDocumentEnd() override { Tick(last_); }
  void OnNull(const YAML::Mark& mark, YAML::anchor_t /*anchor*/) override { Tick(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t /*anchor*/) override { Tick(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string& /*tag*/, YAML::anchor_t /*anchor*/,
                const std::string& /*value*/) override {
    Tick(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string& /*tag*/,
                       YAML::anchor_t /*anchor*/, YAML::EmitterStyle::value /*style*/) override {
    Tick(mark);
  }
  void OnSequenceEnd() override { Tick(last_); }
  void OnMapStart(const YAML::Mark& mark, const std::string& /*tag*/, YAML::anchor_t /*anchor*/,
                  YAML::EmitterStyle::value /*style*/) override {
    Tick(mark);
  }
  void OnMapEnd() override { Tick(last_); }

 private:
  void Tick(const YAML::Mark& mark) {
    last_ = mark;
    if (++events_ > max_events_) {
      throw ParserStalled{mark};
    }
  }

  std::size_t max_events_;
  std::size_t events_ = 0;
  YAML::Mark last_;
};

// A scalar after substitution and typing; `text` is what it became.
struct Scalar {
  Value value;
  std::string text;
};

// One `key: value` of a mapping.
struct Entry {
  std::string key;
  YAML::Node key_node;
  YAML::Node value;
  // Where errors about the value point: an empty value has no position of
  // its own (yaml-cpp marks the next token), so its key's is used.
  YAML::Mark mark;
};

// Reads one YAML document (and the executor file its `uses:` names) into
// options. Thread safety: one Parser per file, used by one thread.
class Parser {
 public:
  Parser(std::string source, std::filesystem::path base_dir)
      : source_(std::move(source)), base_dir_(std::move(base_dir)) {}

  Status Error(const YAML::Mark& mark, std::string_view path, std::string_view what) const {
    std::string message = source_;
    if (!mark.is_null()) {
      message += ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
    }
    message += ": ";
    if (!path.empty()) {
      message += std::string(path) + ": ";
    }
    message += what;
    return InvalidArgumentError(std::move(message));
  }

  // Loads the single document of `yaml` and checks that it is a mapping.
  StatusOr<YAML::Node> LoadDocument(std::string_view yaml) const {
    std::vector<YAML::Node> docs;
    const std::string text(yaml);
    try {
      // Valid YAML gives a few events per byte at most (an empty flow
      // entry "{a,b}" is two); see StallDetector.
      std::istringstream stream(text);
      YAML::Parser parser(stream);
      StallDetector detector(4 * text.size() + 16);
      while (parser.HandleNextDocument(detector)) {
      }
      docs = YAML::LoadAll(text);
    } catch (const YAML::Exception& e) {
      return Error(e.mark, "", e.msg);
    } catch (const StallDetector::ParserStalled& stalled) {
      return Error(stalled.mark, "",
                   "not YAML the parser can read (a ',' where a document should start?)");
    }
    YAML::Mark start;
    if (docs.empty()) {
      return Error(start, "", "empty document, expected a mapping");
    }
    if (docs.size() > 1) {
      return Error(docs[1].Mark(), "",
                   "expected one YAML document, found " + std::to_string(docs.size()));
    }
    if (!docs[0].IsMap()) {
      return Error(docs[0].IsNull() ? start : docs[0].Mark(), "",
                   "expected a mapping at the top level, got " + Describe(docs[0]));
    }
    return docs[0];
  }

  StatusOr<ExecutorConfig> ParseExecutor(const YAML::Node& node, const YAML::Mark& mark,
                                         const std::string& path) const {
    if (!node.IsMap()) {
      return Error(mark, path, "expected a mapping with jtype, with, metas; got " + Describe(node));
    }
    GANTRY_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(node, path, kExecutorKeys));
    ExecutorConfig config;
    config.config_dir = ConfigDir();
    bool has_jtype = false;
    for (const Entry& e : entries) {
      std::string key_path = Join(path, e.key);
      if (e.key == "jtype") {
        GANTRY_ASSIGN_OR_RETURN(config.jtype, ReadName(e, key_path));
        if (config.jtype == "Deployment" || config.jtype == "Flow") {
          return Error(e.mark, key_path, "expected an executor type, got " + Quote(config.jtype));
        }
        has_jtype = true;
      } else if (e.key == "with") {
        GANTRY_ASSIGN_OR_RETURN(config.with, ParseWith(e, key_path));
      } else if (e.key == "metas") {
        GANTRY_ASSIGN_OR_RETURN(config.metas, ParseMetas(e, key_path));
      } else if (e.key == "dynamic_batching") {
        GANTRY_ASSIGN_OR_RETURN(config.dynamic_batching, ParseBatching(e, key_path));
      } else {
        // requests: valid Jina, but nothing carries it to the worker yet,
        // and silently dropping it would be worse.
        if (!e.value.IsMap()) {
          return Error(e.mark, key_path, "expected a mapping, got " + Describe(e.value));
        }
        return Error(e.key_node.Mark(), key_path, "not supported yet");
      }
    }
    if (!has_jtype) {
      return Error(mark, Join(path, "jtype"), "required key is missing");
    }
    return config;
  }

  StatusOr<DeploymentOptions> ParseDeployment(const YAML::Node& root) const {
    GANTRY_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(root, "", kDeploymentKeys));
    const Entry* with = nullptr;
    bool has_jtype = false;
    for (const Entry& e : entries) {
      if (e.key == "jtype") {
        GANTRY_ASSIGN_OR_RETURN(Scalar jtype, ReadScalar(e.value, e.mark, e.key));
        if (jtype.text != "Deployment") {
          return Error(e.mark, e.key, "expected \"Deployment\", got " + Got(e.value, jtype));
        }
        has_jtype = true;
      } else if (e.key == "version") {
        GANTRY_ASSIGN_OR_RETURN(Scalar version, ReadScalar(e.value, e.mark, e.key));
        (void)version;
      } else {
        with = &e;
      }
    }
    YAML::Mark start = root.Mark();
    if (!has_jtype) {
      return Error(start, "jtype", "required key is missing");
    }
    if (with == nullptr) {
      return Error(start, "with", "required key is missing");
    }
    if (!with->value.IsMap()) {
      return Error(with->mark, "with", "expected a mapping, got " + Describe(with->value));
    }
    GANTRY_ASSIGN_OR_RETURN(DeploymentOptions options, ParseDeploymentWith(*with));
    if (!with->value["host"]) {
      options.host = internal::DefaultListenHost();
    }
    return options;
  }

  StatusOr<FlowOptions> ParseFlow(const YAML::Node& root) const {
    GANTRY_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(root, "", kFlowKeys));
    FlowOptions options;
    bool host_given = false;
    std::map<std::string, std::string> env;
    const Entry* executors = nullptr;
    bool has_jtype = false;
    for (const Entry& e : entries) {
      if (e.key == "jtype") {
        GANTRY_ASSIGN_OR_RETURN(Scalar jtype, ReadScalar(e.value, e.mark, e.key));
        if (jtype.text != "Flow") {
          return Error(e.mark, e.key, "expected \"Flow\", got " + Got(e.value, jtype));
        }
        has_jtype = true;
      } else if (e.key == "version") {
        GANTRY_ASSIGN_OR_RETURN(Scalar version, ReadScalar(e.value, e.mark, e.key));
        (void)version;
      } else if (e.key == "with") {
        GANTRY_RETURN_IF_ERROR(ParseFlowWith(e, &options, &env));
        host_given = static_cast<bool>(e.value["host"]);
      } else if (e.key == "executors") {
        executors = &e;
      } else {
        return Error(e.key_node.Mark(), e.key,
                     "not supported yet (set the Flow gateway's port and protocol under `with:`)");
      }
    }
    if (!has_jtype) {
      return Error(root.Mark(), "jtype", "required key is missing");
    }
    if (executors == nullptr) {
      return Error(root.Mark(), "executors", "required key is missing");
    }
    if (!host_given) {
      options.host = internal::DefaultListenHost();
    }
    if (!executors->value.IsSequence() || executors->value.size() == 0) {
      return Error(executors->mark, "executors",
                   "expected a non-empty sequence of executors, got " +
                       (executors->value.IsSequence() ? std::string("an empty one")
                                                      : Describe(executors->value)));
    }
    std::vector<std::string> names;
    std::vector<std::vector<std::string>> needs;
    // Where each step's name and needs were written, for graph errors.
    std::vector<YAML::Mark> step_marks;
    std::vector<std::optional<YAML::Mark>> name_marks;
    std::vector<std::vector<YAML::Mark>> need_marks;
    std::size_t index = 0;
    for (auto it = executors->value.begin(); it != executors->value.end(); ++it, ++index) {
      const std::string path = "executors[" + std::to_string(index) + "]";
      const YAML::Node node = *it;
      const YAML::Mark mark = node.IsNull() ? executors->mark : node.Mark();
      if (!node.IsMap()) {
        return Error(mark, path, "expected a mapping (name, uses, ...), got " + Describe(node));
      }
      GANTRY_ASSIGN_OR_RETURN(std::vector<Entry> step_entries, Entries(node, path, {}));
      FlowStep step;
      YAML::Node rest(YAML::NodeType::Map);
      step_marks.push_back(mark);
      name_marks.emplace_back();
      need_marks.emplace_back();
      for (const Entry& e : step_entries) {
        if (e.key == "external") {
          GANTRY_ASSIGN_OR_RETURN(step.external, ReadBool(e, Join(path, e.key)));
        }
      }
      if (step.external) {
        GANTRY_RETURN_IF_ERROR(ParseExternalStep(step_entries, path, mark, &step,
                                                 &name_marks.back(), &need_marks.back()));
        if (!name_marks.back()) {
          step.deployment.name = "executor" + std::to_string(index);  // Jina's default
        }
        names.push_back(step.deployment.name);
        needs.push_back(step.needs);
        options.executors.push_back(std::move(step));
        continue;
      }
      for (const Entry& e : step_entries) {
        const std::string key_path = Join(path, e.key);
        bool step_only = false;
        for (std::string_view key : kFlowStepOnlyKeys) {
          step_only = step_only || key == e.key;
        }
        if (!step_only) {
          if (e.key == "name") {
            name_marks.back() = e.mark;
          }
          rest.force_insert(e.key_node, e.value);
        } else if (e.key == "needs") {
          GANTRY_RETURN_IF_ERROR(ParseNeeds(e, key_path, &step.needs, &need_marks.back()));
        } else if (e.key == "external") {
          // `external: false`: an ordinary step.
        } else if (e.key == "shards") {
          GANTRY_ASSIGN_OR_RETURN(std::int64_t shards,
                                  ReadInt(e, key_path, internal::kReplicasRule));
          if (shards != 1) {
            return Error(e.mark, key_path, "not supported yet (each step has one shard)");
          }
        } else {
          return Error(e.key_node.Mark(), key_path, "not supported yet");
        }
      }
      Entry with{path, node, rest, mark};
      GANTRY_ASSIGN_OR_RETURN(step.deployment, ParseDeploymentWith(with, path));
      if (!name_marks.back()) {
        step.deployment.name = "executor" + std::to_string(index);  // Jina's default
      }
      for (const auto& [key, value] : env) {
        step.deployment.env.emplace(key, value);  // the step's own env wins
      }
      names.push_back(step.deployment.name);
      needs.push_back(step.needs);
      options.executors.push_back(std::move(step));
    }
    internal::FlowGraphResult graph = internal::ResolveFlowGraph(names, needs);
    if (graph.error) {
      const internal::FlowGraphError& error = *graph.error;
      YAML::Mark at = step_marks[error.step];
      if (error.key == "name" && name_marks[error.step]) {
        at = *name_marks[error.step];
      } else if (error.need && *error.need < need_marks[error.step].size()) {
        at = need_marks[error.step][*error.need];
      }
      return Error(at, error.Path(), error.message);
    }
    return options;
  }

 private:
  // A Flow step with `external: true` (Jina's form): it runs elsewhere, so
  // only where it is (host, port), its name and its needs mean anything.
  Status ParseExternalStep(const std::vector<Entry>& entries, const std::string& path,
                           const YAML::Mark& mark, FlowStep* step,
                           std::optional<YAML::Mark>* name_mark,
                           std::vector<YAML::Mark>* need_marks) const {
    constexpr std::string_view kExternalKeys[] = {"name", "host", "port", "needs", "external"};
    bool has_host = false;
    bool has_port = false;
    for (const Entry& e : entries) {
      const std::string key_path = Join(path, e.key);
      if (e.key == "name") {
        GANTRY_ASSIGN_OR_RETURN(step->deployment.name, ReadName(e, key_path));
        *name_mark = e.mark;
      } else if (e.key == "host") {
        GANTRY_ASSIGN_OR_RETURN(step->deployment.host, ReadName(e, key_path));
        has_host = true;
      } else if (e.key == "port") {
        GANTRY_ASSIGN_OR_RETURN(std::int64_t port, ReadInt(e, key_path, internal::kPortRule));
        if (port == 0) {
          return Error(e.mark, key_path,
                       "an external step needs the port it listens on (1 to 65535), got 0");
        }
        step->deployment.port = static_cast<int>(port);
        has_port = true;
      } else if (e.key == "needs") {
        GANTRY_RETURN_IF_ERROR(ParseNeeds(e, key_path, &step->needs, need_marks));
      } else if (e.key != "external") {
        return Error(e.key_node.Mark(), key_path,
                     "not used by an external step (it runs elsewhere); allowed keys: " +
                         JoinNames(kExternalKeys));
      }
    }
    if (!has_host) {
      return Error(mark, Join(path, "host"), "required key is missing for an external step");
    }
    if (!has_port) {
      return Error(mark, Join(path, "port"), "required key is missing for an external step");
    }
    return OkStatus();
  }

  Status ParseFlowWith(const Entry& with, FlowOptions* options,
                       std::map<std::string, std::string>* env) const {
    if (!with.value.IsMap()) {
      return Error(with.mark, "with", "expected a mapping, got " + Describe(with.value));
    }
    GANTRY_ASSIGN_OR_RETURN(std::vector<Entry> entries,
                            Entries(with.value, "with", internal::FlowWithKeys()));
    for (const Entry& e : entries) {
      std::string path = Join("with", e.key);
      if (e.key == "protocol") {
        // grpc, or a list holding only grpc; HTTP has a port of its own.
        YAML::Node protocol = e.value;
        if (protocol.IsSequence() && protocol.size() == 1) {
          protocol = protocol[0];
        }
        Entry item{e.key, e.key_node, protocol, e.mark};
        StatusOr<std::string> text = ReadName(item, path);
        if (!text.ok() || (*text != "grpc" && *text != "GRPC")) {
          return Error(e.mark, path,
                       "only grpc is supported (add `http_port` for HTTP/JSON next to it), got " +
                           Describe(e.value));
        }
      } else if (e.key == "env") {
        GANTRY_RETURN_IF_ERROR(ParseEnv(e, path, env));
      } else {
        const internal::OptionRow& row = *internal::FindOption(e.key);
        GANTRY_ASSIGN_OR_RETURN(internal::OptionValue value, ReadOption(row, e, path));
        row.flow.set(*options, value);
      }
    }
    return OkStatus();
  }

  // A scalar option by its row's type (core/option_table.h).
  StatusOr<internal::OptionValue> ReadOption(const internal::OptionRow& row, const Entry& e,
                                             const std::string& path) const {
    using internal::OptionType;
    using internal::OptionValue;
    switch (row.type) {
      case OptionType::kInt:
      case OptionType::kMilliseconds: {
        GANTRY_ASSIGN_OR_RETURN(std::int64_t n, ReadInt(e, path, *row.rule));
        return OptionValue(n);
      }
      case OptionType::kBool: {
        GANTRY_ASSIGN_OR_RETURN(bool b, ReadBool(e, path));
        return OptionValue(b);
      }
      case OptionType::kName:
      case OptionType::kPath:
      case OptionType::kLogLevel:
      case OptionType::kLogFormat: {
        GANTRY_ASSIGN_OR_RETURN(std::string text, row.type == OptionType::kName ? ReadName(e, path)
                                                  : row.type == OptionType::kPath
                                                      ? ReadPath(e, path)
                                                      : ReadText(e, path));
        if (row.type == OptionType::kLogLevel) {
          if (Status s = internal::CheckLogLevel(text); !s.ok()) {
            return Error(e.mark, path, s.message());
          }
        }
        if (row.check != nullptr) {
          if (Status s = row.check(text); !s.ok()) {
            return Error(e.mark, path, s.message());
          }
        }
        if (row.type == OptionType::kLogFormat) {
          if (Status s = internal::CheckLogFormat(text); !s.ok()) {
            return Error(e.mark, path, s.message());
          }
        }
        return OptionValue(std::move(text));
      }
      case OptionType::kOwnReader:
        break;
    }
    return InternalError(path + ": no reader for this key");
  }

  // `needs: name` or `needs: [a, b]`.
  Status ParseNeeds(const Entry& e, const std::string& path, std::vector<std::string>* needs,
                    std::vector<YAML::Mark>* marks) const {
    if (e.value.IsScalar()) {
      GANTRY_ASSIGN_OR_RETURN(std::string need, ReadName(e, path));
      needs->push_back(std::move(need));
      marks->push_back(e.mark);
      return OkStatus();
    }
    if (!e.value.IsSequence() || e.value.size() == 0) {
      return Error(e.mark, path,
                   "expected a step name or a non-empty list of them, got " +
                       (e.value.IsSequence() ? std::string("an empty list") : Describe(e.value)));
    }
    std::size_t index = 0;
    for (auto it = e.value.begin(); it != e.value.end(); ++it, ++index) {
      Entry item{e.key, e.key_node, *it, it->IsNull() ? e.mark : it->Mark()};
      GANTRY_ASSIGN_OR_RETURN(std::string need,
                              ReadName(item, path + "[" + std::to_string(index) + "]"));
      needs->push_back(std::move(need));
      marks->push_back(item.mark);
    }
    return OkStatus();
  }

  // "a mapping", "null", "\"two\"", "1.5": what a value was, for messages.
  static std::string Describe(const YAML::Node& node) {
    if (node.IsMap()) {
      return "a mapping";
    }
    if (node.IsSequence()) {
      return "a sequence";
    }
    if (node.IsNull() || !node.IsDefined()) {
      return "null";
    }
    return Quote(node.Scalar());
  }

  static std::string Got(const YAML::Node& node, const Scalar& scalar) {
    if (!node.IsScalar()) {
      return Describe(node);
    }
    return scalar.value.AsText() != nullptr ? Quote(scalar.text) : scalar.text;
  }

  // The entries of a mapping, rejecting duplicate keys, non-scalar keys and
  // (if `allowed` is not empty) keys not in `allowed`.
  StatusOr<std::vector<Entry>> Entries(const YAML::Node& map, std::string_view path,
                                       std::span<const std::string_view> allowed) const {
    std::vector<Entry> entries;
    // Key to its entry: a mapping of many keys is read in linear time.
    std::unordered_map<std::string, std::size_t> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      YAML::Node key = it->first;
      if (!key.IsScalar()) {
        return Error(key.Mark(), path, "expected a string key, got " + Describe(key));
      }
      if (entries.size() == kMaxValuesPerFile) {
        return Error(key.Mark(), path,
                     "more than " + std::to_string(kMaxValuesPerFile) + " keys in one mapping");
      }
      std::string name = key.Scalar();
      std::string key_path = Join(path, name);
      if (const auto [at, fresh] = seen.emplace(name, entries.size()); !fresh) {
        return Error(key.Mark(), key_path,
                     "duplicate key (first at line " +
                         std::to_string(entries[at->second].key_node.Mark().line + 1) + ")");
      }
      if (!allowed.empty()) {
        bool known = false;
        for (std::string_view a : allowed) {
          known = known || a == name;
        }
        if (!known) {
          return Error(key.Mark(), key_path, "unknown key; allowed keys: " + JoinNames(allowed));
        }
      }
      YAML::Node value = it->second;
      YAML::Mark mark = value.IsNull() ? key.Mark() : value.Mark();
      entries.push_back(Entry{std::move(name), key, value, mark});
    }
    return entries;
  }

  // Replaces every `${{ ENV.NAME }}` in `text`.
  StatusOr<std::string> Substitute(std::string_view text, const YAML::Mark& mark,
                                   std::string_view path) const {
    std::string out;
    std::size_t pos = 0;
    while (true) {
      std::size_t open = text.find("${{", pos);
      if (open == std::string_view::npos) {
        out += text.substr(pos);
        return out;
      }
      out += text.substr(pos, open - pos);
      std::size_t close = text.find("}}", open + 3);
      if (close == std::string_view::npos) {
        return Error(mark, path, "unterminated \"${{\" (expected ${{ ENV.NAME }})");
      }
      std::string_view expr = Trim(text.substr(open + 3, close - open - 3));
      if (!expr.starts_with("ENV.") || !IsEnvName(expr.substr(4))) {
        return Error(mark, path,
                     "unsupported substitution " + Quote(text.substr(open, close + 2 - open)) +
                         " (only ${{ ENV.NAME }} is supported)");
      }
      std::string name(expr.substr(4));
      const char* value = std::getenv(name.c_str());
      if (value == nullptr) {
        return Error(mark, path, "environment variable " + name + " is not set");
      }
      out += value;
      pos = close + 2;
    }
  }

  // A scalar (or null) node, substituted and typed by its tag: quoted and
  // !!str scalars stay text, plain ones are resolved as YAML 1.2 does.
  StatusOr<Scalar> ReadScalar(const YAML::Node& node, const YAML::Mark& mark,
                              std::string_view path) const {
    if (node.IsNull()) {
      return Scalar{Value(), "null"};
    }
    if (!node.IsScalar()) {
      return Error(mark, path, "expected a scalar, got " + Describe(node));
    }
    GANTRY_ASSIGN_OR_RETURN(std::string text, Substitute(node.Scalar(), mark, path));
    StatusOr<Value> value = internal::TypeYamlScalar(text, node.Tag());
    if (!value.ok()) {
      return Error(mark, path, value.status().message());
    }
    return Scalar{std::move(value).value(), std::move(text)};
  }

  // `depth` and the file's value budget bound what YAML aliases can build:
  // an alias inside the node it names is a cycle to yaml-cpp (found by the
  // config fuzzer: unbounded recursion), and aliases of aliases expand
  // exponentially.
  StatusOr<Value> ToValue(const YAML::Node& node, const YAML::Mark& mark, const std::string& path,
                          int depth = 0) const {
    if (depth > internal::kMaxNestingDepth) {
      return Error(mark, path,
                   "nested deeper than " + std::to_string(internal::kMaxNestingDepth) +
                       " levels (a YAML alias inside the node it names?)");
    }
    if (++values_read_ > kMaxValuesPerFile) {
      return Error(mark, path,
                   "more than " + std::to_string(kMaxValuesPerFile) +
                       " values in the file once YAML aliases are expanded");
    }
    if (node.IsMap()) {
      GANTRY_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(node, path, {}));
      Value::Dict dict;
      for (const Entry& e : entries) {
        GANTRY_ASSIGN_OR_RETURN(Value value,
                                ToValue(e.value, e.mark, Join(path, e.key), depth + 1));
        dict.emplace(e.key, std::move(value));
      }
      return Value(std::move(dict));
    }
    if (node.IsSequence()) {
      Value::List items;
      std::size_t index = 0;
      for (auto it = node.begin(); it != node.end(); ++it, ++index) {
        GANTRY_ASSIGN_OR_RETURN(Value item,
                                ToValue(*it, it->IsNull() ? mark : it->Mark(),
                                        path + "[" + std::to_string(index) + "]", depth + 1));
        items.push_back(std::move(item));
      }
      return Value(std::move(items));
    }
    GANTRY_ASSIGN_OR_RETURN(Scalar scalar, ReadScalar(node, mark, path));
    return std::move(scalar.value);
  }

  // Any scalar as text (numbers as written), after substitution.
  StatusOr<std::string> ReadText(const Entry& e, std::string_view path) const {
    if (!e.value.IsScalar()) {
      return Error(e.mark, path, "expected a string, got " + Describe(e.value));
    }
    return Substitute(e.value.Scalar(), e.mark, path);
  }

  StatusOr<std::string> ReadName(const Entry& e, std::string_view path) const {
    GANTRY_ASSIGN_OR_RETURN(std::string text, ReadText(e, path));
    if (text.empty()) {
      return Error(e.mark, path, "expected a non-empty string");
    }
    return text;
  }

  // A file path (TLS files): relative ones resolve against the YAML file's
  // directory, as `uses:` does. Whether it exists is checked at start.
  StatusOr<std::string> ReadPath(const Entry& e, std::string_view path) const {
    GANTRY_ASSIGN_OR_RETURN(std::string text, ReadName(e, path));
    std::filesystem::path file(text);
    if (file.is_relative() && !base_dir_.empty()) {
      file = base_dir_ / file;
    }
    return file.string();
  }

  // An integer within `rule` (core/deployment_rules.h); a value of another
  // type is reported in the rule's words too.
  StatusOr<std::int64_t> ReadInt(const Entry& e, std::string_view path, const IntRule& rule) const {
    GANTRY_ASSIGN_OR_RETURN(Scalar scalar, ReadScalar(e.value, e.mark, path));
    const std::int64_t* i = scalar.value.AsInt();
    if (i == nullptr || !internal::InRange(rule, *i)) {
      return Error(e.mark, path, internal::ExpectedGot(rule, Got(e.value, scalar)));
    }
    return *i;
  }

  StatusOr<bool> ReadBool(const Entry& e, std::string_view path) const {
    GANTRY_ASSIGN_OR_RETURN(Scalar scalar, ReadScalar(e.value, e.mark, path));
    const bool* b = scalar.value.AsBool();
    if (b == nullptr) {
      return Error(e.mark, path, "expected true or false, got " + Got(e.value, scalar));
    }
    return *b;
  }

  // A mapping (or an empty value) as a Value::Dict.
  StatusOr<Value::Dict> ReadDict(const Entry& e, const std::string& path) const {
    if (e.value.IsNull()) {
      return Value::Dict{};
    }
    if (!e.value.IsMap()) {
      return Error(e.mark, path, "expected a mapping, got " + Describe(e.value));
    }
    GANTRY_ASSIGN_OR_RETURN(Value value, ToValue(e.value, e.mark, path));
    return std::move(*value.AsMutableDict());
  }

  // `with:` / `uses_with:`: constructor arguments; `device` is checked here
  // so that a bad one is reported where it was written.
  StatusOr<Value::Dict> ParseWith(const Entry& e, const std::string& path) const {
    GANTRY_ASSIGN_OR_RETURN(Value::Dict with, ReadDict(e, path));
    auto device = with.find("device");
    if (device == with.end()) {
      return with;
    }
    YAML::Mark mark = e.mark;
    for (auto it = e.value.begin(); it != e.value.end(); ++it) {
      if (it->first.Scalar() == "device") {
        mark = it->second.IsNull() ? it->first.Mark() : it->second.Mark();
      }
    }
    if (Status s = internal::CheckDeviceValue(device->second); !s.ok()) {
      return Error(mark, Join(path, "device"), s.message());
    }
    return with;
  }

  StatusOr<Value::Dict> ParseMetas(const Entry& e, const std::string& path) const {
    if (e.value.IsNull()) {
      return Value::Dict{};
    }
    if (!e.value.IsMap()) {
      return Error(e.mark, path, "expected a mapping, got " + Describe(e.value));
    }
    GANTRY_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(e.value, path, kMetasKeys));
    Value::Dict metas;
    for (const Entry& m : entries) {
      std::string key_path = Join(path, m.key);
      if (m.key == "keywords" || m.key == "libs") {
        if (!m.value.IsSequence()) {
          return Error(m.mark, key_path, "expected a list of strings, got " + Describe(m.value));
        }
        Value::List items;
        std::size_t index = 0;
        for (auto it = m.value.begin(); it != m.value.end(); ++it, ++index) {
          Entry item{m.key, m.key_node, *it, it->IsNull() ? m.mark : it->Mark()};
          GANTRY_ASSIGN_OR_RETURN(std::string text,
                                  ReadText(item, key_path + "[" + std::to_string(index) + "]"));
          // Plugin paths, like `uses:`, are relative to this file's folder;
          // a bare name that is no file there is left to dlopen's search.
          if (m.key == "libs" && std::filesystem::path(text).is_relative() && !base_dir_.empty() &&
              (text.find('/') != std::string::npos || std::filesystem::exists(base_dir_ / text))) {
            text = (base_dir_ / text).string();
          }
          items.emplace_back(std::move(text));
        }
        metas.emplace(m.key, Value(std::move(items)));
      } else {
        GANTRY_ASSIGN_OR_RETURN(std::string text, ReadText(m, key_path));
        metas.emplace(m.key, Value(std::move(text)));
      }
    }
    return metas;
  }

  // `uses: exec.yml`: the file is loaded now, so workers never need it.
  StatusOr<ExecutorConfig> LoadUsesFile(const Entry& e, const std::string& uses,
                                        std::string_view prefix) const {
    std::filesystem::path path(uses);
    if (path.is_relative() && !base_dir_.empty()) {
      path = base_dir_ / path;
    }
    StatusOr<ExecutorConfig> config = LoadExecutorConfig(path.string());
    if (!config.ok()) {
      // Reported as a fault of this file, whatever the referenced file's code.
      return Error(e.mark, Join(prefix, "uses"), config.status().message());
    }
    return config;
  }

  // `with:` of a Deployment, or (with `prefix` "executors[i]") one step of
  // a Flow, whose step-only keys the caller has taken out.
  StatusOr<DeploymentOptions> ParseDeploymentWith(const Entry& with,
                                                  std::string_view prefix = "with") const {
    GANTRY_ASSIGN_OR_RETURN(std::vector<Entry> entries,
                            Entries(with.value, prefix, internal::DeploymentWithKeys()));
    DeploymentOptions options;
    options.config_dir = ConfigDir();
    // The executor `uses` names by a mapping or a file, joined to the
    // options once they are all read (what they set wins).
    std::optional<ExecutorConfig> executor;
    bool has_uses = false;
    // Where restart_backoff_max was written, for the check against _initial.
    std::optional<YAML::Mark> backoff_max_mark;
    for (const Entry& e : entries) {
      std::string path = Join(prefix, e.key);
      if (e.key == "uses") {
        has_uses = true;
        if (e.value.IsMap()) {
          GANTRY_ASSIGN_OR_RETURN(executor, ParseExecutor(e.value, e.mark, path));
          continue;
        }
        if (!e.value.IsScalar()) {
          return Error(
              e.mark, path,
              "expected an executor type, a .yml path or a mapping, got " + Describe(e.value));
        }
        GANTRY_ASSIGN_OR_RETURN(std::string uses, ReadName(e, path));
        if (internal::KindOfUses(uses) == internal::UsesKind::kExecutorFile) {
          GANTRY_ASSIGN_OR_RETURN(executor, LoadUsesFile(e, uses, prefix));
          // The executor file's `with:` paths are relative to its folder.
          options.config_dir.clear();
        } else {
          options.uses = std::move(uses);
        }
      } else if (e.key == "uses_with") {
        GANTRY_ASSIGN_OR_RETURN(options.uses_with, ParseWith(e, path));
      } else if (e.key == "uses_metas") {
        GANTRY_ASSIGN_OR_RETURN(options.uses_metas, ParseMetas(e, path));
      } else if (e.key == "models") {
        GANTRY_RETURN_IF_ERROR(ParseServedModels(e, path, &options.models));
      } else if (e.key == "env") {
        GANTRY_RETURN_IF_ERROR(ParseEnv(e, path, &options.env));
      } else if (e.key == "volumes") {
        GANTRY_RETURN_IF_ERROR(ParseVolumes(e, path, &options.volumes));
      } else if (e.key == "gpus") {
        GANTRY_ASSIGN_OR_RETURN(options.gpus, ParseGpus(e, path));
      } else if (e.key == "uses_dynamic_batching") {
        GANTRY_ASSIGN_OR_RETURN(options.uses_dynamic_batching, ParseBatching(e, path));
      } else {
        const internal::OptionRow& row = *internal::FindOption(e.key);
        GANTRY_ASSIGN_OR_RETURN(internal::OptionValue value, ReadOption(row, e, path));
        row.deployment.set(options, value);
        if (e.key == "restart_backoff_max") {
          backoff_max_mark = e.mark;
        }
      }
    }
    if (!has_uses) {
      return Error(with.mark, Join(prefix, "uses"), "required key is missing");
    }
    if (Status s = internal::CheckServerTlsOptions(options.tls); !s.ok()) {
      return Error(with.mark, prefix, s.message());
    }
    if (Status s = internal::CheckRestartBackoff(options.restart_backoff_initial.count(),
                                                 options.restart_backoff_max.count());
        !s.ok()) {
      return Error(backoff_max_mark.value_or(with.mark), Join(prefix, "restart_backoff_max"),
                   s.message());
    }
    if (executor.has_value()) {
      internal::MergeExecutorConfig(std::move(executor).value(), options);
    }
    return options;
  }

  // `gpus: 1`, `0.5`, `all`, `"0,2"` or `[0, 2]`: YAML's types decide the
  // form (a quoted "2" is not a number), internal::ParseGpuSpec the rule;
  // the Deployment checks it against the machine's GPUs at start.
  StatusOr<std::string> ParseGpus(const Entry& e, const std::string& path) const {
    constexpr std::string_view kExpected =
        "expected a number of GPUs per replica (1, 0.5), \"all\", or a list of GPU indices or "
        "UUIDs (\"0,2\" or [0, 2])";
    std::string gpus;
    // What a refusal by the rule says after kExpected.
    std::string got;
    if (e.value.IsSequence()) {
      std::size_t index = 0;
      for (auto it = e.value.begin(); it != e.value.end(); ++it, ++index) {
        Entry item{e.key, e.key_node, *it, it->IsNull() ? e.mark : it->Mark()};
        GANTRY_ASSIGN_OR_RETURN(std::string id,
                                ReadName(item, path + "[" + std::to_string(index) + "]"));
        gpus += id + ",";
      }
      if (gpus.empty()) {
        return Error(e.mark, path, std::string(kExpected) + ", got an empty list");
      }
      // "3," keeps a one-GPU list a list; longer ones drop the last comma.
      if (gpus.find(',') != gpus.size() - 1) {
        gpus.pop_back();
      }
      got = ", got a list that names no GPU";
    } else {
      GANTRY_ASSIGN_OR_RETURN(Scalar scalar, ReadScalar(e.value, e.mark, path));
      if (scalar.value.is_none()) {
        return std::string();
      }
      const std::string* text = scalar.value.AsText();
      if (const std::int64_t* i = scalar.value.AsInt()) {
        gpus = std::to_string(*i);
        got = ", got " + scalar.text;
      } else if (scalar.value.AsFloat() != nullptr) {
        gpus = scalar.text;  // as written: "0.5"
        got = ", got " + scalar.text + " (a replica takes whole GPUs or a fraction below 1)";
      } else if (text == nullptr || text->empty()) {
        return Error(e.mark, path, std::string(kExpected) + ", got " + Got(e.value, scalar));
      } else if (*text != "all" && text->find(',') == std::string::npos) {
        return Error(e.mark, path, std::string(kExpected) + ", got " + Quote(*text));
      } else {
        gpus = *text;
        got = ", got " + Quote(*text);
      }
    }
    if (!internal::ParseGpuSpec(gpus).ok()) {
      return Error(e.mark, path, std::string(kExpected) + got);
    }
    return gpus;
  }

  // `dynamic_batching:` / `uses_dynamic_batching:` in Jina's shape:
  // {"/endpoint" or handler: {preferred_batch_size: 32, timeout: 10}}.
  StatusOr<std::map<std::string, DynamicBatching>> ParseBatching(const Entry& e,
                                                                 const std::string& path) const {
    std::map<std::string, DynamicBatching> out;
    if (e.value.IsNull()) {
      return out;
    }
    if (!e.value.IsMap()) {
      return Error(e.mark, path, "expected a mapping, got " + Describe(e.value));
    }
    GANTRY_ASSIGN_OR_RETURN(std::vector<Entry> endpoints, Entries(e.value, path, {}));
    for (const Entry& ep : endpoints) {
      std::string ep_path = path + "[" + Quote(ep.key) + "]";
      if (!ep.value.IsMap()) {
        return Error(ep.mark, ep_path,
                     "expected a mapping such as {preferred_batch_size: 32, timeout: 10}, got " +
                         Describe(ep.value));
      }
      GANTRY_ASSIGN_OR_RETURN(std::vector<Entry> keys, Entries(ep.value, ep_path, kBatchingKeys));
      DynamicBatching batching;
      for (const Entry& k : keys) {
        std::string key_path = Join(ep_path, k.key);
        const auto int_key =
            std::find_if(std::begin(kBatchingIntKeys), std::end(kBatchingIntKeys),
                         [&k](const BatchingIntKey& known) { return known.key == k.key; });
        if (int_key != std::end(kBatchingIntKeys)) {
          GANTRY_ASSIGN_OR_RETURN(std::int64_t v, ReadInt(k, key_path, *int_key->rule));
          batching.*(int_key->field) = static_cast<int>(v);
        } else if (k.key == "flush_all" || k.key == "use_dynamic_batching" ||
                   k.key == "allow_timeout_override") {
          GANTRY_ASSIGN_OR_RETURN(Scalar scalar, ReadScalar(k.value, k.mark, key_path));
          const bool* b = scalar.value.AsBool();
          if (b == nullptr) {
            return Error(k.mark, key_path, "expected true or false, got " + Got(k.value, scalar));
          }
          (k.key == "flush_all"              ? batching.flush_all
           : k.key == "use_dynamic_batching" ? batching.enabled
                                             : batching.allow_timeout_override) = *b;
        } else if (k.key == "timeout_action") {
          // Triton's enum names, in any case.
          GANTRY_ASSIGN_OR_RETURN(Scalar scalar, ReadScalar(k.value, k.mark, key_path));
          std::string action = scalar.text;
          std::transform(action.begin(), action.end(), action.begin(),
                         [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
          if (action == "reject") {
            batching.timeout_action = DynamicBatching::TimeoutAction::kReject;
          } else if (action == "delay") {
            batching.timeout_action = DynamicBatching::TimeoutAction::kDelay;
          } else {
            return Error(k.mark, key_path, "expected REJECT or DELAY, got " + Got(k.value, scalar));
          }
        } else {
          // custom_metric is a Python callable: nothing to carry it here.
          return Error(k.key_node.Mark(), key_path, "not supported (Python callables only)");
        }
      }
      out.emplace(ep.key, batching);
    }
    return out;
  }

  Status ParseEnv(const Entry& e, const std::string& path,
                  std::map<std::string, std::string>* env) const {
    if (e.value.IsNull()) {
      return OkStatus();
    }
    if (!e.value.IsMap()) {
      return Error(e.mark, path, "expected a mapping, got " + Describe(e.value));
    }
    GANTRY_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(e.value, path, {}));
    for (const Entry& v : entries) {
      std::string key_path = Join(path, v.key);
      if (Status s = internal::CheckEnvName(v.key); !s.ok()) {
        return Error(v.key_node.Mark(), key_path, s.message());
      }
      if (!v.value.IsScalar()) {
        return Error(v.mark, key_path,
                     "expected a string, number or bool, got " + Describe(v.value));
      }
      GANTRY_ASSIGN_OR_RETURN(std::string text, ReadText(v, key_path));
      (*env)[v.key] = std::move(text);
    }
    return OkStatus();
  }

  // `volumes:` of a container replica: one "SOURCE:TARGET[:MODE]" or a list;
  // relative SOURCE paths are taken from the file's folder.
  Status ParseVolumes(const Entry& e, const std::string& path,
                      std::vector<std::string>* volumes) const {
    std::vector<std::pair<YAML::Node, std::string>> items;
    if (e.value.IsScalar()) {
      items.emplace_back(e.value, path);
    } else if (e.value.IsSequence()) {
      for (std::size_t i = 0; i < e.value.size(); ++i) {
        items.emplace_back(e.value[i], path + "[" + std::to_string(i) + "]");
      }
    } else {
      return Error(e.mark, path,
                   "expected SOURCE:TARGET[:MODE] or a list of them, got " + Describe(e.value));
    }
    if (items.size() > internal::kMaxVolumes) {
      return Error(e.mark, path, "more than " + std::to_string(internal::kMaxVolumes) + " volumes");
    }
    for (const auto& [node, item_path] : items) {
      if (!node.IsScalar()) {
        return Error(node.Mark(), item_path,
                     "expected SOURCE:TARGET[:MODE], got " + Describe(node));
      }
      const std::string& text = node.Scalar();
      if (Status s = internal::CheckVolumeSpec(text); !s.ok()) {
        return Error(node.Mark(), item_path, s.message());
      }
      volumes->push_back(internal::AbsoluteVolumeSpec(text, base_dir_.string()));
    }
    return OkStatus();
  }

  // `{model name: /endpoint}` for the OpenAI embeddings API.
  Status ParseServedModels(const Entry& e, const std::string& path,
                           std::map<std::string, std::string>* models) const {
    if (!e.value.IsMap()) {
      return Error(e.mark, path,
                   "expected a mapping of model names to endpoints ({all-MiniLM-L6-v2: /encode}), "
                   "got " +
                       Describe(e.value));
    }
    GANTRY_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(e.value, path, {}));
    for (const Entry& v : entries) {
      std::string key_path = Join(path, v.key);
      GANTRY_ASSIGN_OR_RETURN(std::string endpoint, ReadText(v, key_path));
      if (Status s = internal::CheckServedModel(v.key, endpoint); !s.ok()) {
        return Error(v.mark, key_path, s.message());
      }
      (*models)[v.key] = std::move(endpoint);
    }
    return OkStatus();
  }

  // Far above any hand-written file; see ToValue.
  static constexpr std::size_t kMaxValuesPerFile = 100000;

  // The folder relative paths in `with:` resolve against (absolute); empty
  // for text that did not come from a file.
  std::string ConfigDir() const {
    if (source_.empty() || source_.front() == '<') {
      return {};
    }
    std::error_code error;
    std::filesystem::path dir = std::filesystem::absolute(
        base_dir_.empty() ? std::filesystem::path(".") : base_dir_, error);
    return error ? base_dir_.string() : dir.lexically_normal().string();
  }

  std::string source_;
  std::filesystem::path base_dir_;
  mutable std::size_t values_read_ = 0;  // by ToValue, against kMaxValuesPerFile
};

StatusOr<std::string> ReadFile(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    int err = errno;
    std::string message = path + ": cannot open: " + std::strerror(err);
    if (err == ENOENT || err == ENOTDIR) {
      return NotFoundError(std::move(message));
    }
    return InvalidArgumentError(std::move(message));
  }
  std::string text;
  char buffer[65536];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) {
    text.append(buffer, n);
  }
  int err = std::ferror(file) ? errno : 0;
  std::fclose(file);
  if (err != 0) {
    return InvalidArgumentError(path + ": cannot read: " + std::strerror(err));
  }
  return text;
}

// Relative `uses:` paths in text that did not come from a file resolve
// against the working directory.
std::filesystem::path BaseDir(std::string_view source) {
  if (source.empty() || source.front() == '<') {
    return {};
  }
  return std::filesystem::path(source).parent_path();
}

// yaml-cpp reports some problems by throwing; none may escape.
template <typename F>
auto Guard(std::string_view source, F&& parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string(source) + ":" + std::to_string(e.mark.line + 1) + ":" +
                                std::to_string(e.mark.column + 1) + ": " + e.msg);
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string(source) + ": " + e.what());
  }
}

}  // namespace

StatusOr<ExecutorConfig> ParseExecutorConfig(std::string_view yaml, std::string_view source) {
  return Guard(source, [&]() -> StatusOr<ExecutorConfig> {
    Parser parser(std::string(source), BaseDir(source));
    GANTRY_ASSIGN_OR_RETURN(YAML::Node root, parser.LoadDocument(yaml));
    return parser.ParseExecutor(root, root.Mark(), "");
  });
}

StatusOr<ExecutorConfig> LoadExecutorConfig(const std::string& path) {
  GANTRY_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseExecutorConfig(text, path);
}

StatusOr<DeploymentOptions> ParseDeploymentConfig(std::string_view yaml, std::string_view source) {
  return Guard(source, [&]() -> StatusOr<DeploymentOptions> {
    Parser parser(std::string(source), BaseDir(source));
    GANTRY_ASSIGN_OR_RETURN(YAML::Node root, parser.LoadDocument(yaml));
    return parser.ParseDeployment(root);
  });
}

StatusOr<DeploymentOptions> LoadDeploymentConfig(const std::string& path) {
  GANTRY_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseDeploymentConfig(text, path);
}

StatusOr<FlowOptions> ParseFlowConfig(std::string_view yaml, std::string_view source) {
  return Guard(source, [&]() -> StatusOr<FlowOptions> {
    Parser parser(std::string(source), BaseDir(source));
    GANTRY_ASSIGN_OR_RETURN(YAML::Node root, parser.LoadDocument(yaml));
    return parser.ParseFlow(root);
  });
}

StatusOr<FlowOptions> LoadFlowConfig(const std::string& path) {
  GANTRY_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseFlowConfig(text, path);
}

StatusOr<DeploymentOrFlow> ParseDeploymentOrFlowConfig(std::string_view yaml,
                                                       std::string_view source) {
  return Guard(source, [&]() -> StatusOr<DeploymentOrFlow> {
    Parser parser(std::string(source), BaseDir(source));
    GANTRY_ASSIGN_OR_RETURN(YAML::Node root, parser.LoadDocument(yaml));
    const YAML::Node jtype = root["jtype"];
    if (jtype.IsScalar() && jtype.Scalar() == "Flow") {
      GANTRY_ASSIGN_OR_RETURN(FlowOptions flow, parser.ParseFlow(root));
      return DeploymentOrFlow(std::move(flow));
    }
    GANTRY_ASSIGN_OR_RETURN(DeploymentOptions deployment, parser.ParseDeployment(root));
    return DeploymentOrFlow(std::move(deployment));
  });
}

StatusOr<DeploymentOrFlow> LoadDeploymentOrFlowConfig(const std::string& path) {
  GANTRY_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseDeploymentOrFlowConfig(text, path);
}

}  // namespace gantry
