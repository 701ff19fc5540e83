// gantry_grpc_floor: the least a gRPC server of the Jina protocol can do, as
// the peer that Gantry's own latency is read against (bench/peer/run.sh).
//
//   gantry_grpc_floor --port N --echo sync|callback [--no-health]
//   gantry_grpc_floor --port N --forward HOST:PORT [--api callback|async [--threads T]]
//
// `--echo sync` answers /jina.JinaSingleDataRequestRPC/process_single_data
// with the request it parsed, on gRPC's sync API, as Gantry's worker serves
// (parse, serialize; no executor, no documents converted, no route stamped).
// `--echo callback` answers every method with the bytes it received, on the
// callback API: no protobuf at all. `--forward` relays the bytes of each call
// to HOST:PORT and its reply back, with the caller's deadline, on the callback
// API with a generic stub, as Gantry's gateway forwards (no routing, no
// replica pool); with `--api async` it relays on the async API instead, T
// threads (default 1) each polling a completion queue of its own, which spares
// the callback API's hand-offs between its polling threads. Every mode also
// serves grpc.health.v1 (SERVING), so that Gantry's gateway can keep the echo
// in rotation; `--echo sync --no-health` leaves it out, as a server without a
// health service, which answers UNIMPLEMENTED to a health check. Listens on
// 127.0.0.1 only; stops on SIGTERM or SIGINT.
#include <absl/synchronization/mutex.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "jina/jina.grpc.pb.h"

namespace {

// Same as Gantry's servers: no limit the bench's 1-document requests reach.
constexpr int kMaxMessageBytes = 64 << 20;

// Sync API, parse and serialize: the shape of Gantry's worker service.
// Thread-safe: it holds no state.
class SyncEcho final : public jina::JinaSingleDataRequestRPC::StreamedUnaryService {
 public:
  grpc::Status Streamedprocess_single_data(
      grpc::ServerContext* /*context*/,
      grpc::ServerUnaryStreamer<jina::DataRequestProto, jina::DataRequestProto>* stream) override {
    jina::DataRequestProto request;
    if (!stream->Read(&request)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "not a jina.DataRequestProto");
    }
    if (!stream->Write(request)) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "the client is gone");
    }
    return grpc::Status::OK;
  }
};

// One call of the callback services below: reads one message, then answers
// it with `Reply`. Deletes itself in OnDone, after gRPC's last callback.
// Thread-compatible: gRPC runs at most one of its reactions at a time.
class UnaryBytesReactor : public grpc::ServerGenericBidiReactor {
 public:
  void Start() { StartRead(&request_); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request message"));
      return;
    }
    Reply();
  }
  void OnDone() override { delete this; }

 protected:
  // Called once the request is in request_; ends in Answer or Finish.
  virtual void Reply() = 0;
  void Answer(const grpc::Status& status) {
    if (status.ok()) {
      StartWriteAndFinish(&reply_, grpc::WriteOptions(), status);
    } else {
      Finish(status);
    }
  }

  grpc::ByteBuffer request_;
  grpc::ByteBuffer reply_;
};

class EchoReactor final : public UnaryBytesReactor {
 private:
  void Reply() override {
    reply_ = request_;  // shares the slices; no copy of the bytes
    Answer(grpc::Status::OK);
  }
};

class ForwardReactor final : public UnaryBytesReactor {
 public:
  ForwardReactor(grpc::GenericStub* stub, const grpc::GenericCallbackServerContext& context)
      : stub_(stub), method_(context.method()) {
    // As a gateway should: the caller's deadline bounds the upstream call too
    // (time_point::max, no deadline, passes through as none).
    upstream_context_.set_deadline(context.deadline());
  }

  // The caller is gone, or the server is stopping: so is the upstream call
  // (TryCancel may come from any thread, also before the call starts).
  void OnCancel() override { upstream_context_.TryCancel(); }

 private:
  void Reply() override {
    stub_->UnaryCall(&upstream_context_, method_, grpc::StubOptions(), &request_, &reply_,
                     [this](const grpc::Status& status) { Answer(status); });
  }

  grpc::GenericStub* stub_;
  std::string method_;
  grpc::ClientContext upstream_context_;
};

