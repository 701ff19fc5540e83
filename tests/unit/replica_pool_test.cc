// The replica pool's rules (picking, retries, poison requests, probes,
// restarts) against scripted replica links: no sockets, no processes.
#include "gateway/replica_pool.h"

#include <grpcpp/client_context.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace gantry::internal {
namespace {

using Clock = std::chrono::system_clock;

grpc::Status Unavailable(const std::string& message) {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, message);
}

// One scripted replica: answers each try with `answer` at once, or holds it
// until the test completes it; answers probes with `serving`.
class FakeLink final : public ReplicaLink {
 public:
  explicit FakeLink(std::string address) : address_(std::move(address)) {}
  const std::string& address() const override { return address_; }

  void Send(grpc::ClientContext* context, const grpc::ByteBuffer& /*request*/,
            ForwardDone done) override {
    std::unique_lock lock(mutex_);
    ++sends_;
    deadlines_.push_back(context->deadline());
    if (hold_) {
      held_.push_back(std::move(done));
      return;
    }
    grpc::Status answer = answer_;
    std::string peer;
    if (!next_answers_.empty()) {
      std::tie(answer, peer) = next_answers_.front();
      next_answers_.pop_front();
    }
    lock.unlock();
    ForwardResult result;
    result.status = answer;
    result.peer = peer;
    done(std::move(result));
  }

  bool Check(std::chrono::milliseconds /*timeout*/, grpc::Status* status) override {
    std::lock_guard lock(mutex_);
    ++checks_;
    *status = check_status_;
    return check_status_.ok() && serving_;
  }

  void Answer(grpc::Status status) {
    std::lock_guard lock(mutex_);
    answer_ = std::move(status);
  }
  // The next send gets `status` (from the server `peer`), the ones after it
  // Answer's.
  void AnswerNextWith(grpc::Status status, std::string peer = "") {
    std::lock_guard lock(mutex_);
    next_answers_.emplace_back(std::move(status), std::move(peer));
  }
  void Hold() {
    std::lock_guard lock(mutex_);
    hold_ = true;
  }
  // Tries from now on are answered at once again (held ones stay held).
  void Unhold() {
    std::lock_guard lock(mutex_);
    hold_ = false;
  }
  int held() {
    std::lock_guard lock(mutex_);
    return static_cast<int>(held_.size());
  }
  // Completes every held try with `status`.
  void CompleteAll(const grpc::Status& status) {
    while (true) {
      {
        std::lock_guard lock(mutex_);
        if (held_.empty()) {
          return;
        }
      }
      CompleteOne(status);
    }
  }
  // Completes the oldest held try with `status`.
  void CompleteOne(grpc::Status status) {
    ForwardDone done;
    {
      std::lock_guard lock(mutex_);
      ASSERT_FALSE(held_.empty()) << address_ << " holds no request";
      done = std::move(held_.front());
      held_.erase(held_.begin());
    }
    ForwardResult result;
    result.status = std::move(status);
    done(std::move(result));
  }
  void Probes(bool serving, grpc::Status status = grpc::Status::OK) {
    std::lock_guard lock(mutex_);
    serving_ = serving;
    check_status_ = std::move(status);
  }
  int sends() {
    std::lock_guard lock(mutex_);
    return sends_;
  }
  int checks() {
    std::lock_guard lock(mutex_);
    return checks_;
  }
  Clock::time_point last_deadline() {
    std::lock_guard lock(mutex_);
    return deadlines_.back();
  }

 private:
  std::string address_;
  std::mutex mutex_;
  grpc::Status answer_ = grpc::Status::OK;
  std::deque<std::pair<grpc::Status, std::string>> next_answers_;
  bool hold_ = false;
  std::vector<ForwardDone> held_;
  bool serving_ = true;
  grpc::Status check_status_ = grpc::Status::OK;
  int sends_ = 0;
  int checks_ = 0;
  std::vector<Clock::time_point> deadlines_;
};

// A pool of replicas "a:1", "b:2", ... whose links the test scripts.
class Outcome;

