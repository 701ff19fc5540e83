// gRPC settings shared by every Gantry server and channel: a message size
// cap (never unlimited: core/limits.h has the default) and keepalive that tolerates Jina's Python
// clients (pings every ~10 s, also without calls), as Jina's own servers do.
#ifndef GANTRY_COMMON_GRPC_OPTIONS_H_
#define GANTRY_COMMON_GRPC_OPTIONS_H_

#include <gantry/status.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace gantry::internal {

// `max_message_bytes` caps every message received and sent, both ways.
void ConfigureServerBuilder(grpc::ServerBuilder& builder, std::int64_t max_message_bytes);
// The threads of a server's sync services: at most `max_calls_in_flight`
// held calls plus kSpareServerThreads (a ResourceQuota named `quota_name`),
// and up to kIdleSyncServerThreads kept waiting once their call is answered.
void BoundSyncServerThreads(grpc::ServerBuilder& builder, const std::string& quota_name,
                            int max_calls_in_flight);
// `credentials`: plaintext when null (workers, and clients of a gateway
// without TLS). A "dns:///name:port" address gets the round_robin policy,
// so calls spread over every address the name resolves to.
std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& address, std::int64_t max_message_bytes,
    std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);
// The channel arguments MakeChannel uses (also for in-process channels).
grpc::ChannelArguments MakeChannelArguments(std::int64_t max_message_bytes);

inline grpc::Status ToGrpcStatus(const Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}
inline Status FromGrpcStatus(const grpc::Status& status) {
  return Status(static_cast<StatusCode>(status.error_code()), status.error_message());
}

// Turns off abseil's mutex deadlock detector in this process. Debian builds
// abseil without NDEBUG, so every absl::Mutex that gRPC locks also updates a
// process-wide lock-order graph: about 15,000 instructions of a bare gRPC
// server's 90,000 per unary call (callgrind, docs/benchmarks.md). Gantry's
// own locks are std::mutex, which TSan checks; on an abseil built with
// NDEBUG the detector is off already and this changes nothing. Call it at
// the start of main, before gRPC starts its threads.
void DisableAbseilDeadlockDetection();

// "127.0.0.1:0" style; IPv6 hosts get brackets.
std::string JoinHostPort(std::string_view host, int port);

}  // namespace gantry::internal

#endif  // GANTRY_COMMON_GRPC_OPTIONS_H_
