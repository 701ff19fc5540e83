// The `gantry` command line: argument parsing and wiring only.
//
//   gantry deployment --uses deployment.yml [--port N] [--http-port N] [--port-file F]
//                     [--http-port-file F] [--max-message-bytes N] [--ssl-certfile F --ssl-keyfile
//                     F
//                     [--ssl-client-cafile F]] [--restart-backoff-initial MS]
//                     [--restart-backoff-max MS] [--max-init-failures N] [--timeout-drain MS]
//                     [--max-concurrent-requests N] [--liveness-period MS]
//                     [--liveness-timeout MS] [--liveness-failure-threshold N]
//   gantry flow --uses flow.yml [--port N] [--http-port N] [--port-file F] [--http-port-file F]
//               [--log-level L] [--max-message-bytes N] [--max-concurrent-requests N]
//               [--timeout-drain MS] [--monitoring] [--port-monitoring N]
//   gantry executor --uses executor.yml|JTYPE [--lib PLUGIN.so]... [--port N] [--port-file F]
//                   [--max-message-bytes N]
//   gantry gateway --replica-addresses H:P,H:P [--port N] [--http-port N] [--http-port-file F]
//                  [--max-message-bytes N] [--ssl-certfile F --ssl-keyfile F
//                  [--ssl-client-cafile F]] [--timeout-drain MS] [--max-concurrent-requests N]
//   gantry export kubernetes|docker-compose|swarm FLOW_OR_DEPLOYMENT.yml OUT [--namespace NS]
//                 [--image IMAGE] [--gpu-image IMAGE]
//   gantry new NAME [--dir DIR]
//   gantry ping HOST:PORT [--timeout MS] [--attempts N] [--tls [--ssl-cafile F]
//               [--ssl-certfile F --ssl-keyfile F]]
//   gantry executors
//   gantry --version
#include <gantry/client.h>
#include <gantry/config.h>
#include <gantry/deployment.h>
#include <gantry/device.h>
#include <gantry/export.h>
#include <gantry/flow.h>
#include <gantry/heap.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cli/scaffold.h"
#include "common/grpc_options.h"
#include "common/port_file.h"
#include "core/deployment_rules.h"
#include "core/listen_host.h"
#include "core/logging.h"
#include "core/option_table.h"
#include "core/value_json.h"
#include "deployment/worker_program.h"
#include "gateway/gateway.h"
#include "worker/worker_spec.h"

