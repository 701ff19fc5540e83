// Hostile input, in-process: documents, tensors, Structs and JSON crafted to
// overflow sizes or nest deeply, and the worker's gRPC face (on 127.0.0.1,
// in-process) answering garbage bytes and over-cap replies.
#include <gantry/executor.h>
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>

#include "common/grpc_options.h"
#include "core/doc_proto.h"
#include "core/value_json.h"
#include "gateway/json_docs.h"
#include "jina/jina.grpc.pb.h"
#include "worker/request_handler.h"
#include "worker/worker_service.h"

namespace hostile_test {

// Replies with one document holding a tensor of `parameters["bytes"]` bytes.
class BigReplyUnitExec final : public gantry::Executor {
  GANTRY_EXECUTOR(BigReplyUnitExec);
  explicit BigReplyUnitExec(const gantry::ExecutorContext& /*context*/) {}
  GANTRY_REQUESTS(Grow, "/grow");
  void Grow(gantry::DocList& docs, const gantry::Parameters& parameters) {
    std::int64_t bytes = parameters.GetInt("bytes");
    for (gantry::Doc& doc : docs) {
      doc.set_tensor("out", gantry::Tensor::FromBytes(
                                "|u1", {bytes}, std::string(static_cast<std::size_t>(bytes), 'x'))
                                .value());
    }
  }
};
GANTRY_REGISTER_EXECUTOR(BigReplyUnitExec);

}  // namespace hostile_test

namespace gantry::internal {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

docarray::NodeProto* AddTensorDoc(docarray::DocListProto* list, const std::string& id,
                                  const std::string& field) {
  auto* data = list->add_docs()->mutable_data();
  (*data)["id"].set_text(id);
  (*data)["id"].set_type("id");
  return &(*data)[field];
}

void SetDense(docarray::NodeProto* node, const std::string& dtype,
              std::initializer_list<std::uint32_t> shape, std::string buffer) {
  auto* dense = node->mutable_ndarray()->mutable_dense();
  dense->set_dtype(dtype);
  for (std::uint32_t d : shape) {
    dense->add_shape(d);
  }
  dense->set_buffer(std::move(buffer));
}

Status Decode(docarray::DocListProto list) {
  return TakeDocListFromProto(&list, {.max_tensor_bytes = std::uint64_t{64} << 20}).status();
}

// ---- NdArray validation on the proto path ----------------------------------

TEST(HostileInputTest, PoisonShapeWithEmptyBufferIsRefusedWithoutAllocating) {
  docarray::DocListProto list;
  list.add_docs();
  list.add_docs();
  list.add_docs();
  SetDense(AddTensorDoc(&list, "abc", "embedding"), "<f4", {1000000000}, "");
  Status status = Decode(list);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "docs[3] (id 'abc'): field 'embedding': shape [1000000000] of float32 needs "
            "4000000000 bytes, over the 67108864-byte message cap");
  // Without a cap, the size mismatch itself is the error.
  docarray::DocListProto uncapped;
  SetDense(AddTensorDoc(&uncapped, "abc", "embedding"), "<f4", {1000000000}, "");
  EXPECT_EQ(TakeDocListFromProto(&uncapped).status().message(),
            "docs[0] (id 'abc'): field 'embedding': shape [1000000000] of float32 needs "
            "4000000000 bytes, buffer has 0");
}

TEST(HostileInputTest, ShapeOverflowing64BitsIsRefused) {
  // 65536^4 = 2^64 wraps to 0, which an empty buffer used to match.
  docarray::DocListProto list;
  SetDense(AddTensorDoc(&list, "wrap", "t"), "|u1", {65536, 65536, 65536, 65536}, "");
  Status status = Decode(list);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "docs[0] (id 'wrap'): field 't': shape [65536, 65536, 65536, 65536] of uint8 needs "
            "more than 2^64 bytes");
}

TEST(HostileInputTest, BufferOneByteShortOrLongIsRefused) {
  docarray::DocListProto short_list;
  short_list.add_docs();
  SetDense(AddTensorDoc(&short_list, "s", "embedding"), "<f4", {2, 3}, std::string(23, 'x'));
  EXPECT_EQ(Decode(short_list).message(),
            "docs[1] (id 's'): field 'embedding': shape [2, 3] of float32 needs 24 bytes, "
            "buffer has 23");
  docarray::DocListProto long_list;
  SetDense(AddTensorDoc(&long_list, "l", "embedding"), "<f4", {2, 3}, std::string(25, 'x'));
  EXPECT_EQ(Decode(long_list).message(),
            "docs[0] (id 'l'): field 'embedding': shape [2, 3] of float32 needs 24 bytes, "
            "buffer has 25");
  docarray::DocListProto exact;
  SetDense(AddTensorDoc(&exact, "e", "embedding"), "<f4", {2, 3}, std::string(24, 'x'));
  EXPECT_TRUE(Decode(exact).ok());
}

