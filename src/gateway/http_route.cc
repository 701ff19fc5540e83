#include "gateway/http_route.h"

namespace gantry::internal {
namespace {

// The next segment of `path` after its leading '/', consumed.
std::string_view NextSegment(std::string_view& path) {
  path.remove_prefix(1);
  const std::size_t slash = path.find('/');
  const std::string_view segment = path.substr(0, slash);
  path = slash == std::string_view::npos ? std::string_view() : path.substr(slash);
  return segment;
}

}  // namespace

bool HttpRouteMatches(const HttpRoute& route, std::string_view path) {
  if (route.catch_all) {
    return path.size() >= 2 && path.front() == '/';
  }
  std::string_view pattern = route.path;
  while (!pattern.empty() && !path.empty()) {
    if (pattern.front() != '/' || path.front() != '/') {
      return false;
    }
    const std::string_view want = NextSegment(pattern);
    const std::string_view have = NextSegment(path);
    const bool parameter = want.size() >= 2 && want.front() == '{' && want.back() == '}';
    if (parameter ? have.empty() : want != have) {
      return false;
    }
  }
  return pattern.empty() && path.empty();
}

}  // namespace gantry::internal
