// gantry_soak: keeps a running 2-replica deployment (the `gantry deployment`
// process named by --gateway-pid) under mixed load for --seconds: good
// requests, bad ones (unknown endpoint, over max_message_bytes, a 1 ms
// deadline, undecodable bytes), and every --fault-every seconds a fault, in
// turn: a SIGKILL of replica rep-1, a SIGSTOP of it (a hung replica, for the
// gateway's liveness probe), a poison request (a document that ends the
// replica serving it, SoakExec's "poison"), and a SIGHUP to the CLI (a
// rolling restart of both replicas). It reports requests served, errors by
// code, how long each fault took to be repaired, and the RSS of every
// process (the gateway and the current replicas) at start, every
// --sample-every seconds, and at the end. scripts/soak.sh runs it.
//
// Exit status: 0 when every good request succeeded, every fault asked for
// happened and was repaired within its bound, and no poison request was
// served; 1 otherwise; 2 on bad arguments.
#include <gantry/client.h>
#include <gantry/document.h>
#include <gantry/status.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

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

// What the fault loop does every --fault-every seconds, in turn.
enum class Fault { kKill, kStall, kPoison, kRolling };

struct Options {
  std::string address;
  pid_t gateway_pid = 0;
  int seconds = 600;
  int fault_every_s = 20;
  int sample_every_s = 30;
  int good_threads = 4;
  std::vector<Fault> faults{Fault::kKill, Fault::kStall, Fault::kPoison, Fault::kRolling};
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

// Seconds since process `pid` started, or -1 when it is gone.
double ProcessAgeSeconds(pid_t pid) {
  const std::string stat = ReadWhole("/proc/" + std::to_string(pid) + "/stat");
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) {
    return -1;
  }
  // Fields after "(comm)": state is field 3, starttime field 22.
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) {
      return -1;
    }
  }
  const double started =
      std::strtod(field.c_str(), nullptr) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double uptime = std::strtod(ReadWhole("/proc/uptime").c_str(), nullptr);
  return uptime - started;
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

// ---- faults -----------------------------------------------------------------

const char* FaultName(Fault fault) {
  switch (fault) {
    case Fault::kKill:
      return "kill";
    case Fault::kStall:
      return "stall";
    case Fault::kPoison:
      return "poison";
    case Fault::kRolling:
      return "rolling";
  }
  return "?";
}

// How long a fault may take to be repaired before the soak fails it.
Ms RepairBound(Fault fault) {
  return fault == Fault::kRolling ? Ms(120000) : fault == Fault::kStall ? Ms(30000) : Ms(15000);
}

// Waits until `done()` or `bound` passes; the milliseconds it took, or -1.
template <typename Done>
double WaitUntil(Clock::time_point since, Ms bound, const Done& done) {
  while (Clock::now() < since + bound) {
    if (done()) {
      return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
    }
    std::this_thread::sleep_for(Ms(10));
  }
  return -1;
}

// One fault against the deployment whose CLI is `gateway_pid`, then the
// wait for its repair; the milliseconds the repair took, or -1. `poison`
// gets the poison request's own outcome.
double InjectFault(Fault fault, const Options& options, std::string* poison) {
  const pid_t parent = options.gateway_pid;
  // Faults hit replicas that have finished starting (a replica that hangs
  // while it starts is timeout_ready's to catch, not the liveness probe's):
  // both up for kSettledSeconds, waited for at most 60 s.
  constexpr double kSettledSeconds = 5;
  WaitUntil(Clock::now(), Ms(60000), [&] {
    const pid_t first = ReplicaPid(parent, "rep-0");
    const pid_t second = ReplicaPid(parent, "rep-1");
    return first != 0 && second != 0 && ProcessAgeSeconds(first) >= kSettledSeconds &&
           ProcessAgeSeconds(second) >= kSettledSeconds;
  });
  const pid_t rep0 = ReplicaPid(parent, "rep-0");
  const pid_t rep1 = ReplicaPid(parent, "rep-1");
  const auto since = Clock::now();
  const auto replaced = [&](const char* replica, pid_t old) {
    return [=] {
      const pid_t now = ReplicaPid(parent, replica);
      return now != 0 && now != old;
    };
  };
  switch (fault) {
    case Fault::kKill:
      if (rep1 == 0 || ::kill(rep1, SIGKILL) != 0) {
        return -1;
      }
      return WaitUntil(since, RepairBound(fault), replaced("rep-1", rep1));
    case Fault::kStall: {
      // Alive and silent: only the gateway's liveness probe can tell.
      if (rep1 == 0 || ::kill(rep1, SIGSTOP) != 0) {
        return -1;
      }
      const double took = WaitUntil(since, RepairBound(fault), replaced("rep-1", rep1));
      if (took < 0) {
        ::kill(rep1, SIGCONT);  // never leave it stopped
      }
      return took;
    }
    case Fault::kPoison: {
      // Crashes the replica it reaches, and the one it is retried on.
      gantry::Client client(options.address);
      const gantry::Status status =
          client.Post("/encode", {gantry::Doc("poison")}, {.timeout = Ms(30000)}).status();
      *poison = status.ok() ? "OK" : CodeOf(status);
      return WaitUntil(since, RepairBound(fault), [&] {
        const bool both = ReplicaPid(parent, "rep-0") != 0 && ReplicaPid(parent, "rep-1") != 0;
        return both && (ReplicaPid(parent, "rep-0") != rep0 || ReplicaPid(parent, "rep-1") != rep1);
      });
    }
    case Fault::kRolling: {
      // `gantry deployment` re-reads its YAML and replaces both replicas.
      if (::kill(parent, SIGHUP) != 0) {
        return -1;
      }
      const auto first = replaced("rep-0", rep0);
      const auto second = replaced("rep-1", rep1);
      return WaitUntil(since, RepairBound(fault), [&] { return first() && second(); });
    }
  }
  return -1;
}

