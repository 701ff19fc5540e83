// One route of the HTTP gateway as it is registered: the method and path it
// answers and what the OpenAPI document says of it. The gateway dispatches
// through the same list that gateway/openapi.h describes, so the published
// schema cannot drift from what is served.
//
// Thread safety: plain values and pure functions, safe from any thread.
#ifndef GANTRY_GATEWAY_HTTP_ROUTE_H_
#define GANTRY_GATEWAY_HTTP_ROUTE_H_

#include <string>
#include <string_view>
#include <vector>

namespace gantry::internal {

struct HttpRoute {
  std::string method{};  // "GET" or "POST"
  // An OpenAPI path template: a `{name}` segment matches one non-empty
  // segment; everything else matches itself.
  std::string path{};
  std::string operation_id{};
  std::string tag{};  // "Jina", "OpenAI", "TEI", "KServe v2"
  std::string summary{};
  std::string description{};
  // Names in the document's components.schemas; empty: no body.
  std::string request_schema{};
  std::string reply_schema{};
  // The error replies' statuses and their body's schema.
  std::vector<int> error_statuses{};
  std::string error_schema{};
  // The route wants the gateway's API key when one is set.
  bool needs_api_key = false;
  // Takes the Gantry-Timeout-Ms and X-Request-Id headers.
  bool takes_deadline = false;
  // Matches every path of two or more characters (Jina's POST /<endpoint>,
  // whose endpoint may hold slashes); tried after every other route.
  bool catch_all = false;
  // Served but left out of the OpenAPI document (the document and its page).
  bool in_schema = true;
};

// Whether `path` (no query) is one that `route` answers, method aside.
bool HttpRouteMatches(const HttpRoute& route, std::string_view path);

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_HTTP_ROUTE_H_
