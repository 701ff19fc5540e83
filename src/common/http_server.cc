#include "common/http_server.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <unordered_map>

#include "common/tls.h"

namespace gantry::internal {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

std::string_view View(beast::string_view text) { return {text.data(), text.size()}; }

// A request body held as a std::string, as http::string_body, but grown as
// its bytes arrive: string_body's reader reserves the whole Content-Length
// before the first byte, so a client that declares a large body and sends
// little would hold that much memory while the body budget (which charges
// what is held) counted almost none.
struct ArrivingStringBody {
  using value_type = std::string;

  class reader {  // lower case: the name Beast's Body concept requires
   public:
    template <bool IsRequest, class Fields>
    reader(http::header<IsRequest, Fields>& /*header*/, value_type& body) : body_(body) {}
    void init(const boost::optional<std::uint64_t>& length, beast::error_code& ec) {
      length_ = length;
      ec = {};
    }
    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, beast::error_code& ec) {
      const std::size_t extra = beast::buffer_bytes(buffers);
      const std::size_t size = body_.size();
      if (extra > body_.max_size() - size) {
        ec = http::error::buffer_overflow;
        return 0;
      }
      // Room grows geometrically, as push_back's would, but never past the
      // declared length: the budget charges the room.
      if (const std::size_t needed = size + extra; needed > body_.capacity()) {
        std::size_t room = std::max(needed, 2 * body_.capacity());
        if (length_ && *length_ >= needed) {
          room = static_cast<std::size_t>(std::min<std::uint64_t>(room, *length_));
        }
        // A new string: reserve() on this one would round `room` up to
        // twice its capacity (libstdc++'s growth), past the declared length.
        std::string grown;
        grown.reserve(room);
        grown.append(body_);
        body_.swap(grown);
      }
      body_.resize(size + extra);
      char* out = body_.data() + size;
      for (const auto buffer : beast::buffers_range_ref(buffers)) {
        std::memcpy(out, buffer.data(), buffer.size());
        out += buffer.size();
      }
      ec = {};
      return extra;
    }
    void finish(beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
    boost::optional<std::uint64_t> length_;
  };
};

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    if (lower(a[i]) != lower(b[i])) {
      return false;
    }
  }
  return true;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

// %XX escapes of a path decoded (a bad escape is kept as it is).
std::string DecodePath(std::string_view path) {
  std::string out;
  out.reserve(path.size());
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 2 < path.size()) {
      const int high = HexValue(path[i + 1]);
      const int low = HexValue(path[i + 2]);
      if (high >= 0 && low >= 0) {
        out.push_back(static_cast<char>(high * 16 + low));
        i += 2;
        continue;
      }
    }
    out.push_back(path[i]);
  }
  return out;
}

// Certificate chain, key, TLS 1.2 or later, and client certificates when a
// client CA is given. The files were checked by LoadServerTls; what OpenSSL
// still refuses lands in `error`.
bool ConfigureSslContext(SSL_CTX& ctx, const ServerTlsOptions& tls, std::string* error) {
  if (SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION) != 1 ||
      SSL_CTX_use_certificate_chain_file(&ctx, tls.cert_file.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(&ctx, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(&ctx) != 1) {
    *error = "OpenSSL refuses ssl_certfile '" + tls.cert_file + "' or ssl_keyfile '" +
             tls.key_file + "'";
    ERR_clear_error();
    return false;
  }
  if (!tls.client_ca_file.empty()) {
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(tls.client_ca_file.c_str());
    if (names == nullptr ||
        SSL_CTX_load_verify_locations(&ctx, tls.client_ca_file.c_str(), nullptr) != 1) {
      if (names != nullptr) {
        sk_X509_NAME_pop_free(names, X509_NAME_free);
      }
      *error = "OpenSSL refuses ssl_client_cafile '" + tls.client_ca_file + "'";
      ERR_clear_error();
      return false;
    }
    SSL_CTX_set_client_CA_list(&ctx, names);  // takes ownership
    SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return true;
}

}  // namespace

std::string_view HttpRequest::Header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (EqualsIgnoreCase(key, name)) {
      return value;
    }
  }
  return {};
}

