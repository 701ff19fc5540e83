// TEI's /embed and /rerank on the gateway: what a body is read as, the parameters the
// executor gets, the reply's shape and the errors' codes. Through real
// processes and TEI's published schemas: tests/interop/test_tei_api.py.
#include "gateway/tei_embeddings.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/doc_proto.h"
#include "gateway/openai_embeddings.h"

namespace gantry::internal {
namespace {

using nlohmann::json;

const std::map<std::string, std::string> kOne{{"m", "/encode"}};

// The input shape the OpenAI and TEI routes share: one string or a bounded
// list of them, each named in its error.
TEST(TextInputsTest, OneStringOrABoundedListOfNonEmptyStrings) {
  std::vector<std::string> texts;
  EXPECT_FALSE(ReadTextInputs(json("a"), "input", 2, texts).has_value());
  EXPECT_FALSE(ReadTextInputs(json{"b", "c"}, "input", 2, texts).has_value());
  EXPECT_EQ(texts, (std::vector<std::string>{"a", "b", "c"}));

  const struct {
    json value;
    std::string message;
    bool too_many;
  } kBad[] = {
      {json::array(), "'inputs' is an empty list; send at least one string", false},
      {json{"a", "b", "c"}, "'inputs' has 3 items; at most 2 per request", true},
      {json(""), "inputs: an input must not be empty", false},
      {json{"a", ""}, "inputs[1]: an input must not be empty", false},
      {json{1, 2}, "inputs[0]: token-id inputs are not supported; send text", false},
      {json::array({json{1, 2}}), "inputs[0]: token-id inputs are not supported; send text", false},
      {json{{"k", "v"}}, "inputs: expected a string, got object", false},
      {json(true), "inputs: expected a string, got boolean", false},
  };
  for (const auto& bad : kBad) {
    std::vector<std::string> out;
    std::optional<TextInputsProblem> problem = ReadTextInputs(bad.value, "inputs", 2, out);
    ASSERT_TRUE(problem.has_value()) << bad.value.dump();
    EXPECT_EQ(problem->message, bad.message) << bad.value.dump();
    EXPECT_EQ(problem->too_many, bad.too_many) << bad.value.dump();
  }
}

TEST(TeiEmbeddingsTest, FieldsBecomeParametersOfOneDocumentPerInput) {
  auto parsed = ParseTeiEmbedRequest(json{{"inputs", {"a", "b"}},
                                          {"normalize", false},
                                          {"truncate", true},
                                          {"truncation_direction", "Left"},
                                          {"prompt_name", "query"}},
                                     kOne, 8);
  ASSERT_TRUE(std::holds_alternative<TeiEmbedRequest>(parsed))
      << std::get<TeiError>(parsed).message;
  TeiEmbedRequest& request = std::get<TeiEmbedRequest>(parsed);
  EXPECT_EQ(request.model, "m");
  const jina::DataRequestProto proto = MakeTeiDataRequest(request, "/encode", "r1");
  EXPECT_EQ(proto.header().exec_endpoint(), "/encode");
  ASSERT_EQ(proto.data().docs().docs_size(), 2);
  EXPECT_EQ(proto.data().docs().docs(0).data().at("text").text(), "a");
  EXPECT_EQ(proto.data().docs().docs(1).data().at("text").text(), "b");
  // The texts moved into the proto; the request keeps their number.
  EXPECT_EQ(request.inputs.size(), 2U);
  const auto& fields = proto.parameters().fields();
  EXPECT_FALSE(fields.at("normalize").bool_value());
  EXPECT_TRUE(fields.at("truncate").bool_value());
  EXPECT_EQ(fields.at("truncation_direction").string_value(), "left");
  EXPECT_EQ(fields.at("prompt_name").string_value(), "query");

  // Defaults: nothing sent the executor would not otherwise assume.
  auto plain = ParseTeiEmbedRequest(json{{"inputs", "x"}}, kOne, 8);
  ASSERT_TRUE(std::holds_alternative<TeiEmbedRequest>(plain));
  EXPECT_TRUE(MakeTeiDataRequest(std::get<TeiEmbedRequest>(plain), "/encode", "r2")
                  .parameters()
                  .fields()
                  .empty());
}

TEST(TeiEmbeddingsTest, BadBodiesAreErrorsNamingTheField) {
  const std::map<std::string, std::string> two{{"a", "/x"}, {"b", "/y"}};
  struct Case {
    json body;
    const std::map<std::string, std::string>* served;
    int status;
    std::string want;
  };
  const Case cases[] = {
      {json::array(), &kOne, 422, "JSON object"},
      {json{{"normalize", true}}, &kOne, 422, "\"inputs\" is required"},
      {json{{"inputs", json::array()}}, &kOne, 422, "empty list"},
      {json{{"inputs", {"a", 3}}}, &kOne, 422, "inputs[1]: token-id inputs"},
      {json{{"inputs", {"a", ""}}}, &kOne, 422, "inputs[1]: an input must not be empty"},
      {json{{"inputs", std::vector<std::string>(9, "a")}}, &kOne, 413,
       "batch size 9 > maximum allowed batch size 8"},
      {json{{"inputs", "a"}, {"truncate", "no"}}, &kOne, 422, "\"truncate\" must be"},
      {json{{"inputs", "a"}, {"truncation_direction", "Middle"}}, &kOne, 422, "\"Middle\""},
      {json{{"inputs", "a"}, {"prompt_name", 7}}, &kOne, 422, "\"prompt_name\" must be"},
      {json{{"inputs", "a"}}, &two, 422, "name one in \"model\""},
      {json{{"inputs", "a"}, {"model", "c"}}, &two, 404, "'a', 'b'"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseTeiEmbedRequest(c.body, *c.served, 8);
    ASSERT_TRUE(std::holds_alternative<TeiError>(parsed)) << c.body.dump();
    const TeiError& error = std::get<TeiError>(parsed);
    EXPECT_EQ(error.http_status, c.status) << c.body.dump();
    EXPECT_NE(error.message.find(c.want), std::string::npos) << error.message;
    EXPECT_EQ(error.ToJson()["error_type"], "Validation");
  }
  auto named = ParseTeiEmbedRequest(json{{"inputs", "a"}, {"model", "b"}}, two, 8);
  ASSERT_TRUE(std::holds_alternative<TeiEmbedRequest>(named));
  EXPECT_EQ(std::get<TeiEmbedRequest>(named).model, "b");
}

// TEI's /similarity: the source first, then the sentences, one /embed
// request; the source counts toward the client batch bound.
TEST(TeiSimilarityTest, ReadsTheSourceAndSentencesAndRefusesWhatTeiRefuses) {
  const json good = json::parse(
      R"({"inputs": {"source_sentence": "s", "sentences": ["a", "b"]},
          "parameters": {"truncate": true, "truncation_direction": "Left", "prompt_name": "q"}})");
  auto parsed = ParseTeiSimilarityRequest(good, kOne, 3);
  ASSERT_TRUE(std::holds_alternative<TeiSimilarityRequest>(parsed))
      << std::get<TeiError>(parsed).message;
  const TeiSimilarityRequest& request = std::get<TeiSimilarityRequest>(parsed);
  EXPECT_EQ(request.model, "m");
  EXPECT_EQ(request.embed.inputs, (std::vector<std::string>{"s", "a", "b"}));
  EXPECT_EQ(request.embed.truncate, std::optional<bool>(true));
  EXPECT_EQ(request.embed.truncation_direction, "left");
  EXPECT_EQ(request.embed.prompt_name, "q");
  struct Case {
    json body;
    int status;
    std::string want;
  };
  const std::vector<Case> cases = {
      {json{{"inputs", "a"}}, 422, "\"inputs\" is required"},
      {json::parse(R"({"inputs": {"sentences": ["a"]}})"), 422, "source_sentence"},
      {json::parse(R"({"inputs": {"source_sentence": "", "sentences": ["a"]}})"), 422,
       "source_sentence"},
      {json::parse(R"({"inputs": {"source_sentence": "s", "sentences": "a"}})"), 422,
       "inputs.sentences"},
      {json::parse(R"({"inputs": {"source_sentence": "s", "sentences": []}})"), 422,
       "inputs.sentences"},
      {json::parse(R"({"inputs": {"source_sentence": "s", "sentences": ["a", 7]}})"), 422,
       "inputs.sentences[1]"},
      {json::parse(R"({"inputs": {"source_sentence": "s", "sentences": ["a", "b", "c"]}})"), 413,
       "batch size 4 > maximum allowed batch size 3"},
      {json::parse(R"({"inputs": {"source_sentence": "s", "sentences": ["a"]}, "parameters": 1})"),
       422, "\"parameters\" must be an object"},
      {json::parse(
           R"({"inputs": {"source_sentence": "s", "sentences": ["a"]},
               "parameters": {"truncation_direction": "Up"}})"),
       422, "\"Up\""},
  };
  for (const Case& c : cases) {
    auto refused = ParseTeiSimilarityRequest(c.body, kOne, 3);
    ASSERT_TRUE(std::holds_alternative<TeiError>(refused)) << c.body.dump();
    const TeiError& error = std::get<TeiError>(refused);
    EXPECT_EQ(error.http_status, c.status) << c.body.dump();
    EXPECT_NE(error.message.find(c.want), std::string::npos) << error.message;
  }
}

TEST(TeiSimilarityTest, ReplyIsEachSentencesCosineToTheSource) {
  DocList docs{Doc("s"), Doc("a"), Doc("b"), Doc("c")};
  docs[0].set_embedding(Tensor::FromValues<float>({2}, std::vector<float>{3, 4}));
  docs[1].set_embedding(Tensor::FromValues<float>({2}, std::vector<float>{6, 8}));
  docs[2].set_embedding(Tensor::FromValues<float>({2}, std::vector<float>{-4, 3}));
  docs[3].set_embedding(Tensor::FromValues<float>({2}, std::vector<float>{0, 0}));
  jina::DataRequestProto reply;
  DocListToProto(docs, reply.mutable_data()->mutable_docs());
  TeiSimilarityRequest request;
  request.embed.inputs = {"s", "a", "b", "c"};
  auto out = MakeTeiSimilarityResponse(request, reply, 1 << 20);
  ASSERT_TRUE(std::holds_alternative<json>(out)) << std::get<TeiError>(out).message;
  const json& scores = std::get<json>(out);
  ASSERT_EQ(scores.size(), 3U);
  EXPECT_NEAR(scores[0].get<double>(), 1.0, 1e-6);
  EXPECT_NEAR(scores[1].get<double>(), 0.0, 1e-6);
  EXPECT_EQ(scores[2].get<double>(), 0.0) << "an all-zero vector is not similar to anything";
  request.embed.inputs = {"s", "a"};  // the reply has more vectors than inputs
  out = MakeTeiSimilarityResponse(request, reply, 1 << 20);
  ASSERT_TRUE(std::holds_alternative<TeiError>(out));
  EXPECT_EQ(std::get<TeiError>(out).http_status, 424);
}

TEST(TeiEmbeddingsTest, ReplyIsAListOfVectorsNormalisedWhenAsked) {
  DocList docs{Doc("a"), Doc("b")};
  docs[0].set_embedding(Tensor::FromValues<float>({2}, std::vector<float>{3, 4}));
  docs[1].set_embedding(Tensor::FromValues<float>({2}, std::vector<float>{0, 2}));
  jina::DataRequestProto reply;
  DocListToProto(docs, reply.mutable_data()->mutable_docs());
  TeiEmbedRequest request;
  request.inputs = {"a", "b"};
  auto out = MakeTeiEmbedResponse(request, reply, 1 << 20);
  ASSERT_TRUE(std::holds_alternative<json>(out)) << std::get<TeiError>(out).message;
  const json& unit = std::get<json>(out);
  ASSERT_EQ(unit.size(), 2u);
  EXPECT_NEAR(unit[0][0].get<double>(), 0.6, 1e-6);
  EXPECT_NEAR(unit[0][1].get<double>(), 0.8, 1e-6);
  EXPECT_EQ(unit[1], json::parse("[0.0, 1.0]"));
  request.normalize = false;
  out = MakeTeiEmbedResponse(request, reply, 1 << 20);
  EXPECT_EQ(std::get<json>(out), json::parse("[[3.0, 4.0], [0.0, 2.0]]"));
  request.inputs = {"a"};  // one vector too many
  out = MakeTeiEmbedResponse(request, reply, 1 << 20);
  ASSERT_TRUE(std::holds_alternative<TeiError>(out));
  EXPECT_EQ(std::get<TeiError>(out).http_status, 424);
  EXPECT_EQ(std::get<TeiError>(out).type, "Backend");
}

TEST(TeiEmbeddingsTest, ForwardFailuresUseTeisCodes) {
  EXPECT_EQ(TeiError::FromGrpc(8, "full").http_status, 429);  // RESOURCE_EXHAUSTED
  EXPECT_EQ(TeiError::FromGrpc(8, "full").type, "Overloaded");
  EXPECT_EQ(TeiError::FromGrpc(14, "down").http_status, 503);  // UNAVAILABLE
  EXPECT_EQ(TeiError::FromGrpc(14, "down").type, "Unhealthy");
  EXPECT_EQ(TeiError::FromGrpc(4, "late").http_status, 504);  // DEADLINE_EXCEEDED
  EXPECT_EQ(TeiError::FromGrpc(13, "bug").http_status, 424);
}

TEST(TeiRerankTest, QueryAndFlagsBecomeParametersOfOneDocumentPerText) {
  auto parsed = ParseTeiRerankRequest(json{{"query", "q"},
                                           {"texts", {"a", "b", "c"}},
                                           {"raw_scores", true},
                                           {"return_text", true},
                                           {"truncate", false},
                                           {"truncation_direction", "Right"}},
                                      kOne, 8);
  ASSERT_TRUE(std::holds_alternative<TeiRerankRequest>(parsed))
      << std::get<TeiError>(parsed).message;
  const TeiRerankRequest& request = std::get<TeiRerankRequest>(parsed);
  EXPECT_TRUE(request.return_text);
  const jina::DataRequestProto proto = MakeTeiRerankDataRequest(request, "/rerank", "r1");
  EXPECT_EQ(proto.header().exec_endpoint(), "/rerank");
  EXPECT_EQ(proto.data().docs().docs_size(), 3);
  const auto& fields = proto.parameters().fields();
  EXPECT_EQ(fields.at("query").string_value(), "q");
  EXPECT_TRUE(fields.at("raw_scores").bool_value());
  EXPECT_FALSE(fields.at("truncate").bool_value());
  EXPECT_EQ(fields.at("truncation_direction").string_value(), "right");
  EXPECT_FALSE(fields.contains("return_text"));  // the gateway's business

  auto plain = ParseTeiRerankRequest(json{{"query", ""}, {"texts", {"a"}}}, kOne, 8);
  ASSERT_TRUE(std::holds_alternative<TeiRerankRequest>(plain));
  EXPECT_EQ(MakeTeiRerankDataRequest(std::get<TeiRerankRequest>(plain), "/rerank", "r2")
                .parameters()
                .fields()
                .size(),
            1u);  // the query only
}

TEST(TeiRerankTest, BadBodiesAreErrorsNamingTheField) {
  const struct {
    json body;
    int status;
    std::string want;
  } kBad[] = {
      {json{{"texts", {"a"}}}, 422, "\"query\" is required"},
      {json{{"query", 3}, {"texts", {"a"}}}, 422, "\"query\" is required"},
      {json{{"query", "q"}}, 422, "\"texts\" is required"},
      {json{{"query", "q"}, {"texts", "a"}}, 422, "\"texts\" is required: a list"},
      {json{{"query", "q"}, {"texts", json::array()}}, 422, "\"texts\" cannot be empty"},
      {json{{"query", "q"}, {"texts", {"a", 1}}}, 422, "texts[1]"},
      {json{{"query", "q"}, {"texts", std::vector<std::string>(9, "a")}}, 413,
       "batch size 9 > maximum allowed batch size 8"},
      {json{{"query", "q"}, {"texts", {"a"}}, {"raw_scores", "yes"}}, 422,
       "\"raw_scores\" must be"},
      {json{{"query", "q"}, {"texts", {"a"}}, {"return_text", 1}}, 422, "\"return_text\" must be"},
      {json{{"query", "q"}, {"texts", {"a"}}, {"truncation_direction", "Up"}}, 422, "\"Up\""},
  };
  for (const auto& bad : kBad) {
    auto parsed = ParseTeiRerankRequest(bad.body, kOne, 8);
    ASSERT_TRUE(std::holds_alternative<TeiError>(parsed)) << bad.body.dump();
    const TeiError& error = std::get<TeiError>(parsed);
    EXPECT_EQ(error.http_status, bad.status) << bad.body.dump();
    EXPECT_NE(error.message.find(bad.want), std::string::npos) << error.message;
  }
}

TEST(TeiRerankTest, ReplyIsRanksBestFirstWithTextWhenAsked) {
  DocList docs{Doc("a"), Doc("b"), Doc("c")};
  const double scores[] = {0.2, 0.9, 0.2};
  for (std::size_t i = 0; i < docs.size(); ++i) {
    docs[i].mutable_tags()["relevance_score"] = Value(scores[i]);
  }
  jina::DataRequestProto reply;
  DocListToProto(docs, reply.mutable_data()->mutable_docs());
  TeiRerankRequest request;
  request.texts = {"a", "b", "c"};
  auto out = MakeTeiRerankResponse(request, reply, 1 << 20);
  ASSERT_TRUE(std::holds_alternative<json>(out)) << std::get<TeiError>(out).message;
  // Best first; equal scores keep input order.
  EXPECT_EQ(std::get<json>(out), json::parse(R"([{"index":1,"score":0.9},{"index":0,"score":0.2},)"
                                             R"({"index":2,"score":0.2}])"));
  request.return_text = true;
  out = MakeTeiRerankResponse(request, reply, 1 << 20);
  EXPECT_EQ(std::get<json>(out)[0]["text"], "b");

  // A document without a score (an embedding executor behind /rerank) is
  // the backend's fault, named.
  docs[2].mutable_tags().clear();
  jina::DataRequestProto unscored;
  DocListToProto(docs, unscored.mutable_data()->mutable_docs());
  out = MakeTeiRerankResponse(request, unscored, 1 << 20);
  ASSERT_TRUE(std::holds_alternative<TeiError>(out));
  EXPECT_EQ(std::get<TeiError>(out).http_status, 424);
  EXPECT_NE(std::get<TeiError>(out).message.find("document 2"), std::string::npos);
}

TEST(TeiTokenizeTest, GoesToTheTokenizeEndpointWithItsFlags) {
  auto parsed = ParseTeiTokenizeRequest(
      json{{"inputs", {"a", "b"}}, {"add_special_tokens", false}, {"prompt_name", "query"}}, kOne,
      8);
  ASSERT_TRUE(std::holds_alternative<TeiTokenizeRequest>(parsed))
      << std::get<TeiError>(parsed).message;
  const jina::DataRequestProto proto =
      MakeTeiTokenizeDataRequest(std::get<TeiTokenizeRequest>(parsed), "r1");
  EXPECT_EQ(proto.header().exec_endpoint(), "/tokenize");
  EXPECT_EQ(proto.data().docs().docs_size(), 2);
  EXPECT_FALSE(proto.parameters().fields().at("add_special_tokens").bool_value());
  EXPECT_EQ(proto.parameters().fields().at("prompt_name").string_value(), "query");

  auto bad = ParseTeiTokenizeRequest(json{{"inputs", "a"}, {"add_special_tokens", 1}}, kOne, 8);
  ASSERT_TRUE(std::holds_alternative<TeiError>(bad));
  EXPECT_EQ(std::get<TeiError>(bad).http_status, 422);
  bad = ParseTeiTokenizeRequest(json{{"inputs", std::vector<std::string>(9, "a")}}, kOne, 8);
  ASSERT_TRUE(std::holds_alternative<TeiError>(bad));
  EXPECT_EQ(std::get<TeiError>(bad).http_status, 413);
}

TEST(TeiTokenizeTest, ReplyListsEachDocumentsTokensAndNamesAMalformedOne) {
  const auto token = [](std::int64_t id, const char* text, bool special, Value start, Value stop) {
    return Value(Value::Dict{{"id", Value(id)},
                             {"text", Value(text)},
                             {"special", Value(special)},
                             {"start", std::move(start)},
                             {"stop", std::move(stop)}});
  };
  DocList docs{Doc("hi"), Doc("")};
  docs[0].mutable_tags()["tokens"] =
      Value(Value::List{token(101, "[CLS]", true, Value(nullptr), Value(nullptr)),
                        token(7632, "hi", false, Value(0), Value(2))});
  docs[1].mutable_tags()["tokens"] = Value(Value::List{});
  jina::DataRequestProto reply;
  DocListToProto(docs, reply.mutable_data()->mutable_docs());
  TeiTokenizeRequest request;
  request.inputs = {"hi", ""};
  auto out = MakeTeiTokenizeResponse(request, reply, 1 << 20);
  ASSERT_TRUE(std::holds_alternative<json>(out)) << std::get<TeiError>(out).message;
  EXPECT_EQ(std::get<json>(out),
            json::parse(R"([[{"id":101,"text":"[CLS]","special":true,"start":null,"stop":null},)"
                        R"({"id":7632,"text":"hi","special":false,"start":0,"stop":2}],[]])"));

  // An executor without /tokenize (its default handler answered) or with
  // a bad offset: 424 naming the document.
  docs[1].mutable_tags().clear();
  jina::DataRequestProto untagged;
  DocListToProto(docs, untagged.mutable_data()->mutable_docs());
  out = MakeTeiTokenizeResponse(request, untagged, 1 << 20);
  ASSERT_TRUE(std::holds_alternative<TeiError>(out));
  EXPECT_EQ(std::get<TeiError>(out).http_status, 424);
  EXPECT_NE(std::get<TeiError>(out).message.find("document 1"), std::string::npos);
  docs[1].mutable_tags()["tokens"] = Value(Value::List{token(5, "x", false, Value(-1), Value(2))});
  jina::DataRequestProto negative;
  DocListToProto(docs, negative.mutable_data()->mutable_docs());
  out = MakeTeiTokenizeResponse(request, negative, 1 << 20);
  ASSERT_TRUE(std::holds_alternative<TeiError>(out));
  EXPECT_NE(std::get<TeiError>(out).message.find("start that is not a byte offset"),
            std::string::npos);
}

TEST(TeiInfoTest, ModelFromTheQueryOrTheOneServed) {
  const std::map<std::string, std::string> two{{"a", "/encode"}, {"b", "/rerank"}};
  EXPECT_EQ(std::get<std::string>(ChooseTeiInfoModel("", kOne)), "m");
  EXPECT_EQ(std::get<std::string>(ChooseTeiInfoModel("x=1&model=b", two)), "b");
  auto error = ChooseTeiInfoModel("", two);
  ASSERT_TRUE(std::holds_alternative<TeiError>(error));
  EXPECT_EQ(std::get<TeiError>(error).http_status, 422);
  EXPECT_NE(std::get<TeiError>(error).message.find("GET /info?model=NAME"), std::string::npos);
  error = ChooseTeiInfoModel("model=c", two);
  ASSERT_TRUE(std::holds_alternative<TeiError>(error));
  EXPECT_EQ(std::get<TeiError>(error).http_status, 404);
}

TEST(TeiInfoTest, ExecutorFieldsAndRouterFieldsMakeTeisInfo) {
  Doc doc;
  doc.mutable_tags()["tei_info"] = Value(Value::Dict{
      {"model_dtype", Value("float16")},
      {"model_type",
       Value(Value::Dict{{"embedding", Value(Value::Dict{{"pooling", Value("cls")}})}})},
      {"max_input_length", Value(512.0)},  // tags travel as doubles
      {"auto_truncate", Value(true)},
      {"max_batch_requests", Value(256.0)},
      {"max_batch_tokens", Value(131072.0)}});
  jina::DataRequestProto reply;
  DocListToProto(DocList{doc}, reply.mutable_data()->mutable_docs());
  const TeiRouterInfo router{.model_id = "bge",
                             .max_concurrent_requests = 64,
                             .max_client_batch_size = 2048,
                             .version = "1.2.3"};
  auto out = MakeTeiInfoResponse(router, reply, 1 << 20);
  ASSERT_TRUE(std::holds_alternative<json>(out)) << std::get<TeiError>(out).message;
  const json& info = std::get<json>(out);
  EXPECT_EQ(info["model_id"], "bge");
  EXPECT_EQ(info["max_input_length"], 512);
  EXPECT_TRUE(info["max_input_length"].is_number_integer());
  EXPECT_EQ(info["max_batch_tokens"], 131072);
  EXPECT_EQ(info["model_type"]["embedding"]["pooling"], "cls");
  EXPECT_EQ(info["max_concurrent_requests"], 64);
  EXPECT_TRUE(info["model_sha"].is_null());

  // An executor without /info (its default handler echoed no document).
  jina::DataRequestProto empty;
  empty.mutable_data()->mutable_docs();
  out = MakeTeiInfoResponse(router, empty, 1 << 20);
  ASSERT_TRUE(std::holds_alternative<TeiError>(out));
  EXPECT_EQ(std::get<TeiError>(out).http_status, 424);
  EXPECT_NE(std::get<TeiError>(out).message.find("model 'bge'"), std::string::npos);
}

}  // namespace
}  // namespace gantry::internal
