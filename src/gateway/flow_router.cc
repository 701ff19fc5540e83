#include "gateway/flow_router.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>

#include "common/grpc_options.h"
#include "common/tracing.h"
#include "gateway/request_merge.h"
#include "jina/jina.pb.h"

namespace gantry::internal {
namespace {

constexpr char kSingleMethod[] = "/jina.JinaSingleDataRequestRPC/process_single_data";

std::string ToString(const grpc::ByteBuffer& buffer) {
  std::string out;
  std::vector<grpc::Slice> slices;
  if (buffer.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      out.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return out;
}

grpc::ByteBuffer ToByteBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// Merges the replies `parts` (serialized DataRequestProtos) into one.
StatusOr<grpc::ByteBuffer> Merge(const std::vector<grpc::ByteBuffer>& parts) {
  std::vector<jina::DataRequestProto> requests(parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (!requests[i].ParseFromString(ToString(parts[i]))) {
      return InternalError("reply " + std::to_string(i) + " is not a DataRequestProto");
    }
  }
  GANTRY_RETURN_IF_ERROR(MergeRequests(requests));
  return ToByteBuffer(requests.front().SerializeAsString());
}

// An executor error reply saying the step has no handler for the endpoint
// (nor a default one): Jina skips such a step, passing the request on as it
// came, so that a Flow's endpoints need not exist on every step.
bool EndpointNotServed(const grpc::ByteBuffer& reply) {
  jina::DataRequestProto proto;
  return proto.ParseFromString(ToString(reply)) &&
         proto.header().status().code() == jina::StatusProto::ERROR &&
         proto.header().status().exception().name() == "EndpointNotFound";
}

}  // namespace

struct FlowRouter::Graph {
  struct Step {
    std::string name;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<grpc::GenericStub> stub;
    std::vector<std::size_t> needs;
    // (step, position in that step's needs) for each step that needs this one.
    std::vector<std::pair<std::size_t, std::size_t>> dependents;
  };
  std::vector<std::unique_ptr<Step>> steps;
  std::size_t sinks = 0;
};

// One request's walk through the steps. Fields are guarded by `mutex`,
// except each run's context and buffers, which only the thread that starts
// or completes that run touches (gRPC orders the two).
class FlowRouter::Call final : public ForwardHandle {
 public:
  struct Run {
    std::unique_ptr<grpc::ClientContext> context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer reply;
    // The replies of its needs, by position; filled as they complete.
    std::vector<std::optional<grpc::ByteBuffer>> inputs;
    std::size_t waiting = 0;
  };

  void Cancel() override {
    std::lock_guard lock(mutex);
    cancelled = true;
    for (Run& run : runs) {
      if (run.context) {
        run.context->TryCancel();
      }
    }
  }

  // Marks the call finished and returns its `done`, or null when it was
  // finished already. Under `mutex`.
  ForwardDone TakeDoneLocked() {
    if (finished) {
      return nullptr;
    }
    finished = true;
    for (Run& run : runs) {
      if (run.context) {
        run.context->TryCancel();
      }
    }
    return std::move(done);
  }

