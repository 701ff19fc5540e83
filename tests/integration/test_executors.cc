// Executors that exist only in the integration test binary, which proves that
// executors defined in a user's own program are served.
#include <gantry/executor.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

namespace gantry_test {

// Tags every document with the pid of the replica that served it.
class EchoExec final : public gantry::Executor {
  GANTRY_EXECUTOR(EchoExec);
  explicit EchoExec(const gantry::ExecutorContext& context)
      : prefix_(context.with.GetString("prefix", "echo")) {}

  GANTRY_REQUESTS(Echo, "/echo");
  void Echo(gantry::DocList& docs, const gantry::Parameters& parameters) {
    for (gantry::Doc& doc : docs) {
      doc.mutable_tags()["pid"] = gantry::Value(static_cast<std::int64_t>(::getpid()));
      doc.mutable_tags()["param"] = gantry::Value(parameters.GetString("tag", "none"));
      doc.set_text(prefix_ + ":" + std::string(doc.text()));
    }
  }

  GANTRY_REQUESTS(Fallback);
  void Fallback(gantry::DocList& docs) {
    for (gantry::Doc& doc : docs) {
      doc.set_text("default:" + std::string(doc.text()));
    }
  }

 private:
  std::string prefix_;
};
GANTRY_REGISTER_EXECUTOR(EchoExec);

// Throws on a document whose text is "boom"; serves the rest.
class FailingExec final : public gantry::Executor {
  GANTRY_EXECUTOR(FailingExec);
  explicit FailingExec(const gantry::ExecutorContext& /*context*/) {}

  GANTRY_REQUESTS(Encode, "/encode");
  gantry::Status Encode(gantry::DocList& docs) {
    for (gantry::Doc& doc : docs) {
      if (doc.text() == "boom") {
        throw std::runtime_error("cannot encode 'boom'");
      }
      if (doc.text() == "refuse") {
        return gantry::InvalidArgumentError("refusing this document");
      }
      doc.set_text("ok");
    }
    return gantry::OkStatus();
  }
};
GANTRY_REGISTER_EXECUTOR(FailingExec);

// Two endpoints and no default.
class NoDefaultExec final : public gantry::Executor {
  GANTRY_EXECUTOR(NoDefaultExec);
  explicit NoDefaultExec(const gantry::ExecutorContext& /*context*/) {}
  GANTRY_REQUESTS(Index, "/index");
  void Index(gantry::DocList& /*docs*/) {}
  GANTRY_REQUESTS(Search, "/search", "/find");
  void Search(gantry::DocList& /*docs*/) {}
};
GANTRY_REGISTER_EXECUTOR(NoDefaultExec);

// Its constructor fails the way a missing model file would.
class CtorFailExec final : public gantry::Executor {
  GANTRY_EXECUTOR(CtorFailExec);
  explicit CtorFailExec(const gantry::ExecutorContext& /*context*/) {
    throw std::runtime_error("model file /nonexistent/model.safetensors is missing");
  }
  GANTRY_REQUESTS(Encode);
  void Encode(gantry::DocList& /*docs*/) {}
};
GANTRY_REGISTER_EXECUTOR(CtorFailExec);

}  // namespace gantry_test
