// A Flow's router: the Upstream behind a Flow's gateway (gateway/gateway.h)
// that walks each request through the Flow's steps. Every step is a
// Deployment with a gateway of its own on 127.0.0.1 (which picks the
// replica, retries and health-checks); the router calls it with
// process_single_data, so a request goes from step to step without going
// back through the client.
//
// - A step with one need gets that step's reply as its request, unchanged
//   (the bytes are forwarded, never decoded).
// - A step with several needs waits for all of them and gets their replies
//   merged by document id (gateway/request_merge.h).
// - Steps with no needs get the client's request; steps that no other step
//   needs are the Flow's ends, and their replies (merged when several) are
//   the answer.
// - The first step to fail ends the request: a gRPC error is returned with
//   its message prefixed by "flow step '<name>': "; an executor error reply
//   (whose description names the executor and the step's replica) is
//   returned as it is, marked is-error. The steps still running are
//   cancelled and no further step starts.
//
// Thread safety: safe for concurrent use.
#ifndef GANTRY_GATEWAY_FLOW_ROUTER_H_
#define GANTRY_GATEWAY_FLOW_ROUTER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gateway/upstream.h"

namespace gantry::internal {

struct FlowRouteStep {
  std::string name;
  // The step's Deployment gateway, "127.0.0.1:PORT".
  std::string address;
  // Indices of the steps it needs, each lower than its own (the steps are in
  // topological order); empty: it gets the client's request.
  std::vector<std::size_t> needs;
};

class FlowRouter final : public Upstream {
 public:
  // `steps_ready`, if set, says whether every step has a replica in
  // rotation (the Flow asks its steps' Deployments); Available() needs it.
  FlowRouter(std::vector<FlowRouteStep> steps, std::int64_t max_message_bytes,
             std::function<bool()> steps_ready = {});
  ~FlowRouter() override;
  FlowRouter(const FlowRouter&) = delete;
  FlowRouter& operator=(const FlowRouter&) = delete;

  std::shared_ptr<ForwardHandle> Forward(const grpc::ByteBuffer& request,
                                         std::chrono::system_clock::time_point deadline,
                                         ForwardDone done) override;
  // True while no step's channel is in TRANSIENT_FAILURE and `steps_ready`
  // (when given) holds.
  bool Available() const override;
  std::string WhyUnavailable() const override;

  // Defined in flow_router.cc. The steps are shared with the calls in
  // flight, whose completions may come after the router is gone.
  class Call;
  struct Graph;

 private:
  std::function<bool()> steps_ready_;
  std::shared_ptr<Graph> graph_;
};

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_FLOW_ROUTER_H_
