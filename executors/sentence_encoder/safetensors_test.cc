#include "safetensors.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace gantry::sentence_encoder {
namespace {

std::string Floats(std::vector<float> values) {
  std::string bytes(values.size() * 4, '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::string ValidFile() {
  return WriteSafetensors({{"b", "F32", {2}, 0, 0}, {"a", "F32", {1, 3}, 0, 0}},
                          {Floats({1, 2}), Floats({3, 4, 5})}, {{"format", "pt"}});
}

// A file whose header is `json` (padded to 8) followed by `data_bytes` zeros.
std::string RawFile(std::string json, std::size_t data_bytes) {
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const std::uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);  // little-endian host
  return out + json + std::string(data_bytes, '\0');
}

std::string ParseError(std::string bytes) {
  StatusOr<SafetensorsFile> f = SafetensorsFile::Parse(std::move(bytes), "/m/model.safetensors");
  EXPECT_FALSE(f.ok());
  if (f.ok()) {
    return "";
  }
  EXPECT_NE(f.status().message().find("/m/model.safetensors"), std::string::npos) << f.status();
  return f.status().message();
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST(SafetensorsTest, ParsesValidFile) {
  StatusOr<SafetensorsFile> f = SafetensorsFile::Parse(ValidFile(), "x.safetensors");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->entries().size(), 2u);
  EXPECT_EQ(f->entries()[0].name, "a");  // sorted by name
  const SafetensorsEntry* a = f->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<std::int64_t>{1, 3}));
  float v[3];
  std::memcpy(v, f->Data(*a), sizeof v);
  EXPECT_EQ(v[2], 5.0f);
  EXPECT_EQ(f->Find("c"), nullptr);
  EXPECT_EQ(f->metadata().at("format"), "pt");
}

TEST(SafetensorsTest, EmptyAndScalarTensorsAreAllowed) {
  StatusOr<SafetensorsFile> f =
      SafetensorsFile::Parse(WriteSafetensors({{"e", "F32", {0, 4}, 0, 0}, {"s", "I64", {}, 0, 0}},
                                              {"", std::string(8, '\0')}),
                             "x");
  ASSERT_TRUE(f.ok()) << f.status();
}

TEST(SafetensorsTest, TruncatedFile) {
  std::string bytes = ValidFile();
  bytes.pop_back();
  EXPECT_CONTAINS(ParseError(bytes), "truncated");
  EXPECT_CONTAINS(ParseError(bytes.substr(0, 5)), "too short");
  EXPECT_CONTAINS(ParseError(bytes.substr(0, 20)), "runs past the end");
}

TEST(SafetensorsTest, BadHeader) {
  EXPECT_CONTAINS(ParseError(RawFile("[1, 2]", 0)), "does not start with '{'");
  EXPECT_CONTAINS(ParseError(RawFile("{\"a\": ", 0)), "not a valid JSON object");
  std::string huge(16, '\0');
  huge[5] = 1;  // N = 2^40
  EXPECT_CONTAINS(ParseError(huge), "exceeds the limit");
  EXPECT_CONTAINS(ParseError(RawFile(R"({"a": 1})", 0)), "tensor 'a': entry is not an object");
  EXPECT_CONTAINS(
      ParseError(RawFile(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                              "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                         8)),
      "tensor 'a' appears twice");
  EXPECT_CONTAINS(ParseError(RawFile(R"({"a": {"dtype": "F32", "shape": [-1],
                                             "data_offsets": [0, 4]}})",
                                     4)),
                  "tensor 'a': 'shape'");
  EXPECT_CONTAINS(ParseError(RawFile(R"({"__metadata__": {"k": 1}})", 0)), "__metadata__.k");
}

TEST(SafetensorsTest, WrongDtype) {
  EXPECT_CONTAINS(
      ParseError(RawFile(R"({"w": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}})", 4)),
      "tensor 'w': unsupported dtype 'F33'");
  // Right dtype, wrong byte count for it.
  EXPECT_CONTAINS(
      ParseError(RawFile(R"({"w": {"dtype": "F64", "shape": [1], "data_offsets": [0, 4]}})", 4)),
      "tensor 'w': data_offsets span 4 bytes but dtype F64");
}

TEST(SafetensorsTest, OffsetsOutOfRangeOverlappingOrGapped) {
  EXPECT_CONTAINS(
      ParseError(RawFile(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 8)),
      "tensor 'w': data_offsets [4, 12] out of range");
  EXPECT_CONTAINS(
      ParseError(RawFile(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8)),
      "out of range");
  EXPECT_CONTAINS(
      ParseError(RawFile(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                             "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                         12)),
      "tensor 'b' overlaps");
  EXPECT_CONTAINS(
      ParseError(RawFile(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8)),
      "gap in the data buffer before tensor 'a'");
  EXPECT_CONTAINS(
      ParseError(RawFile(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 8)),
      "trailing bytes");
}

TEST(SafetensorsTest, OpenMissingFileNamesIt) {
  StatusOr<SafetensorsFile> f = SafetensorsFile::Open("/nonexistent/model.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(f.status().message(), "/nonexistent/model.safetensors");
}

}  // namespace
}  // namespace gantry::sentence_encoder
