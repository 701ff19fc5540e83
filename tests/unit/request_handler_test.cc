// The worker's request logic in-process: routing, Jina's error contract,
// parameters, dry runs and endpoint discovery.
#include "worker/request_handler.h"

#include <gantry/executor.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/doc_proto.h"
#include "worker/handler_thread.h"

namespace handler_test {

class EchoUnitExec final : public gantry::Executor {
  GANTRY_EXECUTOR(EchoUnitExec);
  explicit EchoUnitExec(const gantry::ExecutorContext& context) {
    if (context.with.GetBool("fail_init")) {
      throw std::runtime_error("weights missing");
    }
  }
  GANTRY_REQUESTS(Upper, "/upper");
  void Upper(gantry::DocList& docs, const gantry::Parameters& parameters) {
    for (gantry::Doc& doc : docs) {
      std::string text(doc.text());
      for (char& c : text) {
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      }
      doc.set_text(text + parameters.GetString("suffix"));
    }
  }
  GANTRY_REQUESTS(Explode, "/explode");
  void Explode(gantry::DocList& /*docs*/) { throw std::out_of_range("index 7 out of range"); }
};
GANTRY_REGISTER_EXECUTOR(EchoUnitExec);

std::string ThisThreadId() {
  std::ostringstream id;
  id << std::this_thread::get_id();
  return id.str();
}

// Tags each document with the thread its handler ran on (text) and the
// thread its constructor ran on (tags.constructed_on).
class ThreadTagUnitExec final : public gantry::Executor {
  GANTRY_EXECUTOR(ThreadTagUnitExec);
  explicit ThreadTagUnitExec(const gantry::ExecutorContext& /*context*/)
      : constructed_on_(ThisThreadId()) {}
  GANTRY_REQUESTS(WhichThread, "/thread");
  void WhichThread(gantry::DocList& docs) {
    for (gantry::Doc& doc : docs) {
      doc.set_text(ThisThreadId());
      doc.mutable_tags().insert_or_assign("constructed_on", gantry::Value(constructed_on_));
    }
  }

 private:
  const std::string constructed_on_;
};
GANTRY_REGISTER_EXECUTOR(ThreadTagUnitExec);

// Batched by default on a GPU only, as SentenceEncoder is.
class GpuBatchedUnitExec final : public gantry::Executor {
  GANTRY_EXECUTOR(GpuBatchedUnitExec);
  explicit GpuBatchedUnitExec(const gantry::ExecutorContext& /*context*/) {}
  GANTRY_REQUESTS(Encode, "/encode");
  GANTRY_DYNAMIC_BATCHING_ON_GPU(Encode, {.preferred_batch_size = 256, .timeout_ms = 0});
  void Encode(gantry::DocList& /*docs*/) {}
  GANTRY_REQUESTS(Tag, "/tag");
  GANTRY_DYNAMIC_BATCHING(Tag, {.preferred_batch_size = 8, .timeout_ms = 5});
  GANTRY_DYNAMIC_BATCHING_ON_GPU(Tag, {.preferred_batch_size = 64, .timeout_ms = 1});
  void Tag(gantry::DocList& /*docs*/) {}
};
GANTRY_REGISTER_EXECUTOR(GpuBatchedUnitExec);

// Chooses its batching after the constructor, from `with:` (as SentenceEncoder
// does from its dtype and CPU): "encode" and "tag" give DefaultBatching's
// answer for each handler ("keep", "off", a preferred_batch_size, or "throw").
class ChosenBatchingUnitExec final : public gantry::Executor {
  GANTRY_EXECUTOR(ChosenBatchingUnitExec);
  explicit ChosenBatchingUnitExec(const gantry::ExecutorContext& context)
      : encode_(context.with.GetString("encode")), tag_(context.with.GetString("tag")) {}
  GANTRY_REQUESTS(Encode, "/encode");
  void Encode(gantry::DocList& /*docs*/) {}
  GANTRY_REQUESTS(Tag, "/tag");
  GANTRY_DYNAMIC_BATCHING(Tag, {.preferred_batch_size = 8, .timeout_ms = 5});
  void Tag(gantry::DocList& /*docs*/) {}

