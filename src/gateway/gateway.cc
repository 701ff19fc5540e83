#include "gateway/gateway.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <random>

#include "common/grpc_options.h"
#include "gateway/http_gateway.h"
#include "jina/jina.grpc.pb.h"
#include "worker/reflection_service.h"

namespace gantry::internal {
namespace {

constexpr char kCallMethod[] = "/jina.JinaRPC/Call";
constexpr char kSingleMethod[] = "/jina.JinaSingleDataRequestRPC/process_single_data";

struct Replica {
  std::string address;
  std::string name;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
  std::atomic<int> in_flight{0};
  std::atomic<std::uint64_t> served{0};
};

struct ForwardResult {
  grpc::Status status;
  grpc::ByteBuffer reply;
  bool is_error = false;
};
using ForwardDone = std::function<void(ForwardResult)>;

// One request on its way to a replica, across retries.
struct ForwardState {
  grpc::ByteBuffer request;
  grpc::ByteBuffer reply;
  std::unique_ptr<grpc::ClientContext> context;
  int attempt = 0;
  std::size_t replica = 0;
  ForwardDone done;
};

bool IsRetryable(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED ||
         code == grpc::StatusCode::NOT_FOUND;
}

grpc::ByteBuffer SerializeToByteBuffer(const google::protobuf::Message& message) {
  std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

bool ParseFromByteBuffer(grpc::ByteBuffer* buffer, google::protobuf::Message* message) {
  grpc::ProtoBufferReader reader(buffer);
  return message->ParseFromZeroCopyStream(&reader);
}

}  // namespace

class Gateway::Impl {
 public:
  explicit Impl(GatewayOptions options) : options_(std::move(options)) {}

  Status Init();
  void Forward(grpc::ByteBuffer request, ForwardDone done);
  int prefetch() const { return options_.prefetch; }
  int port() const { return port_; }
  int http_port() const { return http_ ? http_->port() : -1; }
  std::vector<std::uint64_t> Counts() const {
    std::vector<std::uint64_t> out;
    for (const auto& r : replicas_) {
      out.push_back(r->served.load());
    }
    return out;
  }
  void Shutdown(std::chrono::milliseconds grace) {
    std::call_once(shutdown_once_, [&] {
      if (http_) {
        http_->Shutdown();
      }
      if (!server_) {
        return;
      }
      if (auto* health = server_->GetHealthCheckService()) {
        health->Shutdown();
      }
      server_->Shutdown(std::chrono::system_clock::now() + grace);
      server_->Wait();
    });
  }

 private:
  class DataService;
  class DryRunService;
  class InfoService;

  void Attempt(std::shared_ptr<ForwardState> state);
  HttpForwardResult ForwardAndWait(std::string request);
  std::size_t PickReplica(const ForwardState& state);

  GatewayOptions options_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::atomic<std::size_t> round_robin_{0};
  int max_attempts_ = 1;
  std::unique_ptr<DataService> data_service_;
  std::unique_ptr<DryRunService> dry_run_service_;
  std::unique_ptr<InfoService> info_service_;
  std::unique_ptr<ReflectionService> reflection_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpGateway> http_;
  int port_ = 0;
  std::once_flag shutdown_once_;
};

// ---- Data path: Call and process_single_data as raw bytes -------------------

namespace {

class DataReactor final : public grpc::ServerGenericBidiReactor {
 public:
  DataReactor(Gateway::Impl* gateway, grpc::GenericCallbackServerContext* context)
      : gateway_(gateway), context_(context) {
    const std::string& method = context->method();
    if (method == kSingleMethod) {
      unary_ = true;
    } else if (method != kCallMethod) {
      Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "gateway does not serve " + method));
      return;
    }
    prefetch_ = gateway->prefetch();
    const auto& metadata = context->client_metadata();
    if (auto it = metadata.find("__prefetch__"); it != metadata.end()) {
      int value = std::atoi(std::string(it->second.data(), it->second.size()).c_str());
      if (value > 0) {
        prefetch_ = value;
      }
    }
    if (auto it = metadata.find("__results_in_order__"); it != metadata.end()) {
      in_order_ = it->second == "true";
    }
    std::lock_guard lock(mutex_);
    StartReadLocked();
  }

