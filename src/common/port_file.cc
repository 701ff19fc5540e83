#include "common/port_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace gantry::internal {

Status WritePortFile(const std::string& path, int port) {
  if (path.empty()) {
    return OkStatus();
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << port << "\n";
    out.close();
    if (!out) {
      const int error = errno;
      std::remove(tmp.c_str());
      return InvalidArgumentError("port file " + path + ": cannot write " + tmp + " (" +
                                  std::strerror(error) + ")");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(tmp.c_str());
    return InvalidArgumentError("port file " + path + ": cannot rename " + tmp + " to it (" +
                                std::strerror(error) + ")");
  }
  return OkStatus();
}

}  // namespace gantry::internal