  std::optional<gantry::DynamicBatching> DefaultBatching(
      std::string_view method_name) const override {
    const std::string& choice = method_name == "Encode" ? encode_ : tag_;
    if (choice.empty() || choice == "keep") {
      return std::nullopt;
    }
    if (choice == "off") {
      return gantry::DynamicBatching{.enabled = false};
    }
    if (choice == "throw") {
      throw std::runtime_error("no idea which batching");
    }
    return gantry::DynamicBatching{.preferred_batch_size = std::stoi(choice), .timeout_ms = 0};
  }

 private:
  const std::string encode_;
  const std::string tag_;
};
GANTRY_REGISTER_EXECUTOR(ChosenBatchingUnitExec);

// A batched handler with a validator: documents without a tensor "x" are
// refused per request; the handler counts its calls and documents.
class ValidatedUnitExec final : public gantry::Executor {
  GANTRY_EXECUTOR(ValidatedUnitExec);
  explicit ValidatedUnitExec(const gantry::ExecutorContext& /*context*/) {}
  GANTRY_REQUESTS(Sum, "/sum");
  GANTRY_VALIDATE(Sum, CheckX);
  GANTRY_DYNAMIC_BATCHING(Sum, {.preferred_batch_size = 64, .timeout_ms = 200});
  void Sum(gantry::DocList& docs) {
    for (gantry::Doc& doc : docs) {
      if (doc.tensor("x") == nullptr) {
        throw std::logic_error("the validator let a document without x through");
      }
      doc.set_text("seen in a call of " + std::to_string(docs.size()));
    }
  }
  gantry::Status CheckX(const gantry::DocList& docs, const gantry::Parameters& /*params*/) const {
    for (std::size_t i = 0; i < docs.size(); ++i) {
      if (docs[i].tensor("x") == nullptr) {
        return gantry::InvalidArgumentError("document " + std::to_string(i) + " has no x");
      }
    }
    return gantry::OkStatus();
  }
};
GANTRY_REGISTER_EXECUTOR(ValidatedUnitExec);

}  // namespace handler_test

