// gantry_soak: keeps a running 2-replica deployment (the `gantry deployment`
// process named by --gateway-pid) under mixed load for --seconds: good
// requests, bad ones (unknown endpoint, over max_message_bytes, a 1 ms
// deadline, undecodable bytes) and a SIGKILL of replica rep-1 every
// --kill-every seconds. It reports requests served, errors by code, how long
// each killed replica took to be replaced, and the RSS of every process
// (gateway, the never-killed rep-0, the current rep-1) at start, every
// --sample-every seconds, and at the end. scripts/soak.sh runs it.
//
// Exit status: 0 when every good request succeeded and every killed replica
// was replaced; 1 otherwise; 2 on bad arguments.
#include <gantry/client.h>
#include <gantry/document.h>
#include <gantry/status.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace gantry_bench {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

struct Options {
  std::string address;
  pid_t gateway_pid = 0;
  int seconds = 600;
  int kill_every_s = 20;
  int sample_every_s = 30;
  int good_threads = 4;
};

// ---- /proc ------------------------------------------------------------------

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Resident set size in KiB, or -1 when the process is gone.
std::int64_t RssKib(pid_t pid) {
  std::istringstream status(ReadWhole("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("VmRSS:")) {
      return std::strtoll(line.c_str() + 6, nullptr, 10);
    }
  }
  return -1;
}

// The live child of `parent` whose command line names replica `replica`
// ("rep-1"), or 0.
pid_t ReplicaPid(pid_t parent, const std::string& replica) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) {
      continue;
    }
    // /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces.
    std::string stat = ReadWhole(entry.path().string() + "/stat");
    std::size_t close = stat.rfind(')');
    if (close == std::string::npos) {
      continue;
    }
    char state = 0;
    long ppid = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %ld", &state, &ppid) != 2 || ppid != parent ||
        state == 'Z') {
      continue;
    }
    if (ReadWhole(entry.path().string() + "/cmdline").find("/" + replica) != std::string::npos) {
      return static_cast<pid_t>(std::stol(name));
    }
  }
  return 0;
}

// ---- counters ---------------------------------------------------------------

class Tally {
 public:
  void Add(const std::string& key) {
    std::lock_guard lock(mutex_);
    ++counts_[key];
  }
  void Note(const std::string& message) {
    std::lock_guard lock(mutex_);
    if (samples_.size() < 5) {
      samples_.push_back(message);
    }
  }
  std::map<std::string, std::int64_t> counts() const {
    std::lock_guard lock(mutex_);
    return counts_;
  }
  std::vector<std::string> samples() const {
    std::lock_guard lock(mutex_);
    return samples_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::int64_t> counts_;
  std::vector<std::string> samples_;
};

std::string CodeOf(const gantry::Status& status) {
  return std::string(gantry::StatusCodeName(status.code()));
}

// ---- load -------------------------------------------------------------------

void GoodLoop(const Options& options, int thread, Clock::time_point until, Tally& good,
              std::atomic<std::int64_t>& docs_ok) {
  gantry::Client client(options.address);
  for (std::int64_t round = 0; Clock::now() < until; ++round) {
    gantry::DocList docs;
    for (int i = 0; i < 16; ++i) {
      docs.emplace_back("soak " + std::to_string(thread) + "/" + std::to_string(round) + "/" +
                        std::to_string(i));
    }
    auto out = client.Post("/encode", docs, {.request_size = 4, .timeout = Ms(30000)});
    if (!out.ok()) {
      good.Add(CodeOf(out.status()));
      good.Note(out.status().ToString());
      continue;
    }
    bool same = out->size() == docs.size();
    for (std::size_t i = 0; same && i < docs.size(); ++i) {
      same = (*out)[i].id() == docs[i].id() && (*out)[i].embedding() != nullptr;
    }
    if (!same) {
      good.Add("WRONG_REPLY");
      continue;
    }
    good.Add("OK");
    docs_ok.fetch_add(static_cast<std::int64_t>(docs.size()));
  }
}

// Undecodable bytes straight to the gateway's unary data method.
gantry::Status PostGarbage(grpc::GenericStub& stub) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + Ms(10000));
  std::string junk = "\xff\xfe this is not a DataRequestProto \x01\x02\x03";
  grpc::Slice slice(junk);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer reply;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/jina.JinaSingleDataRequestRPC/process_single_data",
                 grpc::StubOptions(), &request, &reply,
                 [&done](const grpc::Status& status) { done.set_value(status); });
  grpc::Status status = done.get_future().get();
  return status.ok() ? gantry::OkStatus()
                     : gantry::Status(static_cast<gantry::StatusCode>(status.error_code()),
                                      status.error_message());
}

