// gantry_loadgen: a perf_analyzer-style load generator for Jina-protocol
// gateways and workers, Gantry's and Jina's alike (same wire protocol).
//
// Each of N client threads keeps exactly one request in flight (fixed
// concurrency): unary /jina.JinaSingleDataRequestRPC/process_single_data, or
// one /jina.JinaRPC/Call stream per thread. Measurement windows are repeated
// until the last `--stable` windows agree on throughput within `--stable-pct`
// or `--max-windows` is reached. Latency percentiles come from those last
// windows. Requests go through a generic stub on raw bytes, so the client's
// own serialize/deserialize time is timed apart from the network and server
// time. `--mode post` instead times gantry::Client::Post of a whole job
// (e.g. 10,000 docs at request_size 32), the seed job's shape.
//
// `--mode http` posts the bytes of `--http-body-file` (application/json) to
// `--http-path` over HTTP/1.1, each thread on its own keep-alive
// cpp-httplib client (a new connection only where the server closes one).
// Only a 200 (whose body contains `--http-expect`, if given) counts; any
// other status or a connection error stops the run with exit status 1 and
// the first error on stderr: a figure of failed requests is no figure.
//
// One JSON object per measured point is printed on a line starting with
// "RESULT " (and appended to --json FILE), for the bench/peer harness.
#include <gantry/client.h>
#include <gantry/document.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/doc_proto.h"
#include "jina/jina.pb.h"

