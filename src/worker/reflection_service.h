// gRPC server reflection (grpc.reflection.v1alpha.ServerReflection) that
// lists exactly the services it is given.
//
// Why not grpc++'s reflection plugin: it lists every registered service, and
// Jina's gateway raises KeyError on any name outside its stub mapping (health
// included; docs/interop.md), while the gateway's data path is a generic
// service that the plugin would not list at all. Descriptors come from the
// generated descriptor pool, so every linked .proto can be described.
//
// Thread safety: safe for concurrent calls; the object must outlive the server.
#ifndef GANTRY_WORKER_REFLECTION_SERVICE_H_
#define GANTRY_WORKER_REFLECTION_SERVICE_H_

#include <string>
#include <vector>

#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"

namespace gantry::internal {

class ReflectionService final : public grpc::reflection::v1alpha::ServerReflection::Service {
 public:
  // `services`: fully qualified names answered to list_services, in order.
  explicit ReflectionService(std::vector<std::string> services);

  grpc::Status ServerReflectionInfo(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<grpc::reflection::v1alpha::ServerReflectionResponse,
                               grpc::reflection::v1alpha::ServerReflectionRequest>* stream)
      override;

  // The reflection service's own name, for `services` lists.
  static const char* Name();

 private:
  void Answer(const grpc::reflection::v1alpha::ServerReflectionRequest& request,
              grpc::reflection::v1alpha::ServerReflectionResponse* response) const;

  std::vector<std::string> services_;
};

// What a worker lists: the services Jina's gateway has stubs for, plus this
// reflection service (never health, never v1 reflection).
std::vector<std::string> WorkerReflectionServices();

}  // namespace gantry::internal

#endif  // GANTRY_WORKER_REFLECTION_SERVICE_H_
