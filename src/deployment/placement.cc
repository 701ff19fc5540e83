#include "deployment/placement.h"

#include <gantry/device.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>

#include "common/cpu_quota.h"
#include "core/deployment_rules.h"

namespace gantry::internal {
namespace {

std::string Plural(std::size_t n, std::string_view word) {
  return std::to_string(n) + " " + std::string(word) + (n == 1 ? "" : "s");
}

std::string JoinIds(const std::vector<std::string>& ids) {
  std::string out;
  for (const std::string& id : ids) {
    out += out.empty() ? "" : ",";
    out += id;
  }
  return out;
}

std::string FormatShare(double share) {
  std::ostringstream out;
  out << share;
  return out.str();
}

// How a replica's GPUs were chosen; the device checks depend only on this.
struct Slot {
  std::vector<std::string> ids;  // CUDA_VISIBLE_DEVICES entries
  std::vector<int> indices;      // into the inventory, when known
};

class Planner {
 public:
  Planner(const PlacementRequest& request, const GpuInventory& inventory)
      : request_(request),
        inventory_(inventory),
        prefix_("deployment '" + request.deployment + "': ") {}

  StatusOr<PlacementPlan> Plan() {
    // The Deployment checked this already; PlanPlacement may be called alone.
    if (Status s = CheckIntOption(kReplicasRule, "replicas", request_.replicas); !s.ok()) {
      return InvalidArgumentError(prefix_ + s.message());
    }
    std::optional<Device> device;
    if (!request_.explicit_device.empty()) {
      StatusOr<Device> parsed = Device::Parse(request_.explicit_device);
      if (!parsed.ok()) {
        return parsed.status().WithPrefix(prefix_ + "uses_with.device");
      }
      device = *parsed;
    }
    // Jina: env CUDA_VISIBLE_DEVICES beats the process's; RR asks for
    // round-robin placement.
    const std::optional<std::string>& cvd = request_.env_cuda_visible_devices
                                                ? request_.env_cuda_visible_devices
                                                : request_.process_cuda_visible_devices;
    const bool rr = cvd && cvd->starts_with("RR");
    const std::string gpus(TrimBlanks(request_.gpus));
    if (rr && !gpus.empty()) {
      return InvalidArgumentError(prefix_ + "gpus=" + gpus + " and CUDA_VISIBLE_DEVICES=" + *cvd +
                                  " both place replicas; set only one");
    }
    if (!gpus.empty() && request_.env_cuda_visible_devices) {
      return InvalidArgumentError(prefix_ + "gpus=" + gpus + " and env CUDA_VISIBLE_DEVICES=" +
                                  *request_.env_cuda_visible_devices +
                                  " both choose GPUs; set only one");
    }
    std::vector<Slot> slots;  // one per replica; empty: not placed
    if (rr) {
      GANTRY_ASSIGN_OR_RETURN(slots, RoundRobin(cvd->substr(2)));
    } else if (gpus.empty()) {
      return Unmanaged(device, cvd.has_value());
    } else {
      GANTRY_ASSIGN_OR_RETURN(slots, FromGpus(gpus, device));
      if (slots.empty()) {
        return NoGpus(device);
      }
    }
    PlacementPlan plan;
    for (int i = 0; i < request_.replicas; ++i) {
      const Slot& slot = slots[static_cast<std::size_t>(i)];
      ReplicaPlacement placement;
      placement.cuda_visible_devices = JoinIds(slot.ids);
      placement.gpus = slot.indices;
      placement.share = share_;
      placement.device = device ? device->ToString() : "cuda:0";
      placement.description = Describe(slot);
      std::string replica = "replica " + request_.deployment + "/rep-" + std::to_string(i) +
                            " (CUDA_VISIBLE_DEVICES=" + *placement.cuda_visible_devices + ")";
      if (device && device->is_cuda() && device->has_index() &&
          static_cast<std::size_t>(device->index()) >= slot.ids.size()) {
        return InvalidArgumentError(
            prefix_ + "uses_with.device " + device->ToString() + " does not exist in " + replica +
            ", which sees " + Plural(slot.ids.size(), "GPU") + " (cuda:0" +
            (slot.ids.size() > 1 ? "..cuda:" + std::to_string(slot.ids.size() - 1) : "") +
            "); drop `device` to get cuda:0");
      }
      if (device && device->is_cpu() && i == 0) {
        plan.warnings.push_back(prefix_ + "uses_with.device is cpu but each replica is placed on " +
                                "a GPU (" +
                                (gpus.empty() ? "CUDA_VISIBLE_DEVICES=RR" : "gpus=" + gpus) +
                                "); the GPU will sit idle");
      }
      plan.replicas.push_back(std::move(placement));
    }
    return plan;
  }

