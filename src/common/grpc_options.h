// gRPC settings shared by every Gantry server and channel: no message size
// limits and keepalive that tolerates Jina's Python clients (pings every
// ~10 s, also without calls), as Jina's own servers do.
#ifndef GANTRY_COMMON_GRPC_OPTIONS_H_
#define GANTRY_COMMON_GRPC_OPTIONS_H_

#include <gantry/status.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <string_view>

namespace gantry::internal {

void ConfigureServerBuilder(grpc::ServerBuilder& builder);
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

inline grpc::Status ToGrpcStatus(const Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}
inline Status FromGrpcStatus(const grpc::Status& status) {
  return Status(static_cast<StatusCode>(status.error_code()), status.error_message());
}

// "127.0.0.1:0" style; IPv6 hosts get brackets.
std::string JoinHostPort(std::string_view host, int port);

}  // namespace gantry::internal

#endif  // GANTRY_COMMON_GRPC_OPTIONS_H_
