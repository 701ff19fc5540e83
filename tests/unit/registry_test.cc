// The executor registry and the routing macros, without processes.
#include "core/registry.h"

#include <gantry/executor.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace registry_test {

class RoutedExec final : public gantry::Executor {
  GANTRY_EXECUTOR(RoutedExec);
  explicit RoutedExec(const gantry::ExecutorContext& context) : device_(context.device) {}

  GANTRY_REQUESTS(Encode, "/encode");
  void Encode(gantry::DocList& docs) { docs.emplace_back("added by Encode"); }

  GANTRY_REQUESTS(Search, "/search", "/find");
  gantry::Status Search(gantry::DocList& docs, const gantry::Parameters& parameters) {
    docs.emplace_back(parameters.GetString("q"));
    return gantry::OkStatus();
  }

  GANTRY_REQUESTS(Fallback);
  void Fallback(gantry::DocList& /*docs*/, const gantry::Parameters& /*parameters*/) {}

  gantry::Device device_;
};
GANTRY_REGISTER_EXECUTOR(RoutedExec);

class PlainExec final : public gantry::Executor {
  GANTRY_EXECUTOR(PlainExec);
  explicit PlainExec(const gantry::ExecutorContext& /*context*/) {}
};
GANTRY_REGISTER_EXECUTOR(PlainExec);

class OnReceivingThreadExec final : public gantry::Executor {
  GANTRY_EXECUTOR(OnReceivingThreadExec);
  explicit OnReceivingThreadExec(const gantry::ExecutorContext& /*context*/) {}

 private:
  GANTRY_HANDLERS_ON_RECEIVING_THREAD();  // read from a private section too
};
GANTRY_REGISTER_EXECUTOR(OnReceivingThreadExec);

}  // namespace registry_test

namespace gantry {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

TEST(RegistryTest, ListsTypesWithTheirEndpoints) {
  std::vector<ExecutorTypeInfo> types = RegisteredExecutors();
  const ExecutorTypeInfo* routed = nullptr;
  for (const ExecutorTypeInfo& info : types) {
    if (info.name == "RoutedExec") {
      routed = &info;
    }
  }
  ASSERT_NE(routed, nullptr);
  EXPECT_THAT(routed->source_file, ::testing::HasSubstr("registry_test.cc"));
  EXPECT_THAT(routed->endpoints,
              ElementsAre(Pair("/encode", "Encode"), Pair("/search", "Search"),
                          Pair("/find", "Search"), Pair("/default", "Fallback")));
  EXPECT_TRUE(IsExecutorRegistered("PlainExec"));
  EXPECT_FALSE(IsExecutorRegistered("plainexec"));
  // Only a type that declares it runs its handlers on the receiving thread.
  for (const ExecutorTypeInfo& info : types) {
    if (info.name == "PlainExec" || info.name == "RoutedExec") {
      EXPECT_FALSE(info.handlers_on_receiving_thread) << info.name;
    }
    if (info.name == "OnReceivingThreadExec") {
      EXPECT_TRUE(info.handlers_on_receiving_thread);
    }
  }
  EXPECT_TRUE(IsExecutorRegistered("OnReceivingThreadExec"));
}

TEST(RegistryTest, RoutesInvokeTheBoundMethods) {
  const internal::ExecutorType* type = internal::FindExecutorType("RoutedExec");
  ASSERT_NE(type, nullptr);
  ExecutorContext context;
  context.device = Device::Cuda(1);
  std::unique_ptr<Executor> executor = type->create(context);
  EXPECT_EQ(static_cast<registry_test::RoutedExec&>(*executor).device_, Device::Cuda(1));
  std::vector<internal::Route> routes = type->routes();
  ASSERT_EQ(routes.size(), 3u);
  DocList docs;
  ASSERT_TRUE(routes[0].invoke(*executor, docs, Parameters()).ok());
  ASSERT_TRUE(
      routes[1].invoke(*executor, docs, Parameters(Value::Dict{{"q", Value("needle")}})).ok());
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].text(), "added by Encode");
  EXPECT_EQ(docs[1].text(), "needle");
}

TEST(RegistryTest, UnknownTypeErrorListsRegisteredNames) {
  EXPECT_EQ(internal::FindExecutorType("Nope"), nullptr);
  Status error = internal::UnknownExecutorError("Nope");
  EXPECT_EQ(error.code(), StatusCode::kNotFound);
  EXPECT_THAT(error.message(), ::testing::StartsWith("unknown executor type (jtype) 'Nope'; "
                                                     "registered types: "));
  EXPECT_THAT(error.message(), ::testing::HasSubstr("PlainExec, RoutedExec"));
}

TEST(RegistryDeathTest, DuplicateNameAbortsNamingBothFiles) {
  EXPECT_DEATH(
      {
        internal::ExecutorType duplicate;
        duplicate.name = "RoutedExec";
        duplicate.source_file = "other/place.cc";
        internal::RegisterExecutorType(std::move(duplicate));
      },
      "executor type 'RoutedExec' is registered twice: in .*registry_test.cc and in "
      "other/place.cc");
}

}  // namespace
}  // namespace gantry