namespace {

constexpr const char* kVersionText =
    "gantry " GANTRY_VERSION " (Jina 3.x gRPC protocol, docarray v2 documents)";

// CLI11's range check over a rule's bounds (core/deployment_rules.h).
CLI::Range RangeOf(const gantry::internal::IntRule& rule) { return CLI::Range(rule.min, rule.max); }

int Fail(const gantry::Status& status) {
  std::fprintf(stderr, "gantry: error: %s\n", status.message().c_str());
  return 1;
}

// Where a serving command reports the ports it bound.
struct ListenFlags {
  std::string port_file;
  // Written before port_file, so a reader that waits for port_file finds it.
  std::string http_port_file;
};

// An HTTP port file needs an HTTP gateway to report on.
gantry::Status CheckHttpPortFile(const ListenFlags& listen, int http_port) {
  if (!listen.http_port_file.empty() && http_port < 0) {
    return gantry::InvalidArgumentError(
        "--http-port-file: no HTTP gateway to report (give --http-port, or http_port in the "
        "YAML)");
  }
  return gantry::OkStatus();
}

using gantry::internal::OptionField;
using gantry::internal::OptionRow;
using gantry::internal::OptionType;
using gantry::internal::OptionValue;

// The option-table flags (core/option_table.h) a command was given, by key.
using GivenOptions = std::map<std::string_view, OptionValue>;

// The help text of a table row, for commands that take its flag on their own terms.
std::string HelpOf(std::string_view key) {
  return std::string(gantry::internal::FindOption(key)->help);
}

// Adds the flag of every table row that `wanted` picks to `command`; what
// is given lands in `given`. `note` ends each help text.
void AddTableFlags(CLI::App* command, bool (*wanted)(const OptionRow&), std::string_view note,
                   GivenOptions* given) {
  for (const OptionRow& row : gantry::internal::OptionTable()) {
    if (row.flag.empty() || !wanted(row)) {
      continue;
    }
    const std::string flag(row.flag);
    const std::string help = std::string(row.help) + std::string(note);
    const std::string_view key = row.key;
    switch (row.type) {
      case OptionType::kBool:
        command->add_flag_callback(
            flag, [given, key] { (*given)[key] = true; }, help);
        break;
      case OptionType::kInt:
      case OptionType::kMilliseconds:
        command
            ->add_option_function<std::int64_t>(
                flag, [given, key](const std::int64_t& value) { (*given)[key] = value; }, help)
            ->check(RangeOf(*row.rule));
        break;
      default:
        command->add_option_function<std::string>(
            flag, [given, key](const std::string& value) { (*given)[key] = value; }, help);
        break;
    }
  }
}

// The given flags over `options` (the YAML's, or the defaults), each row
// through its `field` (OptionRow::deployment or ::flow). A flag group's
// flags replace the group as a set; a flag may imply a bool option.
template <typename Options>
void ApplyTableFlags(const GivenOptions& given, OptionField<Options> OptionRow::*field,
                     Options& options) {
  for (const OptionRow& row : gantry::internal::OptionTable()) {
    if (row.flag_group.empty() || !(row.*field).present()) {
      continue;
    }
    for (const auto& [key, value] : given) {
      if (gantry::internal::FindOption(key)->flag_group == row.flag_group) {
        (row.*field).set(options, std::string());
        break;
      }
    }
  }
  for (const auto& [key, value] : given) {
    const OptionRow& row = *gantry::internal::FindOption(key);
    if ((row.*field).present()) {
      (row.*field).set(options, value);
    }
    if (!row.flag_implies.empty()) {
      const OptionRow& implied = *gantry::internal::FindOption(row.flag_implies);
      if ((implied.*field).present()) {
        (implied.*field).set(options, true);
      }
    }
  }
}

// The HTTP port first: a reader that waits for --port-file finds both.
gantry::Status WritePortFiles(const ListenFlags& listen, int http_port, int port) {
  GANTRY_RETURN_IF_ERROR(gantry::internal::WritePortFile(listen.http_port_file, http_port));
  return gantry::internal::WritePortFile(listen.port_file, port);
}

// Replaces this process with gantry-worker so that signals reach it directly.
int ExecWorker(const std::vector<std::string>& args) {
  std::string program = gantry::internal::FindWorkerProgram();
  if (program.empty()) {
    program = "gantry-worker";  // execvp reports that it is missing
  }
  std::vector<std::string> storage = {program};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : storage) {
    argv.push_back(arg.data());
  }
  argv.push_back(nullptr);
  ::execvp(program.c_str(), argv.data());
  return Fail(gantry::FailedPreconditionError(
      "cannot run " + program + ": " + std::strerror(errno) + " (set GANTRY_WORKER_PROGRAM)"));
}

// `gantry executor`'s Prometheus metrics (Jina's --monitoring, --port-monitoring): a port of
// 0 or more, or --monitoring alone (any free port), turns them on.
struct MonitoringFlags {
  bool monitoring = false;
  int port_monitoring = -1;
  bool enabled() const { return monitoring || port_monitoring >= 0; }
};

// `gantry deployment` and `gantry flow` once started (Deployment or
// Flow): report the ports, serve until SIGINT or SIGTERM (Block), stop.
template <typename Service>
int ServeUntilSignal(Service& service, const ListenFlags& listen) {
  if (!service.ok()) {
    return Fail(service.status());
  }
  if (service.http_port() >= 0) {
    spdlog::info("HTTP gateway on port {}", service.http_port());
  }
  if (gantry::Status s = WritePortFiles(listen, service.http_port(), service.port()); !s.ok()) {
    return Fail(s);
  }
  service.Block();
  service.Stop();
  return 0;
}

// The API key from the environment when neither YAML nor --api-key gives
// one, so that it need not be written in a file or a process's arguments.
void ApiKeyFromEnvironment(std::string& api_key) {
  if (const char* key = std::getenv("GANTRY_API_KEY"); api_key.empty() && key != nullptr) {
    api_key = key;
  }
}

// --log-level and --log-format; empty: the YAML's, else the environment's.
struct LogFlags {
  std::string level;
  std::string format;
};

