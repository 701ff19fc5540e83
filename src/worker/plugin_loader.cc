#include "worker/plugin_loader.h"

#include <dlfcn.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

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
  // Never dlclose: executors and their registrars live as long as the process.
  spdlog::info("loaded executor plugin {}", path);
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