bool HttpRequest::HasHeader(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (EqualsIgnoreCase(key, name)) {
      return true;
    }
  }
  return false;
}

// One connection, as the Core sees it.
class SessionBase {
 public:
  virtual ~SessionBase() = default;
  // Starts reading (after the TLS handshake, with TLS).
  virtual void Run() = 0;
  // Closes the connection unless a request on it is being answered; then
  // it closes once that answer is sent.
  virtual void Close() = 0;
  virtual void Send(HttpResponse response) = 0;
};

class HttpServer::Core {
 public:
  Core(HttpServerOptions options, HttpHandler handler)
      : options_(std::move(options)), handler_(std::move(handler)) {}
  ~Core() {
    // Sessions still queued in the stopped io_context are destroyed with it,
    // while the members they reach (declared above it) are alive.
    work_.reset();
  }

  Status Listen();
  void RunThreads();
  void Shutdown(std::chrono::milliseconds grace);

  const HttpServerOptions& options() const { return options_; }
  int port() const { return port_; }
  // The TLS context new connections take (null without TLS); a connection
  // keeps the one it started with across a ReloadTls.
  std::shared_ptr<asio::ssl::context> ssl() {
    std::lock_guard lock(ssl_mutex_);
    return ssl_;
  }
  bool tls() const { return options_.tls.enabled(); }
  // A new context from options().tls's files, for connections from now on.
  Status ReloadTls();

  std::size_t open_connections() {
    std::lock_guard lock(mutex_);
    return sessions_.size();
  }
  bool stopped() {
    std::lock_guard lock(mutex_);
    return stopped_;
  }
  void Forget(SessionBase* session) {
    std::lock_guard lock(mutex_);
    sessions_.erase(session);
  }
  // Reserves `bytes` of the body budget; false when they do not fit.
  bool ReserveBody(std::uint64_t bytes) {
    std::lock_guard lock(mutex_);
    if (body_bytes_ + bytes > body_budget_) {
      return false;
    }
    body_bytes_ += bytes;
    return true;
  }
  void ReleaseBody(std::uint64_t bytes) {
    std::lock_guard lock(mutex_);
    body_bytes_ -= bytes;
  }
  // Whether `bytes` more would fit the body budget now (nothing reserved).
  bool BodyFits(std::uint64_t bytes) {
    std::lock_guard lock(mutex_);
    return body_bytes_ + bytes <= body_budget_;
  }
  std::uint64_t body_budget() const { return body_budget_; }
  void BeginAnswer() {
    std::lock_guard lock(mutex_);
    ++answering_;
  }
  void EndAnswer() {
    std::lock_guard lock(mutex_);
    if (--answering_ == 0) {
      answered_.notify_all();
    }
  }
  void Handle(HttpRequest request, HttpRespond respond) {
    handler_(std::move(request), std::move(respond));
  }
  HttpResponse ErrorResponse(int status, const std::string& detail) const {
    if (options_.error_response) {
      return options_.error_response(status, detail);
    }
    HttpResponse out;
    out.status = status;
    out.content_type = "text/plain; charset=utf-8";
    out.body = detail + "\n";
    return out;
  }

  std::shared_ptr<Core> self;  // set by Start, for HttpRespond targets

 private:
  void Accept();

  const HttpServerOptions options_;
  const HttpHandler handler_;
  std::mutex mutex_;
  std::condition_variable answered_;
  std::unordered_map<SessionBase*, std::weak_ptr<SessionBase>> sessions_;  // under mutex_
  std::size_t answering_ = 0;                                              // under mutex_
  bool stopped_ = false;                                                   // under mutex_
  std::uint64_t body_bytes_ = 0;                                           // under mutex_
  const std::uint64_t body_budget_ = options_.max_body_bytes_in_flight > 0
                                         ? options_.max_body_bytes_in_flight
                                         : 16 * options_.max_body_bytes;
  std::atomic<std::uint64_t> refused_connections_{0};
  std::mutex ssl_mutex_;
  std::shared_ptr<asio::ssl::context> ssl_;  // guarded by ssl_mutex_
  int port_ = 0;
  // Declared after what sessions reach, so it is destroyed before them.
  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_{
      asio::make_work_guard(io_)};
  asio::strand<asio::io_context::executor_type> accept_strand_{asio::make_strand(io_)};
  tcp::acceptor acceptor_{accept_strand_};
  asio::steady_timer accept_retry_{accept_strand_};
  std::vector<std::thread> threads_;
};

