// Loading and checking TLS files for the gateway and the client: PEM files
// read into memory, certificates and keys parsed with OpenSSL, a key checked
// against its certificate, so that a bad file is a Status naming it before
// gRPC or cpp-httplib see it (gRPC alone would log and refuse to listen).
//
// Thread safety: pure functions, safe from any thread.
#ifndef GANTRY_COMMON_TLS_H_
#define GANTRY_COMMON_TLS_H_

#include <gantry/status.h>
#include <gantry/tls.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

namespace gantry::internal {

// The PEM text of a gateway's files, checked.
struct ServerTlsFiles {
  std::string cert_chain;
  std::string private_key;
  std::string client_ca;  // empty: no client certificate is asked for
};

// Reads and checks `options` (which must be enabled()): both cert_file and
// key_file given, each a readable PEM file of its kind, the key matching the
// certificate, the client CA (if any) PEM certificates. Errors are
// InvalidArgument "ssl_keyfile '<path>': ...".
StatusOr<ServerTlsFiles> LoadServerTls(const ServerTlsOptions& options);

// gRPC server credentials: TLS with `files`, or insecure for a disabled
// `options`.
StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& options);

// gRPC channel credentials for a Client: TLS (CA, client certificate) or
// insecure when `options.enabled` is false. Errors name the file.
StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsOptions& options);

}  // namespace gantry::internal

#endif  // GANTRY_COMMON_TLS_H_
