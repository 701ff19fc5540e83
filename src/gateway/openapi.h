// The HTTP gateway's OpenAPI 3.1 document (GET /openapi.json), made from the
// routes it registers (gateway/http_route.h): each route's operation, its
// path parameters, request and reply schemas, error replies and, with an
// API key set, the bearer security scheme. The schemas are JSON Schema
// 2020-12, as OpenAPI 3.1 takes them.
//
// Thread safety: pure functions, safe from any thread.
#ifndef GANTRY_GATEWAY_OPENAPI_H_
#define GANTRY_GATEWAY_OPENAPI_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gateway/http_route.h"

namespace gantry::internal {

struct OpenApiOptions {
  std::string title = "Gantry gateway";
  std::string version;
  // Routes with needs_api_key carry the bearer scheme.
  bool api_key = false;
};

// The document for `routes` (those with in_schema). Every schema a route
// names must be one of OpenApiSchemas()'s.
nlohmann::json OpenApiDocument(const std::vector<HttpRoute>& routes, const OpenApiOptions& options);

// components.schemas: every request, reply and error body the gateway's
// routes take or give.
const nlohmann::json& OpenApiSchemas();

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_OPENAPI_H_
