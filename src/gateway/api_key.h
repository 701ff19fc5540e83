// The gateway's API key check, shared by its gRPC and HTTP sides: a client
// sends `authorization: Bearer <key>` (gRPC metadata or HTTP header), as
// OpenAI's, TEI's and Triton's clients do.
//
// Thread safety: pure functions, safe from any thread.
#ifndef GANTRY_GATEWAY_API_KEY_H_
#define GANTRY_GATEWAY_API_KEY_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <string>
#include <string_view>

namespace gantry::internal {

// Whether `authorization` (the header's value) is "Bearer <key>" with this
// key. The key is compared through SHA-256 digests in constant time, so the
// time taken says nothing about the key, not even its length.
bool BearerKeyMatches(std::string_view authorization, const std::string& key);

// OK when `key` is empty or the call's `authorization` metadata carries it;
// else UNAUTHENTICATED saying what to send.
grpc::Status CheckGrpcApiKey(const grpc::ServerContextBase& context, const std::string& key);

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_API_KEY_H_
