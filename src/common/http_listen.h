// Listening sockets for Gantry's cpp-httplib servers (the HTTP gateway and
// the metrics port).
#ifndef GANTRY_COMMON_HTTP_LISTEN_H_
#define GANTRY_COMMON_HTTP_LISTEN_H_

namespace httplib {
class Server;
}  // namespace httplib

namespace gantry::internal {

// Keeps SO_REUSEADDR (a restart may bind a port in TIME_WAIT) but drops the
// SO_REUSEPORT that cpp-httplib sets by default: with it, a second server on
// a port already in use started without error and the kernel split the
// connections between the two. Call before binding.
void UseExclusivePort(httplib::Server& server);

}  // namespace gantry::internal

#endif  // GANTRY_COMMON_HTTP_LISTEN_H_