namespace gantry_bench {
namespace {

using Clock = std::chrono::steady_clock;
using Nanos = std::int64_t;

constexpr char kUnaryMethod[] = "/jina.JinaSingleDataRequestRPC/process_single_data";
constexpr char kStreamMethod[] = "/jina.JinaRPC/Call";

struct Options {
  std::string address;
  std::string mode = "unary";  // unary, stream, post, probe, http
  std::vector<int> concurrency{1};
  int docs_per_request = 1;
  std::string endpoint = "/default";
  int window_ms = 2000;
  int warmup_ms = 500;
  int max_windows = 10;
  int stable = 3;
  double stable_pct = 10.0;
  int timeout_ms = 10000;
  int total_docs = 10000;      // post mode
  int request_size = 32;       // post mode
  int prefetch = 64;           // post mode
  std::int64_t since_ns = 0;   // probe mode: CLOCK_REALTIME of the server's start
  std::string http_path;       // http mode: POST target, e.g. /post
  std::string http_body_file;  // http mode: the request body, sent as application/json
  std::string http_body;       // ...its contents, read once before the threads start
  std::string http_expect;     // http mode: a 200 must contain this, if not empty
  std::string label;
  std::string json_file;
};

// One completed request, as seen by a client thread.
struct Sample {
  Nanos latency = 0;      // serialize + send + wait + deserialize
  Nanos serialize = 0;    // DocList -> DataRequestProto -> bytes
  Nanos deserialize = 0;  // bytes -> DataRequestProto -> DocList
  Nanos gateway = -1;     // the gateway's own route span, when it stamps one
  Nanos handler = -1;     // the executor's route span, when it stamps one
};

// Samples of one thread; the main thread swaps them out at each window end.
struct ThreadSamples {
  std::mutex mutex;
  std::vector<Sample> samples;
  std::uint64_t errors = 0;
  std::string first_error;
};

Nanos SpanNanos(const google::protobuf::Timestamp& from, const google::protobuf::Timestamp& to) {
  return (to.seconds() - from.seconds()) * 1000000000LL + (to.nanos() - from.nanos());
}

bool Stamped(const google::protobuf::Timestamp& t) { return t.seconds() != 0 || t.nanos() != 0; }

gantry::DocList MakeDocs(int n) {
  gantry::DocList docs;
  for (int i = 0; i < n; ++i) {
    docs.emplace_back("benchmark document number " + std::to_string(i));
  }
  return docs;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // Every client thread gets its own TCP connection, as independent
  // perf_analyzer clients would; otherwise all threads share one HTTP/2
  // connection and measure its multiplexing instead of the server.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

// Builds and serializes one request, the work any client does per call.
grpc::ByteBuffer BuildRequest(const gantry::DocList& docs, const std::string& endpoint,
                              const std::string& request_id) {
  jina::DataRequestProto request;
  request.mutable_header()->set_request_id(request_id);
  request.mutable_header()->set_exec_endpoint(endpoint);
  gantry::internal::DocListToProto(docs, request.mutable_data()->mutable_docs());
  grpc::Slice slice(request.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

// Parses a reply down to documents; returns an error text or "".
std::string ParseReply(grpc::ByteBuffer* bytes, std::size_t expected_docs, Sample* sample) {
  jina::DataRequestProto reply;
  grpc::ProtoBufferReader reader(bytes);
  if (!reply.ParseFromZeroCopyStream(&reader)) {
    return "reply is not a DataRequestProto";
  }
  if (reply.header().status().code() == jina::StatusProto::ERROR) {
    return "executor error: " + reply.header().status().description();
  }
  gantry::StatusOr<gantry::DocList> docs =
      reply.data().has_docs_bytes()
          ? gantry::internal::DocListFromBytes(reply.data().docs_bytes())
          : gantry::internal::TakeDocListFromProto(reply.mutable_data()->mutable_docs());
  if (!docs.ok()) {
    return "bad documents in reply: " + docs.status().ToString();
  }
  if (docs->size() != expected_docs) {
    return "reply has " + std::to_string(docs->size()) + " documents, sent " +
           std::to_string(expected_docs);
  }
  for (const auto& route : reply.routes()) {
    if (!Stamped(route.start_time()) || !Stamped(route.end_time())) {
      continue;
    }
    Nanos span = SpanNanos(route.start_time(), route.end_time());
    if (route.executor() == "gateway") {
      sample->gateway = span;
    } else {
      sample->handler = span;
    }
  }
  return "";
}

// Waits for the one operation pending on `cq`; false if it failed.
bool Await(grpc::CompletionQueue* cq) {
  void* tag = nullptr;
  bool ok = false;
  return cq->Next(&tag, &ok) && ok;
}

// Sends requests back to back until `stop`, recording each into `out`.
void ClientLoop(const Options& options, int thread_index, const std::atomic<bool>* stop,
                ThreadSamples* out) {
  auto record_error = [out](const std::string& message) {
    std::lock_guard lock(out->mutex);
    if (out->errors++ == 0) {
      out->first_error = message;
    }
  };
  std::shared_ptr<grpc::Channel> channel = MakeChannel(options.address);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 std::chrono::milliseconds(options.timeout_ms))) {
    record_error("cannot connect to " + options.address);
    return;
  }
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  const gantry::DocList docs = MakeDocs(options.docs_per_request);
  const std::string id_prefix = "lg" + std::to_string(thread_index) + "-";
  const bool streaming = options.mode == "stream";

  // Stream mode: one Call stream for the thread's whole life.
  grpc::ClientContext stream_context;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> stream;
  if (streaming) {
    stream = stub.PrepareCall(&stream_context, kStreamMethod, &cq);
    stream->StartCall(nullptr);
    if (!Await(&cq)) {
      record_error("cannot open a Call stream to " + options.address);
      return;
    }
  }

  // Bounded by `stop`, which the main thread always sets after at most
  // max_windows windows; each call is bounded by its deadline.
  for (std::uint64_t n = 0; !stop->load(std::memory_order_relaxed); ++n) {
    Sample sample;
    Clock::time_point t0 = Clock::now();
    grpc::ByteBuffer request = BuildRequest(docs, options.endpoint, id_prefix + std::to_string(n));
    Clock::time_point t1 = Clock::now();
    grpc::ByteBuffer reply;
    std::string error;
    if (streaming) {
      stream->Write(request, nullptr);
      if (!Await(&cq)) {
        record_error("Call stream write failed");
        return;
      }
      stream->Read(&reply, nullptr);
      if (!Await(&cq)) {
        record_error("Call stream ended early");
        return;
      }
    } else {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(options.timeout_ms));
      grpc::Status status;
      auto call = stub.PrepareUnaryCall(&context, kUnaryMethod, request, &cq);
      call->StartCall();
      call->Finish(&reply, &status, nullptr);
      Await(&cq);
      if (!status.ok()) {
        error = "gRPC " + std::to_string(status.error_code()) + ": " + status.error_message();
      }
    }
    Clock::time_point t2 = Clock::now();
    if (error.empty()) {
      error = ParseReply(&reply, docs.size(), &sample);
    }
    Clock::time_point t3 = Clock::now();
    if (!error.empty()) {
      record_error(error);
      continue;
    }
    sample.serialize = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
    sample.deserialize = std::chrono::duration_cast<std::chrono::nanoseconds>(t3 - t2).count();
    sample.latency = std::chrono::duration_cast<std::chrono::nanoseconds>(t3 - t0).count();
    std::lock_guard lock(out->mutex);
    out->samples.push_back(sample);
  }
  if (streaming) {
    stream->WritesDone(nullptr);
    Await(&cq);
    grpc::Status status;
    stream->Finish(&status, nullptr);
    Await(&cq);
  }
  cq.Shutdown();
}

// HTTP mode: POSTs the same JSON body back to back on one keep-alive
// connection until `stop`. The first failure ends the thread; the main
// thread sees the error at the next window and stops the run.
void HttpClientLoop(const Options& options, const std::atomic<bool>* stop, ThreadSamples* out) {
  auto record_error = [out](const std::string& message) {
    std::lock_guard lock(out->mutex);
    if (out->errors++ == 0) {
      out->first_error = message;
    }
  };
  const bool has_scheme = options.address.rfind("http://", 0) == 0;
  httplib::Client client(has_scheme ? options.address : "http://" + options.address);
  client.set_keep_alive(true);
  // Nagle off on our side too: cpp-httplib writes headers and body apart.
  client.set_tcp_nodelay(true);
  const auto timeout = std::chrono::milliseconds(options.timeout_ms);
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  client.set_write_timeout(timeout);
  // Bounded by `stop`, which the main thread always sets after at most
  // max_windows windows; each request is bounded by the timeouts above.
  while (!stop->load(std::memory_order_relaxed)) {
    Clock::time_point t0 = Clock::now();
    httplib::Result result =
        client.Post(options.http_path.c_str(), options.http_body, "application/json");
    Clock::time_point t1 = Clock::now();
    if (!result) {
      record_error("POST " + options.http_path + " to " + options.address +
                   ": connection error (cpp-httplib: " + httplib::to_string(result.error()) + ")");
      return;
    }
    if (result->status != 200) {
      record_error("POST " + options.http_path + ": HTTP " + std::to_string(result->status) + ": " +
                   result->body.substr(0, 300));
      return;
    }
    if (!options.http_expect.empty() &&
        result->body.find(options.http_expect) == std::string::npos) {
      record_error("POST " + options.http_path + ": a 200 without \"" + options.http_expect +
                   "\": " + result->body.substr(0, 300));
      return;
    }
    Sample sample;
    sample.latency = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
    std::lock_guard lock(out->mutex);
    out->samples.push_back(sample);
  }
  client.stop();
}

double Percentile(std::vector<Nanos>& values, double p) {
  if (values.empty()) {
    return 0;
  }
  std::size_t k = static_cast<std::size_t>(std::ceil(p / 100.0 * values.size()));
  k = std::clamp<std::size_t>(k, 1, values.size()) - 1;
  std::nth_element(values.begin(), values.begin() + k, values.end());
  return values[k] / 1000.0;  // microseconds
}

double MeanMicros(const std::vector<Sample>& samples, Nanos Sample::*field) {
  double sum = 0;
  std::size_t n = 0;
  for (const Sample& s : samples) {
    if (s.*field >= 0) {
      sum += s.*field;
      ++n;
    }
  }
  return n == 0 ? -1 : sum / n / 1000.0;
}

void Emit(const Options& options, const nlohmann::json& result) {
  std::cout << "RESULT " << result.dump() << std::endl;
  if (!options.json_file.empty()) {
    std::ofstream file(options.json_file, std::ios::app);
    file << result.dump() << "\n";
  }
}

// Runs one concurrency level; returns false on a failure worth exit 1.
bool MeasureConcurrency(const Options& options, int concurrency) {
  // HTTP mode fails on any error; a thread stops at its first.
  const bool http = options.mode == "http";
  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<ThreadSamples>> per_thread;
  std::vector<std::thread> threads;
  for (int i = 0; i < concurrency; ++i) {
    per_thread.push_back(std::make_unique<ThreadSamples>());
    if (http) {
      threads.emplace_back(HttpClientLoop, std::cref(options), &stop, per_thread.back().get());
    } else {
      threads.emplace_back(ClientLoop, std::cref(options), i, &stop, per_thread.back().get());
    }
  }
  auto drain = [&](std::uint64_t* errors, std::string* first_error) {
    std::vector<Sample> all;
    for (auto& t : per_thread) {
      std::lock_guard lock(t->mutex);
      all.insert(all.end(), t->samples.begin(), t->samples.end());
      t->samples.clear();
      *errors += t->errors;
      t->errors = 0;
      if (first_error->empty()) {
        *first_error = t->first_error;
      }
    }
    return all;
  };

  std::uint64_t errors = 0;
  std::string first_error;
  std::this_thread::sleep_for(std::chrono::milliseconds(options.warmup_ms));
  drain(&errors, &first_error);  // warm-up samples are dropped
  if (http && errors > 0) {
    stop = true;
    for (auto& t : threads) {
      t.join();
    }
    std::fprintf(stderr, "%s c=%d: FAILED in warm-up, %llu errors: %s\n", options.label.c_str(),
                 concurrency, static_cast<unsigned long long>(errors), first_error.c_str());
    return false;
  }

  struct Window {
    std::vector<Sample> samples;
    double seconds;
  };
  std::vector<Window> windows;
  bool stable = false;
  for (int w = 0; w < options.max_windows && !stable && !(http && errors > 0); ++w) {
    Clock::time_point start = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(options.window_ms));
    std::vector<Sample> samples = drain(&errors, &first_error);
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    windows.push_back({std::move(samples), seconds});
    std::fprintf(stderr, "  [%s c=%d] window %d: %.1f req/s\n", options.label.c_str(), concurrency,
                 w + 1, windows.back().samples.size() / seconds);
    if (static_cast<int>(windows.size()) >= options.stable) {
      double lo = 1e300;
      double hi = 0;
      double sum = 0;
      for (std::size_t i = windows.size() - options.stable; i < windows.size(); ++i) {
        double rate = windows[i].samples.size() / windows[i].seconds;
        lo = std::min(lo, rate);
        hi = std::max(hi, rate);
        sum += rate;
      }
      double mean = sum / options.stable;
      stable = mean > 0 && (hi - mean) <= mean * options.stable_pct / 100.0 &&
               (mean - lo) <= mean * options.stable_pct / 100.0;
    }
  }
  stop = true;
  for (auto& t : threads) {
    t.join();
  }

