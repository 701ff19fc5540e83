// WordCount: embeds each text as [number of words, number of characters].
#include <gantry/executor.h>

#include <sstream>
#include <string>
#include <vector>

class WordCount final : public gantry::Executor {
  GANTRY_EXECUTOR(WordCount);
  GANTRY_HANDLERS_ON_RECEIVING_THREAD();  // no libtorch: no OpenMP team to keep warm
  explicit WordCount(const gantry::ExecutorContext& /*context*/) {}

  GANTRY_REQUESTS(Count, "/count");
  void Count(gantry::DocList& docs) {
    for (gantry::Doc& doc : docs) {
      std::istringstream words{std::string(doc.text())};
      std::string word;
      float n = 0;
      while (words >> word) {
        ++n;
      }
      doc.set_embedding(gantry::Tensor::FromValues<float>(
          {2}, std::vector<float>{n, static_cast<float>(doc.text().size())}));
    }
  }
};
GANTRY_REGISTER_EXECUTOR(WordCount);