class ReplicaPoolTest : public ::testing::Test {
 protected:
  ReplicaPool& MakePool(int replicas, std::chrono::milliseconds timeout_send = {}) {
    std::vector<std::string> addresses;
    for (int i = 0; i < replicas; ++i) {
      addresses.push_back(std::string(1, static_cast<char>('a' + i)) + ":" + std::to_string(i + 1));
    }
    return MakePoolOf(std::move(addresses), timeout_send);
  }
  // A started pool (probes every 10 ms, no liveness checks) whose requests
  // wait up to `hold` for a replica coming back.
  ReplicaPool& MakeHoldingPool(int replicas, std::chrono::milliseconds hold,
                               const std::function<void(ReplicaPoolOptions&)>& adjust = {}) {
    std::vector<std::string> addresses;
    for (int i = 0; i < replicas; ++i) {
      addresses.push_back(std::string(1, static_cast<char>('a' + i)) + ":" + std::to_string(i + 1));
    }
    ReplicaPool& pool =
        MakePoolOf(std::move(addresses), {}, [hold, &adjust](ReplicaPoolOptions& options) {
          options.hold_while_restarting = hold;
          options.probe_interval = std::chrono::milliseconds(10);
          options.liveness_failure_threshold = 0;
          if (adjust) {
            adjust(options);
          }
        });
    pool.Start();
    return pool;
  }
  // Two requests on replica a:1 of a two-replica holding pool, held there
  // (b:2 took none: it was out of rotation while they went); both replicas
  // hold every try from now on, and b is back in rotation.
  void TwoRequestsHeldOnTheFirst(ReplicaPool& pool, Outcome& first, Outcome& second);
  ReplicaPool& MakePoolOf(std::vector<std::string> addresses,
                          std::chrono::milliseconds timeout_send = {},
                          const std::function<void(ReplicaPoolOptions&)>& adjust = {}) {
    ReplicaPoolOptions options;
    options.deployment_name = "enc";
    options.replica_addresses = std::move(addresses);
    options.timeout_send = timeout_send;
    options.links = [this](const std::string& address) {
      auto link = std::make_shared<FakeLink>(address);
      std::lock_guard lock(links_mutex_);
      links_[address] = link;
      return link;
    };
    options.on_rotation_change = [this] { ++rotation_changes_; };
    options.liveness_failure_threshold = 3;
    options.on_unresponsive = [this](std::size_t index) { unresponsive_.push_back(index); };
    if (adjust) {
      adjust(options);
    }
    pool_ = std::make_unique<ReplicaPool>(std::move(options));
    return *pool_;
  }
  FakeLink& link(const std::string& address) {
    std::lock_guard lock(links_mutex_);
    return *links_.at(address);
  }

  // Forwards one request and returns its result, which must be ready.
  ForwardResult Send(Clock::time_point deadline = Clock::time_point::max()) {
    std::optional<ForwardResult> out;
    pool_->Forward(grpc::ByteBuffer(), deadline, [&out](ForwardResult r) { out = std::move(r); });
    EXPECT_TRUE(out.has_value()) << "the request was not answered";
    return out.value_or(ForwardResult{});
  }

  std::mutex links_mutex_;
  std::map<std::string, std::shared_ptr<FakeLink>> links_;
  std::atomic<int> rotation_changes_{0};
  std::vector<std::size_t> unresponsive_;
  std::unique_ptr<ReplicaPool> pool_;
};

// The result of a request answered on any thread.
class Outcome {
 public:
  ForwardDone Done() {
    return [this](ForwardResult result) {
      std::lock_guard lock(mutex_);
      result_ = std::move(result);
      ++answers_;
      ready_.notify_all();
    };
  }
  // The result once there is one, within `bound`.
  std::optional<ForwardResult> Wait(std::chrono::milliseconds bound = std::chrono::seconds(10)) {
    std::unique_lock lock(mutex_);
    ready_.wait_for(lock, bound, [this] { return result_.has_value(); });
    return result_;
  }
  bool answered() {
    std::lock_guard lock(mutex_);
    return result_.has_value();
  }
  int answers() {
    std::lock_guard lock(mutex_);
    return answers_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::optional<ForwardResult> result_;
  int answers_ = 0;
};

// Polls `condition` every millisecond for at most `bound`.
template <typename Condition>
bool Eventually(Condition condition, std::chrono::milliseconds bound = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= until) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

void ReplicaPoolTest::TwoRequestsHeldOnTheFirst(ReplicaPool& pool, Outcome& first,
                                                Outcome& second) {
  link("b:2").Probes(false);
  ASSERT_TRUE(Eventually([&] { return !pool.States()[1].available; }));
  link("a:1").Hold();
  link("b:2").Hold();
  pool.Forward(grpc::ByteBuffer(), Clock::time_point::max(), first.Done());
  pool.Forward(grpc::ByteBuffer(), Clock::time_point::max(), second.Done());
  ASSERT_EQ(link("a:1").held(), 2);
  link("b:2").Probes(true);
  ASSERT_TRUE(Eventually([&] { return pool.States()[1].available; }));
}

TEST_F(ReplicaPoolTest, IdleReplicasShareRequestsRoundRobin) {
  ReplicaPool& pool = MakePool(3);
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(Send().status.ok());
  }
  for (const ReplicaState& state : pool.States()) {
    EXPECT_EQ(state.requests, 100u);
    EXPECT_EQ(state.in_flight, 0);
    EXPECT_TRUE(state.available);
  }
}