 private:
  std::string Visible() const { return DescribeVisibleGpus(inventory_); }
  std::size_t Count() const { return inventory_.gpus.size(); }

  std::string Describe(const Slot& slot) const {
    std::string out;
    for (std::size_t k = 0; k < slot.ids.size(); ++k) {
      out += out.empty() ? "" : ", ";
      out += "GPU " + slot.ids[k];
      if (k < slot.indices.size()) {
        out += " (" + inventory_.gpus[static_cast<std::size_t>(slot.indices[k])].name + ")";
      }
    }
    if (share_ > 0 && share_ < 1) {
      out += " x" + FormatShare(share_);
    }
    return out;
  }

  Slot SlotOf(int index) const {
    return {{inventory_.gpus[static_cast<std::size_t>(index)].id}, {index}};
  }

  // gpus unset: the executor's device is used as given; only an index no
  // visible GPU has is refused here (with no GPU visible the worker's own
  // check reports it, naming the libtorch side of the story).
  StatusOr<PlacementPlan> Unmanaged(const std::optional<Device>& device, bool has_cvd) const {
    if (device && device->is_cuda() && device->has_index() && Count() > 0 && !has_cvd &&
        static_cast<std::size_t>(device->index()) >= Count()) {
      return FailedPreconditionError(prefix_ + "uses_with.device " + device->ToString() +
                                     " does not exist: " + Visible() +
                                     " (cuda:0..cuda:" + std::to_string(Count() - 1) + ")");
    }
    PlacementPlan plan;
    for (int i = 0; i < request_.replicas; ++i) {
      ReplicaPlacement placement;
      placement.device = device ? device->ToString() : "cpu";
      placement.description = placement.device;
      plan.replicas.push_back(std::move(placement));
    }
    return plan;
  }

  // gpus=0: no GPU at all, and the workers cannot see one by accident.
  StatusOr<PlacementPlan> NoGpus(const std::optional<Device>& device) const {
    if (device && device->is_cuda()) {
      return InvalidArgumentError(prefix_ + "uses_with.device " + device->ToString() +
                                  " needs a GPU, but gpus=0 gives the replicas none");
    }
    PlacementPlan plan;
    for (int i = 0; i < request_.replicas; ++i) {
      ReplicaPlacement placement;
      placement.device = device ? device->ToString() : "cpu";
      placement.cuda_visible_devices = "";
      placement.description = "cpu (gpus=0)";
      plan.replicas.push_back(std::move(placement));
    }
    return plan;
  }

  Status NotEnough(const std::string& what, std::size_t needed) const {
    return FailedPreconditionError(prefix_ + "replicas=" + std::to_string(request_.replicas) +
                                   " with " + what + " needs " + Plural(needed, "GPU") + "; " +
                                   Visible());
  }

