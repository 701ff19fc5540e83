// File: gantry/tls.h
//
// TLS for a gateway's front doors (gRPC and HTTP) and for the Client. The
// files are PEM; gRPC's own TLS (grpc::SslServerCredentials /
// grpc::SslCredentials, over OpenSSL) and OpenSSL through cpp-httplib do
// the work. Workers never use TLS: they listen on 127.0.0.1 only.
//
//   gantry::Deployment dep({.uses = "MyExec",
//                           .tls = {.cert_file = "server.pem", .key_file = "server.key"}});
//   gantry::Client client(dep.address(), {.tls = {.enabled = true, .ca_file = "ca.pem"}});
//
// Thread safety: plain values.
#ifndef GANTRY_TLS_H_
#define GANTRY_TLS_H_

#include <string>

namespace gantry {

// A gateway's certificate, key and (optionally) client CA. YAML keys
// `ssl_certfile`, `ssl_keyfile`, `ssl_client_cafile` (Jina's names for the
// first two); CLI flags --ssl-certfile, --ssl-keyfile, --ssl-client-cafile.
struct ServerTlsOptions {
  // The certificate chain the gateway presents (leaf first) and its private
  // key. TLS is on when either is set, and then both must be; a missing or
  // unreadable file, a file that is not PEM, or a key that does not match
  // the certificate fails the start with a message naming the file.
  std::string cert_file{};
  std::string key_file{};
  // CA certificates; when set, every client must present a certificate
  // signed by one of them (mutual TLS), on gRPC and HTTP alike.
  std::string client_ca_file{};

  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

// How a Client reaches a gateway that serves TLS.
struct ClientTlsOptions {
  bool enabled = false;
  // CA certificates to trust; empty: gRPC's default roots (the system's, or
  // the file named by $GRPC_DEFAULT_SSL_ROOTS_FILE_PATH).
  std::string ca_file{};
  // A client certificate and its key, for gateways that require one.
  std::string cert_file{};
  std::string key_file{};
};

}  // namespace gantry

#endif  // GANTRY_TLS_H_
