// The Gantry C++ client against any Jina-compatible gateway: posts N text
// documents (each with a float32 tensor) to ENDPOINT and prints one JSON line
// per returned document. Used by the interop tests against a Python Jina
// Deployment.
//
//   gantry_interop_client HOST:PORT ENDPOINT N
#include <gantry/client.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>

int main(int argc, char** argv) try {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s HOST:PORT ENDPOINT N\n", argv[0]);
    return 2;
  }
  int n = std::atoi(argv[3]);
  gantry::DocList docs;
  for (int i = 0; i < n; ++i) {
    gantry::Doc doc("doc" + std::to_string(i));
    doc.set_tensor("tensor", gantry::Tensor::FromValues<float>(
                                 {2}, std::vector<float>{static_cast<float>(i), 0.5f}));
    doc.mutable_tags()["index"] = gantry::Value(static_cast<std::int64_t>(i));
    docs.push_back(std::move(doc));
  }
  gantry::PostOptions options;
  options.request_size = 2;
  options.parameters = gantry::Parameters(gantry::Value::Dict{{"tag", gantry::Value("cpp")}});
  options.timeout = std::chrono::seconds(60);
  gantry::Client client(argv[1]);
  auto out = client.Post(argv[2], docs, options);
  if (!out.ok()) {
    std::fprintf(stderr, "post failed: %s\n", out.status().message().c_str());
    return 1;
  }
  for (const gantry::Doc& doc : *out) {
    nlohmann::json line;
    line["text"] = std::string(doc.text());
    if (const gantry::Tensor* e = doc.embedding(); e != nullptr) {
      line["embedding_dtype"] = e->dtype();
      line["embedding_shape"] = e->ShapeString();
      if (e->dtype() == "<f4") {
        auto values = e->Values<float>();
        line["embedding"] = std::vector<float>(values.begin(), values.end());
      }
    }
    nlohmann::json tags = nlohmann::json::object();
    for (const auto& [key, value] : doc.tags()) {
      if (const std::string* text = value.AsText(); text != nullptr) {
        tags[key] = *text;
      } else {
        double number = 0;
        tags[key] =
            value.ToNumber(&number) ? nlohmann::json(number) : nlohmann::json(value.DebugString());
      }
    }
    line["tags"] = tags;
    std::printf("%s\n", line.dump().c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gantry_interop_client: %s\n", e.what());
  return 1;
}