  void OnReadDone(bool ok) override {
    std::lock_guard lock(mutex_);
    reading_ = false;
    if (!ok || failed_) {
      reads_done_ = true;
      MaybeFinishLocked();
      return;
    }
    std::uint64_t sequence = next_sequence_++;
    ++in_flight_;
    grpc::ByteBuffer request = std::move(read_buffer_);
    gateway_->Forward(std::move(request), [this, sequence](ForwardResult result) {
      OnForwardDone(sequence, std::move(result));
    });
    if (unary_) {
      reads_done_ = true;
    } else {
      StartReadLocked();
    }
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mutex_);
    writing_ = false;
    if (!ok) {
      // The client is gone; drop what is queued and wind down.
      failed_ = true;
      write_queue_.clear();
      pending_in_order_.clear();
    }
    StartWriteLocked();
    StartReadLocked();
    MaybeFinishLocked();
  }

  void OnDone() override {
    // gRPC's callback API hands ownership of a reactor back to it here: no
    // other callback can run after OnDone.
    delete this;
  }

 private:
  void OnForwardDone(std::uint64_t sequence, ForwardResult result) {
    std::lock_guard lock(mutex_);
    --in_flight_;
    if (!result.status.ok()) {
      // As Jina's gateway: the call ends with the worker's error code.
      if (final_status_.ok()) {
        final_status_ = result.status;
      }
      failed_ = true;
    } else if (!failed_) {
      if (unary_ && result.is_error) {
        context_->AddTrailingMetadata("is-error", "true");
      }
      if (in_order_) {
        pending_in_order_.emplace(sequence, std::move(result.reply));
        while (!pending_in_order_.empty() &&
               pending_in_order_.begin()->first == next_write_sequence_) {
          write_queue_.push_back(std::move(pending_in_order_.begin()->second));
          pending_in_order_.erase(pending_in_order_.begin());
          ++next_write_sequence_;
        }
      } else {
        write_queue_.push_back(std::move(result.reply));
      }
    }
    StartWriteLocked();
    StartReadLocked();
    MaybeFinishLocked();
  }

  void StartReadLocked() {
    if (reading_ || reads_done_ || failed_ || in_flight_ >= prefetch_) {
      return;
    }
    reading_ = true;
    StartRead(&read_buffer_);
  }

  void StartWriteLocked() {
    if (writing_ || write_queue_.empty()) {
      return;
    }
    writing_ = true;
    current_write_ = std::move(write_queue_.front());
    write_queue_.erase(write_queue_.begin());
    StartWrite(&current_write_);
  }

  void MaybeFinishLocked() {
    if (finished_ || !reads_done_ || reading_ || in_flight_ > 0 || writing_ ||
        !write_queue_.empty()) {
      return;
    }
    if (!failed_ && !pending_in_order_.empty()) {
      return;
    }
    finished_ = true;
    Finish(final_status_);
  }

  Gateway::Impl* gateway_;
  grpc::GenericCallbackServerContext* context_;
  bool unary_ = false;
  bool in_order_ = false;
  int prefetch_ = 1000;

  std::mutex mutex_;
  grpc::ByteBuffer read_buffer_;
  grpc::ByteBuffer current_write_;
  std::vector<grpc::ByteBuffer> write_queue_;
  std::map<std::uint64_t, grpc::ByteBuffer> pending_in_order_;
  std::uint64_t next_sequence_ = 0;
  std::uint64_t next_write_sequence_ = 0;
  int in_flight_ = 0;
  bool reading_ = false;
  bool reads_done_ = false;
  bool writing_ = false;
  bool failed_ = false;
  bool finished_ = false;
  grpc::Status final_status_;
};

}  // namespace

class Gateway::Impl::DataService final : public grpc::CallbackGenericService {
 public:
  explicit DataService(Gateway::Impl* gateway) : gateway_(gateway) {}
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    return new DataReactor(gateway_, context);
  }

 private:
  Gateway::Impl* gateway_;
};

// ---- dry_run and _status ---------------------------------------------------

