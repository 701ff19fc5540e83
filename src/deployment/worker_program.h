// Where the `gantry-worker` program is, for Deployments and the CLI.
#ifndef GANTRY_DEPLOYMENT_WORKER_PROGRAM_H_
#define GANTRY_DEPLOYMENT_WORKER_PROGRAM_H_

#include <string>

namespace gantry::internal {

// $GANTRY_WORKER_PROGRAM, else gantry-worker next to this program or in its
// ../bin, else on $PATH; empty if none is found.
std::string FindWorkerProgram();

}  // namespace gantry::internal

#endif  // GANTRY_DEPLOYMENT_WORKER_PROGRAM_H_
