#include "deployment/container_replica.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

#include "core/deployment_rules.h"
#include "deployment/child_process.h"

namespace gantry::internal {
namespace {

constexpr std::size_t kMaxImageName = 255;

bool IsImageChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-' || c == '/' || c == ':' || c == '@';
}

// Docker's names: [a-zA-Z0-9][a-zA-Z0-9_.-]*; anything else becomes '-'.
std::string NameSafe(std::string_view text) {
  std::string out;
  for (char c : text) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-';
    out += ok ? c : '-';
  }
  return out.substr(0, 64);
}

struct CommandResult {
  std::optional<int> wait_status;  // empty: killed after the timeout
  std::string output;              // stdout and stderr together
};

// Runs `docker ARGS`, output captured, killed after `timeout`.
StatusOr<CommandResult> RunDocker(const std::string& docker, std::vector<std::string> args,
                                  std::chrono::milliseconds timeout) {
  char path[] = "/tmp/gantry-docker-XXXXXX";
  int fd = ::mkstemp(path);
  if (fd < 0) {
    return InternalError("cannot create a temporary file for docker's output");
  }
  ::close(fd);
  ChildProcessOptions options;
  options.program = docker;
  options.args = std::move(args);
  options.output_file = path;
  auto process = ChildProcess::Spawn(options);
  if (!process.ok()) {
    ::unlink(path);
    return process.status().WithPrefix("cannot run " + docker);
  }
  CommandResult result;
  if ((*process)->WaitFor(timeout)) {
    result.wait_status = (*process)->exit_status();
  } else {
    (*process)->Terminate(std::chrono::milliseconds(1000));
  }
  std::ifstream in(path);
  result.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  ::unlink(path);
  while (!result.output.empty() && (result.output.back() == '\n' || result.output.back() == ' ')) {
    result.output.pop_back();
  }
  return result;
}

bool Succeeded(const CommandResult& result) {
  return result.wait_status && WIFEXITED(*result.wait_status) &&
         WEXITSTATUS(*result.wait_status) == 0;
}

}  // namespace

Status CheckDockerImageName(std::string_view image) {
  if (image.empty()) {
    return InvalidArgumentError("docker:// names no image (expected docker://IMAGE[:TAG])");
  }
  if (image.size() > kMaxImageName) {
    return InvalidArgumentError("docker image name is longer than 255 characters");
  }
  for (char c : image) {
    if (!IsImageChar(c)) {
      return InvalidArgumentError("docker image \"" + std::string(image) +
                                  "\" has a character an image reference cannot have");
    }
  }
  if (image.front() == '-' || image.front() == ':' || image.front() == '/') {
    return InvalidArgumentError("docker image \"" + std::string(image) +
                                "\" does not start with a name");
  }
  return OkStatus();
}

std::string DockerProgram() {
  const char* env = std::getenv("GANTRY_DOCKER");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string("docker");
}

std::string ContainerName(std::string_view deployment, int replica_index, int start) {
  return "gantry-" + NameSafe(deployment) + "-rep" + std::to_string(replica_index) + "-" +
         std::to_string(::getpid()) + "-" + std::to_string(start);
}

std::vector<std::string> DockerRunArguments(const DockerRunRequest& request) {
  std::vector<std::string> args = {
      "run",
      // Removed as soon as it stops, whoever stops it.
      "--rm",
      // Attached stdin: its EOF (the lifeline) ends the worker.
      "-i", "--name", request.container_name,
      // The worker's port (and metrics port) are the host's, as for a local
      // replica; nothing needs publishing.
      "--network", "host",
      // The image's HEALTHCHECK watches a fixed gateway port; a replica's
      // port is chosen at start and the Deployment checks it itself.
      "--no-healthcheck"};
  for (const auto& [key, value] : request.labels) {
    args.insert(args.end(), {"--label", key + "=" + value});
  }
  if (!request.gpus.empty()) {
    // Quoted: docker reads the value as CSV, and "device=0,1" has a comma.
    args.insert(args.end(), {"--gpus", request.gpus == "all" ? std::string("all")
                                                             : "\"device=" + request.gpus + "\""});
  }
  for (const auto& [key, value] : request.env) {
    args.insert(args.end(), {"-e", key + "=" + value});
  }
  for (const std::string& volume : request.volumes) {
    args.insert(args.end(), {"-v", volume});
  }
  args.insert(args.end(), {"--entrypoint", "gantry-worker", request.image});
  args.insert(args.end(), request.worker_args.begin(), request.worker_args.end());
  args.insert(args.end(), {"--status-fd", "1", "--lifeline-fd", "0"});
  return args;
}

Status CheckDockerImagePresent(const std::string& docker, std::string_view image,
                               std::chrono::milliseconds timeout) {
  StatusOr<CommandResult> ran =
      RunDocker(docker, {"image", "inspect", "--format", "{{.Id}}", std::string(image)}, timeout);
  if (!ran.ok()) {
    return ran.status().WithPrefix("docker image \"" + std::string(image) +
                                   "\" (GANTRY_DOCKER names the docker program)");
  }
  const CommandResult& result = *ran;
  if (Succeeded(result)) {
    return OkStatus();
  }
  if (!result.wait_status) {
    return DeadlineExceededError("`" + docker + " image inspect " + std::string(image) +
                                 "` did not answer within " + std::to_string(timeout.count()) +
                                 " ms: is dockerd running?");
  }
  if (result.output.find("No such image") != std::string::npos) {
    return NotFoundError("docker image \"" + std::string(image) +
                         "\" is not on this machine (nothing is pulled; build it, e.g. with "
                         "scripts/docker_images.sh, or docker load it)");
  }
  return UnavailableError("cannot ask docker about image \"" + std::string(image) +
                          "\": " + ChildProcess::DescribeWaitStatus(*result.wait_status) + ": " +
                          result.output.substr(0, 500));
}

Status RemoveContainer(const std::string& docker, const std::string& name,
                       std::chrono::milliseconds timeout) {
  GANTRY_ASSIGN_OR_RETURN(CommandResult result, RunDocker(docker, {"rm", "-f", name}, timeout));
  if (Succeeded(result) || result.output.find("No such container") != std::string::npos) {
    return OkStatus();
  }
  return UnavailableError("docker rm -f " + name + ": " + result.output.substr(0, 500));
}

}  // namespace gantry::internal