class Gateway::Impl::DryRunService final : public jina::JinaGatewayDryRunRPC::CallbackService {
 public:
  explicit DryRunService(Gateway::Impl* gateway) : gateway_(gateway) {}
  // Sends one empty document to the dry-run endpoint through a replica, as
  // Jina's gateway does, and reports whether it came back clean.
  grpc::ServerUnaryReactor* dry_run(grpc::CallbackServerContext* context,
                                    const google::protobuf::Empty* /*request*/,
                                    jina::StatusProto* reply) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    jina::DataRequestProto probe;
    probe.mutable_header()->set_request_id("dry-run");
    probe.mutable_header()->set_exec_endpoint("_jina_dry_run_");
    probe.mutable_data()->mutable_docs()->add_docs();
    gateway_->Forward(SerializeToByteBuffer(probe), [reactor, reply](ForwardResult result) {
      if (!result.status.ok()) {
        reply->set_code(jina::StatusProto::ERROR);
        reply->set_description(result.status.error_message());
      } else if (result.is_error) {
        jina::DataRequestProto answer;
        ParseFromByteBuffer(&result.reply, &answer);
        *reply = answer.header().status();
      } else {
        reply->set_code(jina::StatusProto::SUCCESS);
      }
      reactor->Finish(grpc::Status::OK);
    });
    return reactor;
  }

 private:
  Gateway::Impl* gateway_;
};