  // Returns no slots for gpus=0.
  StatusOr<std::vector<Slot>> FromGpus(const std::string& gpus,
                                       const std::optional<Device>& /*device*/) {
    StatusOr<GpuSpec> spec = ParseGpuSpec(gpus);
    if (!spec.ok()) {
      return InvalidArgumentError(prefix_ + spec.status().message());
    }
    const int replicas = request_.replicas;
    std::vector<Slot> slots;
    if (spec->kind == GpuSpec::Kind::kAll) {
      if (Count() == 0) {
        return FailedPreconditionError(prefix_ + "gpus=all needs at least 1 GPU; " + Visible());
      }
      if (replicas > 1) {
        return InvalidArgumentError(
            prefix_ + "gpus=all gives every replica all " + Plural(Count(), "GPU") +
            ", so replicas=" + std::to_string(replicas) +
            " would all default to the same cuda:0; use gpus=1, a fraction such as 0.5, or a list");
      }
      Slot slot;
      for (std::size_t k = 0; k < Count(); ++k) {
        slot.ids.push_back(inventory_.gpus[k].id);
        slot.indices.push_back(static_cast<int>(k));
      }
      slots.push_back(std::move(slot));
      share_ = 1;
      return slots;
    }
    if (spec->kind == GpuSpec::Kind::kList) {
      return FromList(gpus, spec->ids);
    }
    if (spec->kind == GpuSpec::Kind::kNone) {
      return slots;
    }
    const double amount = spec->amount;
    if (spec->kind == GpuSpec::Kind::kFraction) {
      // Fractions pack like Ray's: a GPU holds floor(1 / share) replicas.
      // Replicas go round-robin, so load spreads over every GPU first.
      const auto per_gpu = static_cast<std::size_t>(std::floor(1.0 / amount + 1e-9));
      const std::size_t needed = (static_cast<std::size_t>(replicas) + per_gpu - 1) / per_gpu;
      if (needed > Count()) {
        return NotEnough("gpus=" + gpus + " (" + std::to_string(per_gpu) + " replicas per GPU)",
                         needed);
      }
      for (int i = 0; i < replicas; ++i) {
        slots.push_back(SlotOf(static_cast<int>(static_cast<std::size_t>(i) % Count())));
      }
      share_ = amount;
      return slots;
    }
    const auto per_replica = static_cast<std::size_t>(amount);
    const std::size_t needed = per_replica * static_cast<std::size_t>(replicas);
    if (needed > Count()) {
      return NotEnough("gpus=" + gpus, needed);
    }
    for (int i = 0; i < replicas; ++i) {
      Slot slot;
      for (std::size_t k = 0; k < per_replica; ++k) {
        const std::size_t index = static_cast<std::size_t>(i) * per_replica + k;
        slot.ids.push_back(inventory_.gpus[index].id);
        slot.indices.push_back(static_cast<int>(index));
      }
      slots.push_back(std::move(slot));
    }
    share_ = 1;
    return slots;
  }

  // Index of the GPU an entry names (an index, or a UUID or its prefix).
  StatusOr<int> Resolve(const std::string& token, const std::string& what) const {
    if (std::optional<int> index = ParseGpuIndex(token)) {
      if (*index < 0 || static_cast<std::size_t>(*index) >= Count()) {
        return FailedPreconditionError(prefix_ + what + ": GPU " + token + " is not visible; " +
                                       Visible());
      }
      return *index;
    }
    for (std::size_t k = 0; k < Count(); ++k) {
      if (!token.empty() && inventory_.gpus[k].uuid.starts_with(token)) {
        return static_cast<int>(k);
      }
    }
    return FailedPreconditionError(prefix_ + what + ": no visible GPU has UUID " + token + "; " +
                                   Visible());
  }

  // gpus="0,2": one GPU per replica, taken round-robin from the list.
  StatusOr<std::vector<Slot>> FromList(const std::string& gpus,
                                       const std::vector<std::string>& ids) {
    std::vector<Slot> chosen;
    for (const std::string& token : ids) {
      GANTRY_ASSIGN_OR_RETURN(int index, Resolve(token, "gpus=" + gpus));
      chosen.push_back(SlotOf(index));
    }
    // ParseGpuSpec refuses a list that names no GPU.
    return Cycle(chosen);
  }

  std::vector<Slot> Cycle(const std::vector<Slot>& chosen) {
    std::vector<Slot> slots;
    for (int i = 0; i < request_.replicas; ++i) {
      slots.push_back(chosen[static_cast<std::size_t>(i) % chosen.size()]);
    }
    std::map<std::string, int> uses;
    for (const Slot& slot : slots) {
      ++uses[slot.ids[0]];
    }
    int most = 0;
    for (const auto& [id, n] : uses) {
      most = std::max(most, n);
    }
    share_ = 1.0 / most;
    return slots;
  }