void BadLoop(const Options& options, Clock::time_point until, Tally& bad) {
  gantry::Client client(options.address);
  grpc::GenericStub stub(grpc::CreateChannel(options.address, grpc::InsecureChannelCredentials()));
  const std::string big(std::size_t{2} << 20, 'x');  // over the soak's 1 MiB cap
  for (int round = 0; Clock::now() < until; ++round) {
    std::string kind;
    gantry::Status status;
    switch (round % 4) {
      case 0: {
        kind = "unknown_endpoint";
        status =
            client.Post("/no-such-endpoint", {gantry::Doc("x")}, {.timeout = Ms(10000)}).status();
        break;
      }
      case 1: {
        kind = "oversized";
        status = client.Post("/encode", {gantry::Doc(big)}, {.timeout = Ms(10000)}).status();
        break;
      }
      case 2: {
        kind = "deadline_1ms";
        gantry::DocList docs;
        for (int i = 0; i < 64; ++i) {
          docs.emplace_back("late " + std::to_string(i));
        }
        status = client.Post("/encode", docs, {.request_size = 1, .timeout = Ms(1)}).status();
        break;
      }
      default:
        kind = "garbage_bytes";
        status = PostGarbage(stub);
        break;
    }
    bad.Add(kind + " " + (status.ok() ? "OK" : CodeOf(status)));
    std::this_thread::sleep_for(Ms(20));
  }
}

// ---- report -----------------------------------------------------------------

struct RssRow {
  double at_s;
  std::int64_t gateway;
  std::int64_t rep0;
  std::int64_t rep1;
  pid_t rep1_pid;
};

void PrintRow(const RssRow& row) {
  std::printf("  t=%6.0f s  gateway %7lld KiB  rep-0 %7lld KiB  rep-1 (pid %d) %7lld KiB\n",
              row.at_s, static_cast<long long>(row.gateway), static_cast<long long>(row.rep0),
              row.rep1_pid, static_cast<long long>(row.rep1));
  std::fflush(stdout);
}

