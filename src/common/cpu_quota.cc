#include "common/cpu_quota.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace gantry::internal {
namespace {

std::optional<std::int64_t> ParseInt(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
    text.remove_suffix(1);
  }
  std::int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

std::optional<std::string> ReadSmallFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    return std::nullopt;
  }
  std::string text;
  std::getline(in, text);
  return text;
}

// cgroup v2's cpu.max: "max 100000" or "200000 100000".
std::optional<int> CpuMaxCores(const std::filesystem::path& dir) {
  std::optional<std::string> text = ReadSmallFile(dir / "cpu.max");
  if (!text) {
    return std::nullopt;
  }
  std::string_view view = *text;
  const std::size_t space = view.find(' ');
  if (space == std::string_view::npos || view.substr(0, space) == "max") {
    return std::nullopt;
  }
  std::optional<std::int64_t> quota = ParseInt(view.substr(0, space));
  std::optional<std::int64_t> period = ParseInt(view.substr(space + 1));
  return quota && period ? QuotaCores(*quota, *period) : std::nullopt;
}

// cgroup v1's cpu controller: cpu.cfs_quota_us (-1: none), cpu.cfs_period_us.
std::optional<int> CfsCores(const std::filesystem::path& dir) {
  std::optional<std::string> quota_text = ReadSmallFile(dir / "cpu.cfs_quota_us");
  std::optional<std::string> period_text = ReadSmallFile(dir / "cpu.cfs_period_us");
  if (!quota_text || !period_text) {
    return std::nullopt;
  }
  std::optional<std::int64_t> quota = ParseInt(*quota_text);
  std::optional<std::int64_t> period = ParseInt(*period_text);
  return quota && period ? QuotaCores(*quota, *period) : std::nullopt;
}

// The smallest of `read(dir)` for `mount`/`cgroup_path` and each parent up to
// `mount` itself.
template <typename Read>
std::optional<int> SmallestOnTheWayUp(const std::filesystem::path& mount,
                                      std::string_view cgroup_path, Read read) {
  std::optional<int> smallest;
  std::filesystem::path relative = std::filesystem::path(cgroup_path).relative_path();
  while (true) {
    const std::filesystem::path dir = relative.empty() ? mount : mount / relative;
    if (std::optional<int> cores = read(dir)) {
      smallest = smallest ? std::min(*smallest, *cores) : *cores;
    }
    if (relative.empty()) {
      return smallest;
    }
    relative = relative.parent_path();
  }
}

}  // namespace

std::optional<int> QuotaCores(std::int64_t quota_us, std::int64_t period_us) {
  if (quota_us < 0 || period_us <= 0) {
    return std::nullopt;
  }
  return static_cast<int>(std::max<std::int64_t>(1, (quota_us + period_us - 1) / period_us));
}

std::optional<int> CgroupCpuQuotaCores(const std::filesystem::path& cgroup_root,
                                       std::string_view proc_self_cgroup) {
  std::optional<int> smallest;
  auto keep = [&smallest](std::optional<int> cores) {
    if (cores) {
      smallest = smallest ? std::min(*smallest, *cores) : *cores;
    }
  };
  std::istringstream lines{std::string(proc_self_cgroup)};
  std::string line;
  while (std::getline(lines, line)) {
    // "ID:CONTROLLERS:PATH"; v2's line is "0::PATH".
    const std::size_t first = line.find(':');
    const std::size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) {
      continue;
    }
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (controllers.empty()) {
      keep(SmallestOnTheWayUp(cgroup_root, path, CpuMaxCores));
      continue;
    }
    std::vector<std::string> names;
    std::istringstream split(controllers);
    for (std::string name; std::getline(split, name, ',');) {
      names.push_back(name);
    }
    if (std::find(names.begin(), names.end(), "cpu") == names.end()) {
      continue;
    }
    // The v1 cpu controller is mounted under its own name(s).
    for (const char* mount : {"cpu", "cpu,cpuacct", "cpuacct,cpu"}) {
      if (std::filesystem::is_directory(cgroup_root / mount)) {
        keep(SmallestOnTheWayUp(cgroup_root / mount, path, CfsCores));
        break;
      }
    }
  }
  return smallest;
}

std::optional<int> CgroupCpuQuotaCores() {
  std::ifstream in("/proc/self/cgroup");
  if (!in) {
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  return CgroupCpuQuotaCores("/sys/fs/cgroup", text.str());
}

int IntraOpThreadsPerReplica(int cores, int replicas) {
  return std::max(1, cores / std::max(1, replicas));
}

int AffinityCpuCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) {
    return 1;
  }
  return std::max(1, CPU_COUNT(&set));
}

int AvailableCpuCores() {
  const int affinity = AffinityCpuCores();
  const std::optional<int> quota = CgroupCpuQuotaCores();
  return quota ? std::min(affinity, *quota) : affinity;
}

bool ThreadPoolsSizedByUser(const std::map<std::string, std::string>& env) {
  for (const char* variable : kThreadCountVariables) {
    if (env.contains(variable) || std::getenv(variable) != nullptr) {
      return true;
    }
  }
  return false;
}

}  // namespace gantry::internal