TEST_F(ReplicaPoolTest, ARequestGoesToTheReplicaWithFewestInFlight) {
  ReplicaPool& pool = MakePool(3);
  for (const char* address : {"a:1", "b:2", "c:3"}) {
    link(address).Hold();
  }
  std::vector<ForwardResult> results;
  auto keep = [&results](ForwardResult r) { results.push_back(std::move(r)); };
  for (int i = 0; i < 3; ++i) {
    pool.Forward(grpc::ByteBuffer(), Clock::time_point::max(), keep);
  }
  ASSERT_EQ(link("a:1").sends() + link("b:2").sends() + link("c:3").sends(), 3);
  EXPECT_EQ(link("a:1").sends(), 1);
  EXPECT_EQ(link("b:2").sends(), 1);
  link("b:2").CompleteOne(grpc::Status::OK);
  // b is now the only replica with nothing in flight.
  pool.Forward(grpc::ByteBuffer(), Clock::time_point::max(), keep);
  EXPECT_EQ(link("b:2").sends(), 2);
  EXPECT_EQ(pool.States()[1].in_flight, 1);
  EXPECT_EQ(pool.States()[0].in_flight, 1);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].status.ok());
  // A held try keeps its request, and the request its link: answer them.
  for (const char* address : {"a:1", "b:2", "c:3"}) {
    link(address).CompleteAll(grpc::Status::OK);
  }
  EXPECT_EQ(results.size(), 4u);
}

TEST_F(ReplicaPoolTest, AnUnreachableReplicaLeavesRotationAndItsRequestIsRetried) {
  ReplicaPool& pool = MakePool(2);
  link("a:1").Answer(Unavailable("failed to connect to all addresses; last error: refused"));
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(Send().status.ok()) << "request " << i;
  }
  EXPECT_EQ(link("a:1").sends(), 1) << "out of rotation after its first failure";
  EXPECT_EQ(link("b:2").sends(), 10);
  EXPECT_FALSE(pool.States()[0].available);
  EXPECT_TRUE(pool.Available());
  EXPECT_EQ(rotation_changes_, 1);
}

// A DNS name stands for several servers, whose channel balances over them:
// one of them going away leaves the name in rotation and the request is
// tried on it again (round_robin sends it to another server).
TEST_F(ReplicaPoolTest, ADnsNameStaysInRotationWhenOneOfItsServersGoes) {
  ReplicaPool& pool = MakePoolOf({"dns:///encoder:8081"});
  link("dns:///encoder:8081").AnswerNextWith(Unavailable("Socket closed"));
  ForwardResult result = Send();
  EXPECT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(link("dns:///encoder:8081").sends(), 2);
  EXPECT_TRUE(pool.States()[0].available);
  EXPECT_EQ(rotation_changes_, 0);
  EXPECT_TRUE(Send().status.ok());

  // A request that two of its servers drop is a poison request, as for
  // two replicas, and the message says they were servers of one name.
  link("dns:///encoder:8081").Answer(Unavailable("Socket closed"));
  result = Send();
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(result.status.error_message().find(
                "the request killed 2 servers of replica enc/rep-0 (dns:///encoder:8081)"),
            std::string::npos)
      << result.status.error_message();
}

TEST_F(ReplicaPoolTest, APoisonRequestKillsAtMostTwoReplicas) {
  ReplicaPool& pool = MakePool(3);
  for (const char* address : {"a:1", "b:2", "c:3"}) {
    link(address).Answer(Unavailable("Socket closed"));
  }
  ForwardResult result = Send();
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  const std::string& message = result.status.error_message();
  EXPECT_NE(message.find("deployment 'enc': the request killed replica "), std::string::npos)
      << message;
  EXPECT_NE(message.find(" and "), std::string::npos) << message;
  EXPECT_NE(message.find("not retried again"), std::string::npos) << message;
  EXPECT_EQ(link("a:1").sends() + link("b:2").sends() + link("c:3").sends(), 2);
  // The third replica was spared and still serves.
  link("a:1").Answer(grpc::Status::OK);
  link("b:2").Answer(grpc::Status::OK);
  link("c:3").Answer(grpc::Status::OK);
  EXPECT_TRUE(pool.Available());
  EXPECT_TRUE(Send().status.ok());
}

