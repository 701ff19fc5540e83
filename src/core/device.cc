#include <gantry/device.h>

#include <charconv>

namespace gantry {

StatusOr<Device> Device::Parse(std::string_view text) {
  if (text == "cpu") {
    return Cpu();
  }
  if (text == "cuda") {
    return Cuda();
  }
  if (text == "auto") {
    return Auto();
  }
  constexpr std::string_view kCudaPrefix = "cuda:";
  if (text.starts_with(kCudaPrefix)) {
    std::string_view digits = text.substr(kCudaPrefix.size());
    int index = -1;
    const char* end = digits.data() + digits.size();
    auto [ptr, ec] = std::from_chars(digits.data(), end, index);
    // from_chars accepts a leading '-', so the first character is checked too.
    if (!digits.empty() && digits[0] >= '0' && digits[0] <= '9' && ec == std::errc() &&
        ptr == end) {
      return Cuda(index);
    }
  }
  return InvalidArgumentError("bad device \"" + std::string(text) +
                              "\": expected \"cpu\", \"cuda\", \"cuda:N\" or \"auto\"");
}

std::string Device::ToString() const {
  switch (type_) {
    case Type::kCpu:
      return "cpu";
    case Type::kAuto:
      return "auto";
    case Type::kCuda:
      return index_ >= 0 ? "cuda:" + std::to_string(index_) : "cuda";
  }
  return "cpu";
}

}  // namespace gantry
