// A compose file for an exported topology, and the config files its
// services read: for docker-compose (format 2.4, configs bind-mounted) or
// for Docker Swarm's `docker stack deploy` (format 3.8, configs as Swarm
// configs).
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

enum class ComposeTarget { kDockerCompose, kSwarm };

StatusOr<std::vector<OutFile>> RenderCompose(const Topology& t, const ExportOptions& options,
                                             const std::string& config_dir_name,
                                             std::vector<OutFile>* configs,
                                             ComposeTarget target = ComposeTarget::kDockerCompose);

}  // namespace gantry::exporting

#endif  // GANTRY_EXPORT_COMPOSE_H_
