// Runs a Deployment of TorchScale inside this program (its replica
// re-executes it), which links gantry's torch helpers itself (Gantry::torch)
// and the malloc gantry-worker runs models on (gantry_link_model_malloc).
#include <gantry/deployment.h>
#include <gantry/heap.h>
#include <gantry/init.h>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  gantry::Init(argc, argv);  // the replica re-executes this program in worker mode
  gantry::Deployment deployment({.uses = "TorchScale", .uses_with = {{"factor", 3.0}}});
  if (!deployment.ok()) {
    std::fprintf(stderr, "deployment failed: %s\n", deployment.status().message().c_str());
    return 1;
  }
  gantry::Doc doc("x");
  doc.set_tensor("tensor", gantry::Tensor::FromValues<float>({3}, std::vector<float>{1, 2, 3.5}));
  auto out = deployment.Post("/scale", gantry::DocList{std::move(doc)});
  if (!out.ok()) {
    std::fprintf(stderr, "post failed: %s\n", out.status().message().c_str());
    return 1;
  }
  for (const gantry::Doc& scaled : *out) {
    auto e = scaled.embedding()->Values<float>();
    std::printf("%s: scaled=[%g, %g, %g]\n", std::string(scaled.text()).c_str(), e[0], e[1], e[2]);
  }
  // The replica is this program again, on the same malloc.
  std::printf("malloc: %s\n", gantry::MallocKindName(gantry::CurrentMalloc()));
  return 0;
}
