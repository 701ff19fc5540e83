// A docker-compose file (format 2.4, which Docker Swarm also runs) for an
// exported topology, and the config files its services bind-mount.
//
// Thread safety: pure functions.
#ifndef GANTRY_EXPORT_COMPOSE_H_
#define GANTRY_EXPORT_COMPOSE_H_

#include <gantry/export.h>
#include <gantry/status.h>

#include <string>
#include <vector>

#include "export/output_dir.h"
#include "export/topology.h"

namespace gantry::exporting {

StatusOr<std::vector<OutFile>> RenderCompose(const Topology& t, const ExportOptions& options,
                                             const std::string& config_dir_name,
                                             std::vector<OutFile>* configs);

}  // namespace gantry::exporting

#endif  // GANTRY_EXPORT_COMPOSE_H_
