// The converted-weights cache over small synthetic safetensors files.
#include "weight_cache.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "safetensors.h"

namespace gantry::sentence_encoder {
namespace {

namespace fs = std::filesystem;

std::string Bytes(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return {static_cast<const char*>(c.data_ptr()), c.nbytes()};
}

class WeightCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    dir_ = fs::temp_directory_path() /
           ("gantry_weight_cache_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_ / "model");
    WriteSource(at::linspace(-3.0, 3.0, 6, at::kFloat).view({3, 2}));
  }
  void TearDown() override { fs::remove_all(dir_); }

  void WriteSource(const at::Tensor& weight) {
    weight_ = weight;
    const std::string bytes =
        WriteSafetensors({{"ids", "I64", {4}, 0, 0}, {"w", "F32", weight.sizes().vec(), 0, 0}},
                         {Bytes(at::arange(4, at::kLong)), Bytes(weight)});
    std::ofstream(source_path(), std::ios::binary | std::ios::trunc) << bytes;
  }
  std::string source_path() const { return (dir_ / "model" / "model.safetensors").string(); }
  std::string cache_dir() const { return (dir_ / "cache").string(); }

  fs::path dir_;
  at::Tensor weight_;
};

TEST_F(WeightCacheTest, FloatTensorsAreConvertedAndTheRestCopied) {
  StatusOr<SafetensorsFile> source = SafetensorsFile::Open(source_path());
  ASSERT_TRUE(source.ok()) << source.status();
  StatusOr<std::string> path = ConvertedWeights(*source, "BF16", cache_dir());
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(fs::path(*path).parent_path(), fs::path(cache_dir()));

  StatusOr<SafetensorsFile> converted = SafetensorsFile::Open(*path);
  ASSERT_TRUE(converted.ok()) << converted.status();
  const SafetensorsEntry* w = converted->Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, "BF16");
  EXPECT_EQ(w->shape, (std::vector<std::int64_t>{3, 2}));
  EXPECT_EQ(std::string(converted->Data(*w), w->end - w->begin), Bytes(weight_.to(at::kBFloat16)));
  const SafetensorsEntry* ids = converted->Find("ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->dtype, "I64");
  EXPECT_EQ(std::string(converted->Data(*ids), ids->end - ids->begin),
            Bytes(at::arange(4, at::kLong)));
  EXPECT_EQ(converted->metadata().at("gantry_dtype"), "BF16");

  StatusOr<std::string> half = ConvertedWeights(*source, "F16", cache_dir());
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_NE(*half, *path);
  EXPECT_EQ(SafetensorsFile::Open(*half)->Find("w")->dtype, "F16");
}

TEST_F(WeightCacheTest, ACopyIsReusedUntilItsSourceChanges) {
  StatusOr<SafetensorsFile> source = SafetensorsFile::Open(source_path());
  ASSERT_TRUE(source.ok()) << source.status();
  StatusOr<std::string> first = ConvertedWeights(*source, "BF16", cache_dir());
  ASSERT_TRUE(first.ok()) << first.status();
  const auto written = fs::last_write_time(*first);
  StatusOr<std::string> again = ConvertedWeights(*source, "BF16", cache_dir());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *first);
  EXPECT_EQ(fs::last_write_time(*again), written);  // not written twice

  // A new checkpoint at the same path (a different size here) is converted
  // again, not served from the stale copy.
  WriteSource(at::linspace(10.0, 20.0, 8, at::kFloat).view({4, 2}));
  StatusOr<SafetensorsFile> changed = SafetensorsFile::Open(source_path());
  ASSERT_TRUE(changed.ok()) << changed.status();
  StatusOr<std::string> fresh = ConvertedWeights(*changed, "BF16", cache_dir());
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  StatusOr<SafetensorsFile> converted = SafetensorsFile::Open(*fresh);
  ASSERT_TRUE(converted.ok()) << converted.status();
  const SafetensorsEntry* w = converted->Find("w");
  EXPECT_EQ(w->shape, (std::vector<std::int64_t>{4, 2}));
  EXPECT_EQ(std::string(converted->Data(*w), w->end - w->begin), Bytes(weight_.to(at::kBFloat16)));
}

// The same size and the old modification time put back (as cp -p, tar or
// an image layer with a fixed SOURCE_DATE_EPOCH leave them): still a new
// checkpoint, converted again.
TEST_F(WeightCacheTest, ACheckpointOfTheSameSizeAndMtimeIsConvertedAgain) {
  StatusOr<SafetensorsFile> source = SafetensorsFile::Open(source_path());
  ASSERT_TRUE(source.ok()) << source.status();
  StatusOr<std::string> first = ConvertedWeights(*source, "BF16", cache_dir());
  ASSERT_TRUE(first.ok()) << first.status();
  const auto mtime = fs::last_write_time(source_path());
  const auto size = fs::file_size(source_path());
  // Past the kernel's timestamp granularity (a clock tick), so that the
  // rewrite's status-change time differs even on the same inode.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  WriteSource(at::linspace(30.0, 40.0, 6, at::kFloat).view({3, 2}));
  fs::last_write_time(source_path(), mtime);
  ASSERT_EQ(fs::file_size(source_path()), size);
  StatusOr<SafetensorsFile> changed = SafetensorsFile::Open(source_path());
  ASSERT_TRUE(changed.ok()) << changed.status();
  StatusOr<std::string> fresh = ConvertedWeights(*changed, "BF16", cache_dir());
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  StatusOr<SafetensorsFile> converted = SafetensorsFile::Open(*fresh);
  ASSERT_TRUE(converted.ok()) << converted.status();
  const SafetensorsEntry* w = converted->Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(std::string(converted->Data(*w), w->end - w->begin), Bytes(weight_.to(at::kBFloat16)));
}

TEST_F(WeightCacheTest, ACopyCutShortIsWrittenAgain) {
  StatusOr<SafetensorsFile> source = SafetensorsFile::Open(source_path());
  ASSERT_TRUE(source.ok()) << source.status();
  StatusOr<std::string> path = ConvertedWeights(*source, "BF16", cache_dir());
  ASSERT_TRUE(path.ok()) << path.status();
  fs::resize_file(*path, 12);  // as a crash mid-write would leave it
  StatusOr<std::string> again = ConvertedWeights(*source, "BF16", cache_dir());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(SafetensorsFile::Open(*again).ok());
  // Nothing else is left in the directory: no temporary files.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(cache_dir())) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST_F(WeightCacheTest, AnUnusableDirectoryIsAnErrorNamingIt) {
  StatusOr<SafetensorsFile> source = SafetensorsFile::Open(source_path());
  ASSERT_TRUE(source.ok()) << source.status();
  // A directory below a regular file cannot be created.
  const std::string bad = source_path() + "/cache";
  StatusOr<std::string> path = ConvertedWeights(*source, "BF16", bad);
  ASSERT_FALSE(path.ok());
  EXPECT_NE(path.status().message().find("weight cache " + bad), std::string::npos)
      << path.status();
  EXPECT_FALSE(ConvertedWeights(*source, "BF16", "").ok());
  EXPECT_FALSE(ConvertedWeights(*source, "I64", cache_dir()).ok());
}

}  // namespace
}  // namespace gantry::sentence_encoder