class Gateway::Impl::InfoService final : public jina::JinaInfoRPC::CallbackService {
 public:
  grpc::ServerUnaryReactor* _status(grpc::CallbackServerContext* context,
                                    const google::protobuf::Empty* /*request*/,
                                    jina::JinaInfoProto* reply) override {
    (*reply->mutable_jina())["gantry"] = GANTRY_VERSION;
    (*reply->mutable_jina())["protocol"] = "jina-3.x/docarray-v2";
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

// ---- Forwarding ------------------------------------------------------------

Status Gateway::Impl::Init() {
  if (options_.replica_addresses.empty()) {
    return InvalidArgumentError("gateway needs at least one replica address");
  }
  for (std::size_t i = 0; i < options_.replica_addresses.size(); ++i) {
    auto replica = std::make_unique<Replica>();
    replica->address = options_.replica_addresses[i];
    replica->name = i < options_.replica_names.size()
                        ? options_.replica_names[i]
                        : options_.deployment_name + "/rep-" + std::to_string(i);
    replica->channel = MakeChannel(replica->address, options_.max_message_bytes);
    replica->stub = std::make_unique<grpc::GenericStub>(replica->channel);
    replicas_.push_back(std::move(replica));
  }
  max_attempts_ = std::max<int>(3, static_cast<int>(replicas_.size())) + 1;

  data_service_ = std::make_unique<DataService>(this);
  dry_run_service_ = std::make_unique<DryRunService>(this);
  info_service_ = std::make_unique<InfoService>();
  // The gateway's clients are people and tools (grpcurl), not Jina's
  // gateway, so every service is listed, health included.
  reflection_service_ = std::make_unique<ReflectionService>(std::vector<std::string>{
      "jina.JinaRPC", "jina.JinaSingleDataRequestRPC", "jina.JinaGatewayDryRunRPC",
      "jina.JinaInfoRPC", "grpc.health.v1.Health", ReflectionService::Name()});
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(builder, options_.max_message_bytes);
  std::string address = JoinHostPort(options_.host, options_.port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(dry_run_service_.get());
  builder.RegisterService(info_service_.get());
  builder.RegisterService(reflection_service_.get());
  builder.RegisterCallbackGenericService(data_service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    return UnavailableError("gateway cannot listen on " + address +
                            " (port in use or address not available)");
  }
  if (options_.http_port >= 0) {
    auto http = HttpGateway::Start(
        options_.host, options_.http_port,
        [this](std::string request) { return ForwardAndWait(std::move(request)); },
        {{"gantry", GANTRY_VERSION}, {"protocol", "jina-3.x/docarray-v2"}});
    if (!http.ok()) {
      return http.status().WithPrefix("gateway");
    }
    http_ = std::move(http).value();
  }
  return OkStatus();
}

HttpForwardResult Gateway::Impl::ForwardAndWait(std::string request) {
  grpc::Slice slice(request);
  auto promise = std::make_shared<std::promise<HttpForwardResult>>();
  std::future<HttpForwardResult> future = promise->get_future();
  Forward(grpc::ByteBuffer(&slice, 1), [promise](ForwardResult result) {
    HttpForwardResult out;
    out.grpc_code = static_cast<int>(result.status.error_code());
    out.grpc_message = result.status.error_message();
    out.is_error = result.is_error;
    std::vector<grpc::Slice> slices;
    if (result.status.ok() && result.reply.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) {
        out.reply.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    promise->set_value(std::move(out));
  });
  return future.get();
}

std::size_t Gateway::Impl::PickReplica(const ForwardState& state) {
  std::size_t n = replicas_.size();
  std::size_t start = round_robin_.fetch_add(1, std::memory_order_relaxed) % n;
  std::size_t best = n;
  for (std::size_t k = 0; k < n; ++k) {
    std::size_t i = (start + k) % n;
    // A retry goes to another replica when there is one.
    if (state.attempt > 0 && n > 1 && i == state.replica) {
      continue;
    }
    if (best == n || replicas_[i]->in_flight.load() < replicas_[best]->in_flight.load()) {
      best = i;
    }
  }
  return best == n ? start : best;
}

void Gateway::Impl::Forward(grpc::ByteBuffer request, ForwardDone done) {
  auto state = std::make_shared<ForwardState>();
  state->request = std::move(request);
  state->done = std::move(done);
  Attempt(std::move(state));
}

void Gateway::Impl::Attempt(std::shared_ptr<ForwardState> state) {
  state->replica = PickReplica(*state);
  Replica& replica = *replicas_[state->replica];
  replica.in_flight.fetch_add(1);
  state->context = std::make_unique<grpc::ClientContext>();
  if (options_.timeout_send.count() > 0) {
    state->context->set_deadline(std::chrono::system_clock::now() + options_.timeout_send);
  }
  state->reply.Clear();
  ForwardState* raw = state.get();
  replica.stub->UnaryCall(
      raw->context.get(), kSingleMethod, grpc::StubOptions(), &raw->request, &raw->reply,
      [this, state = std::move(state)](grpc::Status status) mutable {
        Replica& replica = *replicas_[state->replica];
        replica.in_flight.fetch_sub(1);
        if (!status.ok() && IsRetryable(status.error_code()) &&
            state->attempt + 1 < max_attempts_) {
          spdlog::warn("request to {} at {} failed ({}); retrying on another replica", replica.name,
                       replica.address, status.error_message());
          ++state->attempt;
          Attempt(std::move(state));
          return;
        }
        ForwardResult result;
        if (status.ok()) {
          replica.served.fetch_add(1);
          const auto& trailers = state->context->GetServerTrailingMetadata();
          auto it = trailers.find("is-error");
          result.is_error = it != trailers.end() && it->second == "true";
          result.reply = std::move(state->reply);
        } else {
          status =
              grpc::Status(status.error_code(),
                           "gateway: communication error with deployment '" +
                               options_.deployment_name + "' at " + replica.address + " (" +
                               replica.name + ") after " + std::to_string(state->attempt + 1) +
                               " tries: " + status.error_message() + "; the worker may be down");
          spdlog::error("{}", status.error_message());
        }
        result.status = std::move(status);
        state->done(std::move(result));
      });
}

// ---- Gateway ---------------------------------------------------------------

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Gateway::~Gateway() { Shutdown(std::chrono::milliseconds(1000)); }

StatusOr<std::unique_ptr<Gateway>> Gateway::Start(GatewayOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  GANTRY_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

int Gateway::port() const { return impl_->port(); }

int Gateway::http_port() const { return impl_->http_port(); }

std::vector<std::uint64_t> Gateway::ReplicaRequestCounts() const { return impl_->Counts(); }

void Gateway::Shutdown(std::chrono::milliseconds grace) { impl_->Shutdown(grace); }

}  // namespace gantry::internal
