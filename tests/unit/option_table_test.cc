#include "core/option_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace gantry::internal {
namespace {

TEST(OptionTableTest, RowsAreWellFormed) {
  std::set<std::string_view> keys;
  std::set<std::string_view> flags;
  for (const OptionRow& row : OptionTable()) {
    SCOPED_TRACE(std::string(row.key));
    EXPECT_TRUE(keys.insert(row.key).second) << "duplicate key";
    if (row.type == OptionType::kOwnReader) {
      EXPECT_FALSE(row.deployment.present() || row.flow.present());
      EXPECT_TRUE(row.flag.empty());
      continue;
    }
    EXPECT_TRUE(row.deployment.present() || row.flow.present()) << "stored nowhere";
    EXPECT_EQ(row.rule != nullptr,
              row.type == OptionType::kInt || row.type == OptionType::kMilliseconds);
    if (!row.flag.empty()) {
      EXPECT_TRUE(row.flag.starts_with("--"));
      EXPECT_TRUE(flags.insert(row.flag).second) << "duplicate flag";
      EXPECT_FALSE(row.help.empty());
    }
    // `gantry gateway` applies its flags to a DeploymentOptions.
    EXPECT_TRUE(!row.gateway_flag || (row.deployment.present() && !row.flag.empty()));
    if (!row.flag_implies.empty()) {
      const OptionRow* implied = FindOption(row.flag_implies);
      ASSERT_NE(implied, nullptr);
      EXPECT_EQ(implied->type, OptionType::kBool);
    }
  }
}

// Each row reaches a field of its own: values written through every row
// come back unchanged through the same rows.
template <typename Options>
void ExpectFieldsOfTheirOwn(OptionField<Options> OptionRow::*field) {
  Options options;
  std::int64_t next = 1;
  std::map<std::string_view, OptionValue> written;
  for (const OptionRow& row : OptionTable()) {
    if (!(row.*field).present()) {
      continue;
    }
    OptionValue value;
    switch (row.type) {
      case OptionType::kInt:
      case OptionType::kMilliseconds:
        value = std::max(row.rule->min, std::int64_t{0}) + next++;
        break;
      case OptionType::kBool:
        value = true;
        break;
      default:
        value = "value of " + std::string(row.key);
        break;
    }
    (row.*field).set(options, value);
    written.emplace(row.key, value);
  }
  ASSERT_FALSE(written.empty());
  for (const auto& [key, value] : written) {
    EXPECT_EQ(((*FindOption(key)).*field).get(options), value) << key;
  }
}

TEST(OptionTableTest, EveryRowHasAFieldOfItsOwn) {
  ExpectFieldsOfTheirOwn(&OptionRow::deployment);
  ExpectFieldsOfTheirOwn(&OptionRow::flow);
}

TEST(OptionTableTest, TimeoutReadyMinusOneWaitsForever) {
  DeploymentOptions options;
  const OptionRow& row = *FindOption("timeout_ready");
  row.deployment.set(options, std::int64_t{-1});
  EXPECT_EQ(options.timeout_ready, kWaitForever);
  EXPECT_EQ(row.deployment.get(options), OptionValue(std::int64_t{-1}));
}

TEST(OptionTableTest, KeyListsFollowTheTable) {
  EXPECT_THAT(FlowWithKeys(),
              ::testing::ElementsAre("name", "port", "protocol", "host", "env", "access_log",
                                     "http_port", "max_message_bytes", "max_concurrent_requests",
                                     "max_client_batch_size", "api_key", "cors", "timeout_drain",
                                     "timeout_send", "monitoring", "port_monitoring", "tracing",
                                     "traces_exporter_host", "traces_exporter_port"));
  EXPECT_EQ(DeploymentWithKeys().front(), "uses");
  EXPECT_EQ(DeploymentWithKeys().back(), "volumes");
  EXPECT_EQ(OptionText(OptionValue(std::int64_t{65536})), "65536");
  EXPECT_EQ(OptionText(OptionValue(false)), "false");
  EXPECT_EQ(FindOption("no_such_key"), nullptr);
}

}  // namespace
}  // namespace gantry::internal