class HttpRespond::Target {
 public:
  Target(std::shared_ptr<HttpServer::Core> core, std::shared_ptr<SessionBase> session)
      : core_(std::move(core)), session_(std::move(session)) {}
  ~Target() {
    if (!sent_.exchange(true)) {
      session_->Send(core_->ErrorResponse(500, "the handler gave no answer"));
    }
  }
  void Send(HttpResponse response) {
    if (!sent_.exchange(true)) {
      {
        // Nothing left to cancel, and what the cancel holds (the forward,
        // whose callback holds this Target) can go. OnClientGone looks at
        // sent_ under the same lock, so it stores nothing from now on.
        std::lock_guard lock(mutex_);
        cancel_ = nullptr;
      }
      session_->Send(std::move(response));
    }
  }
  void OnClientGone(std::function<void()> cancel) {
    std::unique_lock lock(mutex_);
    if (sent_.load()) {
      // Answered already (the forward may finish before it returns its
      // cancel): nothing to cancel, and keeping it would keep the forward's
      // callback, which holds this Target, alive for good.
      return;
    }
    if (gone_) {
      lock.unlock();
      if (cancel) {
        cancel();
      }
      return;
    }
    cancel_ = std::move(cancel);
  }
  // The session saw the client close its connection.
  void ClientGone() {
    std::function<void()> cancel;
    {
      std::lock_guard lock(mutex_);
      gone_ = true;
      cancel = std::exchange(cancel_, nullptr);
    }
    if (cancel && !sent_.load()) {
      cancel();
    }
  }

 private:
  std::shared_ptr<HttpServer::Core> core_;
  std::shared_ptr<SessionBase> session_;
  std::atomic<bool> sent_{false};
  std::mutex mutex_;
  std::function<void()> cancel_;  // guarded by mutex_
  bool gone_ = false;             // guarded by mutex_
};

void HttpRespond::operator()(HttpResponse response) const { target_->Send(std::move(response)); }

void HttpRespond::OnClientGone(std::function<void()> cancel) const {
  target_->OnClientGone(std::move(cancel));
}

namespace {

template <class Stream>
class Session final : public SessionBase, public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(HttpServer::Core* core, tcp::socket socket)
      : core_(core),
        ssl_(core->ssl()),
        stream_(MakeStream(socket)),
        buffer_(std::size_t{core->options().max_header_bytes} + kReadBytes) {}
  ~Session() override {
    ReleaseBody();
    core_->Forget(this);
  }

  void Run() override {
    // On the connection's strand from the first operation: Close() may
    // already be queued there by a Shutdown on another thread.
    asio::dispatch(stream_.get_executor(), [self = this->shared_from_this()] { self->Start(); });
  }

