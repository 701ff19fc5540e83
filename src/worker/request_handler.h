// The logic of a worker, without sockets: routes a DataRequestProto to the
// executor's handler and turns the result (or the handler's exception) into
// the reply Jina expects. Tested in-process; worker_service.cc wires it to
// gRPC.
//
// Thread safety: Handle is safe for concurrent use; handler calls are
// serialised by an internal mutex (Jina's one-request-at-a-time contract).
#ifndef GANTRY_WORKER_REQUEST_HANDLER_H_
#define GANTRY_WORKER_REQUEST_HANDLER_H_

#include <gantry/executor.h>
#include <gantry/status.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "jina/jina.pb.h"

namespace gantry::internal {

class RequestHandler {
 public:
  // Creates the executor of type `jtype` (the constructor runs here). A
  // constructor exception becomes the returned status.
  static StatusOr<std::unique_ptr<RequestHandler>> Create(const std::string& jtype,
                                                          const ExecutorContext& context,
                                                          const std::string& runtime_name);
  ~RequestHandler();

  // Processes `request` in place: on return it is the reply. Returns true if
  // the reply carries an error (the caller sets trailing `is-error: true`).
  bool Handle(jina::DataRequestProto* request);

  // Endpoints (with "_jina_dry_run_") and their JSON schemas, for
  // endpoint_discovery.
  void FillEndpoints(jina::EndpointsProto* endpoints) const;

  // Calls the executor's Close() once; later requests get an error.
  void Close();

  const std::string& executor_name() const { return executor_name_; }
  const std::string& jtype() const { return jtype_; }

 private:
  RequestHandler() = default;
  void SetError(jina::DataRequestProto* request, const std::string& exception_name,
                const std::string& message) const;

  std::string jtype_;
  std::string executor_name_;
  std::string runtime_name_;
  std::vector<internal::Route> routes_;
  // endpoint -> index into routes_
  std::map<std::string, std::size_t, std::less<>> endpoint_routes_;
  std::mutex executor_mutex_;
  std::unique_ptr<Executor> executor_;  // guarded by executor_mutex_ for calls
  bool closed_ = false;                 // guarded by executor_mutex_
};

}  // namespace gantry::internal

#endif  // GANTRY_WORKER_REQUEST_HANDLER_H_
