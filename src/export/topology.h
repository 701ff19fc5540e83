// What `gantry export` exports: the executors of a Deployment or Flow YAML
// with the names, ports and GPUs their containers get, and the gateway in
// front, checked for what containers cannot carry over. The rest of
// src/export/ writes it out (commands.h, kubernetes.h, compose.h).
//
// Thread safety: plain data and pure functions.
#ifndef GANTRY_EXPORT_TOPOLOGY_H_
#define GANTRY_EXPORT_TOPOLOGY_H_

#include <gantry/deployment.h>
#include <gantry/export.h>
#include <gantry/status.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gantry::exporting {

inline constexpr int kDefaultGatewayPort = 8080;
// The gateway's HTTP port where the YAML says 0 (any free port).
inline constexpr int kDefaultExportedHttpPort = 8000;
inline constexpr int kFirstExecutorPort = 8081;
// Where a container serves /metrics when `monitoring` is on and the YAML
// names no port: Prometheus needs a fixed one to scrape.
inline constexpr int kMetricsPort = 9090;
inline constexpr std::string_view kConfigDir = "/etc/gantry";
inline constexpr std::string_view kGatewayName = "gateway";
// Exported executors ask the gateway to reconnect every 30 s (`gantry
// executor --max-connection-age`): gRPC resolves a DNS name again only when
// a connection closes, and this is how replicas started since (a scale-up,
// a task that replaced a failed one) join the gateway's round_robin.
inline constexpr int kExportedMaxConnectionAgeSeconds = 30;
// Where the exported gateway reads its TLS files (a Deployment's
// ssl_certfile, ssl_keyfile, ssl_client_cafile): under kTlsDir from a
// Kubernetes Secret or compose bind mounts, under /run/secrets from Swarm
// secrets; the file names are the keys of a Kubernetes TLS Secret.
inline constexpr std::string_view kTlsDir = "/etc/gantry/tls";
inline constexpr std::string_view kSwarmSecretsDir = "/run/secrets";
// The Secret a Kubernetes export expects to hold them (not written: keys
// do not go into manifests).
inline constexpr std::string_view kTlsSecretName = "gateway-tls";

// One TLS file of the gateway: where it is here, its name in the container.
struct TlsFile {
  std::string source;
  std::string name;       // tls.crt, tls.key or ca.crt
  std::string_view flag;  // the `gantry gateway` flag that names it
};

// A startup probe may not wait forever; `timeout_ready: -1` gets a day.
inline constexpr std::int64_t kMaxStartupSeconds = std::int64_t{24} * 3600;

// One executor of the exported topology.
struct Step {
  std::string name{};      // as in the YAML
  std::string dns_name{};  // the Kubernetes and compose name
  std::string key_path{};  // "with" or "executors[i]", for messages
  DeploymentOptions deployment{};
  std::vector<std::string> needs{};
  bool external = false;
  int port = 0;  // the executor's, in its container
  int gpus = 0;  // whole GPUs per replica
};

struct Topology {
  std::string source;
  bool is_flow = false;
  std::string name;  // the Flow's or the Deployment's
  int gateway_port = kDefaultGatewayPort;
  // The gateway's options (a Flow's are copied over through the option
  // table): its flags or its Flow `with:` are made from them.
  DeploymentOptions gateway{};
  std::string log_level;
  std::vector<Step> steps;
};

// A volume, "SOURCE:TARGET[:MODE]", split up; SOURCE is absolute or a
// named volume.
struct VolumeParts {
  std::string source;
  std::string target;
  bool read_only = false;
};

// InvalidArgument "<source>: <key_path>: <what>": what cannot be exported.
Status Refuse(const Topology& t, std::string_view key_path, std::string_view what);

// The comment that starts every file written (naming the source YAML).
std::string HeaderFor(const Topology& t);

// The executor type the exported config names: the Deployment's, or for a
// docker:// step the one its env gives the image (CheckExportable).
std::string ExecutorType(const Step& step);

// The image a step's pods run: its own for docker://IMAGE, else the GPU or
// the CPU image of the export's options.
std::string StepImage(const Step& step, const ExportOptions& options);

VolumeParts SplitVolume(const std::string& volume);

// The file is read and parsed once, by the loader of its `jtype`, which
// checks it whole (errors carry file:line:col and key).
StatusOr<Topology> LoadTopology(const std::string& path);

// Seconds a startup probe waits for the model to load: timeout_ready,
// 1 to kMaxStartupSeconds.
std::int64_t StartupSeconds(const DeploymentOptions& d);

// The gateway's TLS files, none without TLS.
std::vector<TlsFile> GatewayTlsFiles(const Topology& t);

// The gateway's named ports: grpc, and http when it serves HTTP.
std::vector<std::pair<std::string, int>> GatewayPorts(const Topology& t);

}  // namespace gantry::exporting

#endif  // GANTRY_EXPORT_TOPOLOGY_H_