  // The TLS handshake (bounded by the header deadline), then the first
  // request.
  void Start() {
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      Lowest().expires_after(core_->options().header_timeout);
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (ec) {
                                  self->CloseNow();
                                  return;
                                }
                                self->ReadNext();
                              });
    } else {
      ReadNext();
    }
  }

  void Close() override {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] {
      self->closing_ = true;
      if (!self->answering_) {
        self->CloseNow();
      }
    });
  }

  void Send(HttpResponse response) override {
    asio::post(stream_.get_executor(),
               [self = this->shared_from_this(), response = std::move(response)]() mutable {
                 self->Write(std::move(response), /*answer=*/true);
               });
  }

 private:
  Stream MakeStream(tcp::socket& socket) {
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      return Stream(std::move(socket), *ssl_);
    } else {
      return Stream(std::move(socket));
    }
  }
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  void ReleaseBody() {
    if (body_reserved_ > 0) {
      core_->ReleaseBody(body_reserved_);
      body_reserved_ = 0;
    }
  }

  void CloseNow() {
    ReleaseBody();
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Lowest().close();
  }

  // A keep-alive connection waits (idle_timeout) for the first byte of its
  // next request; the header deadline runs from there.
  void ReadNext() {
    if (closing_) {
      CloseNow();
      return;
    }
    parser_.emplace();
    parser_->header_limit(core_->options().max_header_bytes);
    parser_->body_limit(core_->options().max_body_bytes);
    if (buffer_.size() > 0) {
      ReadHeader();
      return;
    }
    Lowest().expires_after(core_->options().idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = this->shared_from_this()](beast::error_code ec, std::size_t n) {
                              if (ec) {
                                self->CloseNow();
                                return;
                              }
                              self->buffer_.commit(n);
                              self->ReadHeader();
                            });
  }

  void ReadHeader() {
    Lowest().expires_after(core_->options().header_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                              if (ec) {
                                self->Refuse(ec);
                                return;
                              }
                              self->ReadBody();
                            });
  }

  void ReadBody() {
    const auto& header = parser_->get();
    // Only chunked is decoded. A body in another coding would be read as
    // the connection's next request (request smuggling), so it is refused
    // before anything of it is read, and the connection closed.
    if (const auto coding = header.find(http::field::transfer_encoding); coding != header.end()) {
      const std::string value(View(coding->value()));
      // (Beast's parser has trimmed the value's surrounding whitespace.)
      if (!parser_->chunked() || !EqualsIgnoreCase(value, "chunked")) {
        keep_alive_ = false;
        Write(core_->ErrorResponse(
                  parser_->chunked() ? 501 : 400,
                  "Transfer-Encoding '" + value + "' is not supported: " +
                      (parser_->chunked() ? "only chunked, with no other coding"
                                          : "a request body's last coding must be chunked")),
              /*answer=*/false);
        return;
      }
    }
    if (parser_->is_done()) {
      Dispatch();
      return;
    }
    if (EqualsIgnoreCase(View(header[http::field::expect]), "100-continue")) {
      // A client that waits for this before it sends (curl, for a large
      // body) is spared sending a body that would not fit the budget now.
      if (const auto length = parser_->content_length(); length && !core_->BodyFits(*length)) {
        RefuseBusy();
        return;
      }
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      Lowest().expires_after(core_->options().write_timeout);
      asio::async_write(stream_, asio::buffer(kContinue),
                        [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                          if (ec) {
                            self->CloseNow();
                            return;
                          }
                          self->ReadWholeBody();
                        });
      return;
    }
    ReadWholeBody();
  }

  void ReadWholeBody() {
    Lowest().expires_after(core_->options().body_timeout);
    ReadSomeBody();
  }

  // The body's bytes count against every connection's budget as they
  // arrive, not as declared: a connection that only sends headers with a
  // large Content-Length (or a chunked body it never sends) holds nothing.
  void ReadSomeBody() {
    http::async_read_some(stream_, buffer_, *parser_,
                          [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                            if (ec) {
                              self->Refuse(ec);
                              return;
                            }
                            if (!self->ReserveReceivedBody()) {
                              self->RefuseBusy();
                              return;
                            }
                            if (self->parser_->is_done()) {
                              self->Dispatch();
                              return;
                            }
                            self->ReadSomeBody();
                          });
  }

  // 503: the bodies of every connection together hold the budget. What
  // arrived of this one is dropped now, not when the connection closes.
  void RefuseBusy() {
    ReleaseBody();
    parser_.reset();
    keep_alive_ = false;
    HttpResponse busy = core_->ErrorResponse(
        503, "the server holds " + std::to_string(core_->body_budget()) +
                 " bytes of request bodies at once, the most it takes; retry later");
    busy.headers.emplace_back("Retry-After", "1");
    Write(std::move(busy), /*answer=*/false);
  }

  // Counts the memory the body holds so far (what arrived, and the
  // string's room to grow) against the budget; false when it does not fit.
  bool ReserveReceivedBody() {
    const std::uint64_t received = parser_->get().body().capacity();
    if (received <= body_reserved_) {
      return true;
    }
    if (!core_->ReserveBody(received - body_reserved_)) {
      return false;
    }
    body_reserved_ = received;
    return true;
  }

  // A request that could not be read: answered when the client is still
  // there to read it, and the connection closed either way.
  void Refuse(beast::error_code ec) {
    ReleaseBody();
    parser_.reset();
    keep_alive_ = false;
    if (ec == http::error::body_limit) {
      Write(core_->ErrorResponse(413, "request body exceeds the " +
                                          std::to_string(core_->options().max_body_bytes) +
                                          "-byte cap"),
            /*answer=*/false);
    } else if (ec == http::error::header_limit) {
      Write(core_->ErrorResponse(431, "request headers exceed " +
                                          std::to_string(core_->options().max_header_bytes) +
                                          " bytes"),
            /*answer=*/false);
    } else if (ec.category() == beast::error_code(http::error::bad_method).category() &&
               ec != http::error::end_of_stream && ec != http::error::partial_message) {
      Write(core_->ErrorResponse(400, "malformed HTTP request: " + ec.message()),
            /*answer=*/false);
    } else {
      // Timeouts, resets, a client gone mid-request.
      CloseNow();
    }
  }

  void Dispatch() {
    http::request<ArrivingStringBody> message = parser_->release();
    parser_.reset();
    keep_alive_ = message.keep_alive() && !core_->stopped();
    version_ = message.version();
    head_ = message.method() == http::verb::head;
    HttpRequest request;
    request.method = head_ ? "GET" : std::string(View(message.method_string()));
    const std::string_view target = View(message.target());
    const std::size_t query = target.find('?');
    request.path = DecodePath(target.substr(0, query));
    if (query != std::string_view::npos) {
      request.query = std::string(target.substr(query + 1));
    }
    request.headers.reserve(std::distance(message.begin(), message.end()));
    for (const auto& field : message) {
      request.headers.emplace_back(std::string(View(field.name_string())),
                                   std::string(View(field.value())));
    }
    request.body = std::move(message.body());
    answering_ = true;
    core_->BeginAnswer();
    auto target_state =
        std::make_shared<HttpRespond::Target>(core_->self, this->shared_from_this());
    answering_target_ = target_state;
    try {
      core_->Handle(std::move(request), HttpRespond(std::move(target_state)));
    } catch (const std::exception& e) {
      // The Target answered 500 when the handler dropped it; say why.
      spdlog::error("{}: handler threw: {}", core_->options().name, e.what());
    }
    // The handler has made what it forwards of the body; the body is gone.
    ReleaseBody();
    WatchForClientGone();
  }

  // While a handler holds the request, the connection is not read (the next
  // request waits its turn), so a client that closes it is not seen by a
  // read: its socket is polled for the peer's FIN (POLLRDHUP, which a
  // pipelined request's unread bytes do not hide) every kGoneCheckPeriod.
  void WatchForClientGone() {
    if (!answering_) {
      return;
    }
    gone_timer_.expires_after(kGoneCheckPeriod);
    gone_timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (ec || !self->answering_) {
        return;
      }
      pollfd watched{
          .fd = self->Lowest().socket().native_handle(), .events = POLLRDHUP, .revents = 0};
      if (::poll(&watched, 1, 0) == 1 && (watched.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
        self->keep_alive_ = false;
        if (auto target = self->answering_target_.lock()) {
          target->ClientGone();
        }
        return;
      }
      self->WatchForClientGone();
    });
  }

  void Write(HttpResponse response, bool answer) {
    answer_ = answer;
    response_ = {};
    response_.version(version_ == 0 ? 11 : version_);
    response_.result(static_cast<unsigned>(response.status));
    for (auto& [name, value] : response.headers) {
      response_.insert(name, value);
    }
    if (!response.content_type.empty()) {
      response_.set(http::field::content_type, response.content_type);
    }
    response_.body() = std::move(response.body);
    response_.keep_alive(keep_alive_ && !closing_);
    response_.prepare_payload();
    if (head_) {
      response_.body().clear();  // Content-Length stays the GET's
    }
    Lowest().expires_after(core_->options().write_timeout);
    http::async_write(stream_, response_,
                      [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                        self->Written(ec);
                      });
  }

  void Written(beast::error_code ec) {
    const bool keep = !ec && response_.keep_alive();
    if (answer_) {
      answering_ = false;
      answering_target_.reset();
      gone_timer_.cancel();
      core_->EndAnswer();
    }
    if (ec) {
      CloseNow();
      return;
    }
    if (!keep) {
      GracefulClose();
      return;
    }
    ReadNext();
  }

  // After a response with Connection: close: the TLS close_notify, or a
  // TCP half-close, so the client reads the whole response first.
  void GracefulClose() {
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      Lowest().expires_after(std::chrono::seconds(2));
      stream_.async_shutdown(
          [self = this->shared_from_this()](beast::error_code) { self->CloseNow(); });
    } else {
      // A lingering close, as nginx does: the client may still be sending
      // (a body refused with 413 before it was read); closing with unread
      // data would reset the connection and lose the answer. What arrives is
      // read and dropped until the client closes, for at most 2 s.
      beast::error_code ignored;
      Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
      Lowest().expires_after(std::chrono::seconds(2));
      DiscardUntilClosed();
    }
  }

  void DiscardUntilClosed() {
    buffer_.consume(buffer_.size());
    stream_.async_read_some(buffer_.prepare(std::size_t{64} * 1024),
                            [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                              if (ec) {
                                self->CloseNow();
                                return;
                              }
                              self->DiscardUntilClosed();
                            });
  }

  HttpServer::Core* core_;  // outlives every session (see Core::io_)
  // The TLS context this connection started with (null without TLS).
  const std::shared_ptr<asio::ssl::context> ssl_;
  Stream stream_;
  // What was read and not yet parsed: headers up to their cap and one read
  // beyond. Bounded, so that a chunk's size line that never ends (Beast
  // puts no limit on it) is refused rather than read for the body timeout.
  static constexpr std::size_t kReadBytes = std::size_t{128} << 10;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<ArrivingStringBody>> parser_;
  http::response<http::string_body> response_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool head_ = false;
  bool answering_ = false;  // a handler holds this connection's request
  // The answer it owes, told when the client goes away meanwhile.
  std::weak_ptr<HttpRespond::Target> answering_target_;
  static constexpr std::chrono::milliseconds kGoneCheckPeriod{200};
  asio::steady_timer gone_timer_{stream_.get_executor()};
  bool answer_ = false;              // the write in flight is a handler's answer
  bool closing_ = false;             // the server is shutting down
  std::uint64_t body_reserved_ = 0;  // of the Core's body budget
};

}  // namespace

