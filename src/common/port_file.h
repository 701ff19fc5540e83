// The --port-file of `gantry deployment|flow|gateway|executor`: how a script
// or test learns the port the kernel picked for port 0.
#ifndef GANTRY_COMMON_PORT_FILE_H_
#define GANTRY_COMMON_PORT_FILE_H_

#include <gantry/status.h>

#include <string>

namespace gantry::internal {

// Writes "PORT\n" to `path` through a temporary file and a rename, so a
// reader never sees half a number. An empty path writes nothing. A file that
// cannot be written is an error naming it and why: the caller must not serve
// on while its reader waits for a file that will never come.
Status WritePortFile(const std::string& path, int port);

}  // namespace gantry::internal

#endif  // GANTRY_COMMON_PORT_FILE_H_