namespace gantry::internal {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<RequestHandler> MakeHandler(Value::Dict with = {}) {
  ExecutorContext context;
  context.name = "enc";
  context.with = Parameters(std::move(with));
  auto handler = RequestHandler::Create("EchoUnitExec", context, "enc/rep-0");
  EXPECT_TRUE(handler.ok()) << handler.status();
  return handler.ok() ? std::move(handler).value() : nullptr;
}

jina::DataRequestProto MakeRequest(const std::string& endpoint, const DocList& docs) {
  jina::DataRequestProto request;
  request.mutable_header()->set_request_id("r1");
  request.mutable_header()->set_exec_endpoint(endpoint);
  DocListToProto(docs, request.mutable_data()->mutable_docs());
  return request;
}

DocList ReplyDocs(jina::DataRequestProto& reply) {
  auto docs = TakeDocListFromProto(reply.mutable_data()->mutable_docs());
  EXPECT_TRUE(docs.ok()) << docs.status();
  return docs.ok() ? std::move(docs).value() : DocList();
}

TEST(RequestHandlerTest, GpuBatchingAppliesOnCudaDevicesOnlyAndYamlOverridesIt) {
  auto make = [](Device device, const std::map<std::string, DynamicBatching>& yaml = {}) {
    ExecutorContext context;
    context.name = "enc";
    context.device = device;
    auto handler = RequestHandler::Create("GpuBatchedUnitExec", context, "enc/rep-0", yaml);
    EXPECT_TRUE(handler.ok()) << handler.status();
    return std::move(handler).value();
  };
  // CPU: no batching on /encode, the plain macro's on /tag.
  auto cpu = make(Device::Cpu());
  EXPECT_FALSE(cpu->BatchingFor("/encode").has_value());
  ASSERT_TRUE(cpu->BatchingFor("/tag").has_value());
  EXPECT_EQ(cpu->BatchingFor("/tag")->preferred_batch_size, 8);
  // CUDA (no GPU is touched): the GPU macro's on both.
  auto cuda = make(*Device::Parse("cuda:1"));
  ASSERT_TRUE(cuda->BatchingFor("/encode").has_value());
  EXPECT_EQ(cuda->BatchingFor("/encode")->preferred_batch_size, 256);
  EXPECT_EQ(cuda->BatchingFor("/encode")->timeout_ms, 0);
  ASSERT_TRUE(cuda->BatchingFor("/tag").has_value());
  EXPECT_EQ(cuda->BatchingFor("/tag")->preferred_batch_size, 64);
  // YAML by endpoint or handler name wins over either macro.
  auto off = make(*Device::Parse("cuda"),
                  {{"/encode", DynamicBatching{.enabled = false}},
                   {"Tag", DynamicBatching{.preferred_batch_size = 3, .timeout_ms = 7}}});
  EXPECT_FALSE(off->BatchingFor("/encode").has_value());
  ASSERT_TRUE(off->BatchingFor("/tag").has_value());
  EXPECT_EQ(off->BatchingFor("/tag")->preferred_batch_size, 3);
}

TEST(RequestHandlerTest, ExecutorChosenBatchingReplacesTheMacrosAndYamlOverridesIt) {
  auto make = [](const std::string& encode, const std::string& tag,
                 const std::map<std::string, DynamicBatching>& yaml = {}) {
    ExecutorContext context;
    context.name = "chosen";
    context.with = Parameters(Value::Dict{{"encode", Value(encode)}, {"tag", Value(tag)}});
    return RequestHandler::Create("ChosenBatchingUnitExec", context, "chosen/rep-0", yaml);
  };
  // nullopt keeps the macro's: none on /encode, 8 on /tag.
  auto kept = make("keep", "keep");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_FALSE((*kept)->BatchingFor("/encode").has_value());
  ASSERT_TRUE((*kept)->BatchingFor("/tag").has_value());
  EXPECT_EQ((*kept)->BatchingFor("/tag")->preferred_batch_size, 8);
  // A value replaces it; enabled = false turns the macro's off.
  auto chosen = make("128", "off");
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  ASSERT_TRUE((*chosen)->BatchingFor("/encode").has_value());
  EXPECT_EQ((*chosen)->BatchingFor("/encode")->preferred_batch_size, 128);
  EXPECT_EQ((*chosen)->BatchingFor("/encode")->timeout_ms, 0);
  EXPECT_FALSE((*chosen)->BatchingFor("/tag").has_value());
  // YAML, by endpoint or by handler name, beats the executor's choice.
  auto yaml = make("128", "64",
                   {{"/encode", DynamicBatching{.enabled = false}},
                    {"Tag", DynamicBatching{.preferred_batch_size = 3, .timeout_ms = 7}}});
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_FALSE((*yaml)->BatchingFor("/encode").has_value());
  ASSERT_TRUE((*yaml)->BatchingFor("/tag").has_value());
  EXPECT_EQ((*yaml)->BatchingFor("/tag")->preferred_batch_size, 3);
  // A choice the YAML rules refuse, or one that throws, fails the start
  // with the executor and handler named.
  auto invalid = make("0", "keep");
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(invalid.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(invalid.status().message()),
              HasSubstr("ChosenBatchingUnitExec': DefaultBatching(\"Encode\")"));
  EXPECT_THAT(std::string(invalid.status().message()), HasSubstr("preferred_batch_size"));
  auto thrown = make("keep", "throw");
  ASSERT_FALSE(thrown.ok());
  EXPECT_THAT(std::string(thrown.status().message()),
              HasSubstr("failed to choose its dynamic batching"));
  EXPECT_THAT(std::string(thrown.status().message()), HasSubstr("no idea which batching"));
}

// A request the validator refuses fails alone, before it can join a batch;
// requests queued at the same time are merged and served.
TEST(RequestHandlerTest, ValidatorRefusesOneRequestBeforeItJoinsABatch) {
  ExecutorContext context;
  context.name = "val";
  auto handler = RequestHandler::Create("ValidatedUnitExec", context, "val/rep-0");
  ASSERT_TRUE(handler.ok()) << handler.status();
  DocList good;
  good.emplace_back().set_tensor("x", Tensor::FromValues<float>({1}, std::vector<float>{1.0F}));
  DocList bad = good;
  bad.emplace_back("no tensor");

  std::vector<jina::DataRequestProto> requests = {
      MakeRequest("/sum", good), MakeRequest("/sum", bad), MakeRequest("/sum", good)};
  std::vector<RequestHandler::Result> results(requests.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = (*handler)->Handle(&requests[i]); });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  EXPECT_EQ(results[1].status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(results[1].status.message(),
              HasSubstr("executor 'ValidatedUnitExec' (val/rep-0) endpoint '/sum': document 1 "
                        "has no x"));
  for (std::size_t i : {0u, 2u}) {
    ASSERT_TRUE(results[i].status.ok()) << results[i].status;
    ASSERT_FALSE(results[i].is_error) << requests[i].header().status().description();
    DocList out = ReplyDocs(requests[i]);
    ASSERT_EQ(out.size(), 1u);
    // Both good requests went through one merged call (the bad one did not).
    EXPECT_EQ(out[0].text(), "seen in a call of 2");
  }
}

TEST(RequestHandlerTest, RoutesToTheBoundHandler) {
  auto handler = MakeHandler();
  auto request = MakeRequest("/upper", DocList{Doc("abc"), Doc("x")});
  (*request.mutable_parameters()->mutable_fields())["suffix"].set_string_value("!");
  EXPECT_FALSE(handler->Handle(&request).is_error);
  EXPECT_EQ(request.header().request_id(), "r1");
  EXPECT_EQ(request.header().status().code(), jina::StatusProto::SUCCESS);
  DocList docs = ReplyDocs(request);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].text(), "ABC!");
  ASSERT_EQ(request.routes_size(), 1);
  EXPECT_EQ(request.routes(0).executor(), "enc");
}

