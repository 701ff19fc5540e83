// The process-wide executor registry, filled by GANTRY_REGISTER_EXECUTOR
// during static initialisation and read-only afterwards.
#include "core/registry.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <utility>

namespace gantry {

std::string ExecutorContext::ResolvePath(std::string_view path) const {
  const std::filesystem::path file(path);
  if (file.is_absolute() || config_dir.empty() || path.empty()) {
    return std::string(path);
  }
  return (std::filesystem::path(config_dir) / file).lexically_normal().string();
}

namespace internal {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, ExecutorType, std::less<>> types;
};

// Function-local so that registrars in any translation unit find it
// constructed, whatever the static initialisation order.
Registry& GlobalRegistry() {
  static Registry* registry = new Registry();  // never destroyed: used at exit
  return *registry;
}

struct RefusedRegistrations {
  std::mutex mutex;
  std::vector<std::string> messages;
};

RefusedRegistrations& GlobalRefused() {
  static RefusedRegistrations* refused = new RefusedRegistrations();  // used at exit too
  return *refused;
}

}  // namespace

std::vector<std::string> TakeRefusedRegistrations() {
  RefusedRegistrations& refused = GlobalRefused();
  std::lock_guard lock(refused.mutex);
  return std::exchange(refused.messages, {});
}

void RegisterExecutorType(ExecutorType type) {
  Registry& registry = GlobalRegistry();
  std::lock_guard lock(registry.mutex);
  auto it = registry.types.find(type.name);
  if (it != registry.types.end()) {
    // Two executors with one name is a build mistake; fail before main().
    std::fprintf(stderr,
                 "gantry: executor type '%s' is registered twice: in %s and in %s; "
                 "give one of them another name\n",
                 type.name.c_str(), it->second.source_file.c_str(), type.source_file.c_str());
    std::abort();
  }
  std::string name = type.name;
  registry.types.emplace(std::move(name), std::move(type));
}

const ExecutorType* FindExecutorType(std::string_view name) {
  Registry& registry = GlobalRegistry();
  std::lock_guard lock(registry.mutex);
  auto it = registry.types.find(name);
  return it == registry.types.end() ? nullptr : &it->second;
}

std::vector<std::string> RegisteredExecutorNames() {
  Registry& registry = GlobalRegistry();
  std::lock_guard lock(registry.mutex);
  std::vector<std::string> names;
  for (const auto& [name, type] : registry.types) {
    names.push_back(name);
  }
  return names;
}

Status UnknownExecutorError(std::string_view name) {
  std::string known;
  for (const std::string& n : RegisteredExecutorNames()) {
    known += known.empty() ? "" : ", ";
    known += n;
  }
  return NotFoundError("unknown executor type (jtype) '" + std::string(name) +
                       "'; registered types: " + (known.empty() ? "(none)" : known));
}

}  // namespace internal

std::vector<ExecutorTypeInfo> RegisteredExecutors() {
  std::vector<ExecutorTypeInfo> out;
  for (const std::string& name : internal::RegisteredExecutorNames()) {
    const internal::ExecutorType* type = internal::FindExecutorType(name);
    ExecutorTypeInfo info;
    info.name = type->name;
    info.source_file = type->source_file;
    info.handlers_on_receiving_thread = type->handlers_on_receiving_thread;
    for (const internal::Route& route : type->routes()) {
      for (const std::string& endpoint : route.endpoints) {
        info.endpoints.emplace_back(endpoint, route.method_name);
      }
    }
    out.push_back(std::move(info));
  }
  return out;
}

bool IsExecutorRegistered(std::string_view name) {
  return internal::FindExecutorType(name) != nullptr;
}

}  // namespace gantry

extern "C" bool gantry_accept_executor_abi(const char* abi_version, const char* source_file) {
  if (abi_version != nullptr && std::strcmp(abi_version, GANTRY_PLUGIN_ABI_VERSION) == 0) {
    return true;
  }
  gantry::internal::RefusedRegistrations& refused = gantry::internal::GlobalRefused();
  std::lock_guard lock(refused.mutex);
  refused.messages.push_back(std::string(source_file != nullptr ? source_file : "(unknown file)") +
                             " was compiled against Gantry " +
                             (abi_version != nullptr ? abi_version : "(unknown)") +
                             ", this program is Gantry " GANTRY_VERSION_STRING);
  return false;
}
