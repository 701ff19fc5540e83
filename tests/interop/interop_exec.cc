// An executor built as a plugin (a MODULE library that links no Gantry
// library): gantry-worker loads it from `metas.libs` and serves it to stock
// Jina clients in the interop tests. Torch-free, so it builds in seconds.
#include <gantry/executor.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace gantry_interop {

class InteropExec final : public gantry::Executor {
  GANTRY_EXECUTOR(InteropExec);
  explicit InteropExec(const gantry::ExecutorContext& context)
      : scale_(context.with.GetNumber("scale", 1.0)) {}

  // Embeds each text as [length, scale, parameters.offset], reports what it
  // saw of tensors and tags, and rewrites nested documents' texts.
  GANTRY_REQUESTS(Encode, "/encode");
  void Encode(gantry::DocList& docs, const gantry::Parameters& parameters) {
    float offset = static_cast<float>(parameters.GetNumber("offset", 0.0));
    for (gantry::Doc& doc : docs) {
      std::string text(doc.text());
      doc.set_embedding(gantry::Tensor::FromValues<float>(
          {3},
          std::vector<float>{static_cast<float>(text.size()), static_cast<float>(scale_), offset}));
      gantry::Value::Dict& tags = doc.mutable_tags();
      tags["seen_by"] = gantry::Value("gantry");
      tags["param"] = gantry::Value(parameters.GetString("tag", "none"));
      if (parameters.GetBool("return_token_counts")) {
        // One "token" per byte: enough for the gateway's usage sums.
        tags["num_tokens"] = gantry::Value(static_cast<std::int64_t>(text.size()));
      }
      if (const gantry::Tensor* tensor = doc.tensor("tensor"); tensor != nullptr) {
        tags["tensor_dtype"] = gantry::Value(tensor->dtype());
        tags["tensor_shape"] = gantry::Value(tensor->ShapeString());
      }
      if (gantry::Value* chunks = doc.FindMutable("chunks"); chunks != nullptr) {
        if (gantry::DocList* list = chunks->AsMutableDocList(); list != nullptr) {
          for (gantry::Doc& chunk : *list) {
            chunk.set_text("chunk:" + std::string(chunk.text()));
          }
        }
      }
    }
  }

  // Tensor in, tensor out (the KServe tests' generic path): `output` is the
  // float64 tensor `input` doubled, any shape.
  GANTRY_REQUESTS(Double, "/double");
  void Double(gantry::DocList& docs) {
    for (gantry::Doc& doc : docs) {
      const gantry::Tensor* input = doc.tensor("input");
      if (input == nullptr) {
        throw std::invalid_argument("document " + std::string(doc.id()) + " has no tensor 'input'");
      }
      std::vector<double> doubled(input->Values<double>().begin(), input->Values<double>().end());
      for (double& v : doubled) {
        v *= 2;
      }
      doc.set_tensor("output", gantry::Tensor::FromValues<double>(input->shape(), doubled));
    }
  }

  GANTRY_REQUESTS(Fail, "/fail");
  void Fail(gantry::DocList& docs) {
    throw std::runtime_error("interop failure requested for " + std::to_string(docs.size()) +
                             " documents");
  }

  GANTRY_REQUESTS(Default);
  void Default(gantry::DocList& docs) {
    for (gantry::Doc& doc : docs) {
      doc.mutable_tags()["default"] = gantry::Value(true);
    }
  }

 private:
  double scale_;
};
GANTRY_REGISTER_EXECUTOR(InteropExec);

}  // namespace gantry_interop
