// Replicas that run as Docker containers (`uses: docker://IMAGE`, as Jina).
//
// A container replica is a `docker run` client process that the Deployment
// owns like any worker process (internal::ChildProcess): the client stays
// attached, so the container's stdout carries the worker's READY line, its
// stderr the worker's log, and SIGTERM to the client is passed on to the
// worker. The container's stdin is the lifeline: `docker run -i` closes it
// when the client's own stdin (the lifeline pipe) reaches EOF or the client
// dies, so the worker exits and `--rm` removes the container on every exit
// path of the Deployment's process, SIGKILL included. The container shares
// the host's network, so the worker's port is reached as a local one.
//
// Thread safety: free functions without shared state; safe from any thread.
#ifndef GANTRY_DEPLOYMENT_CONTAINER_REPLICA_H_
#define GANTRY_DEPLOYMENT_CONTAINER_REPLICA_H_

#include <gantry/status.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/deployment_rules.h"  // IsDockerUses, DockerImageOf

namespace gantry::internal {

// An image reference Docker accepts: [registry/]name[:tag][@digest], at most
// 255 characters.
Status CheckDockerImageName(std::string_view image);

// $GANTRY_DOCKER, else "docker" (searched in $PATH).
std::string DockerProgram();

// A container name Docker accepts, unique to this process and replica
// start: "gantry-<deployment>-rep<index>-<pid>-<start>".
std::string ContainerName(std::string_view deployment, int replica_index, int start);

struct DockerRunRequest {
  std::string image;
  std::string container_name;
  std::map<std::string, std::string> labels;
  // Passed to the worker with -e.
  std::map<std::string, std::string> env;
  // "SRC:DST[:MODE]", already checked and absolute.
  std::vector<std::string> volumes;
  // GPUs the container may see: "all" or comma-separated indices/UUIDs
  // (`docker run --gpus`); none when empty.
  std::string gpus;
  // gantry-worker's arguments (after the program name).
  std::vector<std::string> worker_args;
};

// `docker` arguments (after the program name) that run gantry-worker in
// the image with its status on the container's stdout and its lifeline on
// the container's stdin.
std::vector<std::string> DockerRunArguments(const DockerRunRequest& request);

// Fails, naming the image and what docker said, unless the image is present
// locally (nothing is pulled: an image missing here is a configuration
// error, not something to fetch behind the user's back).
Status CheckDockerImagePresent(const std::string& docker, std::string_view image,
                               std::chrono::milliseconds timeout);

// `docker rm -f NAME`, waiting at most `timeout`; a container already gone
// is fine. Returns what went wrong otherwise.
Status RemoveContainer(const std::string& docker, const std::string& name,
                       std::chrono::milliseconds timeout);

}  // namespace gantry::internal

#endif  // GANTRY_DEPLOYMENT_CONTAINER_REPLICA_H_
