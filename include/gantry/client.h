// File: gantry/client.h
//
// A gRPC client for a Gantry (or Jina) gateway, the counterpart of Jina's
// `Client(...).post(...)`: documents are cut into requests of
// `request_size`, sent on one bidirectional `/jina.JinaRPC/Call` stream with
// up to `prefetch` requests in flight, and returned in input order.
//
// Thread safety: safe for concurrent use; each Post opens its own stream.
#ifndef GANTRY_CLIENT_H_
#define GANTRY_CLIENT_H_

#include <gantry/document.h>
#include <gantry/status.h>
#include <gantry/tls.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace grpc {
class Channel;
}  // namespace grpc

namespace gantry {
namespace internal {
class ServingFront;
}  // namespace internal

struct PostOptions {
  // Documents per request (Jina's default is 100).
  int request_size = 100;
  // Draw a progress bar on stderr while requests complete.
  bool show_progress = false;
  // Sent as the request parameters (Jina adds "__results__": {} itself too).
  Parameters parameters{};
  // Requests in flight on the stream before waiting for replies.
  int prefetch = 64;
  // Deadline for the whole post; zero means none. The gateway passes it on
  // to the workers: past it, requests are neither run nor retried.
  std::chrono::milliseconds timeout{0};
  // Only executors whose name matches this regex (Jina's target_executor).
  std::string target_executor{};
};

struct ClientOptions {
  // Cap on one request sent or reply received, in bytes (1 to 2^31-1). A
  // reply over it fails with RESOURCE_EXHAUSTED; raise it together with the
  // server's `max_message_bytes`. Default: 64 MiB, the servers' default.
  std::int64_t max_message_bytes = std::int64_t{64} << 20;
  // TLS to a gateway that serves it (gantry/tls.h). A bad CA or client
  // certificate file fails Post, Ping and DryRun with a message naming it.
  ClientTlsOptions tls{};
  // A gateway's API key, sent with every call as the metadata
  // `authorization: Bearer <api_key>`; empty: none.
  std::string api_key{};
};

class Client {
 public:
  // `address` is "host:port"; the connection is made lazily.
  explicit Client(std::string address);
  Client(std::string address, ClientOptions options);
  ~Client();
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;

  const std::string& address() const;

  // Posts `docs` to `endpoint` and returns them as the executors left them,
  // in input order. A handler error comes back as a non-OK status whose
  // message names executor, endpoint and the exception's text; network
  // errors as UNAVAILABLE or DEADLINE_EXCEEDED naming the address.
  StatusOr<DocList> Post(std::string_view endpoint, const DocList& docs,
                         const PostOptions& options = {});

  // gRPC health check (grpc.health.v1.Health/Check, service ""): OK when
  // the server answers SERVING within `timeout`.
  Status Ping(std::chrono::milliseconds timeout = std::chrono::milliseconds(3000));

  // Jina's is_flow_ready(): the gateway's dry_run reports success.
  Status DryRun(std::chrono::milliseconds timeout = std::chrono::milliseconds(3000));

 private:
  friend class internal::ServingFront;
  // Deployment::Post over TLS: requests go on `channel` (the gateway's
  // in-process channel) rather than to `address`, which only names it in
  // messages.
  Client(std::string address, ClientOptions options, std::shared_ptr<grpc::Channel> channel);

  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry

#endif  // GANTRY_CLIENT_H_
