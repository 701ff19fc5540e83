#include "worker/reflection_service.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <set>

namespace gantry::internal {
namespace {

namespace reflection = grpc::reflection::v1alpha;
using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;

// Adds `file` and, after it, every file it imports (transitively) that was
// not sent yet: a client's descriptor pool needs them all to build `file`.
void AddFileWithDependencies(const FileDescriptor* file, std::set<std::string>* sent,
                             reflection::FileDescriptorResponse* out) {
  if (!sent->insert(file->name()).second) {
    return;
  }
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  out->add_file_descriptor_proto(proto.SerializeAsString());
  for (int i = 0; i < file->dependency_count(); ++i) {
    AddFileWithDependencies(file->dependency(i), sent, out);
  }
}

void SetError(grpc::StatusCode code, const std::string& message,
              reflection::ServerReflectionResponse* response) {
  response->mutable_error_response()->set_error_code(static_cast<int>(code));
  response->mutable_error_response()->set_error_message(message);
}

}  // namespace

ReflectionService::ReflectionService(std::vector<std::string> services)
    : services_(std::move(services)) {}

const char* ReflectionService::Name() { return "grpc.reflection.v1alpha.ServerReflection"; }

std::vector<std::string> WorkerReflectionServices() {
  return {"jina.JinaRPC",
          "jina.JinaSingleDataRequestRPC",
          "jina.JinaDataRequestRPC",
          "jina.JinaDiscoverEndpointsRPC",
          "jina.JinaInfoRPC",
          ReflectionService::Name()};
}

grpc::Status ReflectionService::ServerReflectionInfo(
    grpc::ServerContext* /*context*/,
    grpc::ServerReaderWriter<reflection::ServerReflectionResponse,
                             reflection::ServerReflectionRequest>* stream) {
  reflection::ServerReflectionRequest request;
  while (stream->Read(&request)) {
    reflection::ServerReflectionResponse response;
    Answer(request, &response);
    if (!stream->Write(response)) {
      break;
    }
  }
  return grpc::Status::OK;
}

void ReflectionService::Answer(const reflection::ServerReflectionRequest& request,
                               reflection::ServerReflectionResponse* response) const {
  response->set_valid_host(request.host());
  *response->mutable_original_request() = request;
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  std::set<std::string> sent;
  switch (request.message_request_case()) {
    case reflection::ServerReflectionRequest::kListServices:
      for (const std::string& name : services_) {
        response->mutable_list_services_response()->add_service()->set_name(name);
      }
      return;
    case reflection::ServerReflectionRequest::kFileByFilename: {
      const FileDescriptor* file = pool->FindFileByName(request.file_by_filename());
      if (file == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 "file '" + request.file_by_filename() + "' is not known to this server", response);
        return;
      }
      AddFileWithDependencies(file, &sent, response->mutable_file_descriptor_response());
      return;
    }
    case reflection::ServerReflectionRequest::kFileContainingSymbol: {
      const FileDescriptor* file = pool->FindFileContainingSymbol(request.file_containing_symbol());
      if (file == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 "symbol '" + request.file_containing_symbol() + "' is not known to this server",
                 response);
        return;
      }
      AddFileWithDependencies(file, &sent, response->mutable_file_descriptor_response());
      return;
    }
    case reflection::ServerReflectionRequest::kFileContainingExtension: {
      const auto& ext = request.file_containing_extension();
      const google::protobuf::Descriptor* type = pool->FindMessageTypeByName(ext.containing_type());
      const google::protobuf::FieldDescriptor* field =
          type == nullptr ? nullptr : pool->FindExtensionByNumber(type, ext.extension_number());
      if (field == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 "extension " + std::to_string(ext.extension_number()) + " of '" +
                     ext.containing_type() + "' is not known to this server",
                 response);
        return;
      }
      AddFileWithDependencies(field->file(), &sent, response->mutable_file_descriptor_response());
      return;
    }
    case reflection::ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const google::protobuf::Descriptor* type =
          pool->FindMessageTypeByName(request.all_extension_numbers_of_type());
      if (type == nullptr) {
        SetError(
            grpc::StatusCode::NOT_FOUND,
            "type '" + request.all_extension_numbers_of_type() + "' is not known to this server",
            response);
        return;
      }
      std::vector<const google::protobuf::FieldDescriptor*> extensions;
      pool->FindAllExtensions(type, &extensions);
      auto* out = response->mutable_all_extension_numbers_response();
      out->set_base_type_name(type->full_name());
      for (const auto* field : extensions) {
        out->add_extension_number(field->number());
      }
      return;
    }
    case reflection::ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET:
      break;
  }
  SetError(grpc::StatusCode::INVALID_ARGUMENT, "reflection request names no question", response);
}

}  // namespace gantry::internal
