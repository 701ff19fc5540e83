#include "common/grpc_options.h"

#include <absl/synchronization/mutex.h>
#include <grpcpp/resource_quota.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "core/limits.h"

namespace gantry::internal {

namespace {

// gRPC takes an int; larger caps are clamped to its 2 GB ceiling.
int MessageCapForGrpc(std::int64_t max_message_bytes) {
  return static_cast<int>(
      std::clamp<std::int64_t>(max_message_bytes, 1, std::numeric_limits<int>::max()));
}

}  // namespace

void BoundSyncServerThreads(grpc::ServerBuilder& builder, const std::string& quota_name,
                            int max_calls_in_flight) {
  grpc::ResourceQuota quota(quota_name);
  quota.SetMaxThreads(max_calls_in_flight + kSpareServerThreads);
  builder.SetResourceQuota(quota);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
                              kIdleSyncServerThreads);
}

void ConfigureServerBuilder(grpc::ServerBuilder& builder, std::int64_t max_message_bytes) {
  // gRPC binds with SO_REUSEPORT on Linux by default: a second server on a
  // port in use would start, and the kernel would split connections between
  // the two. A port in use fails the start instead, as the HTTP port does.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(MessageCapForGrpc(max_message_bytes));
  builder.SetMaxSendMessageSize(MessageCapForGrpc(max_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 9999);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 4999);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Accept client pings down to every 5 s without data and never answer them
  // with GOAWAY ("too many pings"): Jina clients ping every ~10 s.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

grpc::ChannelArguments MakeChannelArguments(std::int64_t max_message_bytes) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(MessageCapForGrpc(max_message_bytes));
  args.SetMaxSendMessageSize(MessageCapForGrpc(max_message_bytes));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 9999);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 4999);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Reconnect within a second of a peer coming back (gRPC's backoff grows to
  // two minutes): the gateway's health probes must see a recovered replica.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Each Gantry channel is its own connection: the gateway's channels to
  // different replicas must not share one subchannel pool entry.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           std::int64_t max_message_bytes,
                                           std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args = MakeChannelArguments(max_message_bytes);
  if (address.starts_with("dns:")) {
    // A DNS name may stand for several servers (a headless Kubernetes
    // Service, a scaled compose service): spread calls over all of them
    // rather than pick_first's one.
    args.SetLoadBalancingPolicyName("round_robin");
  }
  return grpc::CreateCustomChannel(
      address, credentials ? std::move(credentials) : grpc::InsecureChannelCredentials(), args);
}

void DisableAbseilDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

std::string JoinHostPort(std::string_view host, int port) {
  std::string out;
  if (host.find(':') != std::string_view::npos && !host.starts_with("[")) {
    out = "[" + std::string(host) + "]";
  } else {
    out = std::string(host);
  }
  return out + ":" + std::to_string(port);
}

}  // namespace gantry::internal
