// An event-driven HTTP/1.1 server for the gateway's HTTP port and the
// metrics ports, on Boost.Beast over Boost.Asio (docs/benchmarks.md, "The
// HTTP front end", says why).
// A connection costs a socket and a few kilobytes, never a thread: a few
// I/O threads read requests, and a handler answers each one whenever it
// likes, from any thread, so a request waiting on a replica holds nothing
// but its connection. What a client can make it hold is bounded: open
// connections, the time from a request's first byte to its last header,
// the time to send the body, an idle keep-alive connection's time, the
// header bytes, the body bytes (over the cap: 413 from the Content-Length,
// before the body is read) and the body bytes of all connections together. Keep-alive and
// pipelining follow HTTP/1.1: pipelined requests are answered in order, one at a time. With TLS
// (OpenSSL, 1.2 or later, client certificates when a CA is given) it serves HTTPS.
//
// Thread safety: Start and Shutdown from one thread; the handler runs on
// the I/O threads, and a Respond may be called from any thread.
#ifndef GANTRY_COMMON_HTTP_SERVER_H_
#define GANTRY_COMMON_HTTP_SERVER_H_

#include <gantry/status.h>
#include <gantry/tls.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gantry::internal {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...; HEAD arrives as "GET"
  std::string path;    // the target without its query
  std::string query;   // after '?', undecoded; empty when none
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  // The first header called `name` (case-insensitive); empty when absent.
  std::string_view Header(std::string_view name) const;
  bool HasHeader(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;  // empty: none sent
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// Answers the request it was made for; call it once, from any thread.
// Copies share one answer: only the first call is sent.
class HttpRespond {
 public:
  class Target;
  explicit HttpRespond(std::shared_ptr<Target> target) : target_(std::move(target)) {}
  void operator()(HttpResponse response) const;
  // Runs `cancel` once, on a server thread, if the client closes its
  // connection before the answer is sent (at once if it already has): the
  // work done for it can stop. A client that half-closes its connection
  // after sending the request counts as gone, as it does for uvicorn.
  void OnClientGone(std::function<void()> cancel) const;

 private:
  std::shared_ptr<Target> target_;
};

using HttpHandler = std::function<void(HttpRequest request, HttpRespond respond)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  // What the server is, for messages: "HTTP gateway", "metrics".
  std::string name = "HTTP";
  ServerTlsOptions tls{};
  // Connections open at once; one more is closed as soon as it is accepted.
  std::size_t max_connections = 10000;
  // From a request's first byte to the end of its headers.
  std::chrono::milliseconds header_timeout{10000};
  // From the end of the headers to the end of the body.
  std::chrono::milliseconds body_timeout{60000};
  // A keep-alive connection waiting for its next request.
  std::chrono::milliseconds idle_timeout{60000};
  // Sending one response (a client that stops reading).
  std::chrono::milliseconds write_timeout{60000};
  std::uint64_t max_body_bytes = 1 << 20;
  // Request body bytes held at once, from every connection (a body counts
  // as its bytes arrive, until its handler returns); a request whose bytes
  // pass it is 503, retry later.
  // 0: 16 x max_body_bytes.
  std::uint64_t max_body_bytes_in_flight = 0;
  std::uint32_t max_header_bytes = 64 * 1024;
  // I/O threads; 0: one per core, at least two.
  int io_threads = 0;
  // The body of the errors the server answers itself (400, 413, 431),
  // so that they look like the handler's; null: plain text.
  std::function<HttpResponse(int status, const std::string& detail)> error_response{};
};

class HttpServer {
 public:
  // Binds (an address in use is an error naming it, never shared through
  // SO_REUSEPORT) and serves until Shutdown. TLS files are checked first so
  // that an error names the file.
  static StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options,
                                                     HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // Connections open now (for tests and metrics).
  std::size_t open_connections() const;
  // Re-reads the TLS files (a certificate renewed in place): connections
  // accepted from now on use them, open ones keep theirs. On an error
  // naming the file the old ones stay. FAILED_PRECONDITION without TLS.
  Status ReloadTls();
  // Stops accepting, closes idle connections, waits up to `grace` for the
  // requests being answered, then stops. Idempotent.
  void Shutdown(std::chrono::milliseconds grace = std::chrono::seconds(30));

  class Core;

 private:
  explicit HttpServer(std::shared_ptr<Core> core);
  std::shared_ptr<Core> core_;
};

}  // namespace gantry::internal

#endif  // GANTRY_COMMON_HTTP_SERVER_H_