// Raw bytes on the callback API: an echo, or a relay to one upstream.
// Thread-safe: CreateReactor only reads what the constructor set.
class BytesService final : public grpc::CallbackGenericService {
 public:
  explicit BytesService(grpc::GenericStub* upstream) : upstream_(upstream) {}

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    UnaryBytesReactor* reactor = nullptr;
    if (upstream_ == nullptr) {
      reactor = new EchoReactor();
    } else {
      reactor = new ForwardReactor(upstream_, *context);
    }
    reactor->Start();
    return reactor;
  }

 private:
  grpc::GenericStub* upstream_;
};

// Relayed calls not yet deleted, slots waiting for a call included.
std::atomic<int> g_live_relay_calls{0};

// One relayed call on gRPC's async API, stepped by the thread that polls its
// completion queue: the request's bytes go upstream as a child call (the
// caller's deadline, and its cancellation), the reply's bytes come back.
// Each step's tag is the call itself.
// Thread-compatible: only its queue's one thread steps it.
class AsyncRelayCall {
 public:
  AsyncRelayCall(grpc::AsyncGenericService* service, grpc::ServerCompletionQueue* queue,
                 grpc::GenericStub* upstream)
      : service_(service), queue_(queue), upstream_(upstream), stream_(&server_context_) {
    ++g_live_relay_calls;
    service_->RequestCall(&server_context_, &stream_, queue_, queue_, this);
  }
  ~AsyncRelayCall() { --g_live_relay_calls; }
  AsyncRelayCall(const AsyncRelayCall&) = delete;
  AsyncRelayCall& operator=(const AsyncRelayCall&) = delete;

  // Runs the next step; deletes the call after its last.
  void Step(bool ok) {
    switch (step_) {
      case Stage::kAccepted:
        if (!ok) {  // the server is shutting down
          delete this;
          return;
        }
        new AsyncRelayCall(service_, queue_, upstream_);  // the next call's slot
        step_ = Stage::kRead;
        stream_.Read(&request_, this);
        return;
      case Stage::kRead:
        if (!ok) {
          step_ = Stage::kFinished;
          stream_.Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request message"),
                         this);
          return;
        }
        // A child of the caller's call: a server that stops, cancelling the
        // caller, cancels the upstream call too.
        upstream_context_ = grpc::ClientContext::FromServerContext(server_context_);
        upstream_call_ = upstream_->PrepareUnaryCall(upstream_context_.get(),
                                                     server_context_.method(), request_, queue_);
        step_ = Stage::kUpstream;
        upstream_call_->StartCall();
        upstream_call_->Finish(&reply_, &upstream_status_, this);
        return;
      case Stage::kUpstream:
        step_ = Stage::kFinished;
        if (upstream_status_.ok()) {
          stream_.WriteAndFinish(reply_, grpc::WriteOptions(), grpc::Status::OK, this);
        } else {
          stream_.Finish(upstream_status_, this);
        }
        return;
      case Stage::kFinished:
        delete this;
        return;
    }
  }

 private:
  enum class Stage { kAccepted, kRead, kUpstream, kFinished };

  grpc::AsyncGenericService* service_;
  grpc::ServerCompletionQueue* queue_;
  grpc::GenericStub* upstream_;
  grpc::GenericServerContext server_context_;
  grpc::GenericServerAsyncReaderWriter stream_;
  std::unique_ptr<grpc::ClientContext> upstream_context_;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> upstream_call_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer reply_;
  grpc::Status upstream_status_;
  Stage step_ = Stage::kAccepted;
};

// Polls one completion queue until it is shut down and drained.
void PollRelayQueue(grpc::ServerCompletionQueue* queue) {
  void* tag = nullptr;
  bool ok = false;
  while (queue->Next(&tag, &ok)) {
    static_cast<AsyncRelayCall*>(tag)->Step(ok);
  }
}

