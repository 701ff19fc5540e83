// The HTTP gateway's route matching, its OpenAPI document and the Swagger UI
// files. Through a real gateway, a browser and a maintained validator:
// tests/interop/test_openapi.py.
#include "gateway/openapi.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "gateway/http_route.h"
#include "gateway/swagger_ui.h"

namespace gantry::internal {
namespace {

using nlohmann::json;

HttpRoute Template(std::string path) { return HttpRoute{.method = "GET", .path = std::move(path)}; }

TEST(HttpRouteTest, TemplatesMatchOneNonEmptySegmentPerParameter) {
  const HttpRoute model = Template("/v2/models/{model_name}/ready");
  EXPECT_TRUE(HttpRouteMatches(model, "/v2/models/m/ready"));
  EXPECT_FALSE(HttpRouteMatches(model, "/v2/models//ready"));
  EXPECT_FALSE(HttpRouteMatches(model, "/v2/models/a/b/ready"));
  EXPECT_FALSE(HttpRouteMatches(model, "/v2/models/m/ready/"));
  EXPECT_FALSE(HttpRouteMatches(model, "/v2/models/m"));
  EXPECT_TRUE(HttpRouteMatches(Template("/"), "/"));
  EXPECT_FALSE(HttpRouteMatches(Template("/"), ""));
  EXPECT_FALSE(HttpRouteMatches(Template("/v1/models"), "/v1/models/"));
  EXPECT_FALSE(HttpRouteMatches(Template("/v1/models"), "/v1/model"));
  EXPECT_TRUE(HttpRouteMatches(Template("/v1/models"), "/v1/models"));
}

TEST(HttpRouteTest, TheCatchAllTakesAnyPathOfTwoOrMoreCharacters) {
  const HttpRoute any{.method = "POST", .path = "/{endpoint}", .catch_all = true};
  EXPECT_TRUE(HttpRouteMatches(any, "/encode"));
  EXPECT_TRUE(HttpRouteMatches(any, "/a/b"));
  EXPECT_FALSE(HttpRouteMatches(any, "/"));
  EXPECT_FALSE(HttpRouteMatches(any, "x"));
}

// Every "$ref" anywhere under `node`.
void CollectRefs(const json& node, std::set<std::string>& refs) {
  if (node.is_object()) {
    for (const auto& [key, value] : node.items()) {
      if (key == "$ref" && value.is_string()) {
        refs.insert(value.get<std::string>());
      } else {
        CollectRefs(value, refs);
      }
    }
  } else if (node.is_array()) {
    for (const json& item : node) {
      CollectRefs(item, refs);
    }
  }
}

std::vector<HttpRoute> SomeRoutes() {
  return {
      {.method = "GET", .path = "/", .operation_id = "health", .tag = "Jina", .summary = "h"},
      {.method = "POST",
       .path = "/v2/models/{model_name}/versions/{model_version}/infer",
       .operation_id = "infer",
       .tag = "KServe v2",
       .summary = "i",
       .request_schema = "KServeInferRequest",
       .reply_schema = "KServeInferReply",
       .error_statuses = {400, 404},
       .error_schema = "KServeError",
       .needs_api_key = true,
       .takes_deadline = true},
      {.method = "POST",
       .path = "/v1/embeddings",
       .operation_id = "openai",
       .tag = "OpenAI",
       .summary = "o",
       .request_schema = "OpenAiEmbeddingsRequest",
       .reply_schema = "OpenAiEmbeddingsReply",
       .error_statuses = {400},
       .error_schema = "OpenAiError",
       .needs_api_key = true},
      {.method = "GET", .path = "/docs", .in_schema = false},
  };
}

TEST(OpenApiTest, DescribesEachRouteWithItsParametersBodiesAndErrors) {
  const json doc = OpenApiDocument(SomeRoutes(), {.version = "1.2.3"});
  EXPECT_EQ(doc["openapi"], "3.1.0");
  EXPECT_EQ(doc["info"]["version"], "1.2.3");
  EXPECT_FALSE(doc["paths"].contains("/docs"));
  ASSERT_TRUE(doc["paths"].contains("/"));
  const json& infer =
      doc["paths"]["/v2/models/{model_name}/versions/{model_version}/infer"]["post"];
  EXPECT_EQ(infer["operationId"], "infer");
  EXPECT_EQ(infer["tags"], json::array({"KServe v2"}));
  std::set<std::string> path_parameters;
  std::set<std::string> headers;
  for (const json& parameter : infer["parameters"]) {
    (parameter["in"] == "path" ? path_parameters : headers).insert(parameter["name"]);
  }
  EXPECT_EQ(path_parameters, (std::set<std::string>{"model_name", "model_version"}));
  EXPECT_EQ(headers, (std::set<std::string>{"Gantry-Timeout-Ms", "X-Request-Id"}));
  EXPECT_EQ(infer["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/KServeInferRequest");
  EXPECT_TRUE(infer["responses"].contains("404"));
  EXPECT_FALSE(infer.contains("security")) << "no API key, no security requirement";
  EXPECT_FALSE(doc["components"].contains("securitySchemes"));
  EXPECT_EQ(doc["tags"].size(), 3U);
}

TEST(OpenApiTest, AnApiKeyAddsTheBearerSchemeToTheRoutesThatWantIt) {
  const json doc = OpenApiDocument(SomeRoutes(), {.version = "1", .api_key = true});
  EXPECT_EQ(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
  EXPECT_TRUE(doc["paths"]["/v1/embeddings"]["post"].contains("security"));
  EXPECT_TRUE(doc["paths"]["/v1/embeddings"]["post"]["responses"].contains("401"));
  EXPECT_FALSE(doc["paths"]["/"]["get"].contains("security"));
}

TEST(OpenApiTest, EverySchemaReferenceResolves) {
  const json doc = OpenApiDocument(SomeRoutes(), {.version = "1"});
  std::set<std::string> refs;
  CollectRefs(doc, refs);
  ASSERT_FALSE(refs.empty());
  for (const std::string& ref : refs) {
    const std::string prefix = "#/components/schemas/";
    ASSERT_EQ(ref.rfind(prefix, 0), 0U) << ref;
    EXPECT_TRUE(OpenApiSchemas().contains(ref.substr(prefix.size()))) << ref;
  }
}

class SwaggerUiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gantry_swagger_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& body) {
    std::ofstream(dir_ / name, std::ios::binary) << body;
  }
  std::filesystem::path dir_;
};

TEST_F(SwaggerUiTest, AMissingFileIsNamed) {
  Write("swagger-ui-bundle.js", "var SwaggerUIBundle;");
  const StatusOr<SwaggerUi> loaded = SwaggerUi::LoadFrom(dir_.string());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("swagger-ui.css"), std::string::npos)
      << loaded.status().message();
}

TEST_F(SwaggerUiTest, ServesOnlyThePagesFiles) {
  for (const char* name : {"swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png",
                           "favicon-16x16.png", "swagger-ui-bundle.js.map"}) {
    Write(name, std::string("content of ") + name);
  }
  const StatusOr<SwaggerUi> loaded = SwaggerUi::LoadFrom(dir_.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const SwaggerUi::Asset* script = loaded->Find("swagger-ui-bundle.js");
  ASSERT_NE(script, nullptr);
  EXPECT_EQ(script->body, "content of swagger-ui-bundle.js");
  EXPECT_EQ(script->content_type.rfind("text/javascript", 0), 0U);
  EXPECT_EQ(loaded->Find("swagger-ui-bundle.js.map"), nullptr);
  EXPECT_EQ(loaded->Find("../swagger-ui.css"), nullptr);
}

TEST_F(SwaggerUiTest, TheEnvironmentOverridesWhereTheFilesAreLooked) {
  ::setenv("GANTRY_SWAGGER_UI_DIR", dir_.c_str(), 1);
  const std::vector<std::string> dirs = SwaggerUi::SearchDirs();
  const StatusOr<SwaggerUi> loaded = SwaggerUi::Load();
  ::unsetenv("GANTRY_SWAGGER_UI_DIR");
  EXPECT_EQ(dirs, (std::vector<std::string>{dir_.string()}));
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find(dir_.string()), std::string::npos);
  EXPECT_NE(loaded.status().message().find("GANTRY_SWAGGER_UI_DIR"), std::string::npos);
}

TEST(SwaggerUiPageTest, LoadsItsFilesAndTheDocumentRelatively) {
  const std::string page = SwaggerUi::Page("A <title>");
  EXPECT_NE(page.find("A &lt;title&gt;"), std::string::npos);
  EXPECT_NE(page.find("src=\"docs/swagger-ui-bundle.js\""), std::string::npos);
  EXPECT_NE(page.find("href=\"docs/swagger-ui.css\""), std::string::npos);
  EXPECT_NE(page.find("url: \"openapi.json\""), std::string::npos);
  EXPECT_EQ(page.find("http"), std::string::npos) << "no CDN";
}

}  // namespace
}  // namespace gantry::internal