Status HttpServer::Core::ReloadTls() {
  GANTRY_RETURN_IF_ERROR(LoadServerTls(options_.tls).status());
  auto context = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  std::string error;
  if (!ConfigureSslContext(*context->native_handle(), options_.tls, &error)) {
    return InvalidArgumentError(options_.name + ": " + error);
  }
  std::lock_guard lock(ssl_mutex_);
  ssl_ = std::move(context);
  return OkStatus();
}

Status HttpServer::Core::Listen() {
  const std::string address = options_.host + ":" + std::to_string(options_.port);
  if (options_.port < 0 || options_.port > 65535) {
    return InvalidArgumentError(options_.name + ": port " + std::to_string(options_.port) +
                                " is not 0 to 65535");
  }
  if (options_.tls.enabled()) {
    GANTRY_RETURN_IF_ERROR(ReloadTls());
  }
  beast::error_code ec;
  tcp::resolver resolver(io_);
  auto endpoints = resolver.resolve(options_.host, std::to_string(options_.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) {
    return UnavailableError(options_.name + " cannot listen on " + address + ": " +
                            (ec ? ec.message() : "no address"));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) {
    // SO_REUSEADDR (a restart may bind a port in TIME_WAIT), never
    // SO_REUSEPORT: a second server on a port in use must fail, not share it.
    acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  }
  if (!ec) {
    acceptor_.bind(endpoint, ec);
  }
  if (!ec) {
    acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  }
  if (ec) {
    return UnavailableError(options_.name + " cannot listen on " + address + " (" + ec.message() +
                            ": port in use or address not available)");
  }
  port_ = acceptor_.local_endpoint().port();
  Accept();
  return OkStatus();
}

void HttpServer::Core::Accept() {
  acceptor_.async_accept(asio::make_strand(io_), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) {
      return;
    }
    if (ec) {
      // Out of descriptors, most likely: try again shortly, not in a loop.
      spdlog::warn("{}: accept failed: {}", options_.name, ec.message());
      accept_retry_.expires_after(std::chrono::milliseconds(50));
      accept_retry_.async_wait([this](beast::error_code wait_ec) {
        if (!wait_ec) {
          Accept();
        }
      });
      return;
    }
    std::unique_lock lock(mutex_);
    if (stopped_ || sessions_.size() >= options_.max_connections) {
      lock.unlock();
      if (refused_connections_.fetch_add(1) % 1000 == 0) {
        spdlog::warn("{}: {} connections are open (the cap); closing new ones", options_.name,
                     options_.max_connections);
      }
      beast::error_code ignored;
      socket.close(ignored);
      Accept();
      return;
    }
    // A reply goes out in one gathered write; without Nagle it is not held
    // back for the client's delayed ACK when a previous one is unacked.
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    std::shared_ptr<SessionBase> session;
    if (tls()) {
      session = std::make_shared<Session<TlsStream>>(this, std::move(socket));
    } else {
      session = std::make_shared<Session<PlainStream>>(this, std::move(socket));
    }
    sessions_.emplace(session.get(), session);
    lock.unlock();
    session->Run();
    Accept();
  });
}