TEST_F(ReplicaPoolTest, AWorkersOwnErrorPassesThroughUnretried) {
  ReplicaPool& pool = MakePool(2);
  for (const char* address : {"a:1", "b:2"}) {
    link(address).Answer(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "document 3: bad"));
  }
  ForwardResult result = Send();
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(result.status.error_message(), "document 3: bad");
  EXPECT_EQ(link("a:1").sends() + link("b:2").sends(), 1);
  EXPECT_TRUE(pool.States()[0].available);
  EXPECT_TRUE(pool.States()[1].available);
  EXPECT_EQ(pool.States()[0].requests + pool.States()[1].requests, 1u);
}

TEST_F(ReplicaPoolTest, TimeoutSendIsRetriedAndBoundsEachTry) {
  MakePool(2, std::chrono::milliseconds(1000));
  for (const char* address : {"a:1", "b:2"}) {
    link(address).Answer(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "slow"));
  }
  const Clock::time_point before = Clock::now();
  ForwardResult result = Send();
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(result.status.error_message().find("did not answer within timeout_send"),
            std::string::npos)
      << result.status.error_message();
  // max(3, replicas) + 1 tries, alternating replicas.
  EXPECT_EQ(link("a:1").sends(), 2);
  EXPECT_EQ(link("b:2").sends(), 2);
  const Clock::time_point deadline = link("a:1").last_deadline();
  EXPECT_GE(deadline, before + std::chrono::milliseconds(1000));
  EXPECT_LE(deadline, Clock::now() + std::chrono::milliseconds(1000));
}

TEST_F(ReplicaPoolTest, TheClientsOwnDeadlineIsFinal) {
  MakePool(2);
  for (const char* address : {"a:1", "b:2"}) {
    link(address).Answer(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "slow"));
  }
  const Clock::time_point client_deadline = Clock::now() + std::chrono::seconds(30);
  ForwardResult result = Send(client_deadline);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(result.status.error_message().find("within the request's deadline"), std::string::npos)
      << result.status.error_message();
  EXPECT_EQ(link("a:1").sends() + link("b:2").sends(), 1);
  EXPECT_EQ((link("a:1").sends() == 1 ? link("a:1") : link("b:2")).last_deadline(),
            client_deadline);
}

TEST_F(ReplicaPoolTest, ADeadlineAlreadyPastIsNotSent) {
  MakePool(1);
  ForwardResult result = Send(Clock::now() - std::chrono::seconds(1));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(link("a:1").sends(), 0);
}

TEST_F(ReplicaPoolTest, WithNoReplicaInRotationARequestFailsAtOnceNamingTheGivenUpOne) {
  ReplicaPool& pool = MakePool(2);
  pool.ReplicaGivenUp(0, "crashed 5 times in a row");
  pool.ReplicaDown(1, "exited with code 1");
  EXPECT_FALSE(pool.Available());
  ForwardResult result = Send();
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  const std::string& message = result.status.error_message();
  EXPECT_NE(message.find("deployment 'enc': no replica is available (all 2"), std::string::npos)
      << message;
  EXPECT_NE(message.find("replica enc/rep-0 was given up: crashed 5 times in a row"),
            std::string::npos)
      << message;
  EXPECT_EQ(link("a:1").sends() + link("b:2").sends(), 0);
  EXPECT_EQ(pool.WhyUnavailable(), message.substr(std::string("deployment 'enc': ").size()));
}

TEST_F(ReplicaPoolTest, ProbesTakeReplicasOutAndBringThemBack) {
  ReplicaPool& pool = MakePool(2);
  link("a:1").Probes(false);  // answers NOT_SERVING
  link("b:2").Probes(false, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "busy"));
  pool.ProbeOnce();
  EXPECT_FALSE(pool.States()[0].available);
  EXPECT_TRUE(pool.States()[1].available) << "a slow answer from a busy replica is no failure";
  link("a:1").Probes(true);
  pool.ProbeOnce();
  EXPECT_TRUE(pool.States()[0].available);
  EXPECT_EQ(rotation_changes_, 2);
}

