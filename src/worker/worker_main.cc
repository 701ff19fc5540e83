// Worker process entry: gantry::Init / gantry::RunWorkerMain.
//
// Start-up protocol with the parent (src/deployment): the parent passes a
// status pipe (--status-fd) and a lifeline pipe (--lifeline-fd). The worker
// constructs its executor, starts serving, then writes "READY <port>" (or
// "ERROR <message>") to the status pipe and closes it. The lifeline pipe's
// write end stays with the parent; when the parent dies, even by SIGKILL,
// the worker reads EOF and exits.
#include <fcntl.h>
#include <gantry/config.h>
#include <gantry/device_runtime.h>
#include <gantry/heap.h>
#include <gantry/init.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/cpu_quota.h"
#include "common/grpc_options.h"
#include "common/metrics_server.h"
#include "common/port_file.h"
#include "common/tracing.h"
#include "core/deployment_rules.h"
#include "core/limits.h"
#include "core/logging.h"
#include "core/registry.h"
#include "core/value_json.h"
#include "core/worker_mode.h"
#include "worker/plugin_loader.h"
#include "worker/request_handler.h"
#include "worker/worker_metrics.h"
#include "worker/worker_service.h"
#include "worker/worker_spec.h"

namespace gantry {
namespace internal {

std::string WorkerSpecToJson(const WorkerSpec& spec) {
  nlohmann::json j;
  j["jtype"] = spec.jtype;
  j["with"] = nlohmann::json::parse(ValueDictToJson(spec.with));
  j["metas"] = nlohmann::json::parse(ValueDictToJson(spec.metas));
  j["executor_name"] = spec.executor_name;
  j["runtime_name"] = spec.runtime_name;
  j["replica_id"] = spec.replica_id;
  j["replicas"] = spec.replicas;
  j["device"] = spec.device;
  j["host"] = spec.host;
  j["port"] = spec.port;
  j["log_level"] = spec.log_level;
  j["log_format"] = spec.log_format;
  j["port_file"] = spec.port_file;
  nlohmann::json batching = nlohmann::json::object();
  for (const auto& [key, b] : spec.dynamic_batching) {
    batching[key] = {{"preferred_batch_size", b.preferred_batch_size},
                     {"timeout_ms", b.timeout_ms},
                     {"flush_all", b.flush_all},
                     {"max_batch_size", b.max_batch_size},
                     {"max_queue_size", b.max_queue_size},
                     {"queue_timeout_ms", b.queue_timeout_ms},
                     {"priority_levels", b.priority_levels},
                     {"default_priority_level", b.default_priority_level},
                     {"timeout_delay", b.timeout_action == DynamicBatching::TimeoutAction::kDelay},
                     {"allow_timeout_override", b.allow_timeout_override},
                     {"enabled", b.enabled}};
  }
  j["dynamic_batching"] = std::move(batching);
  if (!spec.config_dir.empty()) {
    j["config_dir"] = spec.config_dir;
  }
  j["max_message_bytes"] = spec.max_message_bytes;
  j["monitoring_port"] = spec.monitoring_port;
  j["max_connection_age_seconds"] = spec.max_connection_age_seconds;
  if (spec.tracing) {
    j["tracing"] = true;
    j["traces_exporter_host"] = spec.traces_exporter_host;
    j["traces_exporter_port"] = spec.traces_exporter_port;
  }
  return j.dump();
}

StatusOr<WorkerSpec> WorkerSpecFromJson(std::string_view json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgumentError("worker spec is not a JSON object");
  }
  WorkerSpec spec;
  try {
    spec.jtype = j.at("jtype").get<std::string>();
    GANTRY_ASSIGN_OR_RETURN(spec.with,
                            ValueDictFromJson(j.value("with", nlohmann::json::object()).dump()));
    GANTRY_ASSIGN_OR_RETURN(spec.metas,
                            ValueDictFromJson(j.value("metas", nlohmann::json::object()).dump()));
    spec.executor_name = j.value("executor_name", spec.executor_name);
    spec.runtime_name = j.value("runtime_name", spec.runtime_name);
    spec.replica_id = j.value("replica_id", 0);
    spec.replicas = j.value("replicas", 1);
    spec.device = j.value("device", spec.device);
    spec.host = j.value("host", spec.host);
    spec.port = j.value("port", 0);
    spec.log_level = j.value("log_level", "");
    spec.log_format = j.value("log_format", "");
    spec.port_file = j.value("port_file", "");
    spec.config_dir = j.value("config_dir", "");
    spec.max_message_bytes = j.value("max_message_bytes", kDefaultMaxMessageBytes);
    spec.monitoring_port = j.value("monitoring_port", -1);
    spec.max_connection_age_seconds = j.value("max_connection_age_seconds", 0);
    spec.tracing = j.value("tracing", false);
    spec.traces_exporter_host = j.value("traces_exporter_host", spec.traces_exporter_host);
    spec.traces_exporter_port = j.value("traces_exporter_port", spec.traces_exporter_port);
    GANTRY_RETURN_IF_ERROR(
        CheckIntOption(kMaxMessageBytesRule, "max_message_bytes", spec.max_message_bytes)
            .WithPrefix("worker spec"));
    GANTRY_RETURN_IF_ERROR(CheckIntOption(kMaxConnectionAgeRule, "max_connection_age_seconds",
                                          spec.max_connection_age_seconds)
                               .WithPrefix("worker spec"));
    const nlohmann::json& batching =
        j.contains("dynamic_batching") ? j.at("dynamic_batching") : nlohmann::json::object();
    for (auto it = batching.begin(); batching.is_object() && it != batching.end(); ++it) {
      const nlohmann::json& b = it.value();
      DynamicBatching& out = spec.dynamic_batching[it.key()];
      out.preferred_batch_size = b.value("preferred_batch_size", out.preferred_batch_size);
      out.timeout_ms = b.value("timeout_ms", out.timeout_ms);
      out.flush_all = b.value("flush_all", out.flush_all);
      out.max_batch_size = b.value("max_batch_size", out.max_batch_size);
      out.max_queue_size = b.value("max_queue_size", out.max_queue_size);
      out.queue_timeout_ms = b.value("queue_timeout_ms", out.queue_timeout_ms);
      out.priority_levels = b.value("priority_levels", out.priority_levels);
      out.default_priority_level = b.value("default_priority_level", out.default_priority_level);
      out.timeout_action = b.value("timeout_delay", false)
                               ? DynamicBatching::TimeoutAction::kDelay
                               : DynamicBatching::TimeoutAction::kReject;
      out.allow_timeout_override = b.value("allow_timeout_override", out.allow_timeout_override);
      out.enabled = b.value("enabled", out.enabled);
    }
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(std::string("worker spec: ") + e.what());
  }
  return spec;
}

std::vector<std::string> WorkerArguments(const WorkerSpec& spec) {
  return {kWorkerFlag, "--spec", WorkerSpecToJson(spec)};
}

namespace {

void WriteAll(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

struct WorkerFlags {
  std::string spec_json;
  int status_fd = -1;
  int lifeline_fd = -1;
  bool list_executors = false;
};

StatusOr<WorkerFlags> ParseWorkerFlags(int argc, char** argv) {
  WorkerFlags flags;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (arg == kWorkerFlag) {
      continue;
    } else if (arg == "--spec") {
      const char* v = next();
      if (v == nullptr) {
        return InvalidArgumentError("--spec needs a JSON value");
      }
      flags.spec_json = v;
    } else if (arg == "--status-fd" || arg == "--lifeline-fd") {
      const char* v = next();
      if (v == nullptr) {
        return InvalidArgumentError(std::string(arg) + " needs a number");
      }
      (arg == "--status-fd" ? flags.status_fd : flags.lifeline_fd) = std::atoi(v);
    } else if (arg == "--list-executors") {
      flags.list_executors = true;
    } else if (arg == "--help" || arg == "-h") {
      return InvalidArgumentError(
          "usage: gantry-worker --spec JSON [--status-fd N] [--lifeline-fd N] | "
          "--list-executors\n(workers are normally started by a Deployment or "
          "`gantry executor`)");
    } else {
      return InvalidArgumentError("unknown worker flag '" + std::string(arg) + "'");
    }
  }
  if (!flags.list_executors && flags.spec_json.empty()) {
    return InvalidArgumentError("missing --spec JSON (see --help)");
  }
  return flags;
}

void PrintExecutors() {
  for (const ExecutorTypeInfo& info : RegisteredExecutors()) {
    std::printf("%s%s\n", info.name.c_str(),
                info.handlers_on_receiving_thread ? "  (handlers on the receiving thread)" : "");
    for (const auto& [endpoint, method] : info.endpoints) {
      std::printf("  %-20s -> %s\n", endpoint.c_str(), method.c_str());
    }
  }
}

// Blocks SIGINT/SIGTERM in every thread (gRPC's included, which inherit the
// mask) so that one thread can sigwait for them.
sigset_t BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// Closes the status pipe. When it is stdout (a container replica), stdout
// is pointed at /dev/null instead, so no later write lands in a file that
// happens to take descriptor 1.
void CloseStatusFd(int fd) {
  if (fd != STDOUT_FILENO) {
    ::close(fd);
    return;
  }
  int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null_fd >= 0) {
    ::dup2(null_fd, STDOUT_FILENO);
    ::close(null_fd);
  }
}

// GANTRY_EXECUTOR of the image: an executor type, or the path of an executor
// YAML inside the image whose with/metas/dynamic_batching the spec's own
// (the Deployment's uses_with, ...) override.
Status TakeExecutorFromImage(WorkerSpec& spec) {
  const char* env = std::getenv("GANTRY_EXECUTOR");
  std::string executor = env != nullptr ? env : "";
  if (executor.empty()) {
    return InvalidArgumentError(
        "no executor named: the Deployment's uses is a docker:// image, and the image sets no "
        "GANTRY_EXECUTOR (an executor type or an executor YAML path; set it in the image or the "
        "Deployment's env)");
  }
  if (KindOfUses(executor) != UsesKind::kExecutorFile) {
    spec.jtype = executor;
    return OkStatus();
  }
  StatusOr<ExecutorConfig> config = LoadExecutorConfig(executor);
  if (!config.ok()) {
    return config.status().WithPrefix("GANTRY_EXECUTOR");
  }
  spec.jtype = config->jtype;
  if (spec.config_dir.empty()) {
    spec.config_dir = config->config_dir;
  }
  spec.with.merge(config->with);  // keys the spec has win
  spec.metas.merge(config->metas);
  spec.dynamic_batching.merge(config->dynamic_batching);
  return OkStatus();
}

int RunWorker(const WorkerFlags& flags) {
  auto report_error = [&](const Status& status) {
    spdlog::error("{}", status.message());
    if (flags.status_fd >= 0) {
      WriteAll(flags.status_fd, "ERROR " + status.message());
      CloseStatusFd(flags.status_fd);
    }
    return 1;
  };
  sigset_t signals = BlockShutdownSignals();

  StatusOr<WorkerSpec> spec = WorkerSpecFromJson(flags.spec_json);
  if (!spec.ok()) {
    InitProcessLogger("worker").IgnoreError();
    return report_error(spec.status());
  }
  if (Status s = InitProcessLogger(spec->runtime_name, spec->log_level, spec->log_format);
      !s.ok()) {
    InitProcessLogger(spec->runtime_name, "info", "text").IgnoreError();
    return report_error(s);
  }

  // libgomp and libtorch would start a thread per CPU the process may run
  // on and ignore its cgroup's CPU quota (a container's --cpus, a pod's cpu
  // limit), then be throttled. Set before the executor's first torch op, which
  // reads these variables, and before any thread of ours could read the
  // environment.
  if (!ThreadPoolsSizedByUser({})) {
    const int affinity = AffinityCpuCores();
    const int usable = AvailableCpuCores();
    if (usable < affinity) {
      const std::string threads = std::to_string(usable);
      for (const char* variable : kThreadCountVariables) {
        ::setenv(variable, threads.c_str(), 1);
      }
      spdlog::info(
          "the CPU quota of this process's cgroup allows {} of the {} cores it may run on: "
          "OMP_NUM_THREADS={} (set OMP_NUM_THREADS to choose)",
          usable, affinity, usable);
    }
  }

  // Before any model allocates: see gantry/heap.h.
  if (const HeapTuning heap = KeepModelBuffersInHeap(); heap != HeapTuning::kApplied) {
    spdlog::debug("malloc: {}; glibc's thresholds left as they are ({})",
                  MallocKindName(CurrentMalloc()),
                  heap == HeapTuning::kLeftToEnvironment ? "the environment sets them"
                                                         : "not glibc's malloc");
  }

  // The parent's death closes the lifeline: leave at once, nobody is
  // listening any more. Watched before the (possibly long) model load.
  if (flags.lifeline_fd >= 0) {
    std::thread([fd = flags.lifeline_fd] {
      char byte;
      while (true) {
        ssize_t n = ::read(fd, &byte, 1);
        if (n < 0 && errno == EINTR) {
          continue;
        }
        if (n <= 0) {
          break;
        }
      }
      spdlog::warn("parent process is gone; exiting");
      std::_Exit(0);
    }).detach();
  }

  // A container replica (`uses: docker://IMAGE`) runs the executor its image
  // names: the Deployment cannot know it.
  if (spec->jtype.empty()) {
    if (Status s = TakeExecutorFromImage(*spec); !s.ok()) {
      return report_error(s.WithPrefix(spec->runtime_name));
    }
  }

  ExecutorContext context;
  context.name = spec->executor_name;
  context.replica_id = spec->replica_id;
  context.replicas = spec->replicas;
  context.metas = spec->metas;
  context.with = Parameters(spec->with);
  context.config_dir = spec->config_dir;
  context.max_message_bytes = spec->max_message_bytes;
  std::string device_text = spec->device;
  if (const Value* d = context.with.Find("device"); d != nullptr && d->AsText() != nullptr) {
    device_text = *d->AsText();
  }
  StatusOr<Device> device = Device::Parse(device_text);
  if (!device.ok()) {
    return report_error(device.status().WithPrefix("with.device"));
  }
  context.device = *device;
  if (const Value* w = context.metas.count("workspace") ? &context.metas.at("workspace") : nullptr;
      w != nullptr && w->AsText() != nullptr) {
    context.workspace = *w->AsText();
  }

  spdlog::info("starting executor {} on {}", spec->jtype, context.device.ToString());
  // Plugins first: their registrars add the executor type looked up next.
  if (Status s = LoadExecutorPlugins(spec->metas); !s.ok()) {
    return report_error(s.WithPrefix(spec->runtime_name));
  }
  // The device's libraries (libtorch's CUDA half on a GPU) before the
  // executor's constructor, which may use the device however it likes; a
  // replica on the CPU maps none of them.
  if (Status s = LoadDeviceRuntimes(context.device); !s.ok()) {
    return report_error(s.WithPrefix(spec->runtime_name));
  }
  auto handler =
      RequestHandler::Create(spec->jtype, context, spec->runtime_name, spec->dynamic_batching);
  if (!handler.ok()) {
    return report_error(handler.status());
  }
  // Every tensor the executor registered must be on its device; a model
  // left behind on the CPU fails the start instead of running slowly.
  {
    auto info = (*handler)->DeviceInfo();
    if (!info["device_misplaced"].empty()) {
      return report_error(FailedPreconditionError(
          "executor '" + spec->jtype + "' (" + spec->runtime_name + "): " +
          "registered tensors are not on " + info["device"] + ": " + info["device_misplaced"]));
    }
    spdlog::info("device={} name=\"{}\" memory_used={} memory_total={} tensors_on_device={}",
                 info["device"], info["device_name"], info["device_memory_used_bytes"],
                 info["device_memory_total_bytes"], info["device_tensors"]);
  }
  // Metrics first: requests may arrive as soon as the gRPC server is up.
  std::unique_ptr<WorkerMetrics> metrics;
  std::unique_ptr<MetricsServer> metrics_server;
  if (spec->monitoring_port >= 0) {
    metrics = std::make_unique<WorkerMetrics>(spec->executor_name, spec->runtime_name,
                                              (*handler)->Endpoints(), (*handler)->device());
    auto started = MetricsServer::Start(spec->host, spec->monitoring_port, metrics->collectables());
    if (!started.ok()) {
      return report_error(started.status().WithPrefix(spec->runtime_name));
    }
    metrics_server = std::move(started).value();
    (*handler)->AttachMetrics(metrics.get());
    spdlog::info("metrics on {}:{}/metrics", spec->host, metrics_server->port());
  }
  std::unique_ptr<Tracer> tracer;
  if (spec->tracing) {
    auto created = Tracer::Create({.enabled = true,
                                   .exporter_host = spec->traces_exporter_host,
                                   .exporter_port = spec->traces_exporter_port},
                                  spec->runtime_name);
    if (!created.ok()) {
      return report_error(created.status().WithPrefix(spec->runtime_name));
    }
    tracer = std::move(created).value();
    (*handler)->AttachTracer(tracer.get());
  }
  auto server = WorkerServer::Start(handler->get(), spec->host, spec->port, spec->max_message_bytes,
                                    std::chrono::seconds(spec->max_connection_age_seconds));
  if (!server.ok()) {
    return report_error(server.status().WithPrefix(spec->runtime_name));
  }
  int port = (*server)->port();
  if (Status written = WritePortFile(spec->port_file, port); !written.ok()) {
    return report_error(written.WithPrefix(spec->runtime_name));
  }
  spdlog::info("ready and listening on {}:{}", spec->host, port);
  if (flags.status_fd >= 0) {
    // The newline ends the report where the pipe cannot be closed: a
    // container's stdout stays open in the attached `docker run`.
    WriteAll(flags.status_fd,
             "READY " + std::to_string(port) +
                 (metrics_server ? " " + std::to_string(metrics_server->port()) : "") + "\n");
    CloseStatusFd(flags.status_fd);
  }

  std::thread signal_waiter([&signals, &server] {
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    spdlog::info("received {}; draining requests in flight", strsignal(signal_number));
    // Calls in flight may finish within the grace period; new ones are refused.
    (*server)->Shutdown(std::chrono::seconds(5));
  });
  (*server)->Wait();
  (*handler)->Close();
  // If Wait returned without a signal (it cannot today), wake the waiter.
  ::kill(::getpid(), SIGTERM);
  signal_waiter.join();
  spdlog::info("stopped");
  // The executor's destructor runs here; the server calls it no more.
  handler->reset();
  tracer.reset();  // sends the spans still queued (a bounded wait)
#if defined(__SANITIZE_ADDRESS__)
  // LeakSanitizer checks now (it exits non-zero on a leak), since the exit
  // below skips the check it would make at an ordinary exit.
  __lsan_do_leak_check();
#endif
  // The process ends here, without the gRPC server's destructor: it was
  // seen to wait 10 s for one of gRPC's own threads (in a poll) after the
  // server had shut down, so that the worker outlived the Deployment's 8 s
  // stop grace and was killed. Nothing is left that the kernel does not
  // clean up.
  spdlog::shutdown();
  std::fflush(nullptr);
  std::_Exit(0);
}

}  // namespace
}  // namespace internal

bool IsWorkerInvocation(int argc, char** argv) {
  return argc >= 2 && std::strcmp(argv[1], internal::kWorkerFlag) == 0;
}

int RunWorkerMain(int argc, char** argv) {
  internal::NoteWorkerMainEntered();  // how Init marks worker mode
  internal::DisableAbseilDeadlockDetection();
  StatusOr<internal::WorkerFlags> flags = internal::ParseWorkerFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "gantry-worker: %s\n", flags.status().message().c_str());
    return 2;
  }
  if (flags->list_executors) {
    internal::PrintExecutors();
    return 0;
  }
  return internal::RunWorker(*flags);
}

void Init(int argc, char** argv) {
  // Also for the program's own Deployment, whose gateway runs in it.
  internal::DisableAbseilDeadlockDetection();
  if (IsWorkerInvocation(argc, argv)) {
    std::exit(RunWorkerMain(argc, argv));
  }
}

}  // namespace gantry
