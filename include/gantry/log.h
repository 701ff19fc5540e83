// Logging from executor code, through the process's own logger: lines carry
// the replica's name and pid like the framework's own ("WARN
// encoder/rep-0@4242 ..."), at the level the Deployment set.
//
// A separate entry point because code that includes libtorch's headers
// cannot include spdlog: the torch wheel ships fmt headers of its own, which
// Debian's spdlog does not build against.
//
// Thread safety: may be called from any thread at once.
#ifndef GANTRY_LOG_H_
#define GANTRY_LOG_H_

#include <string_view>

namespace gantry {

void LogInfo(std::string_view message);
void LogWarning(std::string_view message);

}  // namespace gantry

#endif  // GANTRY_LOG_H_