  // Jina's CUDA_VISIBLE_DEVICES=RR<suffix>, read as Jina reads it: empty for all
  // GPUs, a slice m:n[:s] (optionally in brackets), a list a,b,c, one index
  // k (the slice k:k+1), or UUIDs, passed on as they are.
  StatusOr<std::vector<Slot>> RoundRobin(std::string suffix) {
    const std::string what = "CUDA_VISIBLE_DEVICES=RR" + suffix;
    if (suffix.size() >= 2 && suffix.front() == '[' && suffix.back() == ']') {
      suffix = suffix.substr(1, suffix.size() - 2);
    }
    std::vector<Slot> chosen;
    auto all_indices = [&](const std::vector<int>& indices) {
      for (int index : indices) {
        chosen.push_back(SlotOf(index));
      }
    };
    if (TrimBlanks(suffix).empty()) {
      std::vector<int> indices;
      for (std::size_t k = 0; k < Count(); ++k) {
        indices.push_back(static_cast<int>(k));
      }
      all_indices(indices);
    } else if (suffix.find(':') != std::string::npos) {
      GANTRY_ASSIGN_OR_RETURN(std::vector<int> indices, Slice(suffix, what));
      all_indices(indices);
    } else if (std::optional<int> k = ParseGpuIndex(std::string(TrimBlanks(suffix)))) {
      GANTRY_ASSIGN_OR_RETURN(std::vector<int> indices,
                              Slice(std::to_string(*k) + ":" + std::to_string(*k + 1), what));
      all_indices(indices);
    } else {
      for (const std::string& token : SplitGpuList(suffix)) {
        if (ParseGpuIndex(token)) {
          GANTRY_ASSIGN_OR_RETURN(int index, Resolve(token, what));
          chosen.push_back(SlotOf(index));
        } else {
          chosen.push_back({{token}, {}});  // a UUID: CUDA checks it
        }
      }
    }
    if (chosen.empty()) {
      return FailedPreconditionError(prefix_ + what + " selects no GPU; " + Visible());
    }
    return Cycle(chosen);
  }

  // Python's range(count)[m:n:s] for s > 0.
  StatusOr<std::vector<int>> Slice(const std::string& text, const std::string& what) const {
    std::vector<std::optional<int>> parts;
    std::string_view rest = text;
    while (true) {
      std::size_t colon = rest.find(':');
      std::string_view part = TrimBlanks(rest.substr(0, colon));
      if (part.empty()) {
        parts.emplace_back();
      } else if (std::optional<int> value = ParseGpuIndex(part)) {
        parts.emplace_back(value);
      } else {
        return InvalidArgumentError(prefix_ + what + ": \"" + std::string(part) +
                                    "\" is not an integer in the slice");
      }
      if (colon == std::string_view::npos) {
        break;
      }
      rest.remove_prefix(colon + 1);
    }
    if (parts.size() > 3) {
      return InvalidArgumentError(prefix_ + what + ": a slice is start:stop[:step]");
    }
    const int count = static_cast<int>(Count());
    int step = parts.size() == 3 && parts[2] ? *parts[2] : 1;
    if (step <= 0) {
      return InvalidArgumentError(prefix_ + what + ": the slice step must be positive");
    }
    auto bound = [count](std::optional<int> v, int fallback) {
      int x = v ? *v : fallback;
      if (x < 0) {
        x += count;
      }
      return std::clamp(x, 0, count);
    };
    std::vector<int> out;
    for (int i = bound(parts[0], 0); i < bound(parts[1], count); i += step) {
      out.push_back(i);
    }
    return out;
  }

  const PlacementRequest& request_;
  const GpuInventory& inventory_;
  const std::string prefix_;
  double share_ = 0;
};

}  // namespace

StatusOr<PlacementPlan> PlanPlacement(const PlacementRequest& request,
                                      const GpuInventory& inventory) {
  return Planner(request, inventory).Plan();
}

}  // namespace gantry::internal
