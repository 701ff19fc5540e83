#include "cli/scaffold.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

namespace gantry::cli {
namespace {

// {{Name}} is the class name, {{name}} its snake_case form (targets, files).
constexpr const char* kCMakeLists = R"(cmake_minimum_required(VERSION 3.25)
project({{name}} LANGUAGES CXX)

set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)

# Point CMAKE_PREFIX_PATH at Gantry's install prefix.
find_package(Gantry REQUIRED)

# As a plugin: gantry-worker loads it from executor.yml's `metas.libs`.
gantry_add_executor_plugin({{name}} SOURCES executor.cc)

# As a program: serves the executor in a Deployment of its own.
add_executable({{name}}_server main.cc executor.cc)
target_link_libraries({{name}}_server PRIVATE Gantry::gantry)
)";

constexpr const char* kExecutor =
    R"(// {{Name}}: a Gantry executor. Add endpoints with GANTRY_REQUESTS.
#include <string>

#include <gantry/executor.h>

class {{Name}} final : public gantry::Executor {
  GANTRY_EXECUTOR({{Name}});
  explicit {{Name}}(const gantry::ExecutorContext& context)
      : greeting_(context.with.GetString("greeting", "hello")) {}

  // Jina: @requests(on='/encode')
  GANTRY_REQUESTS(Encode, "/encode");
  void Encode(gantry::DocList& docs, const gantry::Parameters& parameters) {
    for (gantry::Doc& doc : docs) {
      std::string text(doc.text());
      doc.set_text(greeting_ + " " + text);
      doc.set_embedding(gantry::Tensor::FromValues<float>(
          {2}, std::vector<float>{static_cast<float>(text.size()),
                                  static_cast<float>(parameters.GetNumber("scale", 1.0))}));
      doc.mutable_tags()["executor"] = gantry::Value("{{Name}}");
    }
  }

 private:
  std::string greeting_;
};
GANTRY_REGISTER_EXECUTOR({{Name}});
)";

constexpr const char* kMain =
    R"(// Serves {{Name}} behind a gateway on --port (default 12345), or with
// --check posts one document to itself and prints the reply.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <gantry/deployment.h>
#include <gantry/init.h>

int main(int argc, char** argv) {
  gantry::Init(argc, argv);  // worker processes of the Deployment start here
  bool check = argc > 1 && std::strcmp(argv[1], "--check") == 0;
  int port = argc > 2 && std::strcmp(argv[1], "--port") == 0 ? std::atoi(argv[2]) : 12345;
  gantry::Deployment deployment({.uses = "{{Name}}", .port = check ? 0 : port});
  if (!deployment.ok()) {
    std::fprintf(stderr, "%s\n", deployment.status().message().c_str());
    return 1;
  }
  if (check) {
    auto out = deployment.Post("/encode", gantry::DocList{gantry::Doc("world")});
    if (!out.ok()) {
      std::fprintf(stderr, "%s\n", out.status().message().c_str());
      return 1;
    }
    std::printf("%s\n", std::string((*out)[0].text()).c_str());
    return 0;
  }
  std::printf("serving {{Name}} on port %d\n", deployment.port());
  deployment.Block();
  return 0;
}
)";

constexpr const char* kYaml = R"(# Serve with: gantry executor --uses executor.yml --port 12345
# (run from this directory after building into ./build).
jtype: {{Name}}
with:
  greeting: hello
metas:
  name: {{name}}
  libs: [build/lib{{name}}.so]
)";

constexpr const char* kDockerfile =
    R"(# {{Name}} as an image of its own: the plugin is compiled in Gantry's
# development image and served by the stock gantry-worker of Gantry's CPU
# image; both come from one Gantry build (scripts/docker_images.sh makes
# gantry:dev and gantry:cpu), so the plugin finds Gantry's symbols there.
#   docker build -t {{name}} .
#   docker run --rm -p 8080:8080 {{name}}
ARG GANTRY_DEV_IMAGE=gantry:dev
ARG GANTRY_IMAGE=gantry:cpu

FROM ${GANTRY_DEV_IMAGE} AS build
WORKDIR /project
COPY CMakeLists.txt executor.cc main.cc ./
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
 && cmake --build build --target {{name}}

FROM ${GANTRY_IMAGE}
WORKDIR /app
COPY executor.yml ./
COPY --from=build /project/build/lib{{name}}.so build/
# What a container replica of this image runs (a Deployment's
# `uses: docker://{{name}}`).
ENV GANTRY_EXECUTOR=/app/executor.yml
EXPOSE 8080
CMD ["executor", "--uses", "/app/executor.yml", "--port", "8080"]
)";

constexpr const char* kReadme = R"(# {{Name}}

A Gantry executor, created by `gantry new {{Name}}`.

## Build

    cmake -S . -B build -DCMAKE_PREFIX_PATH=<gantry install prefix>
    cmake --build build

This gives `build/lib{{name}}.so` (a plugin) and `build/{{name}}_server` (a program).

## Serve

In a container (needs Gantry's images `gantry:dev` and `gantry:cpu`, made by
Gantry's `scripts/docker_images.sh --cpu-only`):

    docker build -t {{name}} .
    docker run --rm -p 8080:8080 {{name}}

As a plugin, with the stock worker:

    gantry executor --uses executor.yml --port 12345

As a program with its own Deployment:

    ./build/{{name}}_server --port 12345     # or --check for a self-test

Then post with any Jina client:

    from jina import Client
    Client(port=12345).post('/encode', DocList[TextDoc]([TextDoc(text='hi')]))
)";

std::string SnakeCase(const std::string& name) {
  std::string out;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (std::isupper(static_cast<unsigned char>(c))) {
      if (i > 0 && !std::isupper(static_cast<unsigned char>(name[i - 1])) && name[i - 1] != '_') {
        out += '_';
      }
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  return out;
}

std::string Fill(std::string text, const std::string& name, const std::string& snake) {
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"{{Name}}", name}, {"{{name}}", snake}}) {
    for (std::size_t at = text.find(key); at != std::string::npos;
         at = text.find(key, at + value.size())) {
      text.replace(at, key.size(), value);
    }
  }
  return text;
}

bool IsIdentifier(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) {
    return false;
  }
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') {
      return false;
    }
  }
  return true;
}

}  // namespace

Status CreateExecutorProject(const std::string& name, const std::string& dir) {
  namespace fs = std::filesystem;
  if (!IsIdentifier(name)) {
    return InvalidArgumentError("gantry new: '" + name +
                                "' is not a C++ identifier (it becomes the executor class and "
                                "the YAML jtype)");
  }
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec)) {
    return AlreadyExistsError("gantry new: " + dir + " already exists and is not empty");
  }
  fs::create_directories(dir, ec);
  if (ec) {
    return FailedPreconditionError("gantry new: cannot create " + dir + ": " + ec.message());
  }
  std::string snake = SnakeCase(name);
  const std::vector<std::pair<const char*, const char*>> files = {
      {"CMakeLists.txt", kCMakeLists}, {"executor.cc", kExecutor},  {"main.cc", kMain},
      {"executor.yml", kYaml},         {"Dockerfile", kDockerfile}, {"README.md", kReadme}};
  for (const auto& [file, text] : files) {
    std::string path = dir + "/" + file;
    std::ofstream out(path);
    out << Fill(text, name, snake);
    if (!out) {
      return FailedPreconditionError("gantry new: cannot write " + path);
    }
  }
  return OkStatus();
}

}  // namespace gantry::cli