// ---- report -----------------------------------------------------------------

struct RssRow {
  double at_s;
  std::int64_t gateway;
  std::int64_t rep0;
  std::int64_t rep1;
  pid_t rep0_pid;
  pid_t rep1_pid;
};

void PrintRow(const RssRow& row) {
  std::printf(
      "  t=%6.0f s  gateway %7lld KiB  rep-0 (pid %d) %7lld KiB  rep-1 (pid %d) %7lld KiB\n",
      row.at_s, static_cast<long long>(row.gateway), row.rep0_pid, static_cast<long long>(row.rep0),
      row.rep1_pid, static_cast<long long>(row.rep1));
  std::fflush(stdout);
}

// The largest of `pick` over the rows with at_s in [from, to).
template <typename Pick>
std::int64_t MaxOver(const std::vector<RssRow>& rows, double from, double to, const Pick& pick) {
  std::int64_t most = -1;
  for (const RssRow& row : rows) {
    if (row.at_s >= from && row.at_s < to) {
      most = std::max(most, pick(row));
    }
  }
  return most;
}

int Run(const Options& options) {
  if (ReplicaPid(options.gateway_pid, "rep-0") == 0 ||
      ReplicaPid(options.gateway_pid, "rep-1") == 0) {
    std::fprintf(stderr, "gantry_soak: no rep-0 / rep-1 child of pid %d\n", options.gateway_pid);
    return 1;
  }
  const auto start = Clock::now();
  const auto until = start + std::chrono::seconds(options.seconds);
  auto row_now = [&] {
    const pid_t rep0 = ReplicaPid(options.gateway_pid, "rep-0");
    const pid_t rep1 = ReplicaPid(options.gateway_pid, "rep-1");
    return RssRow{std::chrono::duration<double>(Clock::now() - start).count(),
                  RssKib(options.gateway_pid),
                  rep0 != 0 ? RssKib(rep0) : -1,
                  rep1 != 0 ? RssKib(rep1) : -1,
                  rep0,
                  rep1};
  };
  std::string fault_names;
  for (const Fault fault : options.faults) {
    fault_names += (fault_names.empty() ? "" : ", ") + std::string(FaultName(fault));
  }
  std::printf("soak: %d s against %s; gateway pid %d; a fault every %d s, in turn: %s\nRSS:\n",
              options.seconds, options.address.c_str(), options.gateway_pid, options.fault_every_s,
              fault_names.c_str());
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

  // Faults and samples, on this thread.
  std::map<std::string, std::vector<double>> repaired_ms;
  std::map<std::string, int> not_repaired;
  Tally poison_outcomes;
  std::size_t next_fault_index = 0;
  auto next_fault = start + std::chrono::seconds(options.fault_every_s);
  auto next_sample = start + std::chrono::seconds(options.sample_every_s);
  while (Clock::now() < until) {
    std::this_thread::sleep_for(Ms(100));
    if (Clock::now() >= next_sample) {
      rows.push_back(row_now());
      PrintRow(rows.back());
      next_sample += std::chrono::seconds(options.sample_every_s);
    }
    const Fault fault = options.faults[next_fault_index % options.faults.size()];
    if (Clock::now() >= next_fault && Clock::now() + RepairBound(fault) < until) {
      ++next_fault_index;
      std::string poison;
      const pid_t rep0_before = ReplicaPid(options.gateway_pid, "rep-0");
      const pid_t rep1_before = ReplicaPid(options.gateway_pid, "rep-1");
      const double at_s = std::chrono::duration<double>(Clock::now() - start).count();
      const double took = InjectFault(fault, options, &poison);
      if (!poison.empty()) {
        poison_outcomes.Add(poison);
      }
      if (took < 0) {
        ++not_repaired[FaultName(fault)];
        // When, and what the replicas were: to find it in the deployment's log.
        std::printf(
            "  fault %s at t=%.0f s not repaired within %lld s: rep-0 pid %d -> %d, "
            "rep-1 pid %d -> %d\n",
            FaultName(fault), at_s, static_cast<long long>(RepairBound(fault).count() / 1000),
            rep0_before, ReplicaPid(options.gateway_pid, "rep-0"), rep1_before,
            ReplicaPid(options.gateway_pid, "rep-1"));
        std::fflush(stdout);
      } else {
        repaired_ms[FaultName(fault)].push_back(took);
      }
      // The next fault comes a period after this one was repaired.
      next_fault = Clock::now() + std::chrono::seconds(options.fault_every_s);
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
  std::printf("faults (repair: a new process in the replica's place; rolling: both replaced):\n");
  int failed_repairs = 0;
  for (const Fault fault : options.faults) {
    const std::string name = FaultName(fault);
    std::vector<double>& took = repaired_ms[name];
    std::sort(took.begin(), took.end());
    failed_repairs += not_repaired[name];
    std::printf("  %-8s repaired %zu, not within %lld s: %d", name.c_str(), took.size(),
                static_cast<long long>(RepairBound(fault).count() / 1000), not_repaired[name]);
    if (!took.empty()) {
      std::printf("; min %.0f ms, median %.0f ms, max %.0f ms", took.front(), took[took.size() / 2],
                  took.back());
    }
    std::printf("\n");
  }
  bool poison_served = false;
  for (const auto& [code, count] : poison_outcomes.counts()) {
    std::printf("  poison request answered %s: %lld\n", code.c_str(),
                static_cast<long long>(count));
    poison_served = poison_served || code == "OK";
  }
  // Flatness over the second half: the gateway (never restarted) and the
  // largest replica of any incarnation, against the first half's.
  const double half = seconds / 2;
  auto gateway = [](const RssRow& row) { return row.gateway; };
  auto replica = [](const RssRow& row) { return std::max(row.rep0, row.rep1); };
  const RssRow& last = rows.back();
  std::printf(
      "RSS, largest in the first half -> second half: gateway %lld -> %lld KiB (end %lld), "
      "replicas %lld -> %lld KiB\n",
      static_cast<long long>(MaxOver(rows, 1, half, gateway)),
      static_cast<long long>(MaxOver(rows, half, seconds + 1, gateway)),
      static_cast<long long>(last.gateway), static_cast<long long>(MaxOver(rows, 1, half, replica)),
      static_cast<long long>(MaxOver(rows, half, seconds + 1, replica)));
  // Each fault asked for must have happened: a run too short for one proves
  // nothing about it.
  bool every_fault_ran = true;
  for (const Fault fault : options.faults) {
    const std::string name = FaultName(fault);
    if (repaired_ms[name].empty() && not_repaired[name] == 0) {
      std::printf("  %s never ran: the run is too short for it\n", name.c_str());
      every_fault_ran = false;
    }
  }
  const bool passed =
      good_failed == 0 && good_ok > 0 && failed_repairs == 0 && !poison_served && every_fault_ran;
  std::printf("soak %s\n", passed ? "PASSED" : "FAILED");
  return passed ? 0 : 1;
}

int Usage() {
  std::fprintf(stderr,
               "usage: gantry_soak --address H:P --gateway-pid PID [--seconds N] "
               "[--fault-every N] [--faults kill,stall,poison,rolling] [--sample-every N] "
               "[--threads N]\n");
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
    } else if (flag == "--fault-every" || flag == "--kill-every") {
      options.fault_every_s = std::atoi(value.c_str());
    } else if (flag == "--faults") {
      options.faults.clear();
      std::istringstream names(value);
      std::string name;
      while (std::getline(names, name, ',')) {
        const std::map<std::string, gantry_bench::Fault> known = {
            {"kill", gantry_bench::Fault::kKill},
            {"stall", gantry_bench::Fault::kStall},
            {"poison", gantry_bench::Fault::kPoison},
            {"rolling", gantry_bench::Fault::kRolling}};
        auto it = known.find(name);
        if (it == known.end()) {
          return gantry_bench::Usage();
        }
        options.faults.push_back(it->second);
      }
    } else if (flag == "--sample-every") {
      options.sample_every_s = std::atoi(value.c_str());
    } else if (flag == "--threads") {
      options.good_threads = std::atoi(value.c_str());
    } else {
      return gantry_bench::Usage();
    }
  }
  if (options.address.empty() || options.gateway_pid <= 0 || options.seconds <= 0 ||
      options.fault_every_s <= 0 || options.faults.empty() || options.sample_every_s <= 0 ||
      options.good_threads <= 0 || argc % 2 == 0) {
    return gantry_bench::Usage();
  }
  return gantry_bench::Run(options);
}
