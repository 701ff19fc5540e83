// The front a Deployment or a Flow serves behind: its gateway, and the
// client that Post and address() use. Both are shared pointers handed out
// under a lock, so that Stop can drop them while a Post is running (the Post
// keeps its own reference and fails once the gateway is shut down).
//
// Thread safety: every method may be called from any thread.
#ifndef GANTRY_DEPLOYMENT_SERVING_FRONT_H_
#define GANTRY_DEPLOYMENT_SERVING_FRONT_H_

#include <gantry/client.h>
#include <gantry/document.h>
#include <gantry/status.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "gateway/gateway.h"

namespace gantry::internal {

class ServingFront {
 public:
  // Holds the started `gateway` and makes the client: over TCP to its port
  // on `host` (0.0.0.0 reached as 127.0.0.1), or, with `in_process` (a TLS
  // gateway: no CA or client certificate to hold), on its in-process
  // channel.
  void Open(std::unique_ptr<Gateway> gateway, std::string_view host, std::int64_t max_message_bytes,
            bool in_process, const std::string& api_key);

  std::shared_ptr<Gateway> gateway() const;
  // 0, -1, -1 and "" before Open and after Release.
  int port() const;
  int http_port() const;
  int monitoring_port() const;
  std::string address() const;

  // Posts through the client; FailedPrecondition "<what> is stopped" once
  // StopClient ran (`what`: "deployment 'encoder'").
  StatusOr<DocList> Post(std::string_view what, std::string_view endpoint, const DocList& docs,
                         const PostOptions& options) const;

  // From here on Post answers "stopped". Returns the gateway, for the
  // caller to shut down.
  std::shared_ptr<Gateway> StopClient();
  // Drops the gateway, once nothing else of the caller's uses it.
  void Release();

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<Gateway> gateway_;  // guarded by mutex_
  std::shared_ptr<Client> client_;    // guarded by mutex_
};

}  // namespace gantry::internal

#endif  // GANTRY_DEPLOYMENT_SERVING_FRONT_H_
