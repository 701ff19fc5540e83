#include <gantry/device_report.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

namespace gantry {
namespace {

struct Registry {
  std::mutex mutex;
  std::uint64_t next_id = 1;
  std::map<std::uint64_t, std::pair<std::string, TensorLister>> listers;
};

Registry& GetRegistry() {
  static Registry* const registry = new Registry();  // never destroyed: used at exit
  return *registry;
}

void Unregister(std::uint64_t id) {
  if (id == 0) {
    return;
  }
  Registry& registry = GetRegistry();
  std::lock_guard lock(registry.mutex);
  registry.listers.erase(id);
}

bool Matches(const Device& expected, const std::string& device, const std::string& first) {
  if (expected.is_auto()) {
    return device == first;
  }
  if (expected.is_cpu()) {
    return device == "cpu";
  }
  if (!expected.has_index()) {
    return device.starts_with("cuda");
  }
  return device == expected.ToString();
}

}  // namespace

DeviceCheckRegistration::~DeviceCheckRegistration() { Unregister(id_); }

DeviceCheckRegistration::DeviceCheckRegistration(DeviceCheckRegistration&& other) noexcept
    : id_(std::exchange(other.id_, 0)) {}

DeviceCheckRegistration& DeviceCheckRegistration::operator=(
    DeviceCheckRegistration&& other) noexcept {
  if (this != &other) {
    Unregister(id_);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

DeviceCheckRegistration RegisterDeviceCheck(std::string owner, TensorLister lister) {
  Registry& registry = GetRegistry();
  std::lock_guard lock(registry.mutex);
  std::uint64_t id = registry.next_id++;
  registry.listers.emplace(id, std::make_pair(std::move(owner), std::move(lister)));
  return DeviceCheckRegistration(id);
}

DeviceCheckResult CheckRegisteredDevices(const Device& expected) {
  std::vector<std::pair<std::string, TensorLister>> listers;
  {
    Registry& registry = GetRegistry();
    std::lock_guard lock(registry.mutex);
    for (const auto& [id, entry] : registry.listers) {
      listers.push_back(entry);
    }
  }
  DeviceCheckResult result;
  std::string first;
  for (const auto& [owner, lister] : listers) {
    for (const TensorPlacement& tensor : lister()) {
      if (first.empty()) {
        first = tensor.device;
      }
      ++result.tensors;
      if (!Matches(expected, tensor.device, first)) {
        result.misplaced.push_back((owner.empty() ? "" : owner + ".") + tensor.name + " on " +
                                   tensor.device);
      }
    }
  }
  return result;
}

}  // namespace gantry
