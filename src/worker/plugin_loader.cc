#include "worker/plugin_loader.h"

#include <dlfcn.h>
#include <gantry/version.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/registry.h"

namespace gantry::internal {

Status LoadExecutorPlugin(const std::string& path, const std::string& subject) {
  if (path.empty()) {
    return InvalidArgumentError(subject + ": empty plugin library path");
  }
  // dlopen searches the library path for names without a slash; a file that
  // exists relative to the working directory is meant literally.
  std::string resolved = path;
  if (path.find('/') == std::string::npos && ::access(path.c_str(), F_OK) == 0) {
    resolved = "./" + path;
  }
  ::dlerror();
  void* handle = ::dlopen(resolved.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return FailedPreconditionError(subject + ": cannot load executor plugin '" + path +
                                   "': " + (why != nullptr ? why : "unknown dlopen error"));
  }
  // Never dlclose: executors and their registrars live as long as the
  // process. A plugin whose version differs was not registered (its
  // registrars asked gantry_accept_executor_abi first), so it is inert.
  std::vector<std::string> refused = TakeRefusedRegistrations();
  const auto* plugin_abi = static_cast<const char*>(::dlsym(handle, "gantry_plugin_abi_version"));
  if (plugin_abi == nullptr) {
    spdlog::warn("{}: plugin '{}' exports no gantry_plugin_abi_version: it registers no executor",
                 subject, path);
  } else if (std::strcmp(plugin_abi, GANTRY_PLUGIN_ABI_VERSION) != 0 || !refused.empty()) {
    return FailedPreconditionError(
        subject + ": executor plugin '" + path + "' was built against Gantry " + plugin_abi +
        ", this worker is Gantry " GANTRY_VERSION_STRING " (ABI " GANTRY_PLUGIN_ABI_VERSION
        "); rebuild the plugin against this Gantry" +
        (refused.empty() ? std::string() : " (refused: " + refused.front() + ")"));
  }
  spdlog::info("loaded executor plugin {} (Gantry ABI {})", path,
               plugin_abi != nullptr ? plugin_abi : "none");
  return OkStatus();
}

Status LoadExecutorPlugins(const Value::Dict& metas) {
  auto it = metas.find("libs");
  if (it == metas.end() || it->second.is_none()) {
    return OkStatus();
  }
  const Value& libs = it->second;
  if (const std::string* one = libs.AsText(); one != nullptr) {
    return LoadExecutorPlugin(*one, "metas.libs");
  }
  const Value::List* list = libs.AsList();
  if (list == nullptr) {
    return InvalidArgumentError("metas.libs: expected a list of library paths, got " +
                                libs.DebugString());
  }
  for (std::size_t i = 0; i < list->size(); ++i) {
    std::string subject = "metas.libs[" + std::to_string(i) + "]";
    const std::string* path = (*list)[i].AsText();
    if (path == nullptr) {
      return InvalidArgumentError(subject + ": expected a library path, got " +
                                  (*list)[i].DebugString());
    }
    GANTRY_RETURN_IF_ERROR(LoadExecutorPlugin(*path, subject));
  }
  return OkStatus();
}

}  // namespace gantry::internal