// A Deployment's options as `gantry deployment` makes them: the YAML, then
// the flags given over it, the API key from the environment, --log-level
// and --log-format.
gantry::StatusOr<gantry::DeploymentOptions> DeploymentOptionsOf(const std::string& uses,
                                                                const LogFlags& log,
                                                                const GivenOptions& given) {
  auto options = gantry::LoadDeploymentConfig(uses);
  if (!options.ok()) {
    return options.status();
  }
  ApplyTableFlags(given, &OptionRow::deployment, *options);
  ApiKeyFromEnvironment(options->api_key);
  if (!log.level.empty()) {
    options->log_level = log.level;
  }
  if (!log.format.empty()) {
    options->log_format = log.format;
  }
  return options;
}

// While alive, SIGHUP makes `reload` run on a thread of its own (one
// signal at a time; signals that arrive meanwhile run it once more).
// Construct it before any other thread starts, so that every thread has
// SIGHUP blocked and only this one takes it.
// Thread safety: construct and destroy on one thread.
class OnSighup {
 public:
  explicit OnSighup(std::function<void()> reload) {
    sigemptyset(&hup_);
    sigaddset(&hup_, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &hup_, nullptr);
    thread_ = std::thread([this, reload = std::move(reload)] {
      while (true) {
        int signal_number = 0;
        if (sigwait(&hup_, &signal_number) != 0 || stopping_.load()) {
          return;
        }
        reload();
      }
    });
  }
  ~OnSighup() { Stop(); }
  // Waits for a `reload` in progress; none runs after. Idempotent.
  void Stop() {
    if (!thread_.joinable()) {
      return;
    }
    stopping_.store(true);
    pthread_kill(thread_.native_handle(), SIGHUP);
    thread_.join();
  }
  OnSighup(const OnSighup&) = delete;
  OnSighup& operator=(const OnSighup&) = delete;