TEST_F(ReplicaPoolTest, ARestartedReplicaIsProbedOnItsNewAddressBeforeItServes) {
  ReplicaPool& pool = MakePool(1);
  pool.ReplicaDown(0, "killed by signal 9");
  const int checks_before = link("a:1").checks();
  pool.ProbeOnce();
  EXPECT_EQ(link("a:1").checks(), checks_before) << "a replica reported down is not probed";
  pool.ReplicaRestarted(0, "a:7");
  EXPECT_FALSE(pool.Available()) << "not in rotation before its health check passes";
  EXPECT_EQ(Send().status.error_code(), grpc::StatusCode::UNAVAILABLE);
  pool.ProbeOnce();
  EXPECT_EQ(link("a:7").checks(), 1);
  ASSERT_TRUE(pool.Available());
  EXPECT_TRUE(Send().status.ok());
  EXPECT_EQ(link("a:7").sends(), 1);
  EXPECT_EQ(link("a:1").sends(), 0);
}

TEST_F(ReplicaPoolTest, ALateFailureOnAReplacedAddressLeavesTheSuccessorInRotation) {
  ReplicaPool& pool = MakePool(1);
  link("a:1").Hold();
  std::optional<ForwardResult> result;
  pool.Forward(grpc::ByteBuffer(), Clock::time_point::max(),
               [&result](ForwardResult r) { result = std::move(r); });
  pool.ReplicaRestarted(0, "a:8");
  pool.ProbeOnce();
  ASSERT_TRUE(pool.Available());
  // The old process's call fails now; the request is retried on the new one.
  link("a:1").CompleteOne(Unavailable("Socket closed"));
  ASSERT_TRUE(result.has_value());
  EXPECT_TRUE(result->status.ok()) << result->status.error_message();
  EXPECT_TRUE(pool.States()[0].available);
  EXPECT_EQ(link("a:8").sends(), 1);
}

TEST_F(ReplicaPoolTest, ACancelledRequestIsNotRetried) {
  ReplicaPool& pool = MakePool(2);
  link("a:1").Hold();
  link("b:2").Hold();
  std::optional<ForwardResult> result;
  std::shared_ptr<ForwardHandle> handle =
      pool.Forward(grpc::ByteBuffer(), Clock::time_point::max(),
                   [&result](ForwardResult r) { result = std::move(r); });
  handle->Cancel();
  FakeLink& sent_to = link("a:1").sends() == 1 ? link("a:1") : link("b:2");
  sent_to.CompleteOne(grpc::Status(grpc::StatusCode::CANCELLED, "Cancelled"));
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(link("a:1").sends() + link("b:2").sends(), 1);
  EXPECT_TRUE(pool.States()[0].available);
  EXPECT_TRUE(pool.States()[1].available);
}

grpc::Status NoAnswer() {
  return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded");
}

TEST_F(ReplicaPoolTest, AReplicaThatMissesThresholdLivenessChecksInARowIsReportedOnce) {
  ReplicaPool& pool = MakePool(2);
  link("b:2").Probes(false, NoAnswer());
  pool.CheckLivenessOnce();
  pool.CheckLivenessOnce();
  EXPECT_TRUE(pool.States()[1].available) << "two misses are below the threshold of three";
  EXPECT_TRUE(pool.TakeUnresponsive().empty());
  pool.CheckLivenessOnce();
  EXPECT_FALSE(pool.States()[1].available);
  EXPECT_TRUE(pool.States()[0].available);
  EXPECT_EQ(pool.TakeUnresponsive(), (std::vector<UnresponsiveReplica>{{1, "b:2"}}));
  EXPECT_TRUE(pool.TakeUnresponsive().empty()) << "taken once";
  EXPECT_EQ(unresponsive_, std::vector<std::size_t>{1});
  // Still hung and not yet taken: listed once however often it is found.
  for (int i = 0; i < 6; ++i) {
    pool.CheckLivenessOnce();
  }
  EXPECT_EQ(pool.TakeUnresponsive(), (std::vector<UnresponsiveReplica>{{1, "b:2"}}));
  EXPECT_EQ(unresponsive_.size(), 3u);
}

TEST_F(ReplicaPoolTest, AnyAnswerResetsTheMissedLivenessChecks) {
  ReplicaPool& pool = MakePool(1);
  for (int round = 0; round < 4; ++round) {
    link("a:1").Probes(false, NoAnswer());
    pool.CheckLivenessOnce();
    pool.CheckLivenessOnce();
    link("a:1").Probes(false);  // NOT_SERVING (draining) is an answer
    pool.CheckLivenessOnce();
  }
  EXPECT_TRUE(pool.TakeUnresponsive().empty());
  EXPECT_TRUE(unresponsive_.empty());
  EXPECT_TRUE(pool.States()[0].available);
}

