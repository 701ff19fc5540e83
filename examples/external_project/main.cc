// Runs a Deployment of WordCount (two replicas of this very program) and
// posts through its gateway.
#include <gantry/deployment.h>
#include <gantry/init.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  gantry::Init(argc, argv);  // replicas re-execute this program in worker mode
  gantry::Deployment deployment({.uses = "WordCount", .replicas = 2});
  if (!deployment.ok()) {
    std::fprintf(stderr, "deployment failed: %s\n", deployment.status().message().c_str());
    return 1;
  }
  auto out = deployment.Post(
      "/count", gantry::DocList{gantry::Doc("the quick brown fox"), gantry::Doc("hello world")});
  if (!out.ok()) {
    std::fprintf(stderr, "post failed: %s\n", out.status().message().c_str());
    return 1;
  }
  for (const gantry::Doc& doc : *out) {
    auto e = doc.embedding()->Values<float>();
    std::printf("%s: words=%g chars=%g\n", std::string(doc.text()).c_str(), e[0], e[1]);
  }
  return 0;
}