TEST(RequestHandlerTest, ExecutorSpecificParametersWin) {
  auto handler = MakeHandler();
  auto request = MakeRequest("/upper", DocList{Doc("a")});
  auto* fields = request.mutable_parameters()->mutable_fields();
  (*fields)["suffix"].set_string_value("-all");
  (*(*fields)["enc"].mutable_struct_value()->mutable_fields())["suffix"].set_string_value("-enc");
  EXPECT_FALSE(handler->Handle(&request).is_error);
  EXPECT_EQ(ReplyDocs(request)[0].text(), "A-enc");
}

TEST(RequestHandlerTest, ExceptionBecomesJinaErrorReply) {
  auto handler = MakeHandler();
  Doc doc("kept");
  auto request = MakeRequest("/explode", DocList{doc});
  EXPECT_TRUE(handler->Handle(&request).is_error);
  const auto& status = request.header().status();
  EXPECT_EQ(status.code(), jina::StatusProto::ERROR);
  EXPECT_EQ(status.description(),
            "executor 'EchoUnitExec' (enc/rep-0) endpoint '/explode': std::out_of_range: index 7 "
            "out of range");
  EXPECT_EQ(status.exception().name(), "std::out_of_range");
  EXPECT_EQ(status.exception().executor(), "EchoUnitExec");
  ASSERT_EQ(status.exception().args_size(), 1);
  // The documents come back as they were sent.
  DocList docs = ReplyDocs(request);
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].id(), doc.id());
  // And the next request is served.
  auto next = MakeRequest("/upper", DocList{Doc("b")});
  EXPECT_FALSE(handler->Handle(&next).is_error);
}

TEST(RequestHandlerTest, UnknownEndpointWithoutDefaultIsAnErrorListingEndpoints) {
  auto handler = MakeHandler();
  auto request = MakeRequest("/nope", DocList{Doc("a")});
  EXPECT_TRUE(handler->Handle(&request).is_error);
  EXPECT_THAT(request.header().status().description(),
              HasSubstr("endpoint '/nope': no handler for this endpoint and no default handler; "
                        "endpoints: /explode, /upper"));
}