TEST(HostileInputTest, UnknownDTypeIsRefused) {
  docarray::DocListProto list;
  SetDense(AddTensorDoc(&list, "d", "embedding"), "<q4", {1}, std::string(4, 'x'));
  EXPECT_THAT(Decode(list).message(),
              StartsWith("docs[0] (id 'd'): field 'embedding': unknown tensor dtype '<q4'"));
}

TEST(HostileInputTest, TensorFromBytesChecksOverflow) {
  auto wrapped = Tensor::FromBytes("|u1", {65536, 65536, 65536, 65536}, "");
  ASSERT_FALSE(wrapped.ok());
  EXPECT_THAT(wrapped.status().message(), HasSubstr("needs more than 2^64 bytes"));
  auto negative = Tensor::FromBytes("<f4", {-2, -2}, std::string(16, 'x'));
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(negative.status().message(), HasSubstr("negative dimension -2 on axis 0"));
}

// ---- nesting on the proto path ----------------------------------------------

TEST(HostileInputTest, DeepChunksAreRefusedNotRecursedInto) {
  docarray::DocListProto list;
  docarray::DocProto* doc = list.add_docs();
  for (int i = 0; i < 150; ++i) {
    doc = (*doc->mutable_data())["chunks"].mutable_doc_array()->add_docs();
  }
  Status status = Decode(list);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), AllOf(StartsWith("docs[0] (no id): field 'chunks': docs[0]"),
                                      HasSubstr("nested deeper than 100 levels")));
  // 100 levels are fine.
  docarray::DocListProto ok_list;
  doc = ok_list.add_docs();
  for (int i = 0; i < 100; ++i) {
    doc = (*doc->mutable_data())["chunks"].mutable_doc_array()->add_docs();
  }
  EXPECT_TRUE(Decode(ok_list).ok());
}

TEST(HostileInputTest, DeepTagsDictIsRefused) {
  docarray::DocListProto list;
  docarray::NodeProto* node = AddTensorDoc(&list, "t", "tags");
  for (int i = 0; i < 500; ++i) {
    node = &(*node->mutable_dict()->mutable_data())["k"];
  }
  node->set_text("bottom");
  Status status = Decode(list);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), AllOf(StartsWith("docs[0] (id 't'): field 'tags': k: k"),
                                      HasSubstr("nested deeper than 100 levels")));
}

TEST(HostileInputTest, DeepStructIsRefused) {
  google::protobuf::Struct root;
  google::protobuf::Struct* level = &root;
  for (int i = 0; i < 500; ++i) {
    level = (*level->mutable_fields())["a"].mutable_struct_value();
  }
  auto dict = StructToDict(root);
  ASSERT_FALSE(dict.ok());
  EXPECT_EQ(dict.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(dict.status().message(), HasSubstr("nested deeper than 100 levels"));
  google::protobuf::Struct lists;
  google::protobuf::Value* value = &(*lists.mutable_fields())["l"];
  for (int i = 0; i < 500; ++i) {
    value = value->mutable_list_value()->add_values();
  }
  EXPECT_FALSE(StructToDict(lists).ok());
}

// ---- JSON ----------------------------------------------------------------

TEST(HostileInputTest, JsonDepthIsBoundedWhileParsing) {
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto parsed = ParseJsonBounded(deep);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(), "JSON nested deeper than 100 levels");
  EXPECT_TRUE(ParseJsonBounded(std::string(100, '[') + std::string(100, ']')).ok());
  EXPECT_FALSE(ParseJsonBounded(std::string(101, '[') + std::string(101, ']')).ok());
  std::string objects;
  for (int i = 0; i < 200; ++i) {
    objects += "{\"a\":";
  }
  objects += "1" + std::string(200, '}');
  EXPECT_FALSE(ParseJsonBounded(objects).ok());
  EXPECT_THAT(ParseJsonBounded("not json").status().message(), HasSubstr("does not parse"));
  EXPECT_FALSE(ParseJsonBounded("").ok());
  EXPECT_FALSE(ValueDictFromJson(deep).ok());
}

Status JsonDoc(const std::string& text) {
  docarray::DocProto out;
  return JsonToDocProto(nlohmann::json::parse(text), "data[2]", std::uint64_t{64} << 20, &out);
}

