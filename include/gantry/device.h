// File: gantry/device.h
//
// Device strings as executors receive them: "cpu", "cuda", "cuda:N" and
// "auto". Parsed once into a Device value; bad strings are InvalidArgument.
// Whether a CUDA device really exists is checked where libtorch or the CUDA
// runtime is linked (the worker), not here.
//
// Thread safety: value type.
#ifndef GANTRY_DEVICE_H_
#define GANTRY_DEVICE_H_

#include <gantry/status.h>

#include <string>
#include <string_view>

namespace gantry {

class Device {
 public:
  enum class Type { kCpu, kCuda, kAuto };

  // CPU.
  Device() = default;
  static Device Cpu() { return Device(Type::kCpu, -1); }
  // index -1 means "the current CUDA device" (plain "cuda").
  static Device Cuda(int index = -1) { return Device(Type::kCuda, index); }
  static Device Auto() { return Device(Type::kAuto, -1); }

  // Accepts "cpu", "cuda", "cuda:N" (N >= 0), "auto", case-sensitive, with
  // no spaces, as torch does. Anything else is InvalidArgument naming the
  // string and the accepted forms.
  static StatusOr<Device> Parse(std::string_view text);

  Type type() const { return type_; }
  bool is_cpu() const { return type_ == Type::kCpu; }
  bool is_cuda() const { return type_ == Type::kCuda; }
  bool is_auto() const { return type_ == Type::kAuto; }
  // -1 when no index was given.
  int index() const { return index_; }
  bool has_index() const { return index_ >= 0; }

  // "cpu", "cuda", "cuda:1", "auto": Parse(ToString()) round-trips.
  std::string ToString() const;

  friend bool operator==(const Device& a, const Device& b) {
    return a.type_ == b.type_ && a.index_ == b.index_;
  }

 private:
  Device(Type type, int index) : type_(type), index_(index) {}

  Type type_ = Type::kCpu;
  int index_ = -1;
};

}  // namespace gantry

#endif  // GANTRY_DEVICE_H_