TEST(RequestHandlerTest, DryRunAndDocsBytes) {
  auto handler = MakeHandler();
  auto dry = MakeRequest("_jina_dry_run_", DocList{Doc::Empty()});
  EXPECT_FALSE(handler->Handle(&dry).is_error);

  jina::DataRequestProto request;
  request.mutable_header()->set_exec_endpoint("/upper");
  docarray::DocListProto list;
  DocListToProto(DocList{Doc("bytes")}, &list);
  request.mutable_data()->set_docs_bytes(list.SerializeAsString());
  EXPECT_FALSE(handler->Handle(&request).is_error);
  EXPECT_TRUE(request.data().has_docs());
  EXPECT_EQ(ReplyDocs(request)[0].text(), "BYTES");
}

TEST(RequestHandlerTest, ConstructorFailureIsAStatus) {
  ExecutorContext context;
  context.with = Parameters(Value::Dict{{"fail_init", Value(true)}});
  auto handler = RequestHandler::Create("EchoUnitExec", context, "enc/rep-0");
  ASSERT_FALSE(handler.ok());
  EXPECT_EQ(handler.status().message(),
            "executor 'EchoUnitExec' failed to initialise on cpu: std::runtime_error: weights "
            "missing");
  EXPECT_EQ(RequestHandler::Create("Missing", context, "x").status().code(), StatusCode::kNotFound);
}

TEST(RequestHandlerTest, EndpointDiscoveryListsDryRunAndSchemas) {
  auto handler = MakeHandler();
  jina::EndpointsProto endpoints;
  handler->FillEndpoints(&endpoints);
  EXPECT_THAT(endpoints.endpoints(),
              ::testing::ElementsAre("_jina_dry_run_", "/explode", "/upper"));
  const auto& schema = endpoints.schemas().fields().at("/upper").struct_value().fields();
  EXPECT_EQ(schema.at("input").struct_value().fields().at("name").string_value(), "LegacyDocument");
  EXPECT_TRUE(schema.at("input").struct_value().fields().at("model").has_struct_value());
}

TEST(RequestHandlerTest, HandlerCallsRunOnOneThreadOfTheirOwnWhereOpenMpIsLoaded) {
  // OpenMP keeps a thread team per calling thread: where a runtime is
  // loaded (any libtorch worker), handler calls must come from one thread,
  // whichever gRPC thread received the request, and the constructor (a
  // model's warm-up pass) from that thread too. Without one (this test
  // binary links no libtorch), each call runs on its caller's thread.
  ExecutorContext context;
  context.name = "tag";
  auto created = RequestHandler::Create("ThreadTagUnitExec", context, "tag/rep-0");
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<RequestHandler> handler = std::move(created).value();
  constexpr int kCallers = 8;
  std::vector<std::string> ran_on(kCallers);
  std::vector<std::string> constructed_on(kCallers);
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      jina::DataRequestProto request = MakeRequest("/thread", {Doc("x")});
      ASSERT_TRUE(handler->Handle(&request).status.ok());
      auto docs = TakeDocListFromProto(request.mutable_data()->mutable_docs());
      ASSERT_TRUE(docs.ok());
      ran_on[static_cast<std::size_t>(i)] = std::string((*docs)[0].text());
      const auto tag = (*docs)[0].tags().find("constructed_on");
      constructed_on[static_cast<std::size_t>(i)] =
          tag != (*docs)[0].tags().end() && tag->second.AsText() ? *tag->second.AsText() : "";
    });
  }
  std::ostringstream main_id;
  main_id << std::this_thread::get_id();
  for (std::thread& t : callers) {
    t.join();
  }
  std::set<std::string> threads(ran_on.begin(), ran_on.end());
  EXPECT_FALSE(threads.contains(main_id.str()));
  if (HandlerThread::ForThisProcess() == HandlerThread::Placement::kOwnThread) {
    EXPECT_EQ(threads.size(), 1u);
    EXPECT_THAT(constructed_on, ::testing::Each(*threads.begin()));
  } else {
    EXPECT_EQ(threads.size(), static_cast<std::size_t>(kCallers));
    EXPECT_THAT(constructed_on, ::testing::Each(main_id.str()));
  }
}

}  // namespace
}  // namespace gantry::internal