void HttpServer::Core::RunThreads() {
  int count = options_.io_threads;
  if (count <= 0) {
    count = std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  }
  for (int i = 0; i < count; ++i) {
    threads_.emplace_back([this] { io_.run(); });
  }
}

void HttpServer::Core::Shutdown(std::chrono::milliseconds grace) {
  std::vector<std::shared_ptr<SessionBase>> open;
  {
    std::lock_guard lock(mutex_);
    if (stopped_) {
      return;
    }
    stopped_ = true;
    for (auto& [raw, weak] : sessions_) {
      if (auto session = weak.lock()) {
        open.push_back(std::move(session));
      }
    }
  }
  asio::post(accept_strand_, [this] {
    beast::error_code ignored;
    acceptor_.close(ignored);
    accept_retry_.cancel();
  });
  for (const auto& session : open) {
    session->Close();
  }
  open.clear();
  {
    std::unique_lock lock(mutex_);
    if (!answered_.wait_for(lock, grace, [this] { return answering_ == 0; })) {
      spdlog::warn("{}: {} request(s) still unanswered after {} ms; closing", options_.name,
                   answering_, grace.count());
    }
  }
  work_.reset();
  io_.stop();
  for (std::thread& thread : threads_) {
    thread.join();
  }
  threads_.clear();
}

HttpServer::HttpServer(std::shared_ptr<Core> core) : core_(std::move(core)) {}

HttpServer::~HttpServer() {
  try {
    Shutdown();
  } catch (const std::exception& e) {
    // Joining threads or taking a lock failed: nothing left to do about it.
    spdlog::error("{}: shutdown failed: {}", core_->options().name, e.what());
  }
  // Break the cycle Start made; targets still held elsewhere keep it alive.
  core_->self.reset();
}

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options,
                                                        HttpHandler handler) {
  auto core = std::make_shared<Core>(std::move(options), std::move(handler));
  core->self = core;
  if (Status s = core->Listen(); !s.ok()) {
    core->self.reset();
    return s;
  }
  core->RunThreads();
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(core)));
}

int HttpServer::port() const { return core_->port(); }

std::size_t HttpServer::open_connections() const { return core_->open_connections(); }

Status HttpServer::ReloadTls() {
  if (!core_->tls()) {
    return FailedPreconditionError(core_->options().name + " serves no TLS");
  }
  return core_->ReloadTls();
}

void HttpServer::Shutdown(std::chrono::milliseconds grace) { core_->Shutdown(grace); }

}  // namespace gantry::internal