  std::mutex mutex;
  std::vector<Run> runs;
  std::vector<std::optional<grpc::ByteBuffer>> ends;  // by step; set for ends
  std::size_t ends_left = 0;
  std::chrono::system_clock::time_point deadline;
  // W3C trace context sent to every step; empty when none.
  std::string traceparent;
  ForwardDone done;
  bool cancelled = false;
  bool finished = false;
};

namespace {

using Graph = FlowRouter::Graph;
using Call = FlowRouter::Call;

void OnStepDone(const std::shared_ptr<Graph>& graph, const std::shared_ptr<Call>& call,
                std::size_t index, const grpc::Status& status);

void Launch(const std::shared_ptr<Graph>& graph, const std::shared_ptr<Call>& call,
            std::size_t index, const grpc::ByteBuffer& request) {
  Graph::Step& step = *graph->steps[index];
  Call::Run& run = call->runs[index];
  ForwardDone done;
  {
    std::lock_guard lock(call->mutex);
    if (call->cancelled) {
      done = call->TakeDoneLocked();
    } else if (!call->finished) {
      run.context = std::make_unique<grpc::ClientContext>();
      if (call->deadline != std::chrono::system_clock::time_point::max()) {
        run.context->set_deadline(call->deadline);
      }
      if (!call->traceparent.empty()) {
        run.context->AddMetadata(kTraceparentKey, call->traceparent);
      }
      run.request = request;  // a reference-counted copy
    }
  }
  if (done) {
    done({grpc::Status(grpc::StatusCode::CANCELLED,
                       "flow step '" + step.name + "': the request was cancelled by its client"),
          {},
          false,
          {}});
    return;
  }
  if (!run.context) {
    return;  // finished by another step's failure
  }
  step.stub->UnaryCall(
      run.context.get(), kSingleMethod, grpc::StubOptions(), &run.request, &run.reply,
      [graph, call, index](const grpc::Status& status) { OnStepDone(graph, call, index, status); });
}

void OnStepDone(const std::shared_ptr<Graph>& graph, const std::shared_ptr<Call>& call,
                std::size_t index, const grpc::Status& status) {
  Graph::Step& step = *graph->steps[index];
  Call::Run& run = call->runs[index];
  bool is_error = false;
  if (status.ok()) {
    const auto& trailers = run.context->GetServerTrailingMetadata();
    auto it = trailers.find("is-error");
    is_error = it != trailers.end() && it->second == "true";
  }
  std::vector<std::size_t> ready;
  std::vector<grpc::ByteBuffer> ends;
  ForwardDone done;
  ForwardResult result;
  {
    std::lock_guard lock(call->mutex);
    if (call->finished) {
      return;
    }
    // Under the lock Launch wrote run.request under (ThreadSanitizer cannot
    // see gRPC's own ordering).
    if (is_error && EndpointNotServed(run.reply)) {
      is_error = false;
      run.reply = run.request;  // the step is skipped
    }
    if (!status.ok() || is_error) {
      done = call->TakeDoneLocked();
      result.is_error = is_error;
      if (status.ok()) {
        result.reply = run.reply;
      } else {
        result.status = grpc::Status(status.error_code(),
                                     "flow step '" + step.name + "': " + status.error_message());
      }
    } else {
      for (auto [dependent, position] : step.dependents) {
        Call::Run& next = call->runs[dependent];
        next.inputs[position] = run.reply;
        if (--next.waiting == 0) {
          ready.push_back(dependent);
        }
      }
      if (step.dependents.empty()) {
        call->ends[index] = run.reply;
        if (--call->ends_left == 0) {
          for (auto& end : call->ends) {
            if (end) {
              ends.push_back(std::move(*end));
            }
          }
          done = call->TakeDoneLocked();
        }
      }
    }
  }
  if (done && result.status.ok() && !result.is_error) {
    if (ends.size() == 1) {
      result.reply = ends.front();
    } else if (StatusOr<grpc::ByteBuffer> merged = Merge(ends); merged.ok()) {
      result.reply = std::move(merged).value();
    } else {
      result.status =
          grpc::Status(grpc::StatusCode::INTERNAL,
                       "flow: merging the replies of its last steps: " + merged.status().message());
    }
  }
  if (done) {
    done(std::move(result));
    return;
  }
  for (std::size_t next : ready) {
    std::vector<std::optional<grpc::ByteBuffer>>& inputs = call->runs[next].inputs;
    if (inputs.size() == 1) {
      Launch(graph, call, next, *inputs.front());
      continue;
    }
    std::vector<grpc::ByteBuffer> parts;
    for (auto& input : inputs) {
      parts.push_back(std::move(*input));
    }
    StatusOr<grpc::ByteBuffer> merged = Merge(parts);
    if (merged.ok()) {
      Launch(graph, call, next, *merged);
      continue;
    }
    ForwardDone failed;
    {
      std::lock_guard lock(call->mutex);
      failed = call->TakeDoneLocked();
    }
    if (failed) {
      failed({grpc::Status(grpc::StatusCode::INTERNAL,
                           "flow step '" + graph->steps[next]->name +
                               "': merging the replies of its needs: " + merged.status().message()),
              {},
              false,
              {}});
    }
  }
}

}  // namespace

FlowRouter::FlowRouter(std::vector<FlowRouteStep> steps, std::int64_t max_message_bytes,
                       std::function<bool()> steps_ready)
    : steps_ready_(std::move(steps_ready)), graph_(std::make_shared<Graph>()) {
  std::vector<std::unique_ptr<Graph::Step>>& graph_steps = graph_->steps;
  for (FlowRouteStep& s : steps) {
    auto step = std::make_unique<Graph::Step>();
    step->name = std::move(s.name);
    step->channel = MakeChannel(s.address, max_message_bytes);
    step->stub = std::make_unique<grpc::GenericStub>(step->channel);
    step->needs = std::move(s.needs);
    for (std::size_t p = 0; p < step->needs.size(); ++p) {
      graph_steps.at(step->needs[p])->dependents.emplace_back(graph_steps.size(), p);
    }
    graph_steps.push_back(std::move(step));
  }
  for (const auto& step : graph_steps) {
    graph_->sinks += step->dependents.empty() ? 1 : 0;
  }
}

FlowRouter::~FlowRouter() = default;

bool FlowRouter::Available() const {
  for (const auto& step : graph_->steps) {
    // try_to_connect: an idle channel (no request yet) connects, so a step
    // that cannot be reached (an external one not up yet) shows as
    // TRANSIENT_FAILURE before the first request fails on it.
    if (step->channel->GetState(true) == GRPC_CHANNEL_TRANSIENT_FAILURE) {
      return false;
    }
  }
  return !steps_ready_ || steps_ready_();
}

std::string FlowRouter::WhyUnavailable() const {
  for (const auto& step : graph_->steps) {
    if (step->channel->GetState(false) == GRPC_CHANNEL_TRANSIENT_FAILURE) {
      return "flow step '" + step->name + "' cannot be reached";
    }
  }
  return "a step has no replica in rotation";
}

std::shared_ptr<ForwardHandle> FlowRouter::Forward(const grpc::ByteBuffer& request,
                                                   std::chrono::system_clock::time_point deadline,
                                                   ForwardDone done) {
  const std::vector<std::unique_ptr<Graph::Step>>& steps = graph_->steps;
  auto call = std::make_shared<Call>();
  call->deadline = deadline;
  call->done = std::move(done);
  if (const std::optional<TraceContext> trace = CurrentTraceContext()) {
    call->traceparent = FormatTraceparent(*trace);
  }
  call->runs.resize(steps.size());
  call->ends.resize(steps.size());
  call->ends_left = graph_->sinks;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    call->runs[i].inputs.resize(steps[i]->needs.size());
    call->runs[i].waiting = steps[i]->needs.size();
  }
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (steps[i]->needs.empty()) {
      Launch(graph_, call, i, request);
    }
  }
  return call;
}

}  // namespace gantry::internal
