// Executors that exist only in the integration test binary, which proves that
// executors defined in a user's own program are served.
#include <dlfcn.h>
#include <fcntl.h>
#include <gantry/executor.h>
#include <unistd.h>

#include <algorithm>
#include <any>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

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

// Throws on a document whose text is "boom" (std::runtime_error, the
// executor's fault) or "invalid" (std::invalid_argument, the client's);
// serves the rest.
class FailingExec final : public gantry::Executor {
  GANTRY_EXECUTOR(FailingExec);
  explicit FailingExec(const gantry::ExecutorContext& /*context*/) {}

  GANTRY_REQUESTS(Encode, "/encode");
  gantry::Status Encode(gantry::DocList& docs) {
    for (gantry::Doc& doc : docs) {
      if (doc.text() == "boom") {
        throw std::runtime_error("cannot encode 'boom'");
      }
      if (doc.text() == "invalid") {
        throw std::invalid_argument("a document's text may not be 'invalid'");
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

// Starts normally until the file `with.fail_flag` exists; from then on its
// constructor fails every time, as a replica restarted after a broken
// deploy (a deleted model, a bad config) would.
class CrashLoopExec final : public gantry::Executor {
  GANTRY_EXECUTOR(CrashLoopExec);
  explicit CrashLoopExec(const gantry::ExecutorContext& context) {
    std::string flag = context.with.GetString("fail_flag", "");
    if (!flag.empty() && ::access(flag.c_str(), F_OK) == 0) {
      throw std::runtime_error("weights file is corrupt (crash-loop test)");
    }
  }
  GANTRY_REQUESTS(Work);
  void Work(gantry::DocList& docs) {
    for (gantry::Doc& doc : docs) {
      doc.mutable_tags()["pid"] = gantry::Value(static_cast<std::int64_t>(::getpid()));
    }
  }
};
GANTRY_REGISTER_EXECUTOR(CrashLoopExec);

// Its constructor ends the process abruptly, as a crash in a driver would,
// on the first start only: it creates the file `with.crash_flag` and dies
// while that file does not exist yet. With `with.always: true` every start
// dies; with `with.hang: true` the first start hangs instead of dying.
class FirstStartCrashExec final : public gantry::Executor {
  GANTRY_EXECUTOR(FirstStartCrashExec);
  explicit FirstStartCrashExec(const gantry::ExecutorContext& context) {
    const std::string flag = context.with.GetString("crash_flag", "");
    if (context.with.GetBool("always", false)) {
      std::_Exit(4);
    }
    if (!flag.empty() && ::access(flag.c_str(), F_OK) != 0) {
      const int fd = ::open(flag.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) {
        ::close(fd);
      }
      if (context.with.GetBool("hang", false)) {
        std::this_thread::sleep_for(std::chrono::minutes(10));
      }
      std::_Exit(4);
    }
  }
  GANTRY_REQUESTS(Work);
  void Work(gantry::DocList& docs) {
    for (gantry::Doc& doc : docs) {
      doc.set_text("served:" + std::string(doc.text()));
    }
  }
};
GANTRY_REGISTER_EXECUTOR(FirstStartCrashExec);

// One replica slow to start: the first process to create the file
// `with.slow_flag` sleeps `with.slow_ms` in its constructor; the others
// start at once. Its handler tags each document with the replica's pid.
class SlowStartExec final : public gantry::Executor {
  GANTRY_EXECUTOR(SlowStartExec);
  explicit SlowStartExec(const gantry::ExecutorContext& context) {
    const std::string flag = context.with.GetString("slow_flag", "");
    const int fd = flag.empty() ? -1 : ::open(flag.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd >= 0) {
      ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(
          static_cast<std::int64_t>(context.with.GetNumber("slow_ms", 0))));
    }
  }
  GANTRY_REQUESTS(Work);
  void Work(gantry::DocList& docs) {
    for (gantry::Doc& doc : docs) {
      doc.mutable_tags()["pid"] = gantry::Value(static_cast<std::int64_t>(::getpid()));
    }
  }
};
GANTRY_REGISTER_EXECUTOR(SlowStartExec);

// Reports what the replica was given: its CUDA_VISIBLE_DEVICES, thread
// variables and context.device, in tags named with `tag_prefix` first (so
// that two steps of a Flow do not overwrite each other's). Touches no CUDA,
// so it runs under a fake GPU plan.
class PlacementProbeExec final : public gantry::Executor {
  GANTRY_EXECUTOR(PlacementProbeExec);
  explicit PlacementProbeExec(const gantry::ExecutorContext& context)
      : device_(context.device.ToString()), prefix_(context.with.GetString("tag_prefix", "")) {}

  GANTRY_REQUESTS(Probe);
  void Probe(gantry::DocList& docs) {
    const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
    const char* omp_threads = std::getenv("OMP_NUM_THREADS");
    const char* mkl_threads = std::getenv("MKL_NUM_THREADS");
    for (gantry::Doc& doc : docs) {
      auto& tags = doc.mutable_tags();
      tags[prefix_ + "omp_num_threads"] = gantry::Value(omp_threads ? omp_threads : "<unset>");
      tags[prefix_ + "mkl_num_threads"] = gantry::Value(mkl_threads ? mkl_threads : "<unset>");
      tags[prefix_ + "pid"] = gantry::Value(static_cast<std::int64_t>(::getpid()));
      tags[prefix_ + "cuda_visible_devices"] = gantry::Value(cvd ? cvd : "<unset>");
      tags[prefix_ + "device"] = gantry::Value(device_);
    }
  }

 private:
  std::string device_;
  std::string prefix_;
};
GANTRY_REGISTER_EXECUTOR(PlacementProbeExec);

// Counts its handler calls: each document is tagged with the call that
// served it and that call's size. /count batches (16 docs or 1 s); /plain
// does not unless uses_dynamic_batching says so; /gpu batches like /count on
// a CUDA device only; /slow batches one document per call and sleeps
// `parameters.sleep_ms` first, to keep the worker busy (queue policy).
class BatchCountExec final : public gantry::Executor {
  GANTRY_EXECUTOR(BatchCountExec);
  explicit BatchCountExec(const gantry::ExecutorContext& /*context*/) {}

  GANTRY_REQUESTS(Count, "/count");
  GANTRY_DYNAMIC_BATCHING(Count, {.preferred_batch_size = 16, .timeout_ms = 1000});
  void Count(gantry::DocList& docs) { Tag(docs); }

  GANTRY_REQUESTS(Plain, "/plain");
  void Plain(gantry::DocList& docs) { Tag(docs); }

  // Batched only on a CUDA device, as SentenceEncoder's /encode is.
  GANTRY_REQUESTS(OnGpu, "/gpu");
  GANTRY_DYNAMIC_BATCHING_ON_GPU(OnGpu, {.preferred_batch_size = 16, .timeout_ms = 1000});
  void OnGpu(gantry::DocList& docs) { Tag(docs); }

  GANTRY_REQUESTS(Slow, "/slow");
  GANTRY_DYNAMIC_BATCHING(Slow, {.preferred_batch_size = 1, .timeout_ms = 0});
  void Slow(gantry::DocList& docs, const gantry::Parameters& parameters) {
    std::this_thread::sleep_for(
        std::chrono::milliseconds(static_cast<std::int64_t>(parameters.GetNumber("sleep_ms", 0))));
    Tag(docs);
  }

  // Batched by tokens: a document's tokens are its words, the budget the
  // request's `budget` parameter; each document is tagged with its call's
  // padded tokens. A text "uncountable" makes the counter refuse the request.
  GANTRY_REQUESTS(Words, "/words");
  GANTRY_DYNAMIC_BATCHING(Words, {.preferred_batch_size = 64, .timeout_ms = 500});
  GANTRY_BATCH_TOKENS(Words, CountWords);
  void Words(gantry::DocList& docs) {
    std::int64_t longest = 0;
    for (const gantry::Doc& doc : docs) {
      longest = std::max(longest, WordsOf(doc.text()));
    }
    for (gantry::Doc& doc : docs) {
      doc.mutable_tags()["padded"] =
          gantry::Value(longest * static_cast<std::int64_t>(docs.size()));
    }
    Tag(docs);
  }
  gantry::StatusOr<gantry::BatchTokens> CountWords(const gantry::DocList& docs,
                                                   const gantry::Parameters& parameters) const {
    gantry::BatchTokens tokens{
        .budget = static_cast<std::int64_t>(parameters.GetNumber("budget", 0)), .per_document = {}};
    for (const gantry::Doc& doc : docs) {
      if (doc.text() == "uncountable") {
        return gantry::InvalidArgumentError("document '" + doc.id() + "' cannot be counted");
      }
      tokens.per_document.push_back(WordsOf(doc.text()));
    }
    return tokens;
  }

 private:
  static std::int64_t WordsOf(std::string_view text) {
    return 1 + std::count(text.begin(), text.end(), ' ');
  }
  void Tag(gantry::DocList& docs) {
    ++calls_;
    for (gantry::Doc& doc : docs) {
      doc.mutable_tags()["call"] = gantry::Value(calls_);
      doc.mutable_tags()["batch"] = gantry::Value(static_cast<std::int64_t>(docs.size()));
      doc.set_text("seen:" + std::string(doc.text()));
    }
  }
  std::int64_t calls_ = 0;
};
GANTRY_REGISTER_EXECUTOR(BatchCountExec);

// GANTRY_PREPARE through a real worker. The preparer leaves each document's
// text and its own thread with the document (a text "refuse" fails the
// request with INVALID_ARGUMENT, a text "explode" throws); the handler tags
// each document with what was prepared for it (`prepared`, null when
// nothing), whether the preparer ran on the handler's own thread
// (`same_thread`) and its call (`call`). /prepared batches (16 documents or
// 1 s), /prepared_plain does not.
class PrepareExec final : public gantry::Executor {
  GANTRY_EXECUTOR(PrepareExec);
  explicit PrepareExec(const gantry::ExecutorContext& /*context*/) {}

  GANTRY_REQUESTS(Batched, "/prepared");
  GANTRY_DYNAMIC_BATCHING(Batched, {.preferred_batch_size = 16, .timeout_ms = 1000});
  GANTRY_PREPARE(Batched, Prepare);
  void Batched(gantry::DocList& docs) { Tag(docs); }

  GANTRY_REQUESTS(Plain, "/prepared_plain");
  GANTRY_PREPARE(Plain, Prepare);
  void Plain(gantry::DocList& docs) { Tag(docs); }

  gantry::Status Prepare(gantry::DocList& docs, const gantry::Parameters& /*parameters*/) const {
    for (gantry::Doc& doc : docs) {
      if (doc.text() == "refuse") {
        return gantry::InvalidArgumentError("document '" + doc.id() + "' refused by the preparer");
      }
      if (doc.text() == "explode") {
        throw std::runtime_error("the preparer exploded");
      }
      doc.set_prepared(Prepared{std::string(doc.text()), std::this_thread::get_id()});
    }
    return gantry::OkStatus();
  }

 private:
  struct Prepared {
    std::string text;
    std::thread::id thread;
  };
  void Tag(gantry::DocList& docs) {
    ++calls_;
    for (gantry::Doc& doc : docs) {
      const auto* prepared = std::any_cast<Prepared>(&doc.prepared());
      doc.mutable_tags()["prepared"] =
          prepared != nullptr ? gantry::Value(prepared->text) : gantry::Value(nullptr);
      doc.mutable_tags()["same_thread"] =
          gantry::Value(prepared != nullptr && prepared->thread == std::this_thread::get_id());
      doc.mutable_tags()["call"] = gantry::Value(calls_);
    }
  }
  std::int64_t calls_ = 0;
};
GANTRY_REGISTER_EXECUTOR(PrepareExec);

// For failure tests: each handler call appends "<pid> <text of doc 0>" to
// the file `with.log` (so that tests count calls across processes), then
// sleeps `parameters.sleep_ms`, then dies abruptly, as a crash would, if a
// document's text is "poison".
class ChaosExec final : public gantry::Executor {
  GANTRY_EXECUTOR(ChaosExec);
  explicit ChaosExec(const gantry::ExecutorContext& context)
      : log_(context.with.GetString("log", "")) {}

  GANTRY_REQUESTS(Work, "/work");
  void Work(gantry::DocList& docs, const gantry::Parameters& parameters) {
    if (!log_.empty()) {
      std::string line = std::to_string(::getpid()) + " " +
                         (docs.empty() ? std::string() : std::string(docs[0].text())) + "\n";
      int fd = ::open(log_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) {
        (void)!::write(fd, line.data(), line.size());
        ::close(fd);
      }
    }
    auto sleep =
        std::chrono::milliseconds(static_cast<std::int64_t>(parameters.GetNumber("sleep_ms", 0)));
    std::this_thread::sleep_for(sleep);
    for (gantry::Doc& doc : docs) {
      if (doc.text() == "poison") {
        std::_Exit(3);
      }
      doc.mutable_tags()["pid"] = gantry::Value(static_cast<std::int64_t>(::getpid()));
      doc.set_text("done:" + std::string(doc.text()));
    }
  }

 private:
  std::string log_;
};
GANTRY_REGISTER_EXECUTOR(ChaosExec);

// For Flow tests: its default handler sets tags[with.tag] = with.value and
// tags["pid_" + with.tag] on every document, appends "|<with.tag>" to the
// text, and, with with.embedding, sets a 2-d embedding [1, 2]. Throws on a
// document whose text contains with.fail_on (when set).
class TagExec final : public gantry::Executor {
  GANTRY_EXECUTOR(TagExec);
  explicit TagExec(const gantry::ExecutorContext& context)
      : tag_(context.with.GetString("tag", "tag")),
        value_(context.with.GetString("value", "")),
        fail_on_(context.with.GetString("fail_on", "")),
        embedding_(context.with.GetBool("embedding", false)) {}

  GANTRY_REQUESTS(Tag);
  void Tag(gantry::DocList& docs) {
    for (gantry::Doc& doc : docs) {
      if (!fail_on_.empty() && doc.text().find(fail_on_) != std::string_view::npos) {
        throw std::runtime_error("step " + tag_ + " cannot take '" + std::string(doc.text()) + "'");
      }
      doc.mutable_tags()[tag_] = gantry::Value(value_);
      doc.mutable_tags()["pid_" + tag_] = gantry::Value(static_cast<std::int64_t>(::getpid()));
      doc.set_text(std::string(doc.text()) + "|" + tag_);
      if (embedding_) {
        doc.set_embedding(gantry::Tensor::FromValues<float>({2}, std::vector<float>{1.0F, 2.0F}));
      }
    }
  }

 private:
  std::string tag_;
  std::string value_;
  std::string fail_on_;
  bool embedding_;
};
GANTRY_REGISTER_EXECUTOR(TagExec);

// Tags each document with the thread that ran its handler call, whether that
// was the constructor's thread, whether another call of this executor was
// running at the time, and whether an OpenMP runtime is loaded in the
// worker; sleeps `parameters.sleep_ms` inside the call.
class ThreadProbe {
 public:
  ThreadProbe() : constructed_on_(std::this_thread::get_id()) {}

  void Tag(gantry::DocList& docs, const gantry::Parameters& parameters) {
    const bool overlapped = in_call_.fetch_add(1) != 0;
    std::this_thread::sleep_for(
        std::chrono::milliseconds(static_cast<std::int64_t>(parameters.GetNumber("sleep_ms", 0))));
    std::ostringstream thread;
    thread << std::this_thread::get_id();
    for (gantry::Doc& doc : docs) {
      doc.mutable_tags()["thread"] = gantry::Value(thread.str());
      doc.mutable_tags()["on_constructor_thread"] =
          gantry::Value(std::this_thread::get_id() == constructed_on_);
      doc.mutable_tags()["overlapped"] = gantry::Value(overlapped);
      doc.mutable_tags()["openmp_loaded"] =
          gantry::Value(dlsym(RTLD_DEFAULT, "omp_get_max_threads") != nullptr);
    }
    in_call_.fetch_sub(1);
  }

 private:
  const std::thread::id constructed_on_;
  std::atomic<int> in_call_{0};
};

class ThreadProbeExec final : public gantry::Executor {
  GANTRY_EXECUTOR(ThreadProbeExec);
  explicit ThreadProbeExec(const gantry::ExecutorContext& /*context*/) {}
  GANTRY_REQUESTS(Probe);
  void Probe(gantry::DocList& docs, const gantry::Parameters& parameters) {
    probe_.Tag(docs, parameters);
  }

 private:
  ThreadProbe probe_;
};
GANTRY_REGISTER_EXECUTOR(ThreadProbeExec);

class ReceivingThreadProbeExec final : public gantry::Executor {
  GANTRY_EXECUTOR(ReceivingThreadProbeExec);
  GANTRY_HANDLERS_ON_RECEIVING_THREAD();
  explicit ReceivingThreadProbeExec(const gantry::ExecutorContext& /*context*/) {}
  GANTRY_REQUESTS(Probe);
  void Probe(gantry::DocList& docs, const gantry::Parameters& parameters) {
    probe_.Tag(docs, parameters);
  }

 private:
  ThreadProbe probe_;
};
GANTRY_REGISTER_EXECUTOR(ReceivingThreadProbeExec);

}  // namespace gantry_test
