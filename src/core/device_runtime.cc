#include <gantry/device_runtime.h>

#include <algorithm>
#include <mutex>
#include <vector>

namespace gantry {
namespace {

struct Loaders {
  std::mutex mutex;
  std::vector<DeviceRuntimeLoader> loaders;
};

Loaders& GetLoaders() {
  static Loaders* const loaders = new Loaders();  // never destroyed: static initialisers use it
  return *loaders;
}

}  // namespace

bool RegisterDeviceRuntimeLoader(DeviceRuntimeLoader loader) {
  Loaders& all = GetLoaders();
  std::lock_guard lock(all.mutex);
  if (loader != nullptr &&
      std::find(all.loaders.begin(), all.loaders.end(), loader) == all.loaders.end()) {
    all.loaders.push_back(loader);
  }
  return true;
}

Status LoadDeviceRuntimes(const Device& device) {
  std::vector<DeviceRuntimeLoader> loaders;
  {
    Loaders& all = GetLoaders();
    std::lock_guard lock(all.mutex);
    loaders = all.loaders;
  }
  // Outside the lock: a loader may take long (dlopen of large libraries)
  // and may itself register more loaders from its static initialisers.
  for (DeviceRuntimeLoader loader : loaders) {
    GANTRY_RETURN_IF_ERROR(loader(device));
  }
  return OkStatus();
}

}  // namespace gantry