int Usage() {
  std::fprintf(stderr,
               "usage: gantry_grpc_floor --port N (--echo sync|callback [--no-health] |\n"
               "                                   --forward HOST:PORT [--api callback|async\n"
               "                                   [--threads 1-16]])\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int port = -1;
  std::string echo;
  std::string forward;
  std::string api = "callback";
  int relay_threads = 1;
  bool health = true;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--no-health") {
      health = false;
      continue;
    }
    if (i + 1 == argc) {
      std::fprintf(stderr, "gantry_grpc_floor: %s wants a value\n", argv[i]);
      return Usage();
    }
    const char* value = argv[++i];
    if (flag == "--port") {
      char* end = nullptr;
      const long number = std::strtol(value, &end, 10);
      if (*end != '\0' || number <= 0 || number > 65535) {
        std::fprintf(stderr, "gantry_grpc_floor: --port %s is not a port (1-65535)\n", value);
        return 2;
      }
      port = static_cast<int>(number);
    } else if (flag == "--echo") {
      echo = value;
    } else if (flag == "--forward") {
      forward = value;
    } else if (flag == "--api") {
      api = value;
    } else if (flag == "--threads") {
      char* end = nullptr;
      relay_threads = static_cast<int>(std::strtol(value, &end, 10));
      if (*end != '\0') {
        relay_threads = 0;  // refused below
      }
    } else {
      std::fprintf(stderr, "gantry_grpc_floor: unknown flag %s\n", argv[i - 1]);
      return Usage();
    }
  }
  if (port < 0 || echo.empty() == forward.empty() ||
      (!echo.empty() && echo != "sync" && echo != "callback") ||
      (api != "callback" && api != "async") || (api == "async" && forward.empty()) ||
      relay_threads < 1 || relay_threads > 16) {
    return Usage();
  }
  if (!health && echo != "sync") {
    // The generic service of the other modes would take the health method
    // for one of its own and answer it.
    std::fprintf(stderr, "gantry_grpc_floor: --no-health goes with --echo sync only\n");
    return 2;
  }

  // As Gantry's programs do (common/grpc_options.h): Debian's abseil would
  // otherwise run its deadlock detector on every lock gRPC takes.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  // Block the stop signals before gRPC starts its threads, so that only
  // sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::unique_ptr<grpc::GenericStub> upstream;
  if (!forward.empty()) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxMessageBytes);
    args.SetMaxSendMessageSize(kMaxMessageBytes);
    upstream = std::make_unique<grpc::GenericStub>(
        grpc::CreateCustomChannel(forward, grpc::InsecureChannelCredentials(), args));
  }
  SyncEcho sync_echo;
  BytesService bytes_service(upstream.get());

  // The health service Gantry's gateway checks its replicas with (a worker
  // serves it too), answered by gRPC itself.
  grpc::EnableDefaultHealthCheckService(health);
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials());
  grpc::AsyncGenericService async_relay;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> relay_queues;
  if (echo == "sync") {
    builder.RegisterService(&sync_echo);
  } else if (api == "async") {
    builder.RegisterAsyncGenericService(&async_relay);
    for (int i = 0; i < relay_threads; ++i) {
      relay_queues.push_back(builder.AddCompletionQueue());
    }
  } else {
    builder.RegisterCallbackGenericService(&bytes_service);
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    std::fprintf(stderr, "gantry_grpc_floor: cannot listen on 127.0.0.1:%d\n", port);
    return 1;
  }
  std::fprintf(stderr, "gantry_grpc_floor: listening on 127.0.0.1:%d (%s)\n", port,
               echo.empty() ? ("forward to " + forward).c_str() : ("echo " + echo).c_str());

  std::vector<std::thread> relay_pollers;
  for (auto& queue : relay_queues) {
    new AsyncRelayCall(&async_relay, queue.get(), upstream.get());
    relay_pollers.emplace_back(PollRelayQueue, queue.get());
  }

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  // A relayed call's last steps still start operations on its queue, which a
  // queue that is shut down refuses: the queues shut down (and drain) only
  // once every call has ended, which the server's cancellation bounds.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (g_live_relay_calls.load() > 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (g_live_relay_calls.load() > 0) {
    std::fprintf(stderr, "gantry_grpc_floor: %d relayed calls did not end within 10 s\n",
                 g_live_relay_calls.load());
    std::_Exit(1);
  }
  for (auto& queue : relay_queues) {
    queue->Shutdown();
  }
  for (std::thread& poller : relay_pollers) {
    poller.join();
  }
  return 0;
}