TEST_F(ReplicaPoolTest, AReplicaWithoutAHealthServiceAnswersItsLivenessChecks) {
  ReplicaPool& pool = MakePool(1);
  link("a:1").Probes(false, grpc::Status(grpc::StatusCode::UNIMPLEMENTED, ""));
  for (int i = 0; i < 6; ++i) {
    pool.CheckLivenessOnce();
  }
  EXPECT_TRUE(pool.TakeUnresponsive().empty()) << "UNIMPLEMENTED is a reply";
  EXPECT_TRUE(unresponsive_.empty());
  // A check that reached no server is a miss, as a timeout is.
  link("a:1").Probes(false, grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused"));
  for (int i = 0; i < 3; ++i) {
    pool.CheckLivenessOnce();
  }
  EXPECT_EQ(pool.TakeUnresponsive(), (std::vector<UnresponsiveReplica>{{0, "a:1"}}));
}

TEST_F(ReplicaPoolTest, LivenessSkipsReplicasReportedDownAndStartsOverOnARestart) {
  ReplicaPool& pool = MakePool(1);
  link("a:1").Probes(false, NoAnswer());
  pool.CheckLivenessOnce();
  pool.CheckLivenessOnce();
  pool.ReplicaDown(0, "killed by signal 9");
  const int checks_before = link("a:1").checks();
  pool.CheckLivenessOnce();
  EXPECT_EQ(link("a:1").checks(), checks_before);
  pool.ReplicaRestarted(0, "a:7");
  link("a:7").Probes(false, NoAnswer());
  pool.CheckLivenessOnce();
  pool.CheckLivenessOnce();
  EXPECT_TRUE(pool.TakeUnresponsive().empty()) << "the old link's misses do not count";
  pool.CheckLivenessOnce();
  EXPECT_EQ(pool.TakeUnresponsive(), (std::vector<UnresponsiveReplica>{{0, "a:7"}}));
}

TEST_F(ReplicaPoolTest, LivenessThresholdZeroChecksNothing) {
  ReplicaPoolOptions options;
  options.replica_addresses = {"a:1"};
  auto hung = std::make_shared<FakeLink>("a:1");
  hung->Probes(false, NoAnswer());
  options.links = [hung](const std::string&) { return hung; };
  options.liveness_failure_threshold = 0;
  ReplicaPool pool(std::move(options));
  for (int i = 0; i < 5; ++i) {
    pool.CheckLivenessOnce();
  }
  EXPECT_EQ(hung->checks(), 0);
  EXPECT_TRUE(pool.TakeUnresponsive().empty());
}

TEST_F(ReplicaPoolTest, ARequestWaitsForAReplicaBeingRestartedAndGoesToIt) {
  ReplicaPool& pool = MakeHoldingPool(1, std::chrono::seconds(5));
  pool.ReplicaDown(0, "killed by signal 9", std::chrono::milliseconds(100));
  Outcome outcome;
  pool.Forward(grpc::ByteBuffer(), Clock::time_point::max(), outcome.Done());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(outcome.answered()) << "refused while its replica restarts";
  pool.ReplicaStarting(0);
  pool.ReplicaRestarted(0, "a:7");
  std::optional<ForwardResult> result = outcome.Wait();
  ASSERT_TRUE(result.has_value()) << "still waiting after the replica came back";
  EXPECT_TRUE(result->status.ok()) << result->status.error_message();
  EXPECT_EQ(link("a:7").sends(), 1);
  EXPECT_EQ(link("a:1").sends(), 0);
  EXPECT_EQ(outcome.answers(), 1);
}

TEST_F(ReplicaPoolTest, ARequestDoesNotWaitForAReplicaNotComingBackSoon) {
  ReplicaPool& pool = MakeHoldingPool(2, std::chrono::seconds(5));
  pool.ReplicaDown(0, "killed by signal 9", std::chrono::minutes(10));
  pool.ReplicaGivenUp(1, "crashed 5 times in a row");
  const auto start = std::chrono::steady_clock::now();
  Outcome outcome;
  pool.Forward(grpc::ByteBuffer(), Clock::time_point::max(), outcome.Done());
  std::optional<ForwardResult> result = outcome.Wait(std::chrono::milliseconds(0));
  ASSERT_TRUE(result.has_value()) << "a restart in 10 minutes is not waited for";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(result->status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(result->status.error_message().find("no replica is available"), std::string::npos)
      << result->status.error_message();
  // It was not held, so it does not say it waited.
  EXPECT_EQ(result->status.error_message().find("none came back"), std::string::npos)
      << result->status.error_message();
}

TEST_F(ReplicaPoolTest, WhenEveryReplicaWasGivenUpTheErrorDoesNotPromiseTheyRejoin) {
  ReplicaPool& pool = MakeHoldingPool(2, std::chrono::seconds(5));
  pool.ReplicaGivenUp(0, "crashed 5 times in a row");
  pool.ReplicaGivenUp(1, "exited with code 7 at start 5 times");
  Outcome outcome;
  pool.Forward(grpc::ByteBuffer(), Clock::time_point::max(), outcome.Done());
  std::optional<ForwardResult> result = outcome.Wait(std::chrono::milliseconds(0));
  ASSERT_TRUE(result.has_value()) << "nothing is coming back to wait for";
  const std::string& message = result->status.error_message();
  EXPECT_NE(message.find("every one was given up, and none is restarted"), std::string::npos)
      << message;
  EXPECT_EQ(message.find("rejoin"), std::string::npos) << message;
  EXPECT_EQ(message.find("none came back"), std::string::npos) << message;
  EXPECT_NE(message.find("replica enc/rep-1 was given up: exited with code 7"), std::string::npos)
      << message;
}

TEST_F(ReplicaPoolTest, AHeldRequestFailsWhenTheHoldRunsOutNamingIt) {
  ReplicaPool& pool = MakeHoldingPool(1, std::chrono::milliseconds(300));
  pool.ReplicaDown(0, "killed by signal 9", std::chrono::milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  Outcome outcome;
  pool.Forward(grpc::ByteBuffer(), Clock::time_point::max(), outcome.Done());
  std::optional<ForwardResult> result = outcome.Wait();
  ASSERT_TRUE(result.has_value());
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(300));
  EXPECT_EQ(result->status.error_code(), grpc::StatusCode::UNAVAILABLE);
  const std::string& message = result->status.error_message();
  EXPECT_NE(message.find("deployment 'enc': no replica is available"), std::string::npos)
      << message;
  EXPECT_NE(message.find("none came back within 300 ms (hold_while_restarting)"), std::string::npos)
      << message;
}

TEST_F(ReplicaPoolTest, AHeldRequestEndsAtItsDeadlineWhenCancelledAndAtStop) {
  ReplicaPool& pool = MakeHoldingPool(1, std::chrono::seconds(30));
  pool.ReplicaDown(0, "killed by signal 9", std::chrono::milliseconds(100));
  Outcome past_deadline;
  pool.Forward(grpc::ByteBuffer(), Clock::now() + std::chrono::milliseconds(200),
               past_deadline.Done());
  Outcome cancelled;
  std::shared_ptr<ForwardHandle> handle =
      pool.Forward(grpc::ByteBuffer(), Clock::time_point::max(), cancelled.Done());
  Outcome stopped;
  pool.Forward(grpc::ByteBuffer(), Clock::time_point::max(), stopped.Done());
  handle->Cancel();
  std::optional<ForwardResult> result = cancelled.Wait();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->status.error_code(), grpc::StatusCode::CANCELLED);
  result = past_deadline.Wait();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << result->status.error_message();
  EXPECT_FALSE(stopped.answered());
  pool.Stop();
  ASSERT_TRUE(stopped.answered());
  EXPECT_EQ(stopped.Wait()->status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(stopped.Wait()->status.error_message().find("the gateway stopped"), std::string::npos);
}

// Two requests on replica a when it dies, one of them a poison: the
// suspects go to b one at a time, so the poison alone kills b and the
// innocent one, held until a replica is back, is served.
TEST_F(ReplicaPoolTest, InnocentRequestsDroppedBesideAPoisonAreTriedAloneAndServed) {
  ReplicaPool& pool = MakeHoldingPool(2, std::chrono::seconds(10));
  Outcome poison;
  Outcome innocent;
  ASSERT_NO_FATAL_FAILURE(TwoRequestsHeldOnTheFirst(pool, poison, innocent));

  // a dies under both.
  link("a:1").CompleteOne(Unavailable("Socket closed"));
  ASSERT_TRUE(Eventually([&] { return link("b:2").held() == 1; }));
  link("a:1").CompleteOne(Unavailable("Socket closed"));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(link("b:2").sends(), 1) << "the second suspect went out beside the first";
  EXPECT_FALSE(innocent.answered());

  // The poison kills b too; a (its probe passes) is back for the innocent.
  link("a:1").Unhold();
  link("b:2").Unhold();
  link("b:2").CompleteOne(Unavailable("Socket closed"));
  std::optional<ForwardResult> result = poison.Wait();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(result->status.error_message().find(
                "the request killed replica enc/rep-0 (a:1) and enc/rep-1 (b:2)"),
            std::string::npos)
      << result->status.error_message();
  result = innocent.Wait();
  ASSERT_TRUE(result.has_value());
  EXPECT_TRUE(result->status.ok()) << result->status.error_message();
  EXPECT_EQ(innocent.answers(), 1);
}

// A suspect whose try hangs (liveness checks off, no deadline) holds the
// turn for suspect_turn_limit at most: then the next one goes, and both are
// served once the hung replica answers.
TEST_F(ReplicaPoolTest, ASuspectThatHangsHoldsTheTurnOnlyForTheLimit) {
  ReplicaPool& pool = MakeHoldingPool(2, std::chrono::seconds(10), [](ReplicaPoolOptions& options) {
    options.suspect_turn_limit = std::chrono::milliseconds(1000);
  });
  Outcome first;
  Outcome second;
  ASSERT_NO_FATAL_FAILURE(TwoRequestsHeldOnTheFirst(pool, first, second));

  const auto first_dropped = std::chrono::steady_clock::now();
  link("a:1").CompleteOne(Unavailable("Socket closed"));
  ASSERT_TRUE(Eventually([&] { return link("b:2").held() == 1; }));
  link("a:1").CompleteOne(Unavailable("Socket closed"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(link("b:2").sends(), 1) << "the second suspect went out before the turn ran out";
  // b hangs under the first: the second goes once the turn has run out.
  ASSERT_TRUE(Eventually([&] { return link("b:2").held() == 2; }));
  EXPECT_GE(std::chrono::steady_clock::now() - first_dropped, std::chrono::milliseconds(950));
  EXPECT_FALSE(first.answered());
  EXPECT_FALSE(second.answered());

  link("b:2").Unhold();
  link("b:2").CompleteOne(grpc::Status::OK);
  link("b:2").CompleteOne(grpc::Status::OK);
  for (Outcome* outcome : {&first, &second}) {
    std::optional<ForwardResult> result = outcome->Wait();
    ASSERT_TRUE(result.has_value());
    EXPECT_TRUE(result->status.ok()) << result->status.error_message();
    EXPECT_EQ(outcome->answers(), 1);
  }
}

// A dns:/// name's server reached again before its channel saw it go:
// the same server dropping the request twice is one kill, not two.
TEST_F(ReplicaPoolTest, DropsByTheSameServerCountOnce) {
  MakePoolOf({"dns:///encoder:8081"});
  link("dns:///encoder:8081").AnswerNextWith(Unavailable("Socket closed"), "ipv4:10.0.0.5:8081");
  link("dns:///encoder:8081").AnswerNextWith(Unavailable("Socket closed"), "ipv4:10.0.0.5:8081");
  ForwardResult result = Send();
  EXPECT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(link("dns:///encoder:8081").sends(), 3);
  // Two servers are two kills.
  link("dns:///encoder:8081").AnswerNextWith(Unavailable("Socket closed"), "ipv4:10.0.0.5:8081");
  link("dns:///encoder:8081").AnswerNextWith(Unavailable("Socket closed"), "ipv4:10.0.0.6:8081");
  result = Send();
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(result.status.error_message().find("the request killed 2 servers"), std::string::npos)
      << result.status.error_message();
}

// Behind one address (a virtual IP) every server is the same peer: there
// two drops are two kills.
TEST_F(ReplicaPoolTest, DropsThroughOneAddressEachCount) {
  MakePool(2);
  for (const char* address : {"a:1", "b:2"}) {
    link(address).AnswerNextWith(Unavailable("Socket closed"), "ipv4:10.96.0.1:8081");
  }
  ForwardResult result = Send();
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(result.status.error_message().find("the request killed replica"), std::string::npos)
      << result.status.error_message();
  EXPECT_EQ(link("a:1").sends() + link("b:2").sends(), 2);
}

TEST_F(ReplicaPoolTest, NoRotationCallbackAfterStop) {
  ReplicaPool& pool = MakePool(1);
  pool.Stop();
  pool.ReplicaDown(0, "exited");
  EXPECT_EQ(rotation_changes_, 0);
}

}  // namespace
}  // namespace gantry::internal