 private:
  sigset_t hup_{};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// What a SIGHUP's certificate reload came to, in the log; FAILED_PRECONDITION
// is a server without TLS, nothing to say.
void LogCertificateReload(const gantry::Status& certificates) {
  if (certificates.ok()) {
    spdlog::info("SIGHUP: TLS certificate and key read again");
  } else if (certificates.code() != gantry::StatusCode::kFailedPrecondition) {
    spdlog::error("SIGHUP: {}; the certificates in use stay", certificates.message());
  }
}

// Serves a Deployment or a Flow made of `options` as ServeUntilSignal does;
// on SIGHUP, `reread` gives its options again (the YAML `uses` and the
// flags) for a rolling restart, whose outcome is logged. `started` runs once
// the service is up.
template <typename Service, typename Options>
int ServeAndRollOnSighup(Options options, const std::string& uses,
                         const std::function<gantry::StatusOr<Options>()>& reread,
                         const ListenFlags& listen,
                         const std::function<void(Service&)>& started = {}) {
  // Before the service's threads: they must leave SIGHUP to this one.
  std::atomic<Service*> serving{nullptr};
  OnSighup reload([&] {
    Service* service = serving.load();
    if (service == nullptr) {
      spdlog::warn("SIGHUP: still starting; ignored");
      return;
    }
    if constexpr (requires { service->ReloadTls(); }) {
      LogCertificateReload(service->ReloadTls());
    }
    spdlog::info("SIGHUP: reading {} again for a rolling restart", uses);
    gantry::StatusOr<Options> next = reread();
    gantry::Status done =
        next.ok() ? service->RollingRestart(std::move(next).value()) : next.status();
    if (!done.ok()) {
      spdlog::error("SIGHUP: {}; the running replicas stay", done.message());
    }
  });
  Service service(std::move(options));
  serving.store(&service);
  if (started && service.ok()) {
    started(service);
  }
  const int rc = ServeUntilSignal(service, listen);
  reload.Stop();  // before the service goes
  return rc;
}

int RunDeployment(const std::string& uses, const ListenFlags& listen, const LogFlags& log,
                  const GivenOptions& given) {
  gantry::internal::InitProcessLogger("gateway", log.level, log.format).IgnoreError();
  auto options = DeploymentOptionsOf(uses, log, given);
  if (!options.ok()) {
    return Fail(options.status());
  }
  if (log.format.empty() && !options->log_format.empty()) {
    // The YAML's format for this process's lines too.
    gantry::internal::InitProcessLogger("gateway", log.level, options->log_format).IgnoreError();
  }
  if (gantry::Status s = CheckHttpPortFile(listen, options->http_port); !s.ok()) {
    return Fail(s);
  }
  return ServeAndRollOnSighup<gantry::Deployment, gantry::DeploymentOptions>(
      std::move(options).value(), uses, [&] { return DeploymentOptionsOf(uses, log, given); },
      listen,
      [](gantry::Deployment& deployment) {
        if (deployment.monitoring_port() >= 0) {
          for (const gantry::ReplicaInfo& replica : deployment.replicas()) {
            spdlog::info("{} metrics on 127.0.0.1:{}/metrics", replica.name,
                         replica.monitoring_port);
          }
        }
      });
}

// A Flow's options as `gantry flow` makes them: the YAML, the flags given
// over it, the API key from the environment, and --log-level and
// --log-format for every step.
gantry::StatusOr<gantry::FlowOptions> FlowOptionsOf(const std::string& uses, const LogFlags& log,
                                                    const GivenOptions& given) {
  auto options = gantry::LoadFlowConfig(uses);
  if (!options.ok()) {
    return options.status();
  }
  ApplyTableFlags(given, &OptionRow::flow, *options);
  ApiKeyFromEnvironment(options->api_key);
  for (gantry::FlowStep& step : options->executors) {
    if (!log.level.empty()) {
      step.deployment.log_level = log.level;
    }
    if (!log.format.empty()) {
      step.deployment.log_format = log.format;
    }
  }
  return options;
}

int RunFlow(const std::string& uses, const ListenFlags& listen, const LogFlags& log,
            const GivenOptions& given) {
  gantry::internal::InitProcessLogger("gateway", log.level, log.format).IgnoreError();
  auto options = FlowOptionsOf(uses, log, given);
  if (!options.ok()) {
    return Fail(options.status());
  }
  if (gantry::Status s = CheckHttpPortFile(listen, options->http_port); !s.ok()) {
    return Fail(s);
  }
  return ServeAndRollOnSighup<gantry::Flow, gantry::FlowOptions>(
      std::move(options).value(), uses, [&] { return FlowOptionsOf(uses, log, given); }, listen);
}

// `gantry executor`'s own flags.
struct ExecutorFlags {
  std::string host;
  int port = -1;
  std::string device;
  std::string name;
  std::string uses_with;
  std::vector<std::string> libs;
  std::int64_t max_message_bytes = 0;
  int max_connection_age = 0;
  MonitoringFlags monitoring;
  bool tracing = false;
  std::string traces_exporter_host = "localhost";
  int traces_exporter_port = 4317;
};

int RunExecutor(const std::string& uses, const ExecutorFlags& flags, const std::string& port_file,
                const LogFlags& log) {
  const auto& [host, port, device, name, uses_with, libs, max_message_bytes, max_connection_age,
               monitoring, tracing, traces_exporter_host, traces_exporter_port] = flags;
  if (tracing) {
    if (gantry::Status s = gantry::internal::CheckTracesExporterHost(traces_exporter_host);
        !s.ok()) {
      return Fail(s.WithPrefix("--traces-exporter-host"));
    }
  }
  gantry::internal::WorkerSpec spec;
  if (gantry::internal::KindOfUses(uses) == gantry::internal::UsesKind::kExecutorFile) {
    auto config = gantry::LoadExecutorConfig(uses);
    if (!config.ok()) {
      return Fail(config.status());
    }
    spec.jtype = config->jtype;
    spec.config_dir = config->config_dir;
    spec.with = config->with;
    spec.metas = config->metas;
    spec.dynamic_batching = config->dynamic_batching;
  } else {
    spec.jtype = uses;
  }
  if (!libs.empty()) {
    // Appended after the YAML's own metas.libs, loaded in that order.
    gantry::Value::List all;
    if (auto it = spec.metas.find("libs"); it != spec.metas.end() && it->second.AsList()) {
      all = *it->second.AsList();
    }
    for (const std::string& lib : libs) {
      all.emplace_back(lib);
    }
    spec.metas.insert_or_assign("libs", gantry::Value(std::move(all)));
  }
  if (!uses_with.empty()) {
    auto extra = gantry::internal::ValueDictFromJson(uses_with);
    if (!extra.ok()) {
      return Fail(extra.status().WithPrefix("--uses-with"));
    }
    for (auto& [key, value] : *extra) {
      spec.with.insert_or_assign(key, value);
    }
  }
  if (!device.empty()) {
    if (auto parsed = gantry::Device::Parse(device); !parsed.ok()) {
      return Fail(parsed.status().WithPrefix("--device"));
    }
    spec.with.insert_or_assign("device", gantry::Value(device));
  }
  if (auto d = spec.with.find("device"); d != spec.with.end()) {
    // --uses-with may have set it; the rule is the YAML loader's
    // (core/deployment_rules.h), the words the CLI's own.
    if (!gantry::internal::CheckDeviceValue(d->second).ok()) {
      return Fail(gantry::InvalidArgumentError(
          "with.device: expected \"cpu\", \"cuda\", \"cuda:N\" or \"auto\", got " +
          d->second.DebugString()));
    }
  }
  auto metas_name = spec.metas.find("name");
  spec.executor_name = !name.empty() ? name
                       : metas_name != spec.metas.end() && metas_name->second.AsText()
                           ? *metas_name->second.AsText()
                           : "executor";
  spec.runtime_name = spec.executor_name + "/rep-0";
  spec.port = port < 0 ? 0 : port;
  spec.port_file = port_file;
  if (monitoring.enabled()) {
    spec.monitoring_port = std::max(0, monitoring.port_monitoring);
  }
  spec.log_level = log.level;
  spec.log_format = log.format;
  if (max_message_bytes > 0) {
    spec.max_message_bytes = max_message_bytes;
  }
  spec.max_connection_age_seconds = max_connection_age;
  spec.tracing = tracing;
  spec.traces_exporter_host = traces_exporter_host;
  spec.traces_exporter_port = traces_exporter_port;
  // 127.0.0.1 unless told (core/listen_host.h); the images set
  // GANTRY_HOST=0.0.0.0, and exports pass --host 0.0.0.0.
  spec.host = host;
  return ExecWorker(gantry::internal::WorkerArguments(spec));
}

int RunGateway(const std::string& addresses, const std::string& host, const ListenFlags& listen,
               const std::string& name, const LogFlags& log, const GivenOptions& given,
               const std::vector<std::string>& models) {
  gantry::internal::InitProcessLogger("gateway", log.level, log.format).IgnoreError();
  // The gateway's settings are a Deployment's, less its replicas.
  gantry::DeploymentOptions settings{.name = name, .host = host};
  ApplyTableFlags(given, &OptionRow::deployment, settings);
  // --model NAME=ENDPOINT, as a YAML's `models:` map says it.
  for (const std::string& model : models) {
    const std::size_t equals = model.find('=');
    if (equals == std::string::npos) {
      return Fail(gantry::InvalidArgumentError("--model '" + model +
                                               "': expected NAME=ENDPOINT (my-model=/encode)"));
    }
    const std::string model_name = model.substr(0, equals);
    const std::string endpoint = model.substr(equals + 1);
    if (gantry::Status s = gantry::internal::CheckServedModel(model_name, endpoint); !s.ok()) {
      return Fail(s.WithPrefix("--model '" + model + "'"));
    }
    settings.models.insert_or_assign(model_name, endpoint);
  }
  ApiKeyFromEnvironment(settings.api_key);
  if (gantry::Status s = CheckHttpPortFile(listen, settings.http_port); !s.ok()) {
    return Fail(s);
  }
  if (gantry::Status s = gantry::internal::CheckServerTlsOptions(settings.tls); !s.ok()) {
    return Fail(s);
  }
  gantry::internal::GatewayOptions options = gantry::internal::GatewayOptionsOf(settings);
  const std::chrono::milliseconds timeout_drain = settings.timeout_drain;
  std::string rest = addresses;
  while (!rest.empty()) {
    std::size_t comma = rest.find(',');
    std::string address = rest.substr(0, comma);
    if (!address.empty()) {
      options.replica_addresses.push_back(address);
    }
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
  }
  // Before the gateway's threads, which must leave SIGHUP to this one.
  std::atomic<gantry::internal::Gateway*> serving{nullptr};
  OnSighup reload([&] {
    gantry::internal::Gateway* gateway = serving.load();
    if (gateway == nullptr) {
      spdlog::warn("SIGHUP: still starting; ignored");
      return;
    }
    LogCertificateReload(gateway->ReloadTls());
  });
  auto gateway = gantry::internal::Gateway::Start(std::move(options));
  if (!gateway.ok()) {
    return Fail(gateway.status());
  }
  serving.store(gateway->get());
  spdlog::info("ready and listening on {}:{}", host, (*gateway)->port());
  if ((*gateway)->http_port() >= 0) {
    spdlog::info("HTTP gateway on {}:{}", host, (*gateway)->http_port());
  }
  if (gantry::Status s = WritePortFiles(listen, (*gateway)->http_port(), (*gateway)->port());
      !s.ok()) {
    return Fail(s);
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int signal_number = 0;
  sigwait(&set, &signal_number);
  spdlog::info("received {}; draining requests in flight (up to {} ms)", strsignal(signal_number),
               timeout_drain.count());
  reload.Stop();  // before the gateway goes
  (*gateway)->Shutdown(timeout_drain);
  return 0;
}

int RunPing(const std::string& address, int timeout_ms, int attempts,
            const gantry::ClientTlsOptions& tls) {
  gantry::Client client(address, gantry::ClientOptions{.tls = tls});
  gantry::Status last;
  for (int i = 0; i < std::max(1, attempts); ++i) {
    last = client.Ping(std::chrono::milliseconds(timeout_ms));
    if (last.ok()) {
      std::printf("%s is ready\n", address.c_str());
      return 0;
    }
    if (i + 1 < attempts) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  std::fprintf(stderr, "gantry: %s is not ready: %s\n", address.c_str(), last.message().c_str());
  return 1;
}

// `gantry export TARGET CONFIG OUT`: the target is checked here so that a
// wrong one is named with the list of those there are.
int RunExport(const std::string& target, const std::string& config, const std::string& out,
              const gantry::ExportOptions& options) {
  gantry::StatusOr<std::vector<gantry::ExportedFile>> written = gantry::InvalidArgumentError(
      "unknown export target '" + target + "' (targets: kubernetes, docker-compose, swarm)");
  if (target == "kubernetes" || target == "k8s") {
    written = gantry::ExportKubernetes(config, out, options);
  } else if (target == "docker-compose" || target == "compose") {
    written = gantry::ExportDockerCompose(config, out, options);
  } else if (target == "swarm" || target == "docker-stack") {
    written = gantry::ExportDockerSwarm(config, out, options);
  }
  if (!written.ok()) {
    return Fail(written.status());
  }
  for (const gantry::ExportedFile& file : *written) {
    std::printf("wrote %s (%s)\n", file.path.c_str(), file.what.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  gantry::internal::DisableAbseilDeadlockDetection();
  // SIGINT/SIGTERM are waited for with sigwait (gateway) or a handler
  // (deployment); block them early so gRPC's threads inherit the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);

  CLI::App app{"Gantry: serve C++/libtorch executors as Jina-compatible gRPC microservices"};
  app.set_version_flag("-v,--version", kVersionText);
  app.require_subcommand(1);

  std::string uses;
  ListenFlags listen;
  // The images set it, so that their HEALTHCHECK finds whatever port a
  // YAML without `port:` was given.
  if (const char* port_file = std::getenv("GANTRY_PORT_FILE"); port_file != nullptr) {
    listen.port_file = port_file;
  }
  LogFlags log;
  constexpr const char* kLogLevelHelp = "debug, info, warning or error";
  constexpr const char* kLogFormatHelp =
      "text (default) or json: one JSON object per line ($GANTRY_LOG_FORMAT)";
  const auto log_flags = [&](CLI::App* command) {
    command->add_option("--log-level", log.level, kLogLevelHelp);
    command->add_option("--log-format", log.format, kLogFormatHelp)
        ->check(CLI::IsMember({"text", "json"}));
  };
  constexpr const char* kHttpPortFileHelp =
      "write the HTTP port here when ready (before --port-file; for --http-port 0)";
  // The option table's flags (core/option_table.h); one command is parsed.
  GivenOptions given;
  auto* deployment = app.add_subcommand("deployment",
                                        "Run a Deployment from YAML: a gateway and "
                                        "its worker replicas");
  deployment->add_option("--uses", uses, "deployment YAML (jtype: Deployment)")
      ->required()
      ->check(CLI::ExistingFile);
  AddTableFlags(
      deployment, [](const OptionRow& row) { return row.deployment.present(); },
      "; overrides the YAML's", &given);
  deployment->add_option("--port-file", listen.port_file,
                         "write the gateway's port here when ready (default $GANTRY_PORT_FILE)");
  deployment->add_option("--http-port-file", listen.http_port_file, kHttpPortFileHelp);
  log_flags(deployment);

  ExecutorFlags executor_flags;
  auto* executor = app.add_subcommand("executor", "Run one executor as a gRPC worker, no gateway");
  executor->add_option("--uses", uses, "executor YAML (jtype/with/metas) or an executor type name")
      ->required();
  std::string host = gantry::internal::DefaultListenHost();
  executor->add_option("--host", host,
                       "address to listen on (default $GANTRY_HOST, else 127.0.0.1)");
  executor->add_option("--port", executor_flags.port, "port to listen on (0 = any free)")
      ->check(RangeOf(gantry::internal::kPortRule));
  executor->add_option("--port-file", listen.port_file,
                       "write the port here when ready (default $GANTRY_PORT_FILE)");
  executor->add_option("--device", executor_flags.device,
                       "cpu, cuda, cuda:N or auto (overrides with.device)");
  executor->add_option("--name", executor_flags.name,
                       "executor name in logs (default: metas.name)");
  executor->add_option("--uses-with", executor_flags.uses_with, "JSON object merged over `with:`");
  executor->add_option("--lib", executor_flags.libs,
                       "executor plugin library to load before the type lookup (repeatable; "
                       "added to metas.libs)");
  log_flags(executor);
  executor
      ->add_option("--max-message-bytes", executor_flags.max_message_bytes,
                   HelpOf("max_message_bytes"))
      ->check(RangeOf(gantry::internal::kMaxMessageBytesRule));
  executor
      ->add_option("--max-connection-age", executor_flags.max_connection_age,
                   "seconds after which a client connection is asked to reconnect, so that a "
                   "gateway resolving one DNS name for all replicas finds new ones (0: never; "
                   "exports set 30)")
      ->check(RangeOf(gantry::internal::kMaxConnectionAgeRule));
  executor->add_flag("--monitoring", executor_flags.monitoring.monitoring, HelpOf("monitoring"));
  executor
      ->add_option("--port-monitoring", executor_flags.monitoring.port_monitoring,
                   HelpOf("port_monitoring"))
      ->check(RangeOf(gantry::internal::kPortRule));
  executor->add_flag("--tracing", executor_flags.tracing, HelpOf("tracing"));
  executor->add_option("--traces-exporter-host", executor_flags.traces_exporter_host,
                       HelpOf("traces_exporter_host"));
  executor
      ->add_option("--traces-exporter-port", executor_flags.traces_exporter_port,
                   HelpOf("traces_exporter_port"))
      ->check(RangeOf(gantry::internal::kTracesExporterPortRule));

  std::string addresses;
  auto* gateway = app.add_subcommand("gateway", "Run a gateway in front of running workers");
  gateway->add_option("--replica-addresses", addresses, "comma-separated HOST:PORT of replicas")
      ->required();
  gateway->add_option("--host", host,
                      "address to listen on (default $GANTRY_HOST, else 127.0.0.1)");
  AddTableFlags(
      gateway, [](const OptionRow& row) { return row.gateway_flag; }, "", &given);
  std::string gateway_name = "executor";
  gateway->add_option("--name", gateway_name, "deployment name for messages");
  std::vector<std::string> gateway_models;
  gateway->add_option("--model", gateway_models,
                      "NAME=ENDPOINT: a model name for the OpenAI, TEI and KServe v2 APIs and "
                      "the executor endpoint that serves it (repeatable; default: --name serves "
                      "/encode)");
  gateway->add_option("--port-file", listen.port_file,
                      "write the port here when ready (default $GANTRY_PORT_FILE)");
  gateway->add_option("--http-port-file", listen.http_port_file, kHttpPortFileHelp);
  log_flags(gateway);

  std::string address;
  int timeout_ms = 3000;
  int attempts = 1;
  auto* ping = app.add_subcommand("ping", "Health-check a gateway or executor (exit 0 if ready)");
  ping->add_option("address", address, "HOST:PORT")->required();
  ping->add_option("--timeout", timeout_ms, "milliseconds per attempt")->default_val(3000);
  ping->add_option("--attempts", attempts, "attempts before giving up")->default_val(1);
  gantry::ClientTlsOptions client_tls;
  ping->add_flag("--tls", client_tls.enabled, "connect with TLS (implied by the --ssl-* options)");
  ping->add_option("--ssl-cafile", client_tls.ca_file,
                   "trust these PEM CA certificates (default: the system's)");
  ping->add_option("--ssl-certfile", client_tls.cert_file, "client certificate (PEM)");
  ping->add_option("--ssl-keyfile", client_tls.key_file, "client certificate's key (PEM)");

  auto* flow = app.add_subcommand(
      "flow", "Run a Flow from YAML: one gateway and a Deployment per step, chained or a DAG");
  flow->add_option("--uses", uses, "flow YAML (jtype: Flow)")->required()->check(CLI::ExistingFile);
  AddTableFlags(
      flow, [](const OptionRow& row) { return row.flow.present(); }, "; overrides the YAML's",
      &given);
  flow->add_option("--port-file", listen.port_file,
                   "write the gateway's port here when ready (default $GANTRY_PORT_FILE)");
  flow->add_option("--http-port-file", listen.http_port_file, kHttpPortFileHelp);
  log_flags(flow);

  auto* executors = app.add_subcommand("executors", "List the executor types gantry-worker serves");

  std::string export_target;
  std::string export_config;
  std::string export_out;
  gantry::ExportOptions export_options;
  auto* export_command = app.add_subcommand(
      "export",
      "Write Kubernetes manifests, a docker-compose file or a Docker Swarm stack file for a "
      "Deployment or Flow YAML");
  export_command->add_option("target", export_target, "kubernetes, docker-compose or swarm")
      ->required();
  // No ExistingFile check: an unknown target is reported first, a missing
  // file by the loader.
  export_command->add_option("config", export_config, "Deployment or Flow YAML")->required();
  export_command
      ->add_option("out", export_out,
                   "output directory (kubernetes) or file (docker-compose, swarm)")
      ->required();
  export_command->add_option("--namespace", export_options.k8s_namespace,
                             "Kubernetes namespace (default: default)");
  export_command->add_option("--image", export_options.image,
                             "image of the gateway and CPU executors (default: gantry:cpu)");
  export_command->add_option("--gpu-image", export_options.gpu_image,
                             "image of executors that use GPUs (default: gantry:cuda)");

  std::string new_name;
  std::string new_dir;
  auto* scaffold = app.add_subcommand(
      "new", "Create a new executor project (source, CMake, YAML, Dockerfile, README)");
  scaffold->add_option("name", new_name, "executor class name, e.g. MyEncoder")->required();
  scaffold->add_option("--dir", new_dir, "where to create it (default: ./NAME)");

  CLI11_PARSE(app, argc, argv);

  if (deployment->parsed() || flow->parsed() || gateway->parsed()) {
    // These processes are gateways: see gantry/heap.h.
    gantry::ReturnMessageBuffersWhenFreed();
  }
  if (deployment->parsed()) {
    return RunDeployment(uses, listen, log, given);
  }
  if (flow->parsed()) {
    return RunFlow(uses, listen, log, given);
  }
  if (executor->parsed()) {
    executor_flags.host = host;
    return RunExecutor(uses, executor_flags, listen.port_file, log);
  }
  if (gateway->parsed()) {
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    return RunGateway(addresses, host, listen, gateway_name, log, given, gateway_models);
  }
  if (ping->parsed()) {
    // A CA or client certificate only makes sense over TLS.
    client_tls.enabled = client_tls.enabled || !client_tls.ca_file.empty() ||
                         !client_tls.cert_file.empty() || !client_tls.key_file.empty();
    return RunPing(address, timeout_ms, attempts, client_tls);
  }
  if (export_command->parsed()) {
    return RunExport(export_target, export_config, export_out, export_options);
  }
  if (scaffold->parsed()) {
    gantry::Status status =
        gantry::cli::CreateExecutorProject(new_name, new_dir.empty() ? new_name : new_dir);
    if (!status.ok()) {
      return Fail(status);
    }
    std::printf("created executor project %s in %s\n", new_name.c_str(),
                (new_dir.empty() ? new_name : new_dir).c_str());
    return 0;
  }
  if (executors->parsed()) {
    return ExecWorker({gantry::internal::kWorkerFlag, "--list-executors"});
  }
  return 0;
} catch (const std::exception& e) {
  // Our bug, not the user's: still a message and an exit code, not an abort.
  std::fprintf(stderr, "gantry: internal error: %s\n", e.what());
  return 70;
}
