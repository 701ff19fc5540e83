// File: gantry/export.h
//
// Turns a Deployment or Flow YAML (gantry/config.h) into files that run the
// same topology on Kubernetes, docker-compose or Docker Swarm, each executor in its own
// containers and the gateway in front (docs/export.md):
//
//   gantry::ExportOptions options{.k8s_namespace = "search"};
//   gantry::StatusOr<std::vector<gantry::ExportedFile>> written =
//       gantry::ExportKubernetes("flow.yml", "k8s/", options);
//   if (!written.ok()) {
//     std::fprintf(stderr, "%s\n", written.status().message().c_str());
//   }
//   auto compose = gantry::ExportDockerCompose("flow.yml", "compose.yml", options);
//
// Every executor becomes `gantry executor --uses /etc/gantry/executor.yml`
// on 0.0.0.0 (ports 8081, 8082, ... in the order of the file), its config
// (jtype, with, metas, dynamic_batching) written beside it; the gateway
// (port 8080 unless the YAML gives one) reaches each executor's replicas
// through one DNS name, "dns:///NAME.NAMESPACE.svc:PORT" on Kubernetes (a
// headless Service) or "dns:///NAME:PORT" in compose, with gRPC's
// round_robin. A Deployment's gateway is `gantry gateway
// --replica-addresses ...`; a Flow's is `gantry flow --uses
// /etc/gantry/flow.yml` with every step rewritten as `external: true`.
//
// Errors: the loaders' (file:line:col: key: what) for a bad YAML;
// InvalidArgument naming the key for what cannot be exported (`gpus: all`,
// a name that is no DNS label once lowercased); FailedPrecondition when
// the output would overwrite files that an earlier export did not write.
//
// Thread safety: the functions keep no state; concurrent calls must not
// write to the same output.
#ifndef GANTRY_EXPORT_H_
#define GANTRY_EXPORT_H_

#include <gantry/status.h>

#include <string>
#include <vector>

namespace gantry {

struct ExportOptions {
  // Kubernetes namespace of every object and of the Services' DNS names.
  std::string k8s_namespace = "default";
  // Image of the gateway and of executors that use no GPU.
  std::string image = "gantry:cpu";
  // Image of executors that ask for GPUs (`gpus:` or a cuda device).
  std::string gpu_image = "gantry:cuda";
};

// One file an export wrote: its path and why it is there.
struct ExportedFile {
  std::string path;
  std::string what;
};

// Writes OUT_DIR/<name>.yml per executor (ConfigMap, Deployment, headless
// Service) and OUT_DIR/gateway.yml (ConfigMap for a Flow, Deployment,
// Service), for `kubectl apply -f OUT_DIR`. OUT_DIR is created if missing;
// an existing one must be empty or hold only what an earlier export wrote
// (listed in OUT_DIR/.gantry-export), whose files are then replaced.
StatusOr<std::vector<ExportedFile>> ExportKubernetes(const std::string& config_path,
                                                     const std::string& out_dir,
                                                     const ExportOptions& options = {});

// Writes the compose file OUT_FILE and, next to it, the folder
// <OUT_FILE without .yml>.gantry/ with each executor's config (and the
// Flow's), bind-mounted read-only into the containers. An existing
// OUT_FILE is replaced only when an earlier export wrote it; the folder
// follows the rule of ExportKubernetes' OUT_DIR.
StatusOr<std::vector<ExportedFile>> ExportDockerCompose(const std::string& config_path,
                                                        const std::string& out_file,
                                                        const ExportOptions& options = {});

// As ExportDockerCompose, for Docker Swarm (`docker stack deploy -c OUT_FILE
// STACK`): compose format 3.8, the configs as Swarm configs named with a
// digest of their text (so a changed export deploys), `deploy:` with
// `restart_policy` and `endpoint_mode: dnsrr` (the gateway's DNS name of
// an executor resolves to every task), no start order (Swarm has none),
// and GPUs as `generic_resources` of kind NVIDIA-GPU.
StatusOr<std::vector<ExportedFile>> ExportDockerSwarm(const std::string& config_path,
                                                      const std::string& out_file,
                                                      const ExportOptions& options = {});

}  // namespace gantry

#endif  // GANTRY_EXPORT_H_
