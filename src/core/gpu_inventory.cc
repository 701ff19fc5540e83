// GPU discovery through NVML, loaded at run time: no link-time dependency on
// the driver, no libtorch, no CUDA context (NVML does not create one and
// ignores CUDA_VISIBLE_DEVICES, which we apply ourselves).
#include "core/gpu_inventory.h"

#include <dlfcn.h>

#include <charconv>
#include <cstdlib>
#include <mutex>
#include <utility>

namespace gantry::internal {
namespace {

// NVML's C types, declared here so that no NVML header is needed.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr NvmlReturn kNvmlSuccess = 0;

struct Nvml {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*get_count)(unsigned int*) = nullptr;
  NvmlReturn (*get_handle)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*get_name)(NvmlDevice, char*, unsigned int) = nullptr;
  NvmlReturn (*get_uuid)(NvmlDevice, char*, unsigned int) = nullptr;
  NvmlReturn (*get_memory)(NvmlDevice, NvmlMemory*) = nullptr;
  // Why NVML is unusable; empty when it works.
  std::string error;
};

template <typename F>
bool Load(void* library, const char* symbol, F* out) {
  *out = reinterpret_cast<F>(::dlsym(library, symbol));
  return *out != nullptr;
}

// Loaded and initialised once per process; the library stays loaded.
const Nvml& GetNvml() {
  static const Nvml nvml = [] {
    Nvml n;
    void* library = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      n.error = "no NVIDIA driver: libnvidia-ml.so.1 not found";
      return n;
    }
    if (!Load(library, "nvmlInit_v2", &n.init) ||
        !Load(library, "nvmlDeviceGetCount_v2", &n.get_count) ||
        !Load(library, "nvmlDeviceGetHandleByIndex_v2", &n.get_handle) ||
        !Load(library, "nvmlDeviceGetName", &n.get_name) ||
        !Load(library, "nvmlDeviceGetUUID", &n.get_uuid) ||
        !Load(library, "nvmlDeviceGetMemoryInfo", &n.get_memory)) {
      n.error = "libnvidia-ml.so.1 lacks the NVML functions Gantry needs";
      n.init = nullptr;
      return n;
    }
    if (NvmlReturn rc = n.init(); rc != kNvmlSuccess) {
      n.error = "nvmlInit failed (error " + std::to_string(rc) + "; is the driver loaded?)";
      n.init = nullptr;
    }
    return n;
  }();
  return nvml;
}

std::vector<GpuInfo> FakeGpus(std::string_view names) {
  std::vector<GpuInfo> gpus;
  std::size_t k = 0;
  while (!names.empty()) {
    std::size_t comma = names.find(',');
    std::string name(names.substr(0, comma));
    names = comma == std::string_view::npos ? std::string_view() : names.substr(comma + 1);
    if (name.empty()) {
      continue;
    }
    GpuInfo gpu;
    gpu.id = std::to_string(k);
    gpu.uuid = "GPU-fake-" + std::to_string(k);
    gpu.name = std::move(name);
    gpus.push_back(std::move(gpu));
    ++k;
  }
  return gpus;
}

std::vector<GpuInfo> NvmlGpus(const Nvml& nvml) {
  std::vector<GpuInfo> gpus;
  unsigned int count = 0;
  if (nvml.get_count(&count) != kNvmlSuccess) {
    return gpus;
  }
  for (unsigned int i = 0; i < count; ++i) {
    NvmlDevice device = nullptr;
    if (nvml.get_handle(i, &device) != kNvmlSuccess) {
      continue;
    }
    GpuInfo gpu;
    gpu.id = std::to_string(i);
    char buffer[256] = {};
    if (nvml.get_name(device, buffer, sizeof(buffer)) == kNvmlSuccess) {
      gpu.name = buffer;
    }
    char uuid[256] = {};
    if (nvml.get_uuid(device, uuid, sizeof(uuid)) == kNvmlSuccess) {
      gpu.uuid = uuid;
    }
    NvmlMemory memory{};
    if (nvml.get_memory(device, &memory) == kNvmlSuccess) {
      gpu.memory_total_bytes = memory.total;
      gpu.memory_used_bytes = memory.used;
    }
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

}  // namespace

std::string_view TrimBlanks(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
    text.remove_prefix(1);
  }
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) {
    text.remove_suffix(1);
  }
  return text;
}