TEST(HostileInputTest, JsonTensorShapesAreChecked) {
  EXPECT_EQ(JsonDoc(R"({"id": "n", "embedding": {"dtype": "<f4", "shape": [-1], "data": [1]}})")
                .message(),
            "data[2] (id 'n'): field 'embedding': shape [-1] of float32 has the negative "
            "dimension -1 on axis 0");
  EXPECT_EQ(JsonDoc(R"({"id": "o", "embedding": {"dtype": "|u1",
                        "shape": [65536, 65536, 65536, 65536], "data": [1]}})")
                .message(),
            "data[2] (id 'o'): field 'embedding': shape [65536, 65536, 65536, 65536] of uint8 "
            "needs more than 2^64 bytes");
  EXPECT_EQ(JsonDoc(R"({"embedding": {"dtype": "<f4", "shape": [3], "data": [1, 2]}})").message(),
            "data[2] (no id): field 'embedding': shape [3] of float32 needs 12 bytes, buffer "
            "has 8");
  EXPECT_EQ(JsonDoc(R"({"id": "b", "e": {"dtype": "<f4", "shape": [1000000000], "data": [1]}})")
                .message(),
            "data[2] (id 'b'): field 'e': shape [1000000000] of float32 needs 4000000000 bytes, "
            "over the 67108864-byte message cap");
  EXPECT_TRUE(JsonDoc(R"({"e": {"dtype": "<f4", "shape": [2, 2], "data": [1, 2, 3, 4]}})").ok());
  EXPECT_TRUE(JsonDoc(R"({"e": [[1, 2], [3, 4]]})").ok());
}

// Found by the json_docs fuzzer (tests/fuzz/corpus/json_docs/
// regress_uint8_out_of_range.json): 950 as uint8 was an out-of-range
// float-to-integer cast, undefined behaviour.
TEST(HostileInputTest, JsonTensorValuesMustFitTheirDtype) {
  EXPECT_EQ(JsonDoc(R"({"id": "u", "e": {"dtype": "|u1", "data": [1, 950]}})").message(),
            "data[2] (id 'u'): field 'e': value 950 does not fit uint8");
  EXPECT_EQ(JsonDoc(R"({"e": {"dtype": "uint32", "data": [-1]}})").message(),
            "data[2] (no id): field 'e': value -1 does not fit uint32");
  EXPECT_EQ(JsonDoc(R"({"e": {"dtype": "int8", "data": [1.5]}})").message(),
            "data[2] (no id): field 'e': value 1.5 does not fit int8");
  EXPECT_EQ(JsonDoc(R"({"e": {"dtype": "int64", "data": [9.3e18]}})").message(),
            "data[2] (no id): field 'e': value 9.3e+18 does not fit int64");
  EXPECT_EQ(JsonDoc(R"({"e": {"dtype": "int64", "data": [18446744073709551615]}})").message(),
            "data[2] (no id): field 'e': value 18446744073709551615 does not fit int64");
  EXPECT_EQ(JsonDoc(R"({"e": [1e300]})").message(),
            "data[2] (no id): field 'e': value 1e+300 does not fit float32");
  // The edges of each range, and whole floats, fit.
  EXPECT_TRUE(JsonDoc(R"({"e": {"dtype": "|u1", "data": [0, 255, 7.0]}})").ok());
  EXPECT_TRUE(JsonDoc(R"({"e": {"dtype": "|i1", "data": [-128, 127]}})").ok());
  EXPECT_TRUE(JsonDoc(R"({"e": {"dtype": "<u8", "data": [0, 18446744073709551615]}})").ok());
  EXPECT_TRUE(
      JsonDoc(R"({"e": {"dtype": "<i8", "data": [-9223372036854775808, 9223372036854775807]}})")
          .ok());
  EXPECT_TRUE(JsonDoc(R"({"e": {"dtype": "float64", "data": [1e300, -2.5]}})").ok());
}

// Found by the json_docs fuzzer in a CI run (tests/fuzz/corpus/json_docs/
// regress_exec_endpoint_object): a non-string execEndpoint or
// targetExecutor made nlohmann::json throw out of the HTTP handler.
TEST(HostileInputTest, HttpBodyKeysOfTheWrongTypeAreRefused) {
  auto parse = [](const std::string& body, const std::string& endpoint) {
    jina::DataRequestProto request;
    bool single = false;
    return internal::ParseHttpDataRequest(body, endpoint, std::uint64_t{1} << 20, &request,
                                          &single);
  };
  EXPECT_EQ(parse(R"({"execEndpoint": {"id": "x"}})", "").message(),
            "execEndpoint must be a string, got object");
  EXPECT_EQ(parse(R"({"targetExecutor": [1], "data": []})", "/encode").message(),
            "targetExecutor must be a string, got array");
  EXPECT_TRUE(parse(R"({"execEndpoint": null, "data": [{"text": "a"}]})", "").ok());
  EXPECT_TRUE(parse(R"({"execEndpoint": "/x", "targetExecutor": "e"})", "").ok());
}

