// Loading and checking TLS files for the gateway and the client: PEM files
// read into memory, certificates and keys parsed with OpenSSL, a key checked
// against its certificate, so that a bad file is a Status naming it before
// gRPC or cpp-httplib see it (gRPC alone would log and refuse to listen).
//
// Thread safety: the functions are pure, safe from any thread; the class
// says its own.
#ifndef GANTRY_COMMON_TLS_H_
#define GANTRY_COMMON_TLS_H_

#include <gantry/status.h>
#include <gantry/tls.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>

#include <memory>
#include <mutex>
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

// gRPC server credentials whose certificate, key and client CA can be
// replaced while the server runs (certificates renewed in place, re-read on
// SIGHUP). gRPC's file watcher reads them from private copies in a folder
// of their own (mode 0700, removed by the destructor), which Reload swaps
// in one rename once the new files have passed LoadServerTls: a bad or
// half-written file never reaches gRPC, and the key and certificate change
// together. New handshakes see the new files within kRefreshSeconds; open
// connections keep theirs.
// Thread safety: Reload is safe from any thread; destroy only after the
// server using credentials() has shut down.
class ReloadableServerCredentials {
 public:
  static constexpr unsigned kRefreshSeconds = 1;

  // `options` must be enabled(); errors name the file at fault.
  static StatusOr<std::unique_ptr<ReloadableServerCredentials>> Create(ServerTlsOptions options);
  ~ReloadableServerCredentials();
  ReloadableServerCredentials(const ReloadableServerCredentials&) = delete;
  ReloadableServerCredentials& operator=(const ReloadableServerCredentials&) = delete;

  const std::shared_ptr<grpc::ServerCredentials>& credentials() const { return credentials_; }
  // Re-reads the option's files; on an error naming the file the old ones
  // stay in use.
  Status Reload();

 private:
  ReloadableServerCredentials(ServerTlsOptions options, std::string dir)
      : options_(std::move(options)), dir_(std::move(dir)) {}
  // Writes `files` as the next generation and points `current` at it.
  Status Install(const ServerTlsFiles& files);

  const ServerTlsOptions options_;
  const std::string dir_;
  std::mutex mutex_;    // serialises Reload
  int generation_ = 0;  // guarded by mutex_
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_;
  std::shared_ptr<grpc::ServerCredentials> credentials_;
};

// gRPC channel credentials for a Client: TLS (CA, client certificate) or
// insecure when `options.enabled` is false. Errors name the file.
StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsOptions& options);

}  // namespace gantry::internal

#endif  // GANTRY_COMMON_TLS_H_