std::vector<std::string> SplitGpuList(std::string_view text) {
  std::vector<std::string> out;
  while (true) {
    std::size_t comma = text.find(',');
    std::string_view token = TrimBlanks(text.substr(0, comma));
    if (!token.empty()) {
      out.emplace_back(token);
    }
    if (comma == std::string_view::npos) {
      return out;
    }
    text.remove_prefix(comma + 1);
  }
}

std::optional<int> ParseGpuIndex(std::string_view text) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

std::string DescribeVisibleGpus(const GpuInventory& inventory) {
  const std::size_t n = inventory.gpus.size();
  std::string out = std::to_string(n) + (n == 1 ? " is visible (" : " are visible (");
  if (n == 0) {
    return out + (inventory.source.empty() ? "no NVIDIA driver" : inventory.source) + ")";
  }
  // Runs of one model read "2 x NVIDIA A10".
  std::vector<std::pair<std::string, int>> runs;
  for (const GpuInfo& gpu : inventory.gpus) {
    if (!runs.empty() && runs.back().first == gpu.name) {
      ++runs.back().second;
    } else {
      runs.emplace_back(gpu.name, 1);
    }
  }
  for (std::size_t k = 0; k < runs.size(); ++k) {
    out += k == 0 ? "" : ", ";
    out +=
        runs[k].second > 1 ? std::to_string(runs[k].second) + " x " + runs[k].first : runs[k].first;
  }
  return out + ")";
}

std::vector<GpuInfo> ApplyCudaVisibleDevices(const std::vector<GpuInfo>& all,
                                             std::string_view cuda_visible_devices) {
  std::vector<GpuInfo> out;
  std::vector<bool> taken(all.size(), false);
  for (const std::string& token : SplitGpuList(cuda_visible_devices)) {
    std::optional<std::size_t> match;
    if (std::optional<int> index = ParseGpuIndex(token)) {
      if (*index >= 0 && static_cast<std::size_t>(*index) < all.size()) {
        match = static_cast<std::size_t>(*index);
      }
    } else {
      for (std::size_t k = 0; k < all.size(); ++k) {
        if (all[k].uuid.starts_with(token)) {
          match = k;
          break;
        }
      }
    }
    // CUDA stops at the first entry it cannot use, and ignores repeats.
    if (!match || taken[*match]) {
      break;
    }
    taken[*match] = true;
    GpuInfo gpu = all[*match];
    gpu.id = ParseGpuIndex(token) ? std::to_string(*match) : gpu.uuid;
    out.push_back(std::move(gpu));
  }
  return out;
}

GpuInventory DiscoverGpus() {
  GpuInventory inventory;
  std::vector<GpuInfo> all;
  if (const char* fake = std::getenv("GANTRY_FAKE_GPUS"); fake != nullptr) {
    all = FakeGpus(fake);
    inventory.source = "GANTRY_FAKE_GPUS";
  } else {
    const Nvml& nvml = GetNvml();
    if (nvml.init == nullptr) {
      inventory.source = nvml.error;
      return inventory;
    }
    all = NvmlGpus(nvml);
    inventory.source = "NVML";
  }
  // NVML lists GPUs in PCI bus order; workers get CUDA_DEVICE_ORDER=PCI_BUS_ID
  // so that CUDA numbers them the same way.
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  if (cvd == nullptr || std::string_view(cvd).starts_with("RR")) {
    inventory.gpus = std::move(all);
  } else {
    inventory.gpus = ApplyCudaVisibleDevices(all, cvd);
    if (inventory.gpus.empty()) {
      inventory.source += ", hidden by CUDA_VISIBLE_DEVICES=\"" + std::string(cvd) + "\"";
    }
  }
  return inventory;
}

}  // namespace gantry::internal
