// `gantry new NAME`: writes a new executor project, the counterpart of
// `jina hub new`. The project builds against an installed Gantry
// (find_package(Gantry)) both as a plugin for gantry-worker and as a program
// that serves its own Deployment.
#ifndef GANTRY_CLI_SCAFFOLD_H_
#define GANTRY_CLI_SCAFFOLD_H_

#include <gantry/status.h>

#include <string>

namespace gantry::cli {

// `name` must be a C++ identifier (the executor class and YAML jtype).
// `dir` must not exist yet or be empty. Errors name the path.
Status CreateExecutorProject(const std::string& name, const std::string& dir);

}  // namespace gantry::cli

#endif  // GANTRY_CLI_SCAFFOLD_H_
