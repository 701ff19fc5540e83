// File: gantry/device_runtime.h
//
// Libraries a process loads only for the devices it uses. libtorch's CUDA
// half (libtorch_cuda and the CUDA libraries it needs, about 260 MB of a
// process's memory) is one: gantry::torch registers a loader for it
// (gantry/torch_cuda.h), so a worker on `cpu` never maps a CUDA library and
// one on `cuda` loads them before its executor is constructed. The worker
// calls LoadDeviceRuntimes with its device before the executor's
// constructor runs, so an executor may use the device through any libtorch
// API. Torch-free, like the worker that calls it.
//
// Thread safety: safe for concurrent use.
#ifndef GANTRY_DEVICE_RUNTIME_H_
#define GANTRY_DEVICE_RUNTIME_H_

#include <gantry/device.h>
#include <gantry/status.h>

namespace gantry {

// Loads what `device` needs, if it is not loaded yet; OK when nothing is
// needed (a CPU). An error names the device and what could not be loaded.
using DeviceRuntimeLoader = Status (*)(const Device& device);

// Adds `loader` to the ones LoadDeviceRuntimes runs (once each, however often
// it is registered). Returns true, for a static initialiser.
bool RegisterDeviceRuntimeLoader(DeviceRuntimeLoader loader);

// Runs every registered loader for `device`, in the order they were
// registered; the first error, else OK (also when none is registered).
Status LoadDeviceRuntimes(const Device& device);

}  // namespace gantry

#endif  // GANTRY_DEVICE_RUNTIME_H_