  std::size_t used = std::min<std::size_t>(windows.size(), options.stable);
  std::vector<Sample> samples;
  double seconds = 0;
  for (std::size_t i = windows.size() - used; i < windows.size(); ++i) {
    samples.insert(samples.end(), windows[i].samples.begin(), windows[i].samples.end());
    seconds += windows[i].seconds;
  }
  std::vector<Nanos> latencies;
  latencies.reserve(samples.size());
  for (const Sample& s : samples) {
    latencies.push_back(s.latency);
  }
  double rps = seconds > 0 ? samples.size() / seconds : 0;
  nlohmann::json result = {
      {"label", options.label},
      {"address", options.address},
      {"mode", options.mode},
      {"concurrency", concurrency},
      {"http_path", options.http_path},
      {"docs_per_request", options.docs_per_request},
      {"requests", samples.size()},
      {"seconds", seconds},
      {"windows", windows.size()},
      {"stable", stable},
      {"errors", errors},
      {"req_per_s", rps},
      {"docs_per_s", rps * options.docs_per_request},
      {"p50_us", Percentile(latencies, 50)},
      {"p90_us", Percentile(latencies, 90)},
      {"p99_us", Percentile(latencies, 99)},
      {"mean_us", MeanMicros(samples, &Sample::latency)},
      {"client_serialize_us", MeanMicros(samples, &Sample::serialize)},
      {"client_deserialize_us", MeanMicros(samples, &Sample::deserialize)},
      {"gateway_route_us", MeanMicros(samples, &Sample::gateway)},
      {"handler_route_us", MeanMicros(samples, &Sample::handler)},
  };
  if (errors > 0) {
    result["first_error"] = first_error;
  }
  Emit(options, result);
  std::fprintf(stderr,
               "%s c=%d: %.1f req/s, p50 %.1f us, p90 %.1f us, p99 %.1f us, client ser %.1f us "
               "deser %.1f us%s, errors %llu%s%s\n",
               options.label.c_str(), concurrency, rps, result["p50_us"].get<double>(),
               result["p90_us"].get<double>(), result["p99_us"].get<double>(),
               result["client_serialize_us"].get<double>(),
               result["client_deserialize_us"].get<double>(), stable ? "" : " (NOT stable)",
               static_cast<unsigned long long>(errors), errors ? ": " : "", first_error.c_str());
  if (http && errors > 0) {
    std::fprintf(stderr, "%s c=%d: FAILED, %llu errors: %s\n", options.label.c_str(), concurrency,
                 static_cast<unsigned long long>(errors), first_error.c_str());
    return false;
  }
  return !samples.empty();
}

// Cold start: one single-document request on a fresh connection every
// millisecond or so until one succeeds; reports the time since `since_ns`
// (taken by the harness just before it spawned the server).
bool MeasureProbe(const Options& options) {
  const gantry::DocList docs = MakeDocs(1);
  Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(options.timeout_ms);
  std::string last_error = "no attempt";
  for (int attempt = 0; attempt < 1000000 && Clock::now() < deadline; ++attempt) {
    // A fresh channel each time: a channel that failed to connect waits out
    // gRPC's reconnect backoff (1 s and up), which would be measured instead.
    grpc::GenericStub stub(MakeChannel(options.address));
    grpc::CompletionQueue cq;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(1000));
    grpc::ByteBuffer reply;
    grpc::Status status;
    auto call = stub.PrepareUnaryCall(&context, kUnaryMethod,
                                      BuildRequest(docs, options.endpoint, "probe"), &cq);
    call->StartCall();
    call->Finish(&reply, &status, nullptr);
    Await(&cq);
    cq.Shutdown();
    Sample unused;
    last_error = status.ok() ? ParseReply(&reply, 1, &unused) : status.error_message();
    if (last_error.empty()) {
      std::int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
      double ms = (now_ns - options.since_ns) / 1e6;
      Emit(options, {{"label", options.label},
                     {"mode", "probe"},
                     {"address", options.address},
                     {"attempts", attempt + 1},
                     {"cold_start_ms", ms}});
      std::fprintf(stderr, "%s: first reply %.1f ms after start (%d attempts)\n",
                   options.label.c_str(), ms, attempt + 1);
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::fprintf(stderr, "%s: no successful reply within %d ms: %s\n", options.label.c_str(),
               options.timeout_ms, last_error.c_str());
  return false;
}

// The seed job's shape: whole Client::Post jobs, back to back.
bool MeasurePost(const Options& options) {
  gantry::Client client(options.address);
  const gantry::DocList docs = MakeDocs(options.total_docs);
  gantry::PostOptions post;
  post.request_size = options.request_size;
  post.prefetch = options.prefetch;
  post.timeout = std::chrono::milliseconds(options.timeout_ms * 6);
  // One warm-up job, then up to max_windows jobs or window_ms * max_windows.
  if (auto warm = client.Post(options.endpoint, docs, post); !warm.ok()) {
    std::fprintf(stderr, "post failed: %s\n", warm.status().ToString().c_str());
    return false;
  }
  std::vector<Nanos> durations;
  Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(options.window_ms * options.max_windows);
  for (int i = 0; i < options.max_windows && (i < 1 || Clock::now() < deadline); ++i) {
    Clock::time_point t0 = Clock::now();
    auto out = client.Post(options.endpoint, docs, post);
    Clock::time_point t1 = Clock::now();
    if (!out.ok() || out->size() != docs.size()) {
      std::fprintf(stderr, "post failed: %s\n",
                   out.ok() ? "wrong document count" : out.status().ToString().c_str());
      return false;
    }
    durations.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
  }
  std::vector<Nanos> sorted = durations;
  double median_s = Percentile(sorted, 50) / 1e6;
  double requests = std::ceil(static_cast<double>(options.total_docs) / options.request_size);
  nlohmann::json result = {
      {"label", options.label},
      {"address", options.address},
      {"mode", "post"},
      {"concurrency", 1},
      {"total_docs", options.total_docs},
      {"request_size", options.request_size},
      {"prefetch", options.prefetch},
      {"jobs", durations.size()},
      {"job_p50_s", median_s},
      {"docs_per_s", options.total_docs / median_s},
      {"req_per_s", requests / median_s},
  };
  Emit(options, result);
  std::fprintf(stderr, "%s post %d docs @ %d: median %.3f s, %.0f docs/s\n", options.label.c_str(),
               options.total_docs, options.request_size, median_s, options.total_docs / median_s);
  return true;
}

void Usage() {
  std::fprintf(stderr,
               "usage: gantry_loadgen --address HOST:PORT [--mode unary|stream|post|probe|http]\n"
               "  [--concurrency 1,4,16] [--docs-per-request N] [--endpoint /default]\n"
               "  [--window-ms 2000] [--warmup-ms 500] [--max-windows 10] [--stable 3]\n"
               "  [--stable-pct 10] [--timeout-ms 10000] [--total-docs 10000]\n"
               "  [--request-size 32] [--prefetch 64] [--since-ns EPOCH_NS] [--label NAME]\n"
               "  [--json FILE] [--http-path /post --http-body-file FILE [--http-expect TEXT]]\n");
}

bool ParseArgs(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h" || i + 1 >= argc) {
      return false;
    }
    std::string value = argv[++i];
    auto number = [&value] { return std::atoi(value.c_str()); };
    if (flag == "--address") {
      options->address = value;
    } else if (flag == "--mode") {
      options->mode = value;
    } else if (flag == "--concurrency") {
      options->concurrency.clear();
      for (std::size_t pos = 0; pos <= value.size();) {
        std::size_t comma = std::min(value.find(',', pos), value.size());
        options->concurrency.push_back(std::atoi(value.substr(pos, comma - pos).c_str()));
        pos = comma + 1;
      }
    } else if (flag == "--docs-per-request") {
      options->docs_per_request = number();
    } else if (flag == "--endpoint") {
      options->endpoint = value;
    } else if (flag == "--window-ms") {
      options->window_ms = number();
    } else if (flag == "--warmup-ms") {
      options->warmup_ms = number();
    } else if (flag == "--max-windows") {
      options->max_windows = number();
    } else if (flag == "--stable") {
      options->stable = number();
    } else if (flag == "--stable-pct") {
      options->stable_pct = std::atof(value.c_str());
    } else if (flag == "--timeout-ms") {
      options->timeout_ms = number();
    } else if (flag == "--total-docs") {
      options->total_docs = number();
    } else if (flag == "--request-size") {
      options->request_size = number();
    } else if (flag == "--prefetch") {
      options->prefetch = number();
    } else if (flag == "--since-ns") {
      options->since_ns = std::atoll(value.c_str());
    } else if (flag == "--http-path") {
      options->http_path = value;
    } else if (flag == "--http-body-file") {
      options->http_body_file = value;
    } else if (flag == "--http-expect") {
      options->http_expect = value;
    } else if (flag == "--label") {
      options->label = value;
    } else if (flag == "--json") {
      options->json_file = value;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return false;
    }
  }
  bool levels_ok = !options->concurrency.empty() &&
                   std::all_of(options->concurrency.begin(), options->concurrency.end(),
                               [](int c) { return c > 0 && c <= 1024; });
  if (options->address.empty() || !levels_ok || options->docs_per_request < 1 ||
      options->window_ms < 1 || options->max_windows < 1 || options->stable < 1 ||
      options->total_docs < 1 || options->request_size < 1 ||
      (options->mode != "unary" && options->mode != "stream" && options->mode != "post" &&
       options->mode != "probe" && options->mode != "http")) {
    return false;
  }
  if (options->mode == "http") {
    if (options->http_path.empty() || options->http_path[0] != '/' ||
        options->http_body_file.empty()) {
      std::fprintf(stderr, "--mode http needs --http-path /PATH and --http-body-file FILE\n");
      return false;
    }
    std::ifstream body(options->http_body_file, std::ios::binary);
    if (!body) {
      std::fprintf(stderr, "cannot read --http-body-file %s\n", options->http_body_file.c_str());
      return false;
    }
    options->http_body.assign(std::istreambuf_iterator<char>(body),
                              std::istreambuf_iterator<char>());
  }
  if (options->label.empty()) {
    options->label = options->address;
  }
  return true;
}

}  // namespace
}  // namespace gantry_bench

int main(int argc, char** argv) try {
  gantry_bench::Options options;
  if (!gantry_bench::ParseArgs(argc, argv, &options)) {
    gantry_bench::Usage();
    return 2;
  }
  if (options.mode == "post") {
    return gantry_bench::MeasurePost(options) ? 0 : 1;
  }
  if (options.mode == "probe") {
    return gantry_bench::MeasureProbe(options) ? 0 : 1;
  }
  bool ok = true;
  for (int c : options.concurrency) {
    ok = gantry_bench::MeasureConcurrency(options, c) && ok;
  }
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gantry_loadgen: %s\n", e.what());
  return 1;
}
