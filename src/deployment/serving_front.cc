#include "deployment/serving_front.h"

#include <cstdint>
#include <utility>

#include "common/grpc_options.h"

namespace gantry::internal {

void ServingFront::Open(std::unique_ptr<Gateway> gateway, std::string_view host,
                        std::int64_t max_message_bytes, bool in_process,
                        const std::string& api_key) {
  std::string address =
      JoinHostPort(host == "0.0.0.0" ? std::string_view("127.0.0.1") : host, gateway->port());
  ClientOptions options{.max_message_bytes = max_message_bytes, .api_key = api_key};
  std::shared_ptr<Client> client =
      in_process ? std::shared_ptr<Client>(
                       new Client(std::move(address), options, gateway->InProcessChannel()))
                 : std::make_shared<Client>(std::move(address), options);
  std::lock_guard lock(mutex_);
  gateway_ = std::move(gateway);
  client_ = std::move(client);
}

std::shared_ptr<Gateway> ServingFront::gateway() const {
  std::lock_guard lock(mutex_);
  return gateway_;
}

int ServingFront::port() const {
  std::shared_ptr<Gateway> gateway = this->gateway();
  return gateway ? gateway->port() : 0;
}

int ServingFront::http_port() const {
  std::shared_ptr<Gateway> gateway = this->gateway();
  return gateway ? gateway->http_port() : -1;
}

int ServingFront::monitoring_port() const {
  std::shared_ptr<Gateway> gateway = this->gateway();
  return gateway ? gateway->monitoring_port() : -1;
}

std::string ServingFront::address() const {
  std::shared_ptr<Client> client;
  {
    std::lock_guard lock(mutex_);
    client = client_;
  }
  return client ? client->address() : std::string();
}

StatusOr<DocList> ServingFront::Post(std::string_view what, std::string_view endpoint,
                                     const DocList& docs, const PostOptions& options) const {
  std::shared_ptr<Client> client;
  {
    std::lock_guard lock(mutex_);
    client = client_;
  }
  if (!client) {
    return FailedPreconditionError(std::string(what) + " is stopped");
  }
  return client->Post(endpoint, docs, options);
}

std::shared_ptr<Gateway> ServingFront::StopClient() {
  std::lock_guard lock(mutex_);
  client_.reset();
  return gateway_;
}

void ServingFront::Release() {
  std::shared_ptr<Gateway> gateway;
  {
    std::lock_guard lock(mutex_);
    gateway = std::move(gateway_);
  }
}

}  // namespace gantry::internal