// ---- the worker's gRPC face, in-process ----------------------------------------

class InProcessWorker : public ::testing::Test {
 protected:
  static constexpr std::int64_t kCap = 1 << 20;

  void SetUp() override {
    ExecutorContext context;
    context.name = "big";
    auto handler = RequestHandler::Create("BigReplyUnitExec", context, "big/rep-0");
    ASSERT_TRUE(handler.ok()) << handler.status();
    handler_ = std::move(handler).value();
    auto server = WorkerServer::Start(handler_.get(), "127.0.0.1", 0, kCap);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    channel_ = MakeChannel("127.0.0.1:" + std::to_string(server_->port()), 64 << 20);
  }
  void TearDown() override {
    if (server_) {
      server_->Shutdown(std::chrono::milliseconds(0));
    }
  }

  // Calls process_single_data with `bytes_out` as the reply tensor size.
  grpc::Status Grow(double bytes_out, jina::DataRequestProto* reply, bool* is_error) {
    jina::DataRequestProto request;
    request.mutable_header()->set_request_id("r");
    request.mutable_header()->set_exec_endpoint("/grow");
    (*request.mutable_parameters()->mutable_fields())["bytes"].set_number_value(bytes_out);
    DocListToProto(DocList{Doc("a")}, request.mutable_data()->mutable_docs());
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stub = jina::JinaSingleDataRequestRPC::NewStub(channel_);
    grpc::Status status = stub->process_single_data(&context, request, reply);
    auto trailers = context.GetServerTrailingMetadata();
    auto it = trailers.find("is-error");
    *is_error = it != trailers.end() && it->second == "true";
    return status;
  }

  std::unique_ptr<RequestHandler> handler_;
  std::unique_ptr<WorkerServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(InProcessWorker, GarbageBytesAreInvalidArgument) {
  grpc::GenericStub stub(channel_);
  std::string garbage = "\xff\xff\xff\xff garbage \x01\x02";
  grpc::Slice slice(garbage);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer reply;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&context, "/jina.JinaSingleDataRequestRPC/process_single_data",
                 grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
                   std::lock_guard lock(mutex);
                   status = std::move(s);
                   done = true;
                   done_cv.notify_all();
                 });
  std::unique_lock lock(mutex);
  ASSERT_TRUE(done_cv.wait_for(lock, std::chrono::seconds(10), [&] { return done; }));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("process_single_data: the request is not a serialized "
                        "jina.DataRequestProto"));
}

TEST_F(InProcessWorker, ReplyOverTheCapIsAnErrorReplyAndTheWorkerKeepsServing) {
  jina::DataRequestProto reply;
  bool is_error = false;
  grpc::Status status = Grow(2 << 20, &reply, &is_error);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(is_error);
  EXPECT_EQ(reply.header().status().code(), jina::StatusProto::ERROR);
  EXPECT_THAT(reply.header().status().description(),
              AllOf(StartsWith("executor 'BigReplyUnitExec' (big/rep-0) endpoint '/grow': reply "
                               "of "),
                    HasSubstr(" bytes exceeds the 1048576-byte message cap")));
  EXPECT_EQ(reply.header().status().exception().name(), "ReplyTooLarge");
  EXPECT_EQ(reply.data().docs().docs_size(), 0);

  // Still serving, and a reply under the cap goes through.
  status = Grow(1000, &reply, &is_error);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(is_error);
  ASSERT_EQ(reply.data().docs().docs_size(), 1);
}

TEST_F(InProcessWorker, BadDocumentIsInvalidArgumentNotAnErrorReply) {
  jina::DataRequestProto request;
  request.mutable_header()->set_exec_endpoint("/grow");
  SetDense(AddTensorDoc(request.mutable_data()->mutable_docs(), "abc", "embedding"), "<f4",
           {1000000000}, "");
  jina::DataRequestProto reply;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stub = jina::JinaSingleDataRequestRPC::NewStub(channel_);
  grpc::Status status = stub->process_single_data(&context, request, &reply);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "executor 'BigReplyUnitExec' (big/rep-0) endpoint '/grow': docs[0] (id 'abc'): "
            "field 'embedding': shape [1000000000] of float32 needs 4000000000 bytes, over the "
            "1048576-byte message cap");
}

}  // namespace
}  // namespace gantry::internal
