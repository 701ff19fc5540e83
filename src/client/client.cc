#include <gantry/client.h>
#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "client/progress_bar.h"
#include "common/grpc_options.h"
#include "common/tls.h"
#include "core/doc_proto.h"
#include "core/limits.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "jina/jina.grpc.pb.h"

namespace gantry {

class Client::Impl {
 public:
  Impl(std::string address, ClientOptions options, std::shared_ptr<grpc::Channel> channel = nullptr)
      : address_(std::move(address)), options_(std::move(options)), channel_(std::move(channel)) {}

  const std::string& address() const { return address_; }

  // Made on first use; a bad TLS file fails every call with its message.
  StatusOr<std::shared_ptr<grpc::Channel>> channel() {
    std::lock_guard lock(mutex_);
    if (!channel_) {
      StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
          internal::MakeChannelCredentials(options_.tls);
      if (!credentials.ok()) {
        return credentials.status().WithPrefix("client of " + address_);
      }
      channel_ = internal::MakeChannel(address_, options_.max_message_bytes, *credentials);
    }
    return channel_;
  }

  StatusOr<DocList> Post(std::string_view endpoint, const DocList& docs,
                         const PostOptions& options);

  // The API key, when set, goes with every call.
  void Authorize(grpc::ClientContext& context) const {
    if (!options_.api_key.empty()) {
      context.AddMetadata("authorization", "Bearer " + options_.api_key);
    }
  }

 private:
  std::string address_;
  ClientOptions options_;
  std::mutex mutex_;
  std::shared_ptr<grpc::Channel> channel_;
};

namespace {

std::string RandomHex(int digits) {
  thread_local std::mt19937_64 engine{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < digits; ++i) {
    out += kHex[engine() & 0xf];
  }
  return out;
}

// Request ids are "<random>-<batch index>" so replies map back to batches.
std::optional<std::size_t> BatchIndexOf(const std::string& request_id, std::string_view prefix) {
  if (!request_id.starts_with(prefix) || request_id.size() <= prefix.size()) {
    return std::nullopt;
  }
  std::size_t index = 0;
  for (char c : request_id.substr(prefix.size())) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    index = index * 10 + static_cast<std::size_t>(c - '0');
  }
  return index;
}

Status ErrorFromHeader(const jina::HeaderProto& header) {
  const auto& status = header.status();
  std::string message = status.description();
  if (message.empty() && status.exception().args_size() > 0) {
    message = status.exception().args(0);
  }
  if (message.empty()) {
    message = status.exception().name();
  }
  // A handler's std::length_error (an input over the model's limit with
  // truncation off) or std::invalid_argument (input it refused) is
  // INVALID_ARGUMENT, as KServe's gRPC route answers them.
  if (internal::IsInputTooLarge(status) || internal::IsInvalidInput(status)) {
    return InvalidArgumentError(message);
  }
  return UnknownError(message);
}

}  // namespace

