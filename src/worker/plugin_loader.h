// Executor plugins: shared libraries named in an executor's `metas.libs`
// (or `gantry executor --lib`), the counterpart of Jina's py_modules.
//
// A plugin is a shared library built from executor sources that use
// GANTRY_REGISTER_EXECUTOR. It is loaded with RTLD_NOW | RTLD_GLOBAL before
// the executor type is looked up, so its static registrars run then. The
// plugin must resolve gantry's symbols (RegisterExecutorType, Doc, Value,
// ...) from the worker program, which therefore exports them (gantry-worker
// is linked with ENABLE_EXPORTS); the process then has exactly one registry,
// even when a plugin also carries its own copy of gantry_core, because the
// program's definitions come first in the global lookup scope.
#ifndef GANTRY_WORKER_PLUGIN_LOADER_H_
#define GANTRY_WORKER_PLUGIN_LOADER_H_

#include <gantry/document.h>
#include <gantry/status.h>

#include <string>

namespace gantry::internal {

// Loads every library listed in metas["libs"] (a list of paths), in order.
// Libraries stay loaded for the life of the process. Errors name the key,
// the path and dlerror()'s text.
Status LoadExecutorPlugins(const Value::Dict& metas);

// Loads one library; `subject` prefixes errors ("metas.libs[0]").
Status LoadExecutorPlugin(const std::string& path, const std::string& subject);

}  // namespace gantry::internal

#endif  // GANTRY_WORKER_PLUGIN_LOADER_H_
