// What each exported container runs: an executor's own config file, its
// `gantry executor` arguments and environment; the gateway's `gantry
// gateway` arguments (made from the option table, core/option_table.h) or,
// for a Flow, the Flow it runs with every step external.
//
// Thread safety: pure functions.
#ifndef GANTRY_EXPORT_COMMANDS_H_
#define GANTRY_EXPORT_COMMANDS_H_

#include <gantry/document.h>

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "export/topology.h"

namespace gantry::exporting {

// The executor's own file: what `gantry executor --uses` reads.
Value ExecutorConfigDoc(const Step& step);

// The gRPC target through which the gateway reaches a step's replicas.
std::string StepAddress(const Step& step, std::string_view host);

// The Flow the exported gateway runs: the same graph, every step external.
Value GatewayFlowDoc(const Topology& t, const std::function<std::string(const Step&)>& host_of);

// `gantry executor` arguments of a step's containers.
Value::List ExecutorArgs(const Topology& t, const Step& step);

// The gateway container's arguments: `gantry gateway` in front of a
// Deployment's replicas, or `gantry flow` with the Flow GatewayFlowDoc makes.
// `tls_dir`: where the container finds GatewayTlsFiles (kTlsDir, or
// kSwarmSecretsDir).
Value::List GatewayArgs(const Topology& t, std::string_view replica_addresses,
                        std::string_view tls_dir = kTlsDir);

// The executor's environment, less what the container runtime now decides
// (GPU visibility comes from the device plugin or the nvidia runtime).
std::map<std::string, std::string> ContainerEnv(const Step& step);

}  // namespace gantry::exporting

#endif  // GANTRY_EXPORT_COMMANDS_H_
