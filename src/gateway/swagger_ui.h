// Swagger UI for the HTTP gateway's OpenAPI document: GET /docs is a page
// that loads Swagger UI's script and style from the gateway itself (no CDN)
// and points it at /openapi.json. The files come from the PyPI package
// swagger-ui-py (Swagger UI 5, which renders OpenAPI 3.1), copied by the
// build into <prefix>/share/gantry/swagger-ui.
//
// Thread safety: immutable once loaded; safe from any thread.
#ifndef GANTRY_GATEWAY_SWAGGER_UI_H_
#define GANTRY_GATEWAY_SWAGGER_UI_H_

#include <gantry/status.h>

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace gantry::internal {

class SwaggerUi {
 public:
  struct Asset {
    std::string content_type;
    std::string body;
  };

  // Where the files are looked for, in order: $GANTRY_SWAGGER_UI_DIR when
  // set (then only there); <the executable's folder>/../share/gantry/swagger-ui;
  // the folder `cmake --install` puts them in.
  static std::vector<std::string> SearchDirs();

  // The first of SearchDirs() that holds every file; NotFound naming each
  // folder tried and the file it lacks.
  static StatusOr<SwaggerUi> Load();
  static StatusOr<SwaggerUi> LoadFrom(const std::string& dir);

  // The HTML of GET /docs, titled `title`. Its links are relative, so a
  // proxy may serve the gateway under a prefix.
  static std::string Page(std::string_view title);

  // One of the files by name (GET /docs/<name>); nullptr for any other.
  const Asset* Find(std::string_view name) const;

 private:
  std::map<std::string, Asset, std::less<>> assets_;
};

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_SWAGGER_UI_H_
