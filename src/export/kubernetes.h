// Kubernetes manifests for an exported topology: per executor a ConfigMap,
// a Deployment (GPUs as nvidia.com/gpu, probes over gRPC health) and a
// headless Service; the gateway's Deployment and Service.
//
// Thread safety: pure functions.
#ifndef GANTRY_EXPORT_KUBERNETES_H_
#define GANTRY_EXPORT_KUBERNETES_H_

#include <gantry/export.h>
#include <gantry/status.h>

#include <vector>

#include "export/output_dir.h"
#include "export/topology.h"

namespace gantry::exporting {

StatusOr<std::vector<OutFile>> RenderKubernetes(const Topology& t, const ExportOptions& options);

}  // namespace gantry::exporting

#endif  // GANTRY_EXPORT_KUBERNETES_H_
