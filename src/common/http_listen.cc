#include "common/http_listen.h"

#include <httplib.h>
#include <sys/socket.h>

namespace gantry::internal {

void UseExclusivePort(httplib::Server& server) {
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
}

}  // namespace gantry::internal
