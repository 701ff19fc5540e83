// The seed example: a Deployment of two MyGPUExec replicas, 1,000 documents
// posted to /encode in requests of 32 with a progress bar.
//
//   seed_example [DEVICE] [NUM_DOCS]      DEVICE: cpu (default), cuda, cuda:N
#include <gantry/deployment.h>
#include <gantry/init.h>

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  // Worker replicas are this program, re-executed; Init runs them.
  gantry::Init(argc, argv);

  std::string device = argc > 1 ? argv[1] : "cpu";
  int num_docs = argc > 2 ? std::atoi(argv[2]) : 1000;

  gantry::Deployment dep({.uses = "MyGPUExec", .uses_with = {{"device", device}}, .replicas = 2});
  if (!dep.ok()) {
    std::fprintf(stderr, "error: %s\n", dep.status().message().c_str());
    return 1;
  }

  gantry::DocList docs;
  for (int i = 0; i < num_docs; ++i) {
    docs.emplace_back("text " + std::to_string(i));
  }
  auto result = dep.Post("/encode", docs, {.request_size = 32, .show_progress = true});
  if (!result.ok()) {
    std::fprintf(stderr, "error: %s\n", result.status().message().c_str());
    return 1;
  }
  const gantry::Doc& first = (*result)[0];
  auto embedding = first.embedding()->Values<float>();
  std::printf("%zu documents back; first: \"%.*s\" embedding [%.3f, %.3f, %.3f, %.3f, %.3f]\n",
              result->size(), static_cast<int>(first.text().size()), first.text().data(),
              embedding[0], embedding[1], embedding[2], embedding[3], embedding[4]);
  for (const gantry::ReplicaInfo& replica : dep.replicas()) {
    std::printf("%s (pid %d, %s) served %llu requests\n", replica.name.c_str(), replica.pid,
                replica.device.c_str(), static_cast<unsigned long long>(replica.requests));
  }
  return 0;
}
