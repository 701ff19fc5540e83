// SoakExec, the executor the soak serves (a plugin: torch-free, so its
// replicas' memory is the framework's own, and any growth is ours). /encode
// gives each document a 32-float embedding computed from its text with a
// little arithmetic per byte; a document whose text is "poison" ends the
// process at once, as a crashing model would.
#include <gantry/executor.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace gantry_soak {

class SoakExec final : public gantry::Executor {
  GANTRY_EXECUTOR(SoakExec);
  explicit SoakExec(const gantry::ExecutorContext& /*context*/) {}

  GANTRY_REQUESTS(Encode, "/encode", "/default");
  void Encode(gantry::DocList& docs) {
    for (gantry::Doc& doc : docs) {
      const std::string_view text = doc.text();
      if (text == "poison") {
        std::_Exit(3);  // no unwinding, no reply: the gateway sees a dropped call
      }
      std::vector<float> embedding(32, 0.0F);
      std::uint32_t state = 2166136261U;
      for (int round = 0; round < 64; ++round) {
        for (const char c : text) {
          state = (state ^ static_cast<unsigned char>(c)) * 16777619U;
          embedding[state % embedding.size()] += static_cast<float>(state & 0xff) / 255.0F;
        }
      }
      doc.set_embedding(gantry::Tensor::FromValues<float>({32}, embedding));
    }
  }
};

}  // namespace gantry_soak

using gantry_soak::SoakExec;
GANTRY_REGISTER_EXECUTOR(SoakExec);