int Run(const Options& options) {
  const pid_t rep0 = ReplicaPid(options.gateway_pid, "rep-0");
  pid_t rep1 = ReplicaPid(options.gateway_pid, "rep-1");
  if (rep0 == 0 || rep1 == 0) {
    std::fprintf(stderr, "gantry_soak: no rep-0 / rep-1 child of pid %d\n", options.gateway_pid);
    return 1;
  }
  const auto start = Clock::now();
  const auto until = start + std::chrono::seconds(options.seconds);
  auto row_now = [&] {
    pid_t current = ReplicaPid(options.gateway_pid, "rep-1");
    return RssRow{std::chrono::duration<double>(Clock::now() - start).count(),
                  RssKib(options.gateway_pid), RssKib(rep0), current ? RssKib(current) : -1,
                  current};
  };
  std::printf(
      "soak: %d s against %s; gateway pid %d, rep-0 pid %d (never killed), rep-1 "
      "killed every %d s\nRSS:\n",
      options.seconds, options.address.c_str(), options.gateway_pid, rep0, options.kill_every_s);
  std::vector<RssRow> rows{row_now()};
  PrintRow(rows.back());

  Tally good;
  Tally bad;
  std::atomic<std::int64_t> docs_ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < options.good_threads; ++t) {
    threads.emplace_back([&, t] { GoodLoop(options, t, until, good, docs_ok); });
  }
  threads.emplace_back([&] { BadLoop(options, until, bad); });

  // Killer and sampler, on this thread.
  std::vector<double> respawn_ms;
  int kills = 0;
  int not_replaced = 0;
  auto next_kill = start + std::chrono::seconds(options.kill_every_s);
  auto next_sample = start + std::chrono::seconds(options.sample_every_s);
  while (Clock::now() < until) {
    std::this_thread::sleep_for(Ms(100));
    if (Clock::now() >= next_sample) {
      rows.push_back(row_now());
      PrintRow(rows.back());
      next_sample += std::chrono::seconds(options.sample_every_s);
    }
    if (Clock::now() >= next_kill && Clock::now() + Ms(15000) < until) {
      next_kill += std::chrono::seconds(options.kill_every_s);
      rep1 = ReplicaPid(options.gateway_pid, "rep-1");
      if (rep1 == 0 || ::kill(rep1, SIGKILL) != 0) {
        ++not_replaced;
        continue;
      }
      ++kills;
      const auto killed_at = Clock::now();
      pid_t successor = 0;
      while (Clock::now() < killed_at + Ms(15000)) {
        successor = ReplicaPid(options.gateway_pid, "rep-1");
        if (successor != 0 && successor != rep1) {
          break;
        }
        std::this_thread::sleep_for(Ms(10));
      }
      if (successor == 0 || successor == rep1) {
        ++not_replaced;
      } else {
        // A new process; the gateway takes it back once its health check passes.
        respawn_ms.push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - killed_at).count());
      }
    }
  }
  for (std::thread& thread : threads) {
    thread.join();  // each ends at `until`, plus at most one request's timeout
  }
  rows.push_back(row_now());
  PrintRow(rows.back());

  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("\nran %.0f s\n", seconds);
  std::int64_t good_ok = 0;
  std::int64_t good_failed = 0;
  std::printf("good requests (16 docs, request_size 4) by outcome:\n");
  for (const auto& [code, count] : good.counts()) {
    std::printf("  %-20s %lld\n", code.c_str(), static_cast<long long>(count));
    (code == "OK" ? good_ok : good_failed) += count;
  }
  std::printf("  documents served: %lld (%.0f docs/s)\n", static_cast<long long>(docs_ok.load()),
              static_cast<double>(docs_ok.load()) / seconds);
  for (const std::string& sample : good.samples()) {
    std::printf("  failure: %s\n", sample.c_str());
  }
  std::printf("bad requests by kind and code:\n");
  for (const auto& [key, count] : bad.counts()) {
    std::printf("  %-40s %lld\n", key.c_str(), static_cast<long long>(count));
  }
  std::printf("replica kills: %d, replaced: %zu, not replaced within 15 s: %d\n", kills,
              respawn_ms.size(), not_replaced);
  if (!respawn_ms.empty()) {
    std::sort(respawn_ms.begin(), respawn_ms.end());
    std::printf("  kill -> new rep-1 process: min %.0f ms, median %.0f ms, max %.0f ms\n",
                respawn_ms.front(), respawn_ms[respawn_ms.size() / 2], respawn_ms.back());
  }
  // Flatness: the first sample after warm-up against the last one.
  const RssRow& first = rows.size() > 2 ? rows[1] : rows.front();
  const RssRow& last = rows.back();
  auto change = [](std::int64_t a, std::int64_t b) {
    return a > 0 ? 100.0 * static_cast<double>(b - a) / static_cast<double>(a) : 0.0;
  };
  std::printf(
      "RSS start -> end: gateway %lld -> %lld KiB, rep-0 %lld -> %lld KiB, rep-1 (current "
      "incarnation) %lld KiB\n",
      static_cast<long long>(rows.front().gateway), static_cast<long long>(last.gateway),
      static_cast<long long>(rows.front().rep0), static_cast<long long>(last.rep0),
      static_cast<long long>(last.rep1));
  std::printf(
      "RSS after warm-up (t=%.0f s) -> end: gateway %+lld KiB (%+.1f%%), rep-0 %+lld KiB "
      "(%+.1f%%)\n",
      first.at_s, static_cast<long long>(last.gateway - first.gateway),
      change(first.gateway, last.gateway), static_cast<long long>(last.rep0 - first.rep0),
      change(first.rep0, last.rep0));
  const bool passed = good_failed == 0 && good_ok > 0 && not_replaced == 0;
  std::printf("soak %s\n", passed ? "PASSED" : "FAILED");
  return passed ? 0 : 1;
}

int Usage() {
  std::fprintf(stderr,
               "usage: gantry_soak --address H:P --gateway-pid PID [--seconds N] "
               "[--kill-every N] [--sample-every N] [--threads N]\n");
  return 2;
}

}  // namespace
}  // namespace gantry_bench

int main(int argc, char** argv) {
  using gantry_bench::Options;
  Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    std::string value = argv[i + 1];
    if (flag == "--address") {
      options.address = value;
    } else if (flag == "--gateway-pid") {
      options.gateway_pid = static_cast<pid_t>(std::atoi(value.c_str()));
    } else if (flag == "--seconds") {
      options.seconds = std::atoi(value.c_str());
    } else if (flag == "--kill-every") {
      options.kill_every_s = std::atoi(value.c_str());
    } else if (flag == "--sample-every") {
      options.sample_every_s = std::atoi(value.c_str());
    } else if (flag == "--threads") {
      options.good_threads = std::atoi(value.c_str());
    } else {
      return gantry_bench::Usage();
    }
  }
  if (options.address.empty() || options.gateway_pid <= 0 || options.seconds <= 0 ||
      options.kill_every_s <= 0 || options.sample_every_s <= 0 || options.good_threads <= 0 ||
      argc % 2 == 0) {
    return gantry_bench::Usage();
  }
  return gantry_bench::Run(options);
}
