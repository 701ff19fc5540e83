#include "gateway/swagger_ui.h"

#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace gantry::internal {
namespace {

struct AssetFile {
  const char* name;
  const char* content_type;
};
// What the page loads; the rest of the package (the editor, source maps)
// stays out of the gateway's memory.
constexpr std::array<AssetFile, 4> kAssetFiles = {{
    {"swagger-ui-bundle.js", "text/javascript; charset=utf-8"},
    {"swagger-ui.css", "text/css; charset=utf-8"},
    {"favicon-32x32.png", "image/png"},
    {"favicon-16x16.png", "image/png"},
}};
// Swagger UI's files are 2 MB; a folder of something else is not read whole.
constexpr std::uintmax_t kMaxAssetBytes = 16 << 20;

std::string ExecutableDir() {
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string() : exe.parent_path().string();
}

std::string HtmlEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> SwaggerUi::SearchDirs() {
  if (const char* dir = std::getenv("GANTRY_SWAGGER_UI_DIR"); dir != nullptr && *dir != '\0') {
    return {dir};
  }
  std::vector<std::string> dirs;
  if (const std::string exe_dir = ExecutableDir(); !exe_dir.empty()) {
    dirs.push_back(exe_dir + "/../share/gantry/swagger-ui");
  }
  dirs.emplace_back(GANTRY_INSTALL_DATADIR "/gantry/swagger-ui");
  return dirs;
}

StatusOr<SwaggerUi> SwaggerUi::LoadFrom(const std::string& dir) {
  SwaggerUi out;
  for (const AssetFile& file : kAssetFiles) {
    const std::filesystem::path path = std::filesystem::path(dir) / file.name;
    std::error_code error;
    const std::uintmax_t size = std::filesystem::file_size(path, error);
    if (error) {
      return Status(StatusCode::kNotFound, path.string() + ": " + error.message());
    }
    if (size > kMaxAssetBytes) {
      return Status(StatusCode::kInvalidArgument,
                    path.string() + " is " + std::to_string(size) + " bytes, over " +
                        std::to_string(kMaxAssetBytes) + "; not Swagger UI's file");
    }
    std::ifstream in(path, std::ios::binary);
    std::ostringstream body;
    body << in.rdbuf();
    if (!in.good() && !in.eof()) {
      return Status(StatusCode::kNotFound, path.string() + ": cannot be read");
    }
    out.assets_.emplace(file.name, Asset{.content_type = file.content_type, .body = body.str()});
  }
  return out;
}

StatusOr<SwaggerUi> SwaggerUi::Load() {
  std::string tried;
  for (const std::string& dir : SearchDirs()) {
    StatusOr<SwaggerUi> loaded = LoadFrom(dir);
    if (loaded.ok()) {
      return loaded;
    }
    tried += (tried.empty() ? "" : "; ") + std::string(loaded.status().message());
  }
  return Status(StatusCode::kNotFound,
                "Swagger UI's files were not found (" + tried +
                    "); the build copies them from the PyPI package swagger-ui-py, or set "
                    "GANTRY_SWAGGER_UI_DIR to a folder holding swagger-ui-bundle.js and "
                    "swagger-ui.css");
}

std::string SwaggerUi::Page(std::string_view title) {
  const std::string escaped = HtmlEscape(title);
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
         escaped +
         "</title>\n"
         "<link rel=\"stylesheet\" href=\"docs/swagger-ui.css\">\n"
         "<link rel=\"icon\" type=\"image/png\" href=\"docs/favicon-32x32.png\">\n"
         "</head>\n<body>\n<div id=\"swagger-ui\"></div>\n"
         "<script src=\"docs/swagger-ui-bundle.js\"></script>\n"
         "<script>\n"
         "window.ui = SwaggerUIBundle({url: \"openapi.json\", dom_id: \"#swagger-ui\",\n"
         "  deepLinking: true, persistAuthorization: false});\n"
         "</script>\n</body>\n</html>\n";
}

const SwaggerUi::Asset* SwaggerUi::Find(std::string_view name) const {
  const auto it = assets_.find(name);
  return it == assets_.end() ? nullptr : &it->second;
}

}  // namespace gantry::internal