StatusOr<DocList> Client::Impl::Post(std::string_view endpoint, const DocList& docs,
                                     const PostOptions& options) {
  if (options.request_size <= 0) {
    return InvalidArgumentError("request_size must be positive, got " +
                                std::to_string(options.request_size));
  }
  const std::size_t batch_size = static_cast<std::size_t>(options.request_size);
  const std::size_t batches = (docs.size() + batch_size - 1) / batch_size;
  const int prefetch = std::max(1, options.prefetch);
  const std::string prefix = RandomHex(16) + "-";

  google::protobuf::Struct parameters;
  internal::DictToStruct(options.parameters.values(), &parameters);
  if (parameters.fields().count("__results__") == 0) {
    (*parameters.mutable_fields())["__results__"].mutable_struct_value();
  }

  GANTRY_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, this->channel());
  auto stub = jina::JinaRPC::NewStub(channel);
  grpc::ClientContext context;
  Authorize(context);
  if (options.timeout.count() > 0) {
    context.set_deadline(std::chrono::system_clock::now() + options.timeout);
  }
  auto stream = stub->Call(&context);

  std::mutex mutex;
  std::condition_variable can_send;
  int in_flight = 0;
  bool stop_sending = false;

  std::optional<internal::ProgressBar> progress;
  if (options.show_progress) {
    progress.emplace(std::string(endpoint), docs.size());
  }

  // Requests are written by a second thread so that replies are read while
  // later requests are still going out (the stream is full duplex).
  std::jthread writer([&] {
    for (std::size_t b = 0; b < batches; ++b) {
      {
        std::unique_lock lock(mutex);
        can_send.wait(lock, [&] { return stop_sending || in_flight < prefetch; });
        if (stop_sending) {
          break;
        }
        ++in_flight;
      }
      jina::DataRequestProto request;
      auto* header = request.mutable_header();
      header->set_request_id(prefix + std::to_string(b));
      header->set_exec_endpoint(std::string(endpoint));
      if (!options.target_executor.empty()) {
        header->set_target_executor(options.target_executor);
      }
      *request.mutable_parameters() = parameters;
      auto* out = request.mutable_data()->mutable_docs();
      std::size_t end = std::min(docs.size(), (b + 1) * batch_size);
      DocList batch;
      batch.reserve(end - b * batch_size);
      for (std::size_t i = b * batch_size; i < end; ++i) {
        batch.push_back(docs[i]);
      }
      internal::DocListToProto(batch, out);
      if (!stream->Write(request)) {
        break;
      }
    }
    stream->WritesDone();
  });

  std::vector<std::optional<DocList>> results(batches);
  std::size_t received_batches = 0;
  std::size_t received_docs = 0;
  Status error;
  jina::DataRequestProto reply;
  while (received_batches < batches && stream->Read(&reply)) {
    std::optional<std::size_t> index = BatchIndexOf(reply.header().request_id(), prefix);
    if (!index || *index >= batches || results[*index].has_value()) {
      error = InternalError("reply with unexpected request id '" + reply.header().request_id() +
                            "' from " + address_);
      break;
    }
    if (reply.header().status().code() == jina::StatusProto::ERROR) {
      error = ErrorFromHeader(reply.header());
      break;
    }
    auto* data = reply.mutable_data();
    StatusOr<DocList> batch = data->has_docs_bytes()
                                  ? internal::DocListFromBytes(data->docs_bytes())
                                  : internal::TakeDocListFromProto(data->mutable_docs());
    if (!batch.ok()) {
      error = batch.status().WithPrefix("reply from " + address_);
      break;
    }
    received_docs += batch->size();
    results[*index] = std::move(batch).value();
    ++received_batches;
    {
      std::lock_guard lock(mutex);
      --in_flight;
    }
    can_send.notify_one();
    if (progress) {
      progress->Update(received_docs);
    }
  }
  if (!error.ok()) {
    // Stop the writer and abandon the stream. Not when the server ended it:
    // cancelling then would replace the server's status with CANCELLED.
    context.TryCancel();
  }
  {
    std::lock_guard lock(mutex);
    stop_sending = true;
  }
  can_send.notify_all();
  writer.join();
  grpc::Status finish = stream->Finish();
  if (progress) {
    progress->Finish();
  }
  if (!error.ok()) {
    return error;
  }
  // With every reply in, how the stream ended loses nothing: a gateway that
  // starts draining before our WritesDone arrives ends it UNAVAILABLE.
  if (!finish.ok() && received_batches < batches) {
    Status status = internal::FromGrpcStatus(finish);
    if (status.code() == StatusCode::kUnavailable) {
      return status.WithPrefix("cannot reach " + address_);
    }
    return status;
  }
  if (received_batches < batches) {
    return InternalError("the stream to " + address_ + " ended after " +
                         std::to_string(received_batches) + " of " + std::to_string(batches) +
                         " replies");
  }
  DocList out;
  out.reserve(received_docs);
  for (auto& batch : results) {
    for (Doc& doc : *batch) {
      out.push_back(std::move(doc));
    }
  }
  return out;
}

Client::Client(std::string address) : Client(std::move(address), ClientOptions{}) {}
Client::Client(std::string address, ClientOptions options)
    : impl_(std::make_unique<Impl>(std::move(address), std::move(options))) {}
Client::Client(std::string address, ClientOptions options, std::shared_ptr<grpc::Channel> channel)
    : impl_(std::make_unique<Impl>(std::move(address), std::move(options), std::move(channel))) {}
Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

const std::string& Client::address() const { return impl_->address(); }

StatusOr<DocList> Client::Post(std::string_view endpoint, const DocList& docs,
                               const PostOptions& options) {
  return impl_->Post(endpoint, docs, options);
}

Status Client::Ping(std::chrono::milliseconds timeout) {
  GANTRY_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, impl_->channel());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  impl_->Authorize(context);
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    return internal::FromGrpcStatus(status).WithPrefix("health check of " + impl_->address());
  }
  if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return UnavailableError("health check of " + impl_->address() + ": not serving");
  }
  return OkStatus();
}

Status Client::DryRun(std::chrono::milliseconds timeout) {
  GANTRY_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, impl_->channel());
  auto stub = jina::JinaGatewayDryRunRPC::NewStub(channel);
  grpc::ClientContext context;
  impl_->Authorize(context);
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  google::protobuf::Empty request;
  jina::StatusProto response;
  grpc::Status status = stub->dry_run(&context, request, &response);
  if (!status.ok()) {
    return internal::FromGrpcStatus(status).WithPrefix("dry_run of " + impl_->address());
  }
  if (response.code() != jina::StatusProto::SUCCESS) {
    return UnavailableError("dry_run of " + impl_->address() + ": " + response.description());
  }
  return OkStatus();
}

}  // namespace gantry
